"""Rows of the input shards read through Arrow: a piece whole, a few rows, a sample of texts, the
job's columns (`read_features_input`), and the `--keep-by` values in the type they are compared in."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dedup.core.text import TEXT_DTYPE
from dedup.partition.features import SCOPE
from dedup.storage.shards import (
    INT64_MAX,
    POSITION_ID,
    Piece,
    Shard,
    _too_large,
    hive_column,
    open_input,
    position_id,
)

READ_BATCH_ROWS = 8_192
"""Rows a reader decodes at a time when it reads part of a row group (a piece of one that is above the bounds)."""

def read_table(path: str, columns: list[str] | None = None, start: int = 0, stop: int | None = None) -> pa.Table:
    """The file's rows exactly as stored (no pandas metadata applied, no partition columns guessed),
    or rows [start, stop) of it: only the row groups holding them are read, in record batches.

    Decoded on the calling thread: a task already has its core (a worker runs a task a core), and
    Arrow's pool of a thread a core only adds hand-offs."""
    with open_input(path) as fh:
        pf = pq.ParquetFile(fh)
        md = pf.metadata
        stop = md.num_rows if stop is None else min(stop, md.num_rows)
        if start == 0 and stop == md.num_rows:
            return pf.read(columns=columns, use_pandas_metadata=False, use_threads=False)
        sizes = np.asarray([md.row_group(i).num_rows for i in range(md.num_row_groups)], np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        first = int(np.searchsorted(starts, start, side="right")) - 1
        last = int(np.searchsorted(starts, stop, side="left"))
        schema = pf.schema_arrow if columns is None else pa.schema([pf.schema_arrow.field(c) for c in columns],
                                                                      metadata=pf.schema_arrow.metadata)
        kept: list[pa.RecordBatch] = []
        pos = int(starts[first])
        for batch in pf.iter_batches(batch_size=READ_BATCH_ROWS, row_groups=range(first, last), columns=columns,
                                     use_threads=False, use_pandas_metadata=False):
            lo, hi = max(start - pos, 0), min(stop - pos, batch.num_rows)
            if hi > lo:
                kept.append(batch.slice(lo, hi - lo))
            pos += batch.num_rows
            if pos >= stop:
                break
        return pa.Table.from_batches(kept, schema=schema)


SAMPLE_ROWS = 512
"""Texts sampled to judge the corpus before any work (`sample_texts`): a share of 10% is known to
about +-2.7 points."""


def sample_texts(shards: Sequence[Shard], text_column: str, rows: int = SAMPLE_ROWS) -> list[str | None]:
    """About `rows` texts spread evenly over the whole input, so that each file gives a number of them
    in proportion to its rows: the row at each of `rows` evenly spaced places of the concatenated input
    stands for the first rows of its row group (each row group read holds the first texts of as many
    places as fall in it). Read in a moment, a few files at a time, to judge the corpus before any work.
    A row group that does not decode (text that is not UTF-8) is left out: the features stage names its row."""
    total = sum(s.rows for s in shards)
    n = min(rows, total)
    if not n:
        return []
    starts = np.cumsum([0] + [s.rows for s in shards])
    places = ((np.arange(n) + 0.5) * total / n).astype(np.int64)
    wanted: dict[tuple[int, int], int] = {}
    for place in places:
        f = int(np.searchsorted(starts, place, "right") - 1)
        groups = shards[f].group_rows or (shards[f].rows,)
        g = int(np.searchsorted(np.cumsum(groups), place - starts[f], "right"))
        wanted[(f, min(g, len(groups) - 1))] = wanted.get((f, min(g, len(groups) - 1)), 0) + 1

    def read(item: tuple[tuple[int, int], int]) -> list[str | None]:
        (f, g), count = item
        try:
            with open_input(shards[f].path) as fh:
                pf = pq.ParquetFile(fh)
                batch = next(pf.iter_batches(batch_size=count, row_groups=[g], columns=[text_column]), None)
            return [] if batch is None else [t if isinstance(t, str) else None for t in batch.column(0).to_pylist()]
        except (UnicodeDecodeError, pa.ArrowException):
            return []

    with ThreadPoolExecutor(max_workers=min(16, len(wanted))) as pool:
        return [t for got in pool.map(read, sorted(wanted.items())) for t in got]


def read_rows(path: str, rows: Sequence[int], column: str) -> list[Any]:
    """The values of `column` at the given rows of one file, as Python objects, reading only that
    column of the row groups that hold them (the report's few example texts)."""
    with open_input(path) as fh:
        pf = pq.ParquetFile(fh)
        sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        at = np.asarray(rows, dtype=np.int64)
        group = np.searchsorted(starts, at, side="right") - 1
        wanted = np.unique(group)
        table = pf.read_row_groups(wanted.tolist(), columns=[column], use_pandas_metadata=False,
                                    use_threads=False)  # as `read_table`
    # a row's position among the rows of the groups read: the rows of the groups read before its own
    before = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64)[wanted])])
    pos = before[np.searchsorted(wanted, group)] + at - starts[group]
    return takeable(table.column(0)).take(pa.array(pos, pa.int64())).to_pylist()


