"""Exact line dedup per partition (docs/contract.md, section 6b), in three steps around two moves:

1. `partition_firsts`: at each input partition, every key of a line of a clean document once, with
   how often it occurs there and its first occurrence there (the smallest id, then the first line);
2. routed by key, `settle_keys`: each key's count over the corpus and its first occurrence over the
   corpus, sent (for the keys with at least `min_copies` occurrences) to every partition holding it;
3. at each input partition again, `removed_lines`: the occurrences of those keys other than the first.

A key is two independent 64-bit hashes of the line's words (`dedup.core.lines`): two distinct keys
share both with probability about 2^-128 a pair, about 10^-17 among 10^11 distinct lines. A key
occurring in every document moves as one row a partition, so no task holds more than its
partition's lines, whatever a key's count.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from dedup.core.decontam import ProtectedNgrams
from dedup.core.lines import split_lines, without_lines
from dedup.partition.keyspace import doc_keys

LINE_COLUMNS = {"h1": np.uint64, "h2": np.uint64, "count": np.int64, "doc": np.int64, "line": np.int32,
                "part": np.int64}
"""A key's row: its hashes, its count, its first occurrence (document key and line) and, for the
partition-level rows, the partition it was counted in."""

SHOWN_LINES = 20
"""The most repeated lines the manifest and the page name."""

SHARE_BINS = 10
"""Bins of the histogram of the share of a document's characters its lost lines held."""


def firsts_meta(id_dtype: Any) -> pd.DataFrame:
    return pd.DataFrame({**{c: pd.Series(dtype=t) for c, t in LINE_COLUMNS.items()}, "_id": pd.Series(dtype=id_dtype)})


def line_keys_meta(id_dtype: Any) -> pd.DataFrame:
    """A settled key's row: its count over the corpus, its first occurrence (and that document's id)
    and a partition holding it."""
    return firsts_meta(id_dtype)


def _texts(part: pd.DataFrame, text_column: str) -> pa.Array:
    return pa.array(part[text_column], type=pa.large_string(), from_pandas=True)


def clean_documents(part: pd.DataFrame, text_column: str, protected: ProtectedNgrams | None) -> NDArray[np.bool_]:
    """Which documents of the partition decontamination keeps (no protected n-gram in their text):
    only their lines are counted."""
    if protected is None or not len(protected):
        return np.ones(len(part), bool)
    from dedup.core.text import encode_column

    return protected.first_hits(encode_column(part[text_column]))[0] < 0


