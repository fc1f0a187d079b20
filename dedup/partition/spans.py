"""Exact substring (span) dedup per partition (docs/contract.md, section 6c), on the documents the
earlier passes keep (the survivors, their texts as line dedup leaves them), in three steps around two
moves, as line dedup's (`dedup.partition.lines`), whose key routing it shares:

1. `partition_windows`: at each input partition, every key of a k-token window of its surviving
   documents once, with how often it occurs there and its first occurrence there (the smallest id,
   then the first position);
2. routed by key, `settle_keys` (line dedup's, every window having k words): each key seen twice or
   more over the corpus, with its first occurrence, sent to every partition holding it;
3. at each input partition again, `span_changes`: the tokens a repeated window covers (with keep
   "first", every window but the key's first occurrence; with "none", every one), cut from the
   texts (`dedup.core.spans.cut`), and the documents left without a word or, cut, holding a
   protected n-gram dropped.

A key is two independent 64-bit polynomial hashes of the window's token hashes: a key occurring in
every document moves as one row a partition, so no task holds more than its partition's windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from dedup.core.decontam import ProtectedNgrams
from dedup.core.spans import Tokens, covered, cut, tokens, window_keys
from dedup.core.text import encode_batch
from dedup.partition.features import AFTER_LINES
from dedup.partition.keyspace import doc_keys
from dedup.partition.lines import (
    CONTAMINATED_BY_LINES,
    EMPTIED_BY_LINES,
    KEPT,
    SHARE_BINS,
    _settled_row,
    with_line_drops,
    without_removed_lines,
)
from dedup.partition.lines import survivors as line_survivors
from dedup.partition.rows import rows_of

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
                                  "source": pd.Series(dtype=np.int32), "source_gram": pd.Series(dtype=np.int64)})
"""A document that lost a span: its key, the tokens and spans (maximal runs) it lost, its characters
before and after (after line dedup, if it ran), its fate (`dedup.partition.lines`' KEPT, EMPTIED_BY_LINES
for no word left, CONTAMINATED_BY_LINES for a protected n-gram in its new text) and that n-gram."""

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


def _survivor_tokens(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, text_column: str,
                     drop: bool, before: Before, rule: SpanRule, number: int
                     ) -> tuple[list[str | None], Tokens, NDArray[np.bool_]]:
    keys = doc_keys(number, len(part))
    keep = span_survivors(feat, roots, drop, before)
    texts = _texts(part, text_column, keys, keep, before).to_pylist()
    return texts, tokens([t if k else None for t, k in zip(texts, keep)], rule.unit), keep


def partition_windows(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None,
                      line_keys: pd.DataFrame | None, line_changes: pd.DataFrame | None, id_column: str,
                      text_column: str, drop: bool, rule: SpanRule,
                      partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every window key of this partition's surviving documents once (line dedup's key rows,
    `dedup.partition.lines.LINE_COLUMNS`: `line` is the window's first token's position, `words` the
    window's tokens): its count here, its first occurrence here (the smallest id, then position)."""
    number = partition_info["number"] if partition_info else 0
    _, tok, _ = _survivor_tokens(part, feat, roots, text_column, drop, Before(line_keys, line_changes), rule, number)
    h1, h2, first = window_keys(tok, rule.size)
    doc = tok.doc[first] if len(first) else np.zeros(0, np.int64)
    pos = first - tok.offsets[doc] if len(first) else np.zeros(0, np.int64)
    ids = part[id_column].to_numpy()
    rank = np.empty(len(ids), np.int64)
    rank[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    order = np.lexsort((pos, rank[doc], h2, h1))
    h1, h2, doc, pos = h1[order], h2[order], doc[order], pos[order]
    new = np.ones(len(h1), bool)
    new[1:] = (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])
    starts = np.flatnonzero(new)
    count = np.diff(np.append(starts, len(h1)))
    zeros = np.zeros(len(starts), np.int64)
    out = pd.DataFrame({"h1": h1[starts], "h2": h2[starts], "count": count.astype(np.int64),
                        "doc": doc_keys(number, len(part))[doc[starts]], "line": pos[starts].astype(np.int32),
                        "part": np.full(len(starts), number, np.int64), "words": np.full(len(starts), rule.size, np.int64),
                        "chars": zeros, "first_chars": zeros})
    out["_id"] = pd.Series(ids[doc[starts]], dtype=part[id_column].dtype).to_numpy() if len(starts) else \
        part[id_column].iloc[:0].to_numpy()
    return out


def removed_tokens(tok: Tokens, keys: NDArray[np.int64], settled: pd.DataFrame, rule: SpanRule) -> NDArray[np.bool_]:
    """Per token of `tok` (of texts keyed `keys`): whether a repeated window covers it. `settled`:
    this partition's rows of the keys seen twice or more (`settle_keys`), each with its first
    occurrence, which with keep "first" stays."""
    n = len(tok.start)
    if settled.empty or not n:
        return np.zeros(n, bool)
    h1, h2, first = window_keys(tok, rule.size)
    at = _settled_row(h1, h2, settled)
    hit = np.flatnonzero(at >= 0)
    if rule.keep == "first":
        doc = tok.doc[first[hit]]
        pos = first[hit] - tok.offsets[doc]
        is_first = (keys[doc] == settled["doc"].to_numpy(np.int64)[at[hit]]) & \
            (pos == settled["line"].to_numpy(np.int64)[at[hit]])
        hit = hit[~is_first]
    return covered(n, first[hit], rule.size)


