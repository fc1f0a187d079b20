"""Exact substring (span) dedup per partition (docs/contract.md, section 6c), on the documents the
earlier passes keep (the survivors, their texts as line dedup leaves them), in three steps around
three moves, each routed by key to ranges of the first hash (`key_range`,
`dedup.partition.lines.key_part`) or back to a partition:

1. `window_counts`: at each input partition, the first hash of every k-token window of its surviving
   documents once, packed with whether it occurs twice there and the partition (`packed`: 8 bytes a
   row); routed by hash, `repeated_keys`: those seen twice or more over the corpus, each sent back to
   its partition;
2. `partition_windows`: at each partition again, the windows with such a first hash, once a key
   (both hashes), with their count and first occurrence there; routed by key, `settle_windows`: each
   key seen twice or more over the corpus, with its first occurrence, and a row for each partition
   holding it, sent there (`to_holders`; the range's most repeated keys, `top_windows`, taken first);
3. `span_changes`: at each partition, the tokens a repeated window covers (with keep "first", every
   window but the key's first occurrence; with "none", every one), cut from the texts
   (`dedup.core.spans.cut`), and the documents left without a word or, cut, holding a protected
   n-gram dropped; the new texts go to the write with them.

A key is two independent 64-bit polynomial hashes of the window's token hashes; a partition's
documents are tokenised a few thousand at a time (`TOKEN_CHUNK`), so no task holds more than its
partition's window keys, whatever the corpus or a key's copies.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from dedup.core.decontam import ProtectedNgrams
from dedup.core.spans import CHAR, WORD, Tokens, covered, cut, tokens, window_keys, with_cuts
from dedup.core.text import encode_batch, string_array
from dedup.partition.features import AFTER_LINES
from dedup.partition.keyspace import doc_keys, key_partition
from dedup.partition.lines import (
    CONTAMINATED_ANEW,
    KEPT,
    LEFT_WITHOUT_WORDS,
    SHARE_BINS,
    KeyLookup,
    top_keys,
    with_drops,
    with_line_drops,
    without_removed_lines,
)
from dedup.partition.lines import survivors as line_survivors

KEEP_MODES = ("first", "none")
"""`--spans-keep`: the occurrence in the smallest-id document stays (first), or none does (Lee et
al.'s strike-all)."""

SPAN_TOKENS = 50
"""`--span-tokens`: the tokens of the shortest repeated substring cut."""


@dataclass(frozen=True)
class SpanRule:
    """What span dedup removes: windows of `size` tokens of `unit` ("word" or "char"), `keep` mode."""

    size: int = SPAN_TOKENS
    unit: str = "word"
    keep: str = "first"


@dataclass(frozen=True)
class Before:
    """What the passes before span dedup did to a partition: line dedup's settled keys and changes
    (None without line dedup). Span dedup reads the texts as they leave them."""

    line_keys: pd.DataFrame | None = None
    line_changes: pd.DataFrame | None = None


SPAN_CHANGES_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "tokens": pd.Series(dtype=np.int64),
                                  "spans": pd.Series(dtype=np.int64), "before": pd.Series(dtype=np.int64),
                                  "after": pd.Series(dtype=np.int64), "fate": pd.Series(dtype=np.int8),
                                  "source": pd.Series(dtype=np.int32), "source_gram": pd.Series(dtype=np.int64),
                                  "text": pd.Series(dtype=object)})
"""A document that lost a span: its key, the tokens and spans (maximal runs) it lost, its characters
before and after (after line dedup, if it ran), its new `text` (what the write writes), its fate
(`dedup.partition.lines`' KEPT, LEFT_WITHOUT_WORDS for no word left, CONTAMINATED_ANEW for a
protected n-gram in its new text) and that n-gram."""

SPAN_COUNTS_META = {"tokens": "int64", "spans": "int64", "chars": "int64", "documents": "int64", "emptied": "int64",
                    "contaminated": "int64", "hist": object}