def partition_firsts(part: pd.DataFrame, id_column: str, text_column: str, protected: ProtectedNgrams | None,
                     partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every key of the keyed lines of this partition's clean documents once: its count here and
    its first occurrence here (the document with the smallest id, then its first line with the key),
    that document's id, and this partition's number."""
    number = partition_info["number"] if partition_info else 0
    lines = split_lines(_texts(part, text_column))
    take = lines.keyed & clean_documents(part, text_column, protected)[lines.doc]
    doc, line, h1, h2 = lines.doc[take], lines.line[take], lines.h1[take[lines.keyed]], lines.h2[take[lines.keyed]]
    ids = part[id_column].to_numpy()
    rank = np.empty(len(ids), np.int64)
    rank[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    order = np.lexsort((line, rank[doc], h2, h1))
    h1, h2, doc, line = h1[order], h2[order], doc[order], line[order]
    new = np.ones(len(h1), bool)
    new[1:] = (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])
    starts = np.flatnonzero(new)
    count = np.diff(np.append(starts, len(h1)))
    out = pd.DataFrame({"h1": h1[starts], "h2": h2[starts], "count": count.astype(np.int64),
                        "doc": doc_keys(number, len(part))[doc[starts]], "line": line[starts].astype(np.int32),
                        "part": np.full(len(starts), number, np.int64)})
    out["_id"] = pd.Series(ids[doc[starts]], dtype=part[id_column].dtype).to_numpy() if len(starts) else \
        part[id_column].iloc[:0].to_numpy()
    return out


def key_part(frame: pd.DataFrame, npartitions: int) -> NDArray[np.int64]:
    """The range of `npartitions` equal ranges of h1 each key row goes to."""
    return ((frame["h1"].to_numpy(np.uint64) >> np.uint64(32)) * np.uint64(npartitions) >> np.uint64(32)).astype(np.int64)


def settle_keys(rows: pd.DataFrame, min_copies: int) -> pd.DataFrame:
    """Of the partition-level rows of a range of keys: for each key with at least `min_copies`
    occurrences over the corpus, one row for each partition holding it, with the key's count and its
    first occurrence over the corpus (the smallest id, then the first line), to be sent there."""
    if rows.empty:
        return rows.iloc[:0][list(rows.columns)]
    by = rows.sort_values(["h1", "h2", "_id", "line"], kind="stable").reset_index(drop=True)
    h1, h2 = by["h1"].to_numpy(np.uint64), by["h2"].to_numpy(np.uint64)
    new = np.ones(len(by), bool)
    new[1:] = (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])
    group = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    total = np.add.reduceat(by["count"].to_numpy(np.int64), starts)
    wanted = (total >= min_copies)[group]
    first = starts[group]
    return pd.DataFrame({"h1": h1[wanted], "h2": h2[wanted], "count": total[group][wanted],
                         "doc": by["doc"].to_numpy(np.int64)[first][wanted],
                         "line": by["line"].to_numpy(np.int32)[first][wanted],
                         "part": by["part"].to_numpy(np.int64)[wanted],
                         "_id": by["_id"].to_numpy()[first][wanted]})


def to_partition(frame: pd.DataFrame) -> NDArray[np.int64]:
    """Where a settled key's row goes: the partition that counted it."""
    return frame["part"].to_numpy(np.int64)


def removed_lines(texts: pa.Array, keys: NDArray[np.int64], line_keys: pd.DataFrame,
                  clean: NDArray[np.bool_] | None = None) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(text, line) positions of the lines these texts lose: each keyed line whose key is settled
    (`line_keys`, this partition's rows of `settle_keys`) and which is not that key's first occurrence.
    `keys`: the texts' document keys; `clean`: only these texts lose lines (a contaminated document
    is dropped whole)."""
    if line_keys.empty or not len(texts):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lines = split_lines(texts)
    doc, line = lines.doc[lines.keyed], lines.line[lines.keyed].astype(np.int64)
    at = _settled_row(lines.h1, lines.h2, line_keys)
    hit = at >= 0
    if clean is not None:
        hit &= clean[doc]
    i = np.flatnonzero(hit)
    first = (keys[doc[i]] == line_keys["doc"].to_numpy(np.int64)[at[i]]) & \
        (line[i] == line_keys["line"].to_numpy(np.int64)[at[i]])
    i = i[~first]
    return doc[i], line[i]


def _settled_row(h1: NDArray[np.uint64], h2: NDArray[np.uint64], line_keys: pd.DataFrame) -> NDArray[np.int64]:
    """For each key (h1, h2): its row in `line_keys` (one row a key, as a partition's are), or -1. By a
    hash lookup of h1, h2 confirming; when two settled keys share an h1 (about one pair in 10^7 among
    10^6 keys), by binary search, those keys looked up one by one."""
    index = pd.Index(line_keys["h1"].to_numpy(np.uint64))
    if index.is_unique:
        at = index.get_indexer(h1).astype(np.int64)
        found = at >= 0
        found[found] = line_keys["h2"].to_numpy(np.uint64)[at[found]] == h2[found]
        return np.where(found, at, -1)
    order = np.lexsort((line_keys["h2"].to_numpy(np.uint64), line_keys["h1"].to_numpy(np.uint64)))
    d1, d2 = line_keys["h1"].to_numpy(np.uint64)[order], line_keys["h2"].to_numpy(np.uint64)[order]
    lo, hi = np.searchsorted(d1, h1, "left"), np.searchsorted(d1, h1, "right")
    at = np.full(len(h1), -1, np.int64)
    one = (hi - lo == 1)
    one[one] = d2[lo[one]] == h2[one]
    at[one] = order[lo[one]]
    for k in np.flatnonzero(hi - lo > 1):
        same = np.flatnonzero(d2[lo[k]:hi[k]] == h2[k])
        if len(same):
            at[k] = order[lo[k] + same[0]]
    return at


def rewrite(texts: pa.Array, keys: NDArray[np.int64], line_keys: pd.DataFrame, clean: NDArray[np.bool_] | None = None,
            removed: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None) -> tuple[pa.Array, NDArray[np.bool_]]:
    """The texts without the lines they lose (`removed_lines`, unless given as `removed`), and which
    documents lost a line and have no word left (dropped: `empty_after_lines`)."""
    doc, line = removed if removed is not None else removed_lines(texts, keys, line_keys, clean)
    new = without_lines(texts, doc, line)
    emptied = np.zeros(len(texts), bool)
    if len(doc):
        from dedup.core.text import encode_arrow

        lost = np.unique(doc)
        emptied[lost] = encode_arrow(new.take(pa.array(lost))).num_words == 0
    return new, emptied


def rewritten_frame(part: pd.DataFrame, line_keys: pd.DataFrame, text_column: str, original: str,
                    partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """The partition with its texts rewritten (`rewrite`) and the texts as read kept as `original`
    (decontamination reads those)."""
    number = partition_info["number"] if partition_info else 0
    texts = _texts(part, text_column)
    new, _ = rewrite(texts, doc_keys(number, len(part)), line_keys)
    out = part.copy()
    out[original] = part[text_column]
    out[text_column] = pd.Series(pd.arrays.ArrowExtensionArray(new) if len(new) else part[text_column].array[:0],
                                 index=part.index).astype(part[text_column].dtype)
    return out


def removal_counts(part: pd.DataFrame, line_keys: pd.DataFrame, text_column: str, protected: ProtectedNgrams | None,
                   partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Of this partition's clean documents: the lines and characters removed, the documents that lost
    a line and those left without a word, and the histogram (`SHARE_BINS`) of the share of a
    document's characters its lost lines held (of the documents that lost one)."""
    number = partition_info["number"] if partition_info else 0
    texts = _texts(part, text_column)
    keys = doc_keys(number, len(part))
    clean = clean_documents(part, text_column, protected) if not line_keys.empty else None
    doc, line = removed_lines(texts, keys, line_keys, clean)
    hist = np.zeros(SHARE_BINS, np.int64)
    chars = touched = emptied = 0
    if len(doc):
        new, gone = rewrite(texts, keys, line_keys, removed=(doc, line))
        lost = np.unique(doc)
        before = np.asarray(pa.compute.utf8_length(texts.take(pa.array(lost))).to_numpy(zero_copy_only=False), np.int64)
        after = np.asarray(pa.compute.utf8_length(new.take(pa.array(lost))).to_numpy(zero_copy_only=False), np.int64)
        chars, touched, emptied = int((before - after).sum()), len(lost), int(gone.sum())
        share = (before - after) / np.maximum(before, 1)
        hist = np.bincount(np.minimum((share * SHARE_BINS).astype(np.int64), SHARE_BINS - 1), minlength=SHARE_BINS)
    return pd.DataFrame({"lines": [len(doc)], "chars": [chars], "documents": [touched], "emptied": [emptied],
                         "hist": pd.Series([hist.tolist()], dtype=object)})


def key_count(settled: pd.DataFrame) -> pd.DataFrame:
    """How many distinct keys these settled rows hold (the repeated lines' keys of a key range)."""
    return pd.DataFrame({"n": [len(settled.drop_duplicates(["h1", "h2"]))]})


def top_keys(line_keys: pd.DataFrame, n: int = SHOWN_LINES) -> pd.DataFrame:
    """The `n` most repeated settled keys of these rows, once each: by count, then by their first
    occurrence's id and line, then by key (never by position: the same whatever the partitioning)."""
    one = line_keys.drop_duplicates(["h1", "h2"])
    return one.sort_values(["count", "_id", "line", "h1", "h2"], ascending=[False, True, True, True, True],
                           kind="stable").head(n)
