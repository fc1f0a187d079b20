"""The texts of an earlier OUTPUT's documents, read where the index says they are, and checked against
the hashes of their words the index recorded: a later run rebuilds signatures from them, and compares
them for exact Jaccard."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from dedup.storage.index import DAMAGED, IndexPart
from dedup.storage.safety import UsageError


def check_texts(part: IndexPart, rows: pa.Table, texts: pa.Array) -> None:
    """Raise `UsageError` unless each text read from the earlier OUTPUT has the text hashes its docs-file
    row (of `rows`) records: a file patched in place (same size, same footer: bit rot, a byte-patching
    tool) passes the stamps' check, but not this one."""
    from dedup.core.minhash import SIGNATURE_CHUNK
    from dedup.core.text import encode_arrow
    from dedup.partition.features import text_keys

    want, want2 = rows.column("tkey").to_numpy(), rows.column("tkey2").to_numpy()
    bad = []
    for lo in range(0, len(texts), SIGNATURE_CHUNK):
        got, got2 = text_keys(encode_arrow(texts.slice(lo, SIGNATURE_CHUNK)))
        hi = lo + len(got)
        bad.append(lo + np.flatnonzero(((got != want[lo:hi]) | (got2 != want2[lo:hi])) & (want[lo:hi] != 0)))
    bad_rows = np.concatenate(bad) if bad else np.zeros(0, np.int64)
    if len(bad_rows):
        at = int(bad_rows[0])
        more = f", and {len(bad_rows) - 1} more of the rows read" if len(bad_rows) > 1 else ""
        raise UsageError(f"--against {part.shown}: row {rows.column('row')[at].as_py()} of "
                         f"{rows.column('file')[at].as_py()} no longer holds the text its index describes (the file "
                         f"was changed in place since dedup wrote it{more}). {DAMAGED}")


TEXT_BATCH_BYTES = 8 * 2**20
"""About how many bytes of an earlier OUTPUT's text column are decoded at a time while the texts of
its matched documents are taken (`output_texts`): a batch, not a file's whole column (65 MB for a
§7 shard of 56,250 documents; a shard of long documents holds gigabytes), so a task's memory
stays bounded, and two threads reading at once ran about a fifth faster than with whole columns."""


def output_texts(part: IndexPart, files: list[str], rows: NDArray[np.int64]) -> pa.Array:
    """The texts at (file, row) of the earlier OUTPUT `part` indexes, in the order given, as one Arrow
    string array: of each file, only the text column of the row groups holding one of the rows is
    read, in batches of about `TEXT_BATCH_BYTES`, and no further than the last row wanted."""
    pieces, order = [], []
    names, of_file = np.unique(np.asarray(files, dtype=object), return_inverse=True)
    for i, name in enumerate(names.tolist()):
        which = np.flatnonzero(of_file == i)
        want = rows[which].astype(np.int64)
        pieces.append(file_texts(f"{part.output}/{name}", part.text_column, want))
        order.append(which)
    if not pieces:
        return pa.array([], pa.large_string())
    joined = pa.concat_arrays(pieces)
    return joined.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))


def file_texts(path: str, text_column: str, want: NDArray[np.int64]) -> pa.Array:
    """The texts at rows `want` of one Parquet file, in that order (large strings)."""
    import pyarrow.parquet as pq

    from dedup.storage.files import open_input

    with open_input(path) as fh:
        pf = pq.ParquetFile(fh)
        md = pf.metadata
        sizes = np.asarray([md.row_group(g).num_rows for g in range(md.num_row_groups)], np.int64)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        group_of = np.searchsorted(bounds, want, "right") - 1
        groups = np.unique(group_of)
        first = np.zeros(len(sizes), np.int64)  # where each group read starts among the rows read
        first[groups] = np.concatenate([[0], np.cumsum(sizes[groups])[:-1]])
        at = first[group_of] + want - bounds[group_of]  # each wanted row among the rows read
        col = md.schema.to_arrow_schema().get_field_index(text_column)
        text_bytes = sum(md.row_group(int(g)).column(col).total_uncompressed_size for g in groups)
        per_row = max(1, text_bytes // max(1, int(sizes[groups].sum())))
        batch = int(max(64, TEXT_BATCH_BYTES // per_row))
        sorted_at = np.sort(at)
        taken, start = [], 0
        for got in pf.iter_batches(batch_size=batch, row_groups=groups.tolist(), columns=[text_column],
                                   use_threads=False):
            lo, hi = np.searchsorted(sorted_at, [start, start + got.num_rows])
            if hi > lo:
                taken.append(got.column(0).cast(pa.large_string()).take(pa.array(sorted_at[lo:hi] - start)))  # any text type
            start += got.num_rows
            if hi == len(sorted_at):
                break
    texts = pa.concat_arrays(taken) if taken else pa.array([], pa.large_string())
    return texts.take(pa.array(np.searchsorted(sorted_at, at)))