EMPTIED_BY_SPANS = -3
"""`source` of a document span dedup left without a word (`with_span_drops`): reason `empty_after_spans`."""

AFTER_SPANS = "_after_spans"
"""The features column `with_span_drops` adds: the document's text after span dedup holds the
protected n-gram its `source` names (reason `contaminated_after_spans`)."""


def _texts(part: pd.DataFrame, text_column: str, keys: NDArray[np.int64], keep: NDArray[np.bool_],
           before: Before) -> pa.Array:
    """The partition's texts as the passes before span dedup leave them (large_string)."""
    texts = pa.array(part[text_column], type=pa.large_string(), from_pandas=True)
    if before.line_keys is not None:
        texts = without_removed_lines(texts, keys, before.line_keys, keep).cast(pa.large_string())
    return texts


def span_survivors(feat: pd.DataFrame, roots: pd.DataFrame | None, drop: bool, before: Before) -> NDArray[np.bool_]:
    """The documents span dedup reads: those near dedup and decontamination keep, less those line
    dedup dropped."""
    return line_survivors(with_line_drops(feat, before.line_changes), roots, drop)


TOKEN_CHUNK = 4096
"""Documents tokenised at a time (`_survivor_chunks`): a task holds their tokens and windows (about 50
bytes a token), not its whole partition's."""


def _survivor_chunks(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, text_column: str,
                     drop: bool, before: Before, rule: SpanRule, number: int
                     ) -> Iterator[tuple[int, pa.Array, Tokens]]:
    """The partition's texts as span dedup reads them, `TOKEN_CHUNK` documents at a time: (the first
    one's row, their texts, the tokens of the survivors among them)."""
    keys = doc_keys(number, len(part))
    keep = span_survivors(feat, roots, drop, before)
    texts = _texts(part, text_column, keys, keep, before)
    only = _only(texts, keep)
    for lo in range(0, len(texts), TOKEN_CHUNK):
        yield lo, texts.slice(lo, TOKEN_CHUNK), tokens(only.slice(lo, TOKEN_CHUNK), rule.unit)


def _only(texts: pa.Array, keep: NDArray[np.bool_]) -> pa.Array:
    """`texts` with those `keep` does not mark null."""
    return texts if keep.all() else pc.if_else(pa.array(keep), texts, pa.scalar(None, texts.type))


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


