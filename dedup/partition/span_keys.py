"""Span dedup's window keys between partitions (`dedup.partition.spans` has the steps at each
partition): the first move's rows packed in 8 bytes (`packed`), routed to ranges of the first hash
(`key_range`); what a range's task does with them (`repeated_keys`) and with the second move's rows
(`settle_windows`, `top_windows`); and where each row goes back (`part_of`, `holder_of`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dedup.partition.keyspace import key_partition
from dedup.partition.lines import top_keys

COUNTS_META = pd.DataFrame({"key": pd.Series(dtype=np.uint64)})
"""A window's row of the first move, 8 bytes (`packed`): its first hash's high bits, whether the
partition that counted it holds it twice or more, and that partition (no second hash, no id: most
windows occur once; a first hash seen twice or more over the corpus brings its windows to the second
move, `partition_windows`, which keys them by both hashes)."""


def part_bits(npartitions: int) -> int:
    """The low bits of a first move's row (`packed`) that name its partition."""
    return max(1, (npartitions - 1).bit_length())


def packed(h1: NDArray[np.uint64], twice: NDArray[np.bool_], part: int, bits: int) -> NDArray[np.uint64]:
    """First-move rows: h1 with its `bits` + 1 low bits replaced by `twice` and `part` (its high bits,
    which route it, intact; two windows sharing the rest, one in 2^(63 - bits) among 10^9, only add
    a window to the second move, which compares both full hashes)."""
    low = np.uint64(bits + 1)
    return (h1 >> low << low) | (twice.astype(np.uint64) << np.uint64(bits)) | np.uint64(part)


def unpacked_hash(keys: NDArray[np.uint64], bits: int) -> NDArray[np.uint64]:
    """The hash bits of first-move rows (`packed`), or of first hashes, comparable with each other."""
    return keys >> np.uint64(bits + 1)


def key_range(frame: pd.DataFrame, npartitions: int) -> NDArray[np.int64]:
    """The range of `npartitions` equal ranges of first hashes a first-move row goes to (as
    `dedup.partition.lines.key_part` ranges h1)."""
    return ((frame["key"].to_numpy(np.uint64) >> np.uint64(32)) * np.uint64(npartitions) >> np.uint64(32)).astype(
        np.int64)


def grouped(h1: NDArray[np.uint64], h2: NDArray[np.uint64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The order that puts equal keys (h1, h2) together, and where each key's run starts in it. By h1
    alone, then by h2 within the runs of an h1 that two keys share (about one pair in 10^6 among
    10^7 windows), so that the sort is one 64-bit key's."""
    order = np.argsort(h1, kind="stable")
    s1, s2 = h1[order], h2[order]
    same1 = s1[1:] == s1[:-1]
    clash = same1 & (s2[1:] != s2[:-1])
    if clash.any():  # runs sharing an h1 with more than one h2: sorted again by (h1, h2)
        runs = np.flatnonzero(np.concatenate([[True], ~same1]))
        run_of = np.cumsum(np.concatenate([[True], ~same1])) - 1
        bad = np.unique(run_of[1:][clash])
        for r in bad.tolist():
            lo = runs[r]
            hi = runs[r + 1] if r + 1 < len(runs) else len(order)
            seg = order[lo:hi]
            order[lo:hi] = seg[np.lexsort((h2[seg],))]
        s2 = h2[order]
    new = np.ones(len(order), bool)
    new[1:] = ~same1 | (s2[1:] != s2[:-1])
    return order, np.flatnonzero(new)


HOLDERS_META = pd.DataFrame({"h1": pd.Series(dtype=np.uint64), "h2": pd.Series(dtype=np.uint64),
                             "doc": pd.Series(dtype=np.int64), "line": pd.Series(dtype=np.int32),
                             "part": pd.Series(dtype=np.int32)})
"""A repeated key as it goes to a partition holding it (`part`): its hashes and its first occurrence."""


def settled_meta(id_dtype: Any) -> pd.DataFrame:
    """A row of `settle_windows`: a repeated key's hashes, count over the corpus and first occurrence
    (document key, first token, id), a partition holding it (`part`), `lead`, true on one row of each
    key (where its count and first occurrence are read once), and `first`, the first occurrence's
    place in the task's order of occurrences (the id's rank there, then the token), for `top_windows`."""
    return pd.DataFrame({"h1": pd.Series(dtype=np.uint64), "h2": pd.Series(dtype=np.uint64),
                         "count": pd.Series(dtype=np.int64), "doc": pd.Series(dtype=np.int64),
                         "line": pd.Series(dtype=np.int32), "part": pd.Series(dtype=np.int32),
                         "_id": pd.Series(dtype=id_dtype), "lead": pd.Series(dtype=bool),
                         "first": pd.Series(dtype=np.int64)})


def _id_ranks(ids: pd.Series) -> NDArray[np.int64]:
    """Each id's rank among these ids (equal ids the same): a number that orders them as the ids do,
    found by sorting each distinct id once (a task's rows hold a document's id once a window; Arrow
    sorts strings by their UTF-8 bytes, which is the order of their code points, Python's)."""
    codes, uniques = pd.factorize(ids, sort=False)
    rank = np.empty(len(uniques), np.int64)
    rank[np.asarray(uniques.argsort())] = np.arange(len(uniques))
    return rank[codes]


def settle_windows(rows: pd.DataFrame) -> pd.DataFrame:
    """Of the second move's rows of a range of keys: for each key seen twice or more over the corpus,
    its count and its first occurrence over the corpus (the smallest id, then position), one row for
    each partition holding it (`part`; `settled_meta`)."""
    if rows.empty:
        return settled_meta(rows["_id"].dtype)
    h1, h2 = rows["h1"].to_numpy(np.uint64), rows["h2"].to_numpy(np.uint64)
    order, starts = grouped(h1, h2)
    ids = rows["_id"]
    occurrence = (_id_ranks(ids) << 32 | rows["line"].to_numpy(np.int64))[order]
    best = np.minimum.reduceat(occurrence, starts)
    total = np.add.reduceat(rows["count"].to_numpy(np.int64)[order], starts)
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(order))))
    # the row of each key's first occurrence (rows of a key are of different documents: one is first)
    first_of = order[np.minimum.reduceat(np.where(occurrence == best[group], np.arange(len(order)), len(order)),
                                         starts)]
    wanted = (total >= 2)[group]
    take, g = order[wanted], group[wanted]
    lead = np.zeros(len(order), bool)
    lead[starts] = True
    src = first_of[g]
    return pd.DataFrame({"h1": h1[take], "h2": h2[take], "count": total[g],
                         "doc": rows["doc"].to_numpy(np.int64)[src], "line": rows["line"].to_numpy(np.int32)[src],
                         "part": key_partition(rows["doc"].to_numpy(np.int64)[take]).astype(np.int32),
                         "_id": ids.iloc[src].reset_index(drop=True),
                         "lead": lead[wanted], "first": best[g]})