def takeable(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """`column`, a `string_view` one as large_string: Arrow has no take for views (a text column may be one)."""
    return column.cast(pa.large_string()) if pa.types.is_string_view(column.type) else column


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema`'s columns in its order: cast (lossless, checked), missing ones null."""
    arrays = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            arrays.append(col if col.type.equals(f.type) else col.cast(f.type, safe=True))
        else:
            arrays.append(pa.nulls(len(table), f.type))
    return pa.Table.from_arrays(arrays, schema=schema.remove_metadata()).replace_schema_metadata(table.schema.metadata)


def _bad_utf8(path: str, column: pa.ChunkedArray, text_column: str, row0: int = 0) -> None:
    """Raise naming the first row (and byte offset) whose text is not valid UTF-8, if any."""
    row = row0
    for chunk in column.chunks:
        try:
            chunk.validate(full=True)
        except pa.ArrowInvalid:
            raw = chunk.view(pa.large_binary() if pa.types.is_large_string(chunk.type) else pa.binary()).to_pylist()
            for i, b in enumerate(raw):
                if b is None:
                    continue
                try:
                    b.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{path}: row {row + i} of the text column {text_column!r} is not valid UTF-8 "
                                     f"(byte offset {exc.start}); repair or remove that row.") from None
        row += len(chunk)


def read_features_input(pieces: Sequence[Piece], id_column: str, text_column: str, id_type: pa.DataType,
                        keep: tuple[str, pa.DataType] | None = None,
                        scope: tuple[str, pa.DataType] | None = None) -> pd.DataFrame:
    """The id and text columns of `pieces`, concatenated, for the features stage; with `keep`
    (`--keep-by`'s column and its unified type), its values too, as `_keep` (`keep_values`); with
    `scope` (`--within`'s), its values as strings (nulls stay null), as `_scope` (`SCOPE`).

    Ids come as int64 (integer ids) or Python strings; texts as an Arrow-backed column
    (`dedup.core.text.TEXT_DTYPE`, read in place by the features stage). A null id or text that is not
    UTF-8 raises naming the file and row.
    """
    ids: list[Any] = []
    texts: list[pa.Array] = []
    kept: list[pa.Array] = []
    scopes: list[pa.Array] = []
    for piece in pieces:
        s = piece.shard
        positions = id_column == POSITION_ID
        in_file = keep is not None and keep[0] in s.schema.names  # else a Hive key of its path (or nulls)
        scope_in_file = scope is not None and scope[0] in s.schema.names
        t = read_table(s.path, list(dict.fromkeys([*([] if positions else [id_column]), text_column,
                                                   *([keep[0]] if keep and in_file else []),
                                                   *([scope[0]] if scope and scope_in_file else [])])), piece.start,
                       piece.stop)
        if keep is not None:
            column = t.column(keep[0]) if in_file else \
                pa.chunked_array([hive_column(s, keep[0], keep[1], piece.rows)], keep[1])
            kept.extend(keep_values(column, keep[1]).chunks)
        if scope is not None:
            column = t.column(scope[0]) if scope_in_file else \
                pa.chunked_array([hive_column(s, scope[0], scope[1], piece.rows)], scope[1])
            scopes.extend(scope_values(column).chunks)
        txt = t.column(text_column)
        idc = pa.chunked_array([pa.array([position_id(s.name, r) for r in range(piece.start, piece.stop)],
                                         pa.string())]) if positions else t.column(id_column)
        if idc.null_count:
            row = piece.start + int(np.flatnonzero(idc.is_null().to_numpy(zero_copy_only=False))[0])
            raise ValueError(f"{s.path}: row {row} has a null id in column {id_column!r}; every document needs a unique id.")
        if pa.types.is_dictionary(txt.type):
            txt = txt.cast(txt.type.value_type)
        if not pa.types.is_null(txt.type):
            _bad_utf8(s.path, txt, text_column, piece.start)
        if pa.types.is_integer(id_type):
            try:
                ids.append(idc.cast(pa.int64()).to_numpy())
            except pa.ArrowInvalid:
                raw = idc.cast(pa.uint64()).to_numpy()
                row = piece.start + int(np.flatnonzero(raw > INT64_MAX)[0])
                raise _too_large(f"{s.path}: row {row} of the id column {id_column!r} is {raw[row]}") from None
        else:
            if pa.types.is_dictionary(idc.type):
                idc = idc.cast(idc.type.value_type)
            ids.append(np.asarray(idc.to_pylist(), dtype=object))
        texts.extend(txt.cast(pa.large_string()).chunks if not pa.types.is_null(txt.type)
                     else [pa.nulls(len(txt), pa.large_string())])
    id_values = np.concatenate(ids) if ids else np.zeros(0, np.int64 if pa.types.is_integer(id_type) else object)
    out = pd.DataFrame({id_column: pd.Series(id_values, dtype=np.int64 if pa.types.is_integer(id_type) else object),
                        text_column: pd.Series(pd.arrays.ArrowStringArray(pa.chunked_array(texts, pa.large_string())),
                                               dtype=TEXT_DTYPE)})
    if keep is not None:
        out["_keep"] = pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array(kept, keep_type(keep[1]))))
    if scope is not None:
        out[SCOPE] = pd.Series(pd.arrays.ArrowStringArray(pa.chunked_array(scopes, pa.large_string())), dtype=TEXT_DTYPE)
    return out


def scope_values(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """`--within`'s values as large strings, each type's own text form (a dictionary read as its values)."""
    t = column.type
    if pa.types.is_dictionary(t):
        column = column.cast(t.value_type)
    return column.cast(pa.large_string())


def scopeable(t: pa.DataType) -> bool:
    """Whether `--within` can name a column of type `t`: values with a text form Arrow gives (numbers,
    strings, booleans, dates, times), not lists, structs or binary."""
    t = t.value_type if pa.types.is_dictionary(t) else t
    return any(f(t) for f in (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_boolean,
                              pa.types.is_date, pa.types.is_timestamp, pa.types.is_decimal, pa.types.is_floating))


def keep_type(t: pa.DataType) -> pa.DataType:
    """The type `--keep-by` values are compared in: a dictionary's value type, strings as large strings."""
    t = t.value_type if pa.types.is_dictionary(t) else t
    if pa.types.is_float16(t):  # Arrow cannot sort half floats; float32 holds each value exactly, in the same order
        return pa.float32()
    return pa.large_string() if pa.types.is_string(t) else pa.large_binary() if pa.types.is_binary(t) else t


def orderable(t: pa.DataType) -> bool:
    """Whether `--keep-by` can order a column of type `t`: numbers, strings, binary, booleans, times
    that Arrow can sort in their comparison type (`keep_type`; an interval, say, it cannot)."""
    t = t.value_type if pa.types.is_dictionary(t) else t
    if not any(f(t) for f in (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_string,
                              pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary,
                              pa.types.is_boolean, pa.types.is_temporal)):
        return False
    try:
        pc.sort_indices(pa.array([None, None], keep_type(t)))
    except pa.ArrowNotImplementedError:
        return False
    return True


def keep_values(col: pa.ChunkedArray, t: pa.DataType) -> pa.ChunkedArray:
    """A `--keep-by` column in its comparison type (`keep_type`), NaN as null (a null never wins) and -0.0
    as 0.0 (equal values: their tie goes to the smallest id, not to the order they came in)."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    col = col.cast(keep_type(t))
    if pa.types.is_floating(col.type):
        col = pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), pc.add(col, pa.scalar(0.0, col.type)))
    return col