def _grouped(h1: NDArray[np.uint64], h2: NDArray[np.uint64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
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


def window_counts(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None,
                  line_keys: pd.DataFrame | None, line_changes: pd.DataFrame | None, text_column: str, drop: bool,
                  rule: SpanRule, npartitions: int, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every first hash of a window of this partition's surviving documents once, packed with whether
    it occurs twice or more here and this partition's number (`COUNTS_META`): what the first move
    carries."""
    number = partition_info["number"] if partition_info else 0
    chunks = _survivor_chunks(part, feat, roots, text_column, drop, Before(line_keys, line_changes), rule, number)
    h1 = np.sort(np.concatenate([np.zeros(0, np.uint64), *(window_keys(tok, rule.size)[0] for _, _, tok in chunks)]))
    new = np.ones(len(h1), bool)
    new[1:] = h1[1:] != h1[:-1]
    starts = np.flatnonzero(new)
    twice = np.diff(np.append(starts, len(h1))) >= 2
    return pd.DataFrame({"key": packed(h1[starts], twice, number, part_bits(npartitions))})


def windows_meta(id_dtype: Any) -> pd.DataFrame:
    """A window key's row of the second move (`partition_windows`): its hashes, its count and its
    first occurrence (document key, first token, id) in the partition that counted it (the document
    key's partition, `dedup.partition.keyspace.key_partition`)."""
    return pd.DataFrame({"h1": pd.Series(dtype=np.uint64), "h2": pd.Series(dtype=np.uint64),
                         "count": pd.Series(dtype=np.int32), "doc": pd.Series(dtype=np.int64),
                         "line": pd.Series(dtype=np.int32), "_id": pd.Series(dtype=id_dtype)})


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
    order, starts = _grouped(h1, h2)
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


def partition_windows(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None,
                      line_keys: pd.DataFrame | None, line_changes: pd.DataFrame | None, repeated: pd.DataFrame | None,
                      id_column: str, text_column: str, drop: bool, rule: SpanRule, npartitions: int,
                      partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every window key of this partition's surviving documents whose first hash is `repeated` (this
    partition's rows of `repeated_keys`; None: every key) once (`windows_meta`): its count here, its
    first occurrence here (the smallest id, then position: `doc`, `line`, `_id`)."""
    number = partition_info["number"] if partition_info else 0
    # each first hash once: `window_counts` counts a partition's once, `repeated_keys` sends it once
    bits = part_bits(npartitions)
    wanted_h1 = pd.Index(unpacked_hash(repeated["key"].to_numpy(np.uint64), bits)) if repeated is not None else None
    parts: list[tuple[NDArray[np.uint64], NDArray[np.uint64], NDArray[np.int64], NDArray[np.int64]]] = []
    for lo, _, tok in _survivor_chunks(part, feat, roots, text_column, drop, Before(line_keys, line_changes), rule,
                                       number):
        h1, h2, first = window_keys(tok, rule.size)
        if wanted_h1 is not None:
            wanted = wanted_h1.get_indexer(unpacked_hash(h1, bits)) >= 0
            h1, h2, first = h1[wanted], h2[wanted], first[wanted]
        d = tok.doc[first] if len(first) else np.zeros(0, np.int64)
        parts.append((h1, h2, lo + d, first - tok.offsets[d] if len(first) else np.zeros(0, np.int64)))
    h1, h2, doc, pos = (np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, t)
                        for i, t in enumerate((np.uint64, np.uint64, np.int64, np.int64)))
    ids = part[id_column].to_numpy()
    rank = np.empty(len(ids), np.int64)
    rank[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    order, starts = _grouped(h1, h2)
    rank_pos = (rank[doc] << 32 | pos)[order]
    best = np.minimum.reduceat(rank_pos, starts) if len(starts) else np.zeros(0, np.int64)
    by_rank = np.argsort(rank)
    fdoc, fpos = by_rank[best >> 32], best & 0xFFFFFFFF
    count = np.diff(np.append(starts, len(order)))
    at = order[starts]
    out = pd.DataFrame({"h1": h1[at], "h2": h2[at], "count": count.astype(np.int32),
                        "doc": doc_keys(number, len(part))[fdoc], "line": fpos.astype(np.int32)})
    out["_id"] = part[id_column].iloc[fdoc].to_numpy() if part[id_column].dtype == object else \
        part[id_column].iloc[fdoc].reset_index(drop=True)  # Arrow strings taken as they are
    return out


def removed_tokens(tok: Tokens, keys: NDArray[np.int64], settled: pd.DataFrame | KeyLookup,
                   rule: SpanRule) -> NDArray[np.bool_]:
    """Per token of `tok` (of texts keyed `keys`): whether a repeated window covers it. `settled`:
    this partition's rows of the keys seen twice or more (`settle_keys`), each with its first
    occurrence, which with keep "first" stays."""
    n = len(tok.start)
    lookup = settled if isinstance(settled, KeyLookup) else KeyLookup(settled)
    if lookup.frame.empty or not n:
        return np.zeros(n, bool)
    h1, h2, first = window_keys(tok, rule.size)
    at = lookup.rows(h1, h2)
    settled = lookup.frame
    hit = np.flatnonzero(at >= 0)
    if rule.keep == "first":
        doc = tok.doc[first[hit]]
        pos = first[hit] - tok.offsets[doc]
        is_first = (keys[doc] == settled["doc"].to_numpy(np.int64)[at[hit]]) & \
            (pos == settled["line"].to_numpy(np.int64)[at[hit]])
        hit = hit[~is_first]
    return covered(n, first[hit], rule.size)


def _runs(removed: NDArray[np.bool_], doc: NDArray[np.int64], n: int) -> NDArray[np.int64]:
    """Per text (of `n`): how many maximal runs of removed tokens it has."""
    start = removed.copy()
    start[1:] &= ~(removed[:-1] & (doc[1:] == doc[:-1]))
    return np.bincount(doc[start], minlength=n)


def span_changes(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, line_keys: pd.DataFrame | None,
                 line_changes: pd.DataFrame | None, settled: pd.DataFrame, text_column: str, drop: bool,
                 protected: ProtectedNgrams | None, rule: SpanRule,
                 partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every surviving document of this partition that loses a span (`SPAN_CHANGES_META`): the tokens
    and spans it loses, its characters before and after, and its fate: kept cut, dropped with no
    word left, or dropped because its cut text holds a protected n-gram."""
    number = partition_info["number"] if partition_info else 0
    keys = doc_keys(number, len(part))
    lookup = KeyLookup(settled)
    found = [_chunk_changes(texts, tok, keys[lo:lo + len(texts)], lookup, protected, rule)
             for lo, texts, tok in _survivor_chunks(part, feat, roots, text_column, drop,
                                                    Before(line_keys, line_changes), rule, number)]
    found = [f for f in found if len(f)]
    return pd.concat(found, ignore_index=True) if found else SPAN_CHANGES_META.copy()


def _chunk_changes(texts: pa.Array, tok: Tokens, keys: NDArray[np.int64], settled: KeyLookup,
                   protected: ProtectedNgrams | None, rule: SpanRule) -> pd.DataFrame:
    """`span_changes` of a run of documents (`texts`, keyed `keys`, their survivors' tokens `tok`)."""
    gone = removed_tokens(tok, keys, settled, rule)
    if not gone.any():
        return SPAN_CHANGES_META.copy()
    doc = tok.doc
    lost = np.unique(doc[gone])
    new = cut(texts, tok, gone)
    after = [new[d] for d in lost.tolist()]
    words = encode_batch(after).num_words
    fate = np.where(words == 0, LEFT_WITHOUT_WORDS, KEPT).astype(np.int8)
    source = np.full(len(lost), -1, np.int32)
    gram = np.full(len(lost), -1, np.int64)
    if protected is not None and len(protected):
        left = np.flatnonzero(fate == KEPT)
        rec, hit = protected.first_hits(encode_batch([after[i] for i in left.tolist()]))
        found = rec >= 0
        fate[left[found]] = CONTAMINATED_ANEW
        source[left[found]], gram[left[found]] = rec[found], hit[found]
    runs = _runs(gone, doc, len(texts))
    return pd.DataFrame({"doc": keys[lost], "tokens": np.bincount(doc[gone], minlength=len(texts))[lost],
                         "spans": runs[lost], "before": np.asarray(pc.utf8_length(texts.take(pa.array(lost))).to_numpy(
                             zero_copy_only=False), np.int64),
                         "after": np.asarray([len(t) for t in after], np.int64), "fate": fate, "source": source,
                         "source_gram": gram, "text": pd.Series(after, dtype=object).to_numpy()})


def span_counts(changes: pd.DataFrame) -> pd.DataFrame:
    """Of one partition's `span_changes`: tokens, spans and characters removed (all of a dropped
    document's), documents changed, emptied and contaminated anew, and the histogram (`SHARE_BINS`)
    of the share of a changed document's characters removed."""
    before, after = changes["before"].to_numpy(np.int64), changes["after"].to_numpy(np.int64)
    share = (before - after).astype(np.float64) / np.maximum(before, 1)
    hist = np.bincount(np.minimum((share * SHARE_BINS).astype(np.int64), SHARE_BINS - 1), minlength=SHARE_BINS)
    fate = changes["fate"].to_numpy()
    return pd.DataFrame({"tokens": [int(changes["tokens"].sum())], "spans": [int(changes["spans"].sum())],
                         "chars": [int(np.where(fate == KEPT, before - after, before).sum())],
                         "documents": [len(changes)], "emptied": [int((fate == LEFT_WITHOUT_WORDS).sum())],
                         "contaminated": [int((fate == CONTAMINATED_ANEW).sum())],
                         "hist": pd.Series([hist.tolist()], dtype=object)})


def with_span_drops(feat: pd.DataFrame, changes: pd.DataFrame | None) -> pd.DataFrame:
    """A features partition with span dedup's drops made (`with_drops`): a document left without a
    word marked `EMPTIED_BY_SPANS`, one whose cut text holds a protected n-gram marked contaminated by
    it (`AFTER_SPANS`, and no longer `AFTER_LINES`); every decision read from it counts them."""
    out = with_drops(feat, changes, EMPTIED_BY_SPANS, AFTER_SPANS)
    if changes is not None and AFTER_LINES in out.columns:  # contaminated after spans, not after lines
        out[AFTER_LINES] = out[AFTER_LINES].to_numpy() & ~out[AFTER_SPANS].to_numpy()
    return out


def without_spans(texts: pa.Array | pa.ChunkedArray, keys: NDArray[np.int64], changes: pd.DataFrame) -> pa.Array:
    """`texts` (of documents keyed `keys`, as the passes before leave them) with the new text of each
    document `changes` (this partition's `span_changes`) holds; of the input's Arrow type."""
    large = string_array(texts, "span dedup").cast(pa.large_string())
    at = np.flatnonzero(np.isin(keys, changes["doc"].to_numpy(np.int64)))
    if not len(at):
        return texts if isinstance(texts, pa.Array) else texts.combine_chunks()
    by_doc = dict(zip(changes["doc"].tolist(), changes["text"].tolist()))
    return with_cuts(large, {int(i): by_doc[int(keys[i])] for i in at}).cast(texts.type)


def window_texts(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, line_keys: pd.DataFrame | None,
                 line_changes: pd.DataFrame | None, text_column: str, drop: bool, rule: SpanRule, top: pd.DataFrame,
                 partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """The text of each window of `top` (rows of `settle_keys`: `doc`, its first occurrence's document
    key, `line`, its first token) whose document is in this partition, as span dedup read it: from its
    first token's first character to its last token's last."""
    number = partition_info["number"] if partition_info else 0
    keys = doc_keys(number, len(part))
    rows = np.flatnonzero(np.isin(keys, top["doc"].to_numpy(np.int64)))
    out: dict[str, list[Any]] = {"doc": [], "line": [], "text": []}
    if not len(rows):
        return pd.DataFrame(out).astype({"doc": np.int64, "line": np.int64, "text": object})
    keep = span_survivors(feat, roots, drop, Before(line_keys, line_changes))[rows]
    texts = pa.array(part[text_column].iloc[rows], type=pa.large_string(), from_pandas=True)
    if line_keys is not None:
        texts = without_removed_lines(texts, keys[rows], line_keys, keep)
    pattern: re.Pattern[str] = WORD if rule.unit == "word" else CHAR
    by_doc = dict(zip(keys[rows].tolist(), texts.to_pylist()))
    for d, line in top[["doc", "line"]].itertuples(index=False):
        text = by_doc.get(int(d))
        if text is None:
            continue
        found = list(pattern.finditer(text))[int(line):int(line) + rule.size]
        out["doc"].append(int(d))
        out["line"].append(int(line))
        out["text"].append(text[found[0].start():found[-1].end()] if found else "")
    return pd.DataFrame(out).astype({"doc": np.int64, "line": np.int64, "text": object})
