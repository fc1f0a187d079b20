"""Input shards through Arrow: discovery, footers, one unified schema, partitions, exact read and write.

The corpus goes from input Parquet to output Parquet without a pandas round trip: each output
shard is its input file read with pyarrow, cast to the unified schema, filtered, given the
`minhash_cluster` column and written under the same relative path. So every type (nested,
dictionary, decimal, timestamps with or without zone, null), every value (int64 beyond 2^53,
NaN apart from null), nullability and metadata come back as they went in.
Only the id and text columns are converted to pandas, for the features stage.
"""

from __future__ import annotations

import glob
import os
import posixpath
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from dedup.storage.files import open_input, open_output
from dedup.storage.safety import UsageError, is_url

CLUSTER_COLUMN = "minhash_cluster"
SIZE_COLUMN = "minhash_cluster_size"
TAG_COLUMN = "contaminated_by"
"""With `--contaminated tag`: the protected records (`FILE#RECORD`) each row shares an n-gram with."""
"""With `--cluster-size`: how many input documents each kept row's cluster holds (docs/contract.md)."""
@dataclass(frozen=True)
class Shard:
    """One input Parquet file: where it is, its output name, rows, uncompressed bytes, schema, and
    the rows and uncompressed bytes of each of its row groups."""

    path: str
    name: str
    rows: int
    nbytes: int
    schema: pa.Schema
    group_rows: tuple[int, ...] = ()
    group_bytes: tuple[int, ...] = ()
    footer: str = ""
    """The hash of its Parquet footer (`dedup.storage.stamps.footer_digest`): part of what identifies its version."""


@dataclass(frozen=True)
class Piece:
    """Rows [start, stop) of one input file: what a partition reads (one or more consecutive pieces).
    A file within the partition bounds is one piece; a larger one is several (`partitions`)."""

    shard: Shard
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.shard.rows

    def describe(self) -> str:
        """The file, and the rows when the piece is part of it (for messages)."""
        return self.shard.path if self.whole else f"{self.shard.path} rows {self.start}-{self.stop - 1}"


def discover(path: str) -> list[str]:
    """The Parquet files of a file, a directory tree, a glob or a URL, sorted.

    Names starting with `.` or `_` (in the file or any directory below INPUT) are skipped, as
    Parquet readers do. Raises naming the path when nothing is there.
    """
    if is_url(path):
        fs, root = fsspec.core.url_to_fs(path)
        proto = path.split("://", 1)[0]

        def tree(top: str) -> list[str]:
            return [f for f in fs.find(top) if not any(p.startswith((".", "_")) for p in f[len(top):].split("/") if p)]

        if fs.isdir(root):
            found = tree(root)
        else:
            matched = fs.glob(root) if any(c in root for c in "*?[") else ([root] if fs.exists(root) else [])
            found = [f for m in matched for f in (tree(m) if fs.isdir(m) else [m])]  # a glob of directories too
            if not found:
                raise UsageError(f"No input files at {path!r}.")
        return sorted(set(f"{proto}://{f}" for f in found))
    path = path.removeprefix("file://")
    if any(c in path for c in "*?[") and not os.path.exists(path):  # `corpus[2024]` is a directory's name
        matched = glob.glob(path, recursive=True)  # files, and directories (`data/lang=[jz]*`) read as trees
        files = sorted({f for m in matched for f in (_tree(m) if os.path.isdir(m) else [m] if os.path.isfile(m) else [])})
        if not files:
            raise UsageError(f"No input files match {path!r}.")
        return files
    if os.path.isdir(path):
        return _tree(path)
    if os.path.isfile(path):
        return [path]
    raise UsageError(f"Input {path!r} does not exist.")


def _tree(path: str) -> list[str]:
    """The files below a local directory, sorted, but those under a name starting with `.` or `_`."""
    return sorted(
        os.path.join(dirpath, name)
        for dirpath, _dirs, names in os.walk(path, followlinks=True)
        for name in names
        if not name.startswith((".", "_")) and not any(part.startswith((".", "_")) for part in
                                                       Path(os.path.relpath(dirpath, path)).parts)
    )


HIVE_DIR = re.compile(r"[^/=]+=[^/]*")
"""A Hive partition directory (`lang=en`): its name holds a column of the dataset for Hive-aware readers."""


HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
"""The value Hive writes in a partition directory's name for a null key."""