def _runs(removed: NDArray[np.bool_], doc: NDArray[np.int64]) -> NDArray[np.int64]:
    """Per text: how many maximal runs of removed tokens it has."""
    start = removed.copy()
    start[1:] &= ~(removed[:-1] & (doc[1:] == doc[:-1]))
    return np.bincount(doc[start], minlength=0) if start.any() else np.zeros(0, np.int64)


def span_changes(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, line_keys: pd.DataFrame | None,
                 line_changes: pd.DataFrame | None, settled: pd.DataFrame, text_column: str, drop: bool,
                 protected: ProtectedNgrams | None, rule: SpanRule,
                 partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every surviving document of this partition that loses a span (`SPAN_CHANGES_META`): the tokens
    and spans it loses, its characters before and after, and its fate: kept cut, dropped with no
    word left, or dropped because its cut text holds a protected n-gram."""
    number = partition_info["number"] if partition_info else 0
    keys = doc_keys(number, len(part))
    texts, tok, _ = _survivor_tokens(part, feat, roots, text_column, drop, Before(line_keys, line_changes), rule, number)
    gone = removed_tokens(tok, keys, settled, rule)
    if not gone.any():
        return SPAN_CHANGES_META.copy()
    doc = tok.doc
    lost = np.unique(doc[gone])
    new = cut(texts, tok, gone)
    after = [new[d] or "" for d in lost.tolist()]
    words = encode_batch(after).num_words
    fate = np.where(words == 0, EMPTIED_BY_LINES, KEPT).astype(np.int8)
    source = np.full(len(lost), -1, np.int32)
    gram = np.full(len(lost), -1, np.int64)
    if protected is not None and len(protected):
        left = np.flatnonzero(fate == KEPT)
        rec, hit = protected.first_hits(encode_batch([after[i] for i in left.tolist()]))
        found = rec >= 0
        fate[left[found]] = CONTAMINATED_BY_LINES
        source[left[found]], gram[left[found]] = rec[found], hit[found]
    runs = _runs(gone, doc)
    runs = np.concatenate([runs, np.zeros(max(0, len(part) - len(runs)), np.int64)])
    return pd.DataFrame({"doc": keys[lost], "tokens": np.bincount(doc[gone], minlength=len(part))[lost],
                         "spans": runs[lost], "before": np.asarray([len(texts[d] or "") for d in lost.tolist()], np.int64),
                         "after": np.asarray([len(t) for t in after], np.int64), "fate": fate, "source": source,
                         "source_gram": gram})


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
                         "documents": [len(changes)], "emptied": [int((fate == EMPTIED_BY_LINES).sum())],
                         "contaminated": [int((fate == CONTAMINATED_BY_LINES).sum())],
                         "hist": pd.Series([hist.tolist()], dtype=object)})


def with_span_drops(feat: pd.DataFrame, changes: pd.DataFrame | None) -> pd.DataFrame:
    """A features partition with span dedup's drops made: a document left without a word marked
    `EMPTIED_BY_SPANS`, one whose cut text holds a protected n-gram marked contaminated by it
    (`AFTER_SPANS`); every decision read from it counts them."""
    if changes is None:
        return feat
    out = feat.assign(**{AFTER_SPANS: np.zeros(len(feat), bool)})
    dropped = changes[changes["fate"].to_numpy() != KEPT]
    if dropped.empty:
        return out
    rows = rows_of(feat, dropped["doc"].to_numpy(np.int64))
    emptied = dropped["fate"].to_numpy() == EMPTIED_BY_LINES
    source, gram, after = (out[c].to_numpy().copy() for c in ("source", "source_gram", AFTER_SPANS))
    source[rows] = np.where(emptied, EMPTIED_BY_SPANS, dropped["source"].to_numpy(np.int32))
    gram[rows[~emptied]] = dropped["source_gram"].to_numpy(np.int64)[~emptied]
    after[rows[~emptied]] = True
    out["source"], out["source_gram"], out[AFTER_SPANS] = source, gram, after
    if AFTER_LINES in out.columns:  # contaminated after spans, not after lines
        out[AFTER_LINES] = out[AFTER_LINES].to_numpy() & ~after
    return out


def without_spans(texts: pa.Array | pa.ChunkedArray, keys: NDArray[np.int64], settled: pd.DataFrame,
                  survive: NDArray[np.bool_], rule: SpanRule) -> pa.Array:
    """`texts` (of documents keyed `keys`, as the passes before leave them) with the surviving ones'
    repeated spans cut; of the input's Arrow type."""
    values = texts.to_pylist()
    tok = tokens([t if k else None for t, k in zip(values, survive)], rule.unit)
    gone = removed_tokens(tok, keys, settled, rule)
    if not gone.any():
        return texts if isinstance(texts, pa.Array) else texts.combine_chunks()
    return pa.array(cut(values, tok, gone), pa.large_string()).cast(texts.type)



def window_texts(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, line_keys: pd.DataFrame | None,
                 line_changes: pd.DataFrame | None, text_column: str, drop: bool, rule: SpanRule, top: pd.DataFrame,
                 partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """The text of each window of `top` (rows of `settle_keys`: `doc`, its first occurrence's document
    key, `line`, its first token) whose document is in this partition, as span dedup read it: from its
    first token's first character to its last token's last."""
    import re

    from dedup.core.spans import CHAR, WORD

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
