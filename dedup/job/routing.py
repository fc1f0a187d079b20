"""Moving rows between partitions: each row to the partition a column names (a document's own
partition, a key's range, a component's label), by a shuffle, or, when the rows are known to be
few, by one gathering task or by plain tasks (see the constants' notes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.job.graphs import exchanged, fanned, gathered, shuffled
from dedup.partition import keyspace
from dedup.partition.rows import concat_rows
from dedup.storage import index

SMALL_ROUTE_BYTES = 64 * 2**20
"""A route whose rows are known to take at most about this many bytes (rows x the caller's estimate
of a row) goes through one task that gathers every partition and splits the rows by destination,
instead of a shuffle, whose fixed cost (transfer tasks, barrier, unpack tasks) is most of the time
of a small one (docs/performance.md, Design choices). A bound on bytes, not a share of the corpus:
no task gathers much more than this, and larger frames keep the shuffle's parallelism."""

INLINE_ROUTE_BYTES = 2**20
"""A small route whose rows take at most about this many bytes hands each destination's piece to the
task that uses it, not through a task of its own (a task fewer a partition, and a step less to wait
for): that task's worker then receives every piece, which costs little only for a frame this small."""

ROUTE_GROUP_BYTES = 64 * 2**20
"""A larger route whose rows are known shuffles to groups of about this many bytes (`route_grouped`):
a shuffle cuts every input partition into a piece for every output partition, and the cost of those
pieces (a few milliseconds each, however small) grows with the product of the partitions, that is
with the square of the corpus (docs/performance.md, Memory-limited workers)."""

DIRECT_ROUTE_PIECES = 256
"""A route to key ranges from n partitions to k whose n x k is at most this goes through plain tasks
(`route_direct`: n splits, n x k pieces, k joins) instead of a p2p shuffle: every piece is a task,
so their cost grows with the square of the partitions where a shuffle's grows with the rows.
Routes to the documents' own partitions keep the shuffle (docs/performance.md, Design choices)."""

ID_ROW_BYTES = 80
"""The estimate of a routed row holding a document key and an id (a string id of about 50 bytes)."""

BAND_ROW_BYTES = 48
"""The estimate of a routed band row (band, key, doc and two text keys: 33 bytes, and the routing's own)."""

PART = "_partitions"
"""The column holding each row's destination partition while it is routed (the name dask's shuffles use)."""


def route_by(frame: dd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray], npartitions: int,
              rows: int | None = None, row_bytes: int = 64, ranges: bool = False,
              nbytes: int | None = None) -> dd.DataFrame:
    """Partition i of the result holds the rows `part_of` sends to i; their index and their order
    inside a partition are unspecified (every consumer sorts or groups). `rows`: an upper bound on
    the frame's rows, when known, so that a small frame takes `route_small`; `nbytes`, for a frame
    whose rows are not known but whose bytes are (a persisted one, `graphs.persisted_bytes`): the
    same, for `route_small` only. `ranges`: the result's partitions are key ranges of their own
    (joined with no other frame's partitions), and between few partitions it takes `route_direct`.

    Else, when `rows` is known and a partition would hold less than `ROUTE_GROUP_BYTES`, a shuffle
    to groups of partitions (`route_grouped`). Else a shuffle on the destination column itself
    (dask's own `Shuffle`, which its hash shuffles and `set_index` build on): `set_index` on the
    destination, as before, added three tasks a partition (a lookup of the destination in the
    divisions, the new index, a sort of every partition by it)."""
    size = rows * row_bytes if rows is not None else nbytes
    if size is not None and size <= SMALL_ROUTE_BYTES:
        return route_small(frame, part_of, npartitions, inline=size <= INLINE_ROUTE_BYTES)
    if ranges and frame.npartitions * npartitions <= DIRECT_ROUTE_PIECES:
        return route_direct(frame, part_of, npartitions)
    if rows is not None:
        groups = max(1, -(-rows * row_bytes // ROUTE_GROUP_BYTES))
        if groups < npartitions:
            return route_grouped(frame, part_of, npartitions, groups)
    meta = frame._meta.assign(**{PART: pd.Series(dtype=np.int64)})
    with_part = frame.map_partitions(_with_part, part_of, meta=meta)
    return shuffled(with_part, PART, npartitions)[list(frame.columns)]


def _with_part(frame: pd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray]) -> pd.DataFrame:
    return frame.assign(**{PART: part_of(frame)})


def _placed_part(frame: pd.DataFrame, key_column: str, placement: keyspace.Placement) -> np.ndarray:
    return placement(frame[key_column].to_numpy(np.int64))


def range_part(frame: pd.DataFrame, column: str, npartitions: int) -> np.ndarray:
    return index.key_range_of(frame[column].to_numpy(np.uint64), npartitions)


def label_part(frame: pd.DataFrame, npartitions: int, column: str = "label") -> np.ndarray:
    """The partition that gathers each row's key in `column` (a component's label, a node: every row of
    one key in one partition)."""
    return keyspace.label_partition(frame[column].to_numpy(np.int64), npartitions)


def row_count(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"n": [len(frame)]})

ROWS_META = {"n": "int64"}