def hive_values(name: str) -> dict[str, str | None]:
    """The Hive keys of a file's output name (`lang=en/part-0.parquet`: {"lang": "en"}), values
    URL-decoded as pyarrow's Hive partitioning reads them; None for Hive's null."""
    from urllib.parse import unquote

    out: dict[str, str | None] = {}
    for part in posixpath.dirname(name).split("/"):
        if HIVE_DIR.fullmatch(part):
            key, _, value = part.partition("=")
            out[unquote(key)] = None if value in ("", HIVE_NULL) else unquote(value)
    return out


def _integer(value: str | None) -> bool:
    return value is None or (re.fullmatch(r"-?\d{1,19}", value) is not None and -2**63 <= int(value) <= INT64_MAX)


def hive_schema(shards: Sequence[Shard], schema: pa.Schema) -> pa.Schema:
    """The Hive keys of the input files' names (`hive_values`) that are not columns of the files, as
    the columns Hive-aware readers (pyarrow, pandas, Spark) give: int64 where every value is an
    integer, else strings; null in a file whose path has no such key."""
    found: dict[str, list[str | None]] = {}
    for s in shards:
        for key, value in hive_values(s.name).items():
            found.setdefault(key, []).append(value)
    return pa.schema([pa.field(k, pa.int64() if all(map(_integer, vs)) else pa.string())
                      for k, vs in found.items() if k not in schema.names])


def shadowed_keys(shards: Sequence[Shard], schema: pa.Schema) -> list[str]:
    """The Hive keys of the input's directories that are also columns of its files: the files' columns
    are read, as pyarrow and pandas read them, and the directories' values are not."""
    keys = {key for s in shards for key in hive_values(s.name)}
    return sorted(k for k in keys if k in schema.names)


def hive_column(shard: Shard, column: str, t: pa.DataType, rows: int) -> pa.Array:
    """`rows` values of the Hive key `column` for the rows of `shard` (its value in the file's path,
    of type `t`), or nulls where the path has none."""
    value = hive_values(shard.name).get(column)
    if value is None:
        return pa.nulls(rows, t)
    return pa.repeat(pa.scalar(int(value) if pa.types.is_integer(t) else value, t), rows)


def output_names(files: Sequence[str]) -> list[str]:
    """Each file's path relative to the deepest directory holding them all that is not a Hive
    partition directory (`HIVE_DIR`): its output name."""
    if not files:
        return []
    local = [f.split("://", 1)[-1] for f in files]
    dirs = [posixpath.dirname(f.replace(os.sep, "/")) for f in local]
    base = posixpath.commonpath(dirs) if all(d.startswith("/") for d in dirs) or not any(d.startswith("/") for d in dirs) \
        else ""
    while HIVE_DIR.fullmatch(posixpath.basename(base)):  # a Hive partition directory stays in the names
        base = posixpath.dirname(base)
    names = [posixpath.relpath(f.replace(os.sep, "/"), base or ".") for f in local]
    if len(set(names)) != len(names):
        raise UsageError("Two input files would have the same output name; give INPUT as one directory.")
    return names


def _footer(path: str) -> tuple[int, int, pa.Schema, tuple[int, ...], tuple[int, ...], str] | Exception:
    from dedup.storage.stamps import MAGIC, footer_digest, read_footer

    try:
        with open_input(path) as fh:
            footer, end = read_footer(fh, fh.seek(0, 2), path)
            md = pq.read_metadata(pa.BufferReader(MAGIC + footer + end))
            groups = [md.row_group(i) for i in range(md.num_row_groups)]
            sizes = tuple(g.total_byte_size for g in groups)
            return (md.num_rows, sum(sizes), md.schema.to_arrow_schema(), tuple(g.num_rows for g in groups), sizes,
                    footer_digest(footer))
    except Exception as exc:  # pyarrow raises several types for bad files
        return UsageError(f"Input file {path!r} is not a readable Parquet file ({type(exc).__name__}: {exc}). "
                          "Remove it from the input or repair it.")


def read_footers(files: Sequence[str]) -> list[Shard]:
    """Every file's footer, read by a small thread pool; the first bad file in sorted order is reported."""
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(files)))) as pool:
        footers = list(pool.map(_footer, files))
    shards = []
    for f, name, footer in zip(files, output_names(files), footers):
        if isinstance(footer, Exception):
            raise footer
        shards.append(Shard(f, name, *footer))
    return shards


