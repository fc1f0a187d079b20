"""The write tasks: each input file back through Arrow with its rows' decisions, under its own name
in the staging directory (with its index docs file), and `_report/removed.parquet` beside them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from dedup.core.decontam import ProtectedNgrams
from dedup.partition import keyspace
from dedup.partition import lines as part_lines
from dedup.partition import spans as part_spans
from dedup.partition.buckets import band_documents
from dedup.partition.contamination import cut_column, tag_column
from dedup.partition.decisions import cluster_sizes, root_keys, row_decisions, whole_rows
from dedup.partition.features import HIT, signatures_of
from dedup.report import removed
from dedup.storage import index, index_files, reads
from dedup.storage import shards as shards_mod

Inputs = tuple[list[list[shards_mod.Piece]], pa.Schema]
"""The input pieces of each partition, and the schema every output shard is written with."""

PIECES_DIR = "_pieces"
"""Where the write tasks leave the parts of an output file whose input was split across partitions
(`<output name>/<first row>.parquet`), until `join_pieces` makes them one file."""


def read_group(group: list[shards_mod.Piece], id_column: str, text_column: str, id_type: pa.DataType,
               keep: tuple[str, pa.DataType] | None = None, scope: tuple[str, pa.DataType] | None = None) -> pd.DataFrame:
    return reads.read_features_input(group, id_column, text_column, id_type, keep, scope)


def piece_path(root: str, name: str, piece: shards_mod.Piece) -> str:
    """Where a piece of a split file's output (`name`: its path under the staging directory) is written."""
    return f"{root}/{PIECES_DIR}/{name}/{piece.start:012d}.parquet"


def split_files(groups: list[list[shards_mod.Piece]]) -> dict[str, list[shards_mod.Piece]]:
    """The output names of the input files split across partitions, with their pieces in order."""
    out: dict[str, list[shards_mod.Piece]] = {}
    for group in groups:
        for piece in group:
            if not piece.whole:
                out.setdefault(piece.shard.name, []).append(piece)
    return out