def to_holders(settled: pd.DataFrame, top: pd.DataFrame | None = None) -> pd.DataFrame:
    """`settle_windows`' rows as the partitions holding them need them (`HOLDERS_META`). `top`: the
    range's `top_windows`, not read: taken first, so that the settled rows, once sent, are released
    (two steps read them; the workers would hold them until the second ran, every range at once)."""
    return settled[list(HOLDERS_META.columns)]


def top_meta(id_dtype: Any) -> pd.DataFrame:
    """A candidate for the most repeated windows (`top_windows`): its hashes, count and first
    occurrence (document key, token, id), and `keys` (the first of a range's rows: its repeated
    windows; the others 0)."""
    return pd.DataFrame({"h1": pd.Series(dtype=np.uint64), "h2": pd.Series(dtype=np.uint64),
                         "count": pd.Series(dtype=np.int64), "doc": pd.Series(dtype=np.int64),
                         "line": pd.Series(dtype=np.int64), "_id": pd.Series(dtype=id_dtype),
                         "keys": pd.Series(dtype=np.int64)})


def top_windows(settled: pd.DataFrame, n: int) -> pd.DataFrame:
    """The `n` most repeated keys of `settle_windows`' rows of a key range, once each, as
    `dedup.partition.lines.top_keys` orders them (by count, then first occurrence's id and token,
    then key), chosen by numbers: the keys as many times repeated as the n-th or more, then ordered
    (`top_meta`; `keys`, how many keys the range holds, on its first row, 0 on the others)."""
    one = settled[settled["lead"].to_numpy(bool)]
    keys = len(one)
    count = one["count"].to_numpy(np.int64)
    if len(one) > n:
        least = np.partition(count, len(count) - n)[len(count) - n]
        one = one[count >= least]
    order = np.lexsort((one["h2"].to_numpy(np.uint64), one["h1"].to_numpy(np.uint64), one["first"].to_numpy(np.int64),
                        -one["count"].to_numpy(np.int64)))[:n]
    out = one.iloc[order][["h1", "h2", "count", "doc", "line", "_id"]].astype({"line": np.int64})
    return out.assign(keys=np.where(np.arange(len(out)) == 0, keys, 0))


def top_of(candidates: pd.DataFrame, n: int) -> pd.DataFrame:
    """The `n` most repeated windows of the key ranges' `top_windows`, in order."""
    return top_keys(candidates.drop(columns="keys"), n).reset_index(drop=True)


def repeated_keys(rows: pd.DataFrame, npartitions: int) -> pd.DataFrame:
    """Of the first move's rows of a range of first hashes: those whose hash is seen twice or more
    over the corpus (in two partitions, or twice in one), each to be sent to its partition (`part_of`)."""
    if rows.empty:
        return rows.iloc[:0]
    bits = part_bits(npartitions)
    key = np.sort(rows["key"].to_numpy(np.uint64))  # a row is its key: sorted, equal hashes side by side
    h = unpacked_hash(key, bits)
    new = np.ones(len(h), bool)
    new[1:] = h[1:] != h[:-1]
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    twice = (key >> np.uint64(bits)) & np.uint64(1)
    wanted = (np.diff(np.append(starts, len(h))) >= 2) | (np.maximum.reduceat(twice, starts) > 0)
    return pd.DataFrame({"key": key[wanted[group]]})


def part_of(frame: pd.DataFrame, npartitions: int) -> NDArray[np.int64]:
    """Where a row of `repeated_keys` goes: the partition that counted it."""
    return (frame["key"].to_numpy(np.uint64) & np.uint64((1 << part_bits(npartitions)) - 1)).astype(np.int64)


def holder_of(frame: pd.DataFrame) -> NDArray[np.int64]:
    """Where a row of `to_holders` goes: the partition holding the window."""
    return frame["part"].to_numpy(np.int64)