def _lossy(src: pa.DataType, dst: pa.DataType) -> bool:
    """True when casting src to dst can change values (pyarrow's permissive promotion allows some)."""
    if src.equals(dst) or pa.types.is_null(src):
        return False
    if pa.types.is_integer(src) and pa.types.is_floating(dst):
        return True
    if pa.types.is_integer(src) and pa.types.is_integer(dst):
        ss, ds = pa.types.is_signed_integer(src), pa.types.is_signed_integer(dst)
        if ss and not ds:
            return True
        return dst.bit_width < src.bit_width or (not ss and ds and dst.bit_width <= src.bit_width)
    if pa.types.is_floating(src) and pa.types.is_floating(dst):
        return dst.bit_width < src.bit_width
    if (pa.types.is_list(src) or pa.types.is_large_list(src)) and (pa.types.is_list(dst) or pa.types.is_large_list(dst)):
        return _lossy(src.value_type, dst.value_type)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        return any(_lossy(src.field(i).type, dst.field(dst.get_field_index(src.field(i).name)).type)
                   for i in range(src.num_fields))
    return False


def unify(shards: Sequence[Shard]) -> pa.Schema:
    """One schema for every shard, as pyarrow unifies them (int32 -> int64, string -> large_string,
    a column missing from a shard becomes nulls there); raises naming the column, both types and
    both files when two shards cannot be reconciled without changing values."""
    if not shards:
        return pa.schema([])
    try:
        schema = pa.unify_schemas([s.schema for s in shards], promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        schema = None
    for s in shards:
        for f in s.schema:
            if schema is None or _lossy(f.type, schema.field(f.name).type):
                _explain_conflict(shards, f.name)
    assert schema is not None
    fields = []
    for f in schema:
        missing = any(f.name not in s.schema.names for s in shards)
        fields.append(f.with_nullable(True) if missing and not f.nullable else f)
    return pa.schema(fields, metadata=shards[0].schema.metadata)


def _explain_conflict(shards: Sequence[Shard], column: str) -> None:
    """Raise naming the first two shards whose types for `column` do not reconcile, if any."""
    first: Shard | None = None
    for s in shards:
        if column not in s.schema.names:
            continue
        if first is None:
            first = s
            continue
        a, b = first.schema.field(column).type, s.schema.field(column).type
        try:
            merged = pa.unify_schemas([pa.schema([first.schema.field(column)]), pa.schema([s.schema.field(column)])],
                                      promote_options="permissive").field(column).type
            ok = not _lossy(a, merged) and not _lossy(b, merged)
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            ok = False
        if not ok:
            raise UsageError(f"Column {column!r} is {a} in {first.path} but {b} in {s.path}; "
                             "rewrite one shard so the types agree.")


POSITION_ID = "_dedup_position"
"""The id column of a corpus without ids: no column of the input, each document's id is its
position, `position_id(file, row)`."""


def position_id(name: str, row: int) -> str:
    """A document's id by its position: its file's output name (relative path) and its row, `a/b.parquet#17`."""
    return f"{name}#{row}"


def id_type_of(schema: pa.Schema, id_column: str) -> pa.DataType:
    """The ids' type: the id column's (its value type when dictionary-encoded), strings for positions."""
    if id_column == POSITION_ID:
        return pa.string()
    t = schema.field(id_column).type
    return t.value_type if pa.types.is_dictionary(t) else t


def check_columns(shards: Sequence[Shard], schema: pa.Schema, id_column: str, text_column: str,
                  adds_cluster: bool = True) -> None:
    """The id and text columns exist in every shard with usable types; errors name the file.
    `adds_cluster`: the run writes `minhash_cluster` (near dedup), so the input must not hold one; a
    run that does not (`lines`, `decontaminate`) keeps an earlier run's as it is."""
    for s in shards:
        for role, name in (("id", id_column), ("text", text_column)):
            if name == POSITION_ID:
                continue
            if name not in s.schema.names:
                raise UsageError(f"{s.path}: the {role} column {name!r} is missing; columns found: {s.schema.names}. "
                                 f"Pass --{role}-column to name the right one.")
        ttype = s.schema.field(text_column).type
        if not (_is_text(ttype) or pa.types.is_null(ttype)):
            raise UsageError(f"{s.path}: the text column {text_column!r} has type {ttype}; it must hold strings "
                             "(cast it, or name the right column with --text-column).")
        itype = s.schema.field(id_column).type if id_column != POSITION_ID else pa.string()
        if not (pa.types.is_integer(itype) or _is_text(itype)):
            raise UsageError(f"{s.path}: the id column {id_column!r} has type {itype}; ids must be strings or integers.")
    if adds_cluster and CLUSTER_COLUMN in schema.names:
        raise UsageError(f"The input already has a {CLUSTER_COLUMN!r} column (an earlier near-dedup output?); near "
                         "dedup writes its own: rename or drop it first.")
    if id_column == POSITION_ID:
        return
    if any(s.schema.field(id_column).type == pa.uint64() for s in shards):
        _check_uint64_ids([s.path for s in shards if s.schema.field(id_column).type == pa.uint64()], id_column)
    if shards and pa.types.is_null(schema.field(id_column).type):
        raise UsageError(f"The id column {id_column!r} is null in every shard; every document needs an id.")


INT64_MAX = 2**63 - 1
"""Integer ids are compared as int64: uint64 ids above this cannot be (cast them to strings)."""


def _too_large(message: str) -> UsageError:
    return UsageError(f"{message}; integer ids are compared as 64-bit signed integers, so uint64 ids must be below "
                      "2^63. Cast the id column to strings (or int64) first.")


def _check_uint64_ids(paths: Sequence[str], id_column: str) -> None:
    """Refuse uint64 ids of 2^63 or more, found in the footers' statistics (a file without them is
    checked when it is read: `read_features_input`)."""
    def largest(path: str) -> int | None:
        with open_input(path) as fh:
            md = pq.ParquetFile(fh).metadata
        col = md.schema.to_arrow_schema().get_field_index(id_column)
        top = None
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(col).statistics
            if st is not None and st.has_min_max:
                top = max(int(st.max), top or 0)
        return top

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(paths)))) as pool:
        for path, top in zip(paths, pool.map(largest, paths)):
            if top is not None and top > INT64_MAX:
                raise _too_large(f"{path}: the id column {id_column!r} holds {top}")


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or t == pa.string_view() or (
        pa.types.is_dictionary(t) and _is_text(t.value_type))


