"""Exact substring (span) dedup per partition (docs/contract.md, section 6c), on the documents the
earlier passes keep (the survivors, their texts as line dedup leaves them), in three steps around
three moves, each routed by key to ranges of the first hash (`dedup.partition.span_keys` has what a
range's task does, and the packed first-move rows) or back to a partition:

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
from dedup.core.spans import CHAR, WORD, Tokens, covered, cut, removed_runs, tokens, window_keys, with_cuts
from dedup.core.text import encode_batch, string_array
from dedup.partition.features import AFTER_LINES
from dedup.partition.keyspace import doc_keys
from dedup.partition.lines import (
    CONTAMINATED_ANEW,
    KEPT,
    LEFT_WITHOUT_WORDS,
    SHARE_BINS,
    KeyLookup,
    with_drops,
    with_line_drops,
    without_removed_lines,
)
from dedup.partition.lines import survivors as line_survivors
from dedup.partition.span_keys import grouped, packed, part_bits, unpacked_hash

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


def window_counts(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None,
                  line_keys: pd.DataFrame | None, line_changes: pd.DataFrame | None, text_column: str, drop: bool,
                  rule: SpanRule, npartitions: int, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every first hash of a window of this partition's surviving documents once, packed with whether
    it occurs twice or more here and this partition's number (`span_keys.COUNTS_META`): what the first move
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
    order, starts = grouped(h1, h2)
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
    return np.bincount(doc[removed_runs(removed, doc)[0]], minlength=n)


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