def kept_counts(feat: pd.DataFrame, roots: pd.DataFrame | None, inputs: Inputs, drop: bool,
                partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Rows kept in each piece of one partition: (partition, piece, kept), so that each piece of a
    split file knows where its rows start in the output file (`row_offsets`)."""
    assert partition_info is not None
    number = partition_info["number"]
    keep, _ = row_decisions(feat, roots, drop)
    bounds = np.cumsum([0] + [p.rows for p in inputs[0][number]])
    kept = [int(keep[lo:hi].sum()) for lo, hi in zip(bounds[:-1], bounds[1:])]
    return pd.DataFrame({"partition": np.full(len(kept), number, np.int64), "piece": np.arange(len(kept)),
                         "kept": np.asarray(kept, np.int64)})


def row_offsets(groups: list[list[shards_mod.Piece]], counts: pd.DataFrame) -> dict[tuple[int, int], int]:
    """(partition, piece) -> the output row its first kept row gets, for the pieces of split files."""
    kept = {(int(p), int(i)): int(k) for p, i, k in counts[["partition", "piece", "kept"]].itertuples(index=False)}
    before: dict[str, int] = {}
    out: dict[tuple[int, int], int] = {}
    for number, group in enumerate(groups):
        for i, piece in enumerate(group):
            if not piece.whole:
                out[(number, i)] = before.get(piece.shard.name, 0)
                before[piece.shard.name] = out[(number, i)] + kept[(number, i)]
    return out


def join_pieces(staging_url: str, name: str, pieces: list[shards_mod.Piece]) -> int:
    """Make the parts of one split file's output (`piece_path`) the file `name`, a row group at a
    time, in row order; the rows written."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(staging_url)
    return shards_mod.write_joined(fs, [piece_path(root, name, p) for p in pieces], f"{root}/{name}")


@dataclass(frozen=True)
class ShardOptions:
    """How the write tasks write a partition: the id and text columns; `drop` the near duplicates or
    only `tag` rows with `minhash_cluster` (and with `sizes`, `minhash_cluster_size`); where
    (`staging_url`); with `num_perm`, also the index's docs file; `contaminated`: the contamination
    action (a cut rewrites texts, a tag adds `contaminated_by`)."""

    id_column: str
    text_column: str
    drop: bool
    tag: bool
    staging_url: str
    num_perm: int | None = None
    sizes: bool = False
    contaminated: str = "drop"


def write_group(feat: pd.DataFrame, roots: pd.DataFrame | None, lines: pd.DataFrame | None,
                changes: pd.DataFrame | None, span_changes: pd.DataFrame | None, inputs: Inputs, options: ShardOptions,
                shown: tuple[str, dict[int, list[int]]] | None = None,
                offsets: dict[tuple[int, int], int] | None = None, rule: ProtectedNgrams | None = None,
                partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Write the output shards of one partition: each input file filtered, tagged, under its own name
    (a piece of a split file as a part, `piece_path`, joined later); with `options.num_perm`, also
    this partition's index docs file (every document kept as its cluster's root), where the rows of
    a split file's pieces start at `offsets[(partition, piece)]`. `shown`: (text column, partition
    -> rows): the texts of those rows come back, as (key, text) pairs in the "texts" column, for the
    report page (read here with every other column, as they were: near dedup read them so). `lines`,
    `changes`: with line dedup, this partition's settled repeated lines and the documents that lose
    one (`dedup.job.lines`): the texts are written without the lines they lose, those it drops not.
    `span_changes`: with span dedup, the documents that lose a span, with their new texts
    (`dedup.job.spans`), cut after the lines. `rule`: the protected n-grams in force, for the
    contamination cut (before the lines) or the `contaminated_by` tag (of the text written)."""
    import fsspec

    assert partition_info is not None
    o = options
    id_column, drop, tag, staging_url, num_perm, sizes = o.id_column, o.drop, o.tag, o.staging_url, o.num_perm, o.sizes
    groups, schema = inputs
    group = groups[partition_info["number"]]
    feat = part_spans.with_span_drops(part_lines.with_line_drops(feat, changes), span_changes)
    keep, cluster = row_decisions(feat, roots, drop)
    size = cluster_sizes(feat, roots) if sizes else None
    fs, root = fsspec.core.url_to_fs(staging_url)
    cluster_field = pa.field(shards_mod.CLUSTER_COLUMN, cluster_type(schema, id_column), nullable=False)
    out_row = np.cumsum(keep) - 1  # row of each kept document in its output file, once offset per file
    out_file = np.empty(len(feat), dtype=object)
    text_column, rows = shown if shown is not None else ("", {})
    wanted = np.asarray(rows.get(partition_info["number"], []), dtype=np.int64)
    texts: list[tuple[int, Any]] = []
    offset = written = 0
    for i, piece in enumerate(group):
        s = piece.shard
        table = reads.conform(reads.read_table(s.path, None, piece.start, piece.stop), schema)
        n = table.num_rows
        if offset + n > len(feat) or n != piece.rows:
            raise RuntimeError(f"{s.path} has more rows than its features; was it changed during the run?")
        here = wanted[(wanted >= offset) & (wanted < offset + n)]
        if len(here):
            got = reads.takeable(table.column(text_column)).take(pa.array(here - offset, pa.int64())).to_pylist()
            texts += zip(feat["doc"].to_numpy(np.int64)[here].tolist(), got)
        if rule is not None and o.contaminated == "cut":
            at = table.schema.get_field_index(o.text_column)
            table = table.set_column(at, table.schema.field(at), cut_column(table.column(at), feat, offset, rule))
        if lines is not None:
            table = without_repeated_lines(table, o.text_column, feat, offset, lines, keep)
        if span_changes is not None:
            table = without_repeated_spans(table, o.text_column, feat, offset, span_changes)
        k = keep[offset:offset + n]
        tags = tag_array(table, o.text_column, feat, offset, rule, (changes, span_changes)) \
            if rule is not None and o.contaminated == "tag" else None
        out_row[offset:offset + n] -= written - (0 if piece.whole or offsets is None
                                                 else offsets[(partition_info["number"], i)])
        out_file[offset:offset + n] = s.name
        table = kept_rows(table, k)
        if tags is not None:
            table = table.append_column(pa.field(shards_mod.TAG_COLUMN, tags.type, nullable=False), tags.filter(pa.array(k)))
        if tag:
            table = table.append_column(cluster_field, pa.array(cluster[offset:offset + n][k], type=cluster_field.type))
            if size is not None:
                table = table.append_column(pa.field(shards_mod.SIZE_COLUMN, pa.int64(), nullable=False),
                                            pa.array(size[offset:offset + n][k], type=pa.int64()))
        shards_mod.write_shard(table, fs, f"{root}/{s.name}" if piece.whole else piece_path(root, s.name, piece),
                               piece=not piece.whole)
        offset += n
        written += table.num_rows
    if offset != len(feat):
        raise RuntimeError(f"Input files {[s.path for s in group]} changed during the run (row counts differ).")
    indexed = absorbed = nbytes = 0
    if num_perm is not None:
        own = feat["_id"].to_numpy(dtype=cluster.dtype)
        root = keep & (cluster == own)
        # the kept documents, and the near duplicates found (those with band rows): a later run
        # that finds a document like one of them puts it in the same cluster
        take = np.flatnonzero(root | (np.isin(feat["doc"].to_numpy(np.int64), band_documents(feat)) & ~root))
        tkeys = (feat["tkey"].to_numpy(np.uint64)[take], feat["tkey2"].to_numpy(np.uint64)[take])
        files = [f if k else None for f, k in zip(out_file[take].tolist(), keep[take])]
        sigs = signatures_of(feat, num_perm, take[~keep[take]])  # the rest are computed again from OUTPUT's texts
        table = index_files.docs_table(own[take], cluster[take], feat["doc"].to_numpy(np.int64)[take], tkeys,
                                 sigs, files, out_row[take], cluster_type(schema, id_column), root_keys(feat, roots)[take])
        nbytes = index_files.write_docs(table, f"{staging_url}/{index.INDEX_DIR}", partition_info["number"])
        indexed = int(root.sum())
        absorbed = table.num_rows - indexed
    return pd.DataFrame({"rows": [written], "indexed": [indexed], "absorbed": [absorbed], "bytes": [nbytes],
                         "texts": pd.Series([texts], dtype=object)})


def tag_array(table: pa.Table, text_column: str, feat: pd.DataFrame, offset: int, rule: ProtectedNgrams,
              changed: tuple[pd.DataFrame | None, ...]) -> pa.Array:
    """`contaminated_by` of `table` (rows offset.. of a features partition, its texts as written): the
    records each row's text shares an n-gram with, read from the rows hit or changed by line or span
    dedup (any other row's text is its input's, which shares none)."""
    n = table.num_rows
    docs = feat["doc"].to_numpy(np.int64)[offset:offset + n]
    look = feat[HIT].to_numpy()[offset:offset + n] >= 0
    for frame in changed:
        if frame is not None and len(frame):
            look |= np.isin(docs, frame["doc"].to_numpy(np.int64))
    rows = np.flatnonzero(look)
    texts = table.column(text_column).take(pa.array(rows, pa.int64())).to_pylist() if len(rows) else []
    return tag_column(n, rows, texts, rule)


def kept_rows(table: pa.Table, keep: NDArray[np.bool_]) -> pa.Table:
    """The rows of `table` that `keep` marks. Arrow has no filter for view columns (`string_view`,
    `binary_view`, as Polars writes them): those are filtered as large ones and cast back, the same
    values in the same type."""
    mask = pa.array(keep, type=pa.bool_())
    views = [i for i, f in enumerate(table.schema) if pa.types.is_string_view(f.type) or pa.types.is_binary_view(f.type)]
    if not views:
        return table.filter(mask)
    large = table
    for i in views:
        wide = pa.large_string() if pa.types.is_string_view(table.schema.field(i).type) else pa.large_binary()
        large = large.set_column(i, table.schema.field(i).with_type(wide), table.column(i).cast(wide))
    out = large.filter(mask)
    for i in views:
        out = out.set_column(i, table.schema.field(i), out.column(i).cast(table.schema.field(i).type))
    return out


def without_repeated_spans(table: pa.Table, text_column: str, feat: pd.DataFrame, offset: int,
                           changes: pd.DataFrame) -> pa.Table:
    """`table` (rows offset.. of a features partition, its texts as line dedup left them) with the
    texts span dedup cut (`changes`: this partition's `span_changes`, which hold them); the text
    column's type as it was."""
    if changes.empty:
        return table
    rows = slice(offset, offset + table.num_rows)
    at = table.schema.get_field_index(text_column)
    new = part_spans.without_spans(table.column(at), feat["doc"].to_numpy(np.int64)[rows], changes)
    return table.set_column(at, table.schema.field(at), new)


def without_repeated_lines(table: pa.Table, text_column: str, feat: pd.DataFrame, offset: int,
                           lines: pd.DataFrame, keep: NDArray[np.bool_]) -> pa.Table:
    """`table` (rows offset.. of a features partition) with the texts of the rows `keep` marks
    rewritten by line dedup (the others are not written); the text column's type as it was."""
    if lines.empty:
        return table
    rows = slice(offset, offset + table.num_rows)
    at = table.schema.get_field_index(text_column)
    new = part_lines.without_removed_lines(table.column(at), feat["doc"].to_numpy(np.int64)[rows], lines, keep[rows])
    return table.set_column(at, table.schema.field(at), new)


def locator(groups: list[list[shards_mod.Piece]]) -> Callable[[int], tuple[str, int]]:
    """Maps a document key (partition, row) to its input file and the row inside it."""
    def locate(key: int) -> tuple[str, int]:
        part, row = key >> keyspace.ROW_BITS, key & ((1 << keyspace.ROW_BITS) - 1)
        for p in groups[part]:
            if row < p.rows:
                return p.shard.path, p.start + row
            row -= p.rows
        last = groups[part][-1]
        return last.shard.path, last.stop + row
    return locate


def write_removed(feat: pd.DataFrame, roots: pd.DataFrame | None, found: pd.DataFrame | None,
                  changes: pd.DataFrame | None, span_changes: pd.DataFrame | None, inputs: Inputs, id_column: str,
                  protected: ProtectedNgrams | None, staging_url: str, contaminated: str = "drop",
                  partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Write `_report/removed.parquet/<input file name>` for each input file of one partition
    (`changes`: with line dedup, the documents it drops are listed too; `contaminated`: the action,
    which names why a contaminated document went)."""
    assert partition_info is not None
    groups, schema = inputs
    feat = part_spans.with_span_drops(part_lines.with_line_drops(feat, changes), span_changes)
    _, cluster = row_decisions(feat, roots, drop=False)
    table, rows = removed.removed_rows(feat, cluster, found, protected, cluster_type(schema, id_column), contaminated,
                                       whole_rows(feat, roots))
    return _write_by_file(table, rows, groups[partition_info["number"]], removed.REMOVED, staging_url)


def write_removed_lines(feat: pd.DataFrame, roots: pd.DataFrame | None, lines: pd.DataFrame, inputs: Inputs,
                        id_column: str, text_column: str, drop: bool, staging_url: str,
                        partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Write `_report/removed_lines.parquet/<input file name>` for each input file of one partition:
    a row a line its surviving documents lose (`dedup.partition.lines.removed_line_rows`), read from
    the input's text column, a file at a time."""
    assert partition_info is not None
    groups, schema = inputs
    survive, _ = row_decisions(feat, roots, drop)
    keys = feat["doc"].to_numpy(np.int64)
    ids = feat["_id"].to_numpy()
    pieces, positions, offset = [], [], 0
    for p in groups[partition_info["number"]]:
        texts = reads.read_table(p.shard.path, [text_column], p.start, p.stop).column(0)
        rows = slice(offset, offset + p.rows)
        table = part_lines.removed_line_rows(texts, ids[rows], keys[rows], lines, survive[rows],
                                             cluster_type(schema, id_column))
        pieces.append(table)
        positions.append(np.full(table.num_rows, offset, np.int64))
        offset += p.rows
    table = pa.concat_tables(pieces) if pieces else part_lines.removed_lines_table(cluster_type(schema, id_column))
    return _write_by_file(table, np.concatenate(positions) if positions else np.zeros(0, np.int64),
                          groups[partition_info["number"]], removed.REMOVED_LINES, staging_url)


def _write_by_file(table: pa.Table, rows: NDArray[np.int64], group: list[shards_mod.Piece], listing: str,
                   staging_url: str) -> pd.DataFrame:
    """Write `table`'s rows (at partition rows `rows`, in order) as `<listing>/<input file name>`, a
    file (or a piece of a split one) for each input file of the partition; the rows written."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(staging_url)
    offset = written = 0
    for p in group:
        lo, hi = np.searchsorted(rows, [offset, offset + p.rows])
        part = table.slice(lo, hi - lo)
        name = f"{listing}/{p.shard.name}"
        shards_mod.write_shard(part, fs, f"{root}/{name}" if p.whole else piece_path(root, name, p), piece=not p.whole)
        offset += p.rows
        written += part.num_rows
    return pd.DataFrame({"rows": [written]})


def cluster_type(schema: pa.Schema, id_column: str) -> pa.DataType:
    """The type of `minhash_cluster`: the ids' (`dedup.storage.shards.id_type_of`)."""
    return shards_mod.id_type_of(schema, id_column)