def write_shard(table: pa.Table, fs: Any, path: str, piece: bool = False) -> None:
    """Write one output shard (parent directories created), unless its run has ended. `piece`: a part
    that `write_joined` reads back once, written plain (no dictionary, no compression) when no column
    holds dictionary values: the joined file's bytes are the same (it re-encodes what it reads), and
    the part costs a fifth of the time to write and half to read (at 62,500 rows of ~175 words)."""
    from dedup.storage.staging import check_live

    check_live(fs, path)
    parent = posixpath.dirname(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    plain = piece and not any(_holds_dictionary(f.type) for f in table.schema)
    with open_output(fs, path) as fh:
        pq.write_table(table, fh, **({"compression": "none", "use_dictionary": False} if plain else {}))


def _holds_dictionary(t: pa.DataType) -> bool:
    """Whether `t` is a dictionary type or nests one: read back from a plain part, its dictionary
    would be made anew, perhaps in another order, so such parts are written as whole files are."""
    return pa.types.is_dictionary(t) or any(_holds_dictionary(t.field(i).type) for i in range(t.num_fields))


def write_joined(fs: Any, parts: Sequence[str], path: str) -> int:
    """Write the row groups of `parts` (Parquet files of one schema), in order, as the file `path`,
    one row group in memory at a time, unless its run has ended; the rows written."""
    from dedup.storage.staging import check_live

    check_live(fs, path)
    parent = posixpath.dirname(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    rows = 0
    with fs.open(parts[0], "rb") as fh:
        schema = pq.ParquetFile(fh).schema_arrow
    with open_output(fs, path) as out, pq.ParquetWriter(out, schema) as writer:
        for part in parts:
            with fs.open(part, "rb") as fh:
                pf = pq.ParquetFile(fh)
                for g in range(pf.metadata.num_row_groups):
                    table = pf.read_row_group(g, use_pandas_metadata=False, use_threads=False)
                    if table.num_rows:
                        writer.write_table(table)
                        rows += table.num_rows
    return rows