def _split(frame: pd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray], npartitions: int) -> list[pd.DataFrame]:
    """The rows of `frame` (every partition, concatenated) cut into one frame per destination."""
    frame = frame.reset_index(drop=True)
    dest = np.asarray(part_of(frame), dtype=np.int64) if len(frame) else np.zeros(0, np.int64)
    order = stable_order(dest, npartitions)
    frame = frame.take(order).reset_index(drop=True)
    bounds = np.searchsorted(dest[order], np.arange(npartitions + 1))
    return [frame.iloc[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]


def stable_order(dest: np.ndarray, npartitions: int) -> np.ndarray:
    """The stable argsort of destinations 0 .. npartitions - 1: as 16-bit values when they fit, which
    numpy sorts by radix, five times faster than the timsort it gives 64-bit integers."""
    small = npartitions <= np.iinfo(np.uint16).max + 1 and (not len(dest) or (dest.min() >= 0 and dest.max() < npartitions))
    return np.argsort(dest.astype(np.uint16) if small else dest, kind="stable")


DEST = "_dest"
"""The column holding each row's destination partition while it is routed to its group (`route_grouped`)."""


def route_grouped(frame: dd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray], npartitions: int,
                  groups: int) -> dd.DataFrame:
    """`route_by` through a shuffle to `groups` partitions: each row shuffled to the group of its
    destination (a run of consecutive destinations, `graphs.group_starts`), each group then cut into
    its destinations (`graphs.fanned`). Its pieces number inputs x groups, not inputs x outputs, and
    a group holds about `ROUTE_GROUP_BYTES`. The inputs are not joined first: that would end the
    fusion of the steps before the shuffle into its transfer tasks, and their results would wait in
    memory for the joins (measured: 1.6 GiB against 1.0 GiB peak worker memory at 1,000,000 documents)."""
    meta = frame._meta.assign(**{DEST: pd.Series(dtype=np.int64), PART: pd.Series(dtype=np.int64)})
    with_part = frame.map_partitions(_with_group, part_of, npartitions, groups, meta=meta)
    at_groups = shuffled(with_part, PART, groups)[[*frame.columns, DEST]]
    return fanned(at_groups, _cut_group, npartitions, frame._meta.reset_index(drop=True))


def _with_group(frame: pd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray], npartitions: int,
                groups: int) -> pd.DataFrame:
    dest = np.asarray(part_of(frame), dtype=np.int64) if len(frame) else np.zeros(0, np.int64)
    return frame.assign(**{DEST: dest, PART: dest * groups // npartitions})


def _cut_group(frame: pd.DataFrame, start: int, stop: int) -> list[pd.DataFrame]:
    """A group's rows cut into the frames of destinations start .. stop - 1."""
    pieces = _split(frame, lambda f: f[DEST].to_numpy(np.int64) - start, stop - start)
    return [p.drop(columns=DEST) for p in pieces]


def route_small(frame: dd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray],
                npartitions: int, inline: bool = False) -> dd.DataFrame:
    """`route_by` through one task: for frames small enough to gather (`SMALL_ROUTE_BYTES`). `inline`:
    each destination's piece taken by the task that uses it (`graphs.gathered`; `INLINE_ROUTE_BYTES`)."""
    meta = frame._meta.reset_index(drop=True)
    return gathered(frame, partial(_split_parts, part_of=part_of, npartitions=npartitions), npartitions, meta,
                    inline)


def route_direct(frame: dd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray],
                 npartitions: int) -> dd.DataFrame:
    """`route_by` through plain tasks, each partition cut by destination (`_split`) and the pieces of
    each destination joined in partition order (`graphs.exchanged`): for few partitions
    (`DIRECT_ROUTE_PIECES`)."""
    meta = frame._meta.reset_index(drop=True)
    return exchanged(frame, partial(_split, part_of=part_of, npartitions=npartitions), concat_rows,
                     npartitions, meta)


def _split_parts(parts: Sequence[pd.DataFrame], part_of: Callable[[pd.DataFrame], np.ndarray],
                 npartitions: int) -> list[pd.DataFrame]:
    """The rows of every part (`concat_rows`) cut by destination (`_split`)."""
    return _split(concat_rows(parts), part_of, npartitions)


def route(frame: dd.DataFrame, key_column: str, npartitions: int,
          placement: keyspace.Placement = keyspace.OWN, rows: int | None = None, row_bytes: int = 64,
          nbytes: int | None = None) -> dd.DataFrame:
    """`frame`'s rows moved to the partition of the document key in `key_column`: partition i of the
    result holds exactly the rows whose key belongs to features partition i, by `placement` (a
    shuffle, or one task for a small frame: `rows`, an upper bound on its rows, and `row_bytes`,
    or its `nbytes`; no graph data)."""
    return route_by(frame, partial(_placed_part, key_column=key_column, placement=placement), npartitions, rows,
                     row_bytes, nbytes=nbytes)


def route_ranges(frame: dd.DataFrame, npartitions: int, rows: int | None = None) -> dd.DataFrame:
    """Band rows moved to the bucket range of their key (`dedup.storage.index.key_range_of`): every bucket
    in one partition, and the same ranges as an index's band files. `rows`: an upper bound on the
    band rows, when known (`BAND_ROW_BYTES` each)."""
    return route_by(frame, partial(range_part, column="key", npartitions=npartitions), npartitions, rows,
                    BAND_ROW_BYTES, ranges=True)
