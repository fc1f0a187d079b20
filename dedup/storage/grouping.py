"""Which pieces of the input files make each partition: a file whole, runs of its row groups, or row
ranges of a row group above the bounds (`pieces_of`), grouped consecutively into as few, as even
partitions as the bounds allow (`grouped`)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from dedup.config import MIN_PARTITIONS, PARTITION_ROWS
from dedup.storage.shards import Piece, Shard

PARTITION_BYTES = 128 * 2**20
"""... or this many uncompressed bytes (`PARTITION_ROWS`, in `dedup.config`, bounds the rows); a larger
file is split into pieces of whole row groups within both bounds, and a row group above them into
row ranges read in record batches (`Piece`). 128 MiB is the row group parquet-mr writes (Spark's
and Hive's `parquet.block.size`) and Spark's `maxPartitionBytes`: such a group is read whole. At
64 MiB, a row group of 62,500 documents of about 1,200 bytes (75 MB) was cut into two row ranges
and decoded 1.5 times: 1,000,000 documents took 87 CPU-seconds against 76 (docs/performance.md,
Partition size)."""


def pieces_of(shard: Shard, rows: int = PARTITION_ROWS, nbytes: int = PARTITION_BYTES) -> list[Piece]:
    """The file whole when it is within both bounds; otherwise runs of consecutive row groups within
    them, and a row group above them cut into equal row ranges that are."""
    if (shard.rows <= rows and shard.nbytes <= nbytes) or not shard.group_rows:
        return [Piece(shard, 0, shard.rows)]
    out: list[Piece] = []
    start = pos = run_bytes = 0
    for g_rows, g_bytes in zip(shard.group_rows, shard.group_bytes):
        if pos > start and (pos - start + g_rows > rows or run_bytes + g_bytes > nbytes):
            out.append(Piece(shard, start, pos))
            start, run_bytes = pos, 0
        if g_rows > rows or g_bytes > nbytes:  # one row group above the bounds: row ranges of it
            cuts = max(-(-g_rows // rows), -(-g_bytes // nbytes))
            step = -(-g_rows // cuts)
            out += [Piece(shard, lo, min(lo + step, pos + g_rows)) for lo in range(pos, pos + g_rows, step)]
            start = pos + g_rows
        else:
            run_bytes += g_bytes
        pos += g_rows
    if pos > start:
        out.append(Piece(shard, start, pos))
    return out


def oversized_groups(shards: Sequence[Shard], rows: int = PARTITION_ROWS,
                     nbytes: int = PARTITION_BYTES) -> list[tuple[Shard, int]]:
    """(file, rows of its largest row group) for each file holding a row group above the bounds:
    such a group is read in row ranges, each decoding it from its start (Parquet has no way to
    start inside a row group), so it is read about (ranges + 1) / 2 times."""
    return [(s, max(s.group_rows)) for s in shards if s.group_rows and (s.rows > rows or s.nbytes > nbytes)
            and any(r > rows or b > nbytes for r, b in zip(s.group_rows, s.group_bytes))]


def grouped(shards: Sequence[Shard], rows: int = PARTITION_ROWS, nbytes: int = PARTITION_BYTES
            ) -> tuple[list[list[Piece]], int]:
    """`partitions`, and the rows bound they were made under: `rows`, or for an input above it that
    makes fewer than `MIN_PARTITIONS` partitions, a `MIN_PARTITIONS`th of its rows (never below its
    largest row group, which would then be cut into row ranges each decoded from its start) when that
    makes more: a small input's few partitions leave workers waiting on the last."""
    groups = _evened(shards, rows, nbytes)
    total = sum(s.rows for s in shards)
    if len(groups) >= MIN_PARTITIONS or total <= rows:
        return groups, rows
    largest = max((g for s in shards for g in (s.group_rows or (s.rows,))), default=0)
    smaller = min(rows, max(-(-total // MIN_PARTITIONS), largest))
    more = _evened(shards, smaller, nbytes) if smaller < rows else groups
    return (more, smaller) if len(more) > len(groups) else (groups, rows)


def partitions(shards: Sequence[Shard], rows: int = PARTITION_ROWS, nbytes: int = PARTITION_BYTES) -> list[list[Piece]]:
    """Consecutive pieces (`pieces_of`) grouped into as few partitions as `rows` rows and `nbytes` bytes
    allow (at least `MIN_PARTITIONS` of an input above them, when its files allow: `grouped`)."""
    return grouped(shards, rows, nbytes)[0]


def _evened(shards: Sequence[Shard], rows: int, nbytes: int) -> list[list[Piece]]:
    """Consecutive pieces (`pieces_of`) grouped into as few partitions as `rows` rows and `nbytes` bytes
    allow, and those as even as the pieces allow: the same count of partitions under the smallest
    bounds (a share of both) that still give it. Filled one by one up to the bounds, 16 shards of
    12,750 rows would be partitions of five, five, five and one shard at 65,536 rows, two workers
    taking two full ones and one full one; evened, they are four of four."""
    pieces = [p for s in shards for p in pieces_of(s, rows, nbytes)]
    if not pieces:
        return []
    sizes = [p.shard.nbytes * p.rows // max(p.shard.rows, 1) for p in pieces]
    counts = [p.rows for p in pieces]
    fewest = len(_cuts(counts, sizes, rows, nbytes))
    lo, hi = 0.0, 1.0  # the share of the bounds: the groups' count at `hi` is the fewest
    for _ in range(30):
        mid = (lo + hi) / 2
        if len(_cuts(counts, sizes, int(rows * mid), int(nbytes * mid))) == fewest:
            hi = mid
        else:
            lo = mid
    cuts = _cuts(counts, sizes, int(rows * hi), int(nbytes * hi))
    return [pieces[a:b] for a, b in zip([0, *cuts[:-1]], cuts)]


def _cuts(rows: Sequence[int], sizes: Sequence[int], max_rows: int, max_bytes: int) -> list[int]:
    """Where consecutive groups of the pieces end, each group taking pieces while within both bounds
    (a piece above them alone); the fewest groups any consecutive grouping within them has. Running
    sums searched with `bisect` on lists: a search costs a tenth of numpy's on an array, and the
    evening search in `_evened` runs this 32 times, a search a group (thousands of pieces at a
    billion documents, or with small bounds)."""
    cum_rows, cum_bytes = list(accumulate(rows)), list(accumulate(sizes))
    out: list[int] = []
    start = 0
    while start < len(cum_rows):
        base_rows = cum_rows[start - 1] if start else 0
        base_bytes = cum_bytes[start - 1] if start else 0
        stop = min(bisect_right(cum_rows, base_rows + max_rows), bisect_right(cum_bytes, base_bytes + max_bytes))
        start = max(stop, start + 1)
        out.append(start)
    return out
