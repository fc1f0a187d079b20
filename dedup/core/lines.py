"""Exact line dedup's rule on texts (docs/contract.md, section 6b): a document's lines
(`text.split("\\n")`), each line's key (its words, section 1, joined by one space) as two independent
64-bit hashes, and the texts written again without the lines the rule removes.

Everything here works on Arrow string arrays in place: the lines are Arrow's `split_pattern` of
the texts, their words the tokeniser every other stage uses (`dedup.core.text.encode_arrow`), and
the new texts Arrow's `binary_join` of the lines kept, so a kept line is the same bytes as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

LINE_BREAK = "\n"
"""What separates a document's lines (a `\\r` before it stays with its line, as a non-word character)."""


@dataclass(frozen=True)
class Lines:
    """The lines of a batch of texts: doc [n_lines] (the text's position in the batch), line [n_lines]
    (its position in the text), and for the lines with at least one word (`keyed`) the two hashes of
    their key, h1 (xorshift-multiply) and h2 (FNV-1a), as in the texts' own keys. `counts` [n_texts]:
    lines a text has (0 for a null). `words` [n_lines]: each line's words; `chars` [n_lines]: its
    characters."""

    doc: NDArray[np.int64]
    line: NDArray[np.int32]
    keyed: NDArray[np.bool_]
    words: NDArray[np.int64]
    chars: NDArray[np.int64]
    h1: NDArray[np.uint64]
    h2: NDArray[np.uint64]
    counts: NDArray[np.int64]


def _as_large(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    from dedup.core.text import string_array

    return string_array(texts, "line dedup").cast(pa.large_string())


def _split(texts: pa.Array) -> tuple[pa.Array, NDArray[np.int64]]:
    """Every line of every text, in order, and how many lines each text has (0 for a null)."""
    lists = pc.split_pattern(texts, pattern=LINE_BREAK)
    counts = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return lists.flatten(), counts


def split_lines(texts: pa.Array | pa.ChunkedArray) -> Lines:
    """The lines of `texts` and the hashed keys of those with words."""
    from dedup.core import _kernels
    from dedup.core.text import encode_arrow

    flat, counts = _split(_as_large(texts))
    n = int(counts.sum())
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if len(counts) else np.zeros(0, np.int64)
    doc = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    line = (np.arange(n, dtype=np.int64) - np.repeat(starts, counts)).astype(np.int32)
    batch = encode_arrow(flat)
    keyed = batch.num_words > 0
    first = batch.word_offsets[:-1][keyed]
    last = batch.word_offsets[1:][keyed] - 1
    h1, h2 = _kernels.text_keys(batch.buf, np.ascontiguousarray(batch.word_start[first], np.int64),
                                np.ascontiguousarray(batch.word_ends(last), np.int64))
    chars = np.asarray(pc.utf8_length(flat).to_numpy(zero_copy_only=False), np.int64) if len(flat) else \
        np.zeros(0, np.int64)
    return Lines(doc=doc, line=line, keyed=keyed, words=np.asarray(batch.num_words, np.int64), chars=chars,
                 h1=np.asarray(h1, np.uint64), h2=np.asarray(h2, np.uint64), counts=counts)


def with_blank_neighbours(lines: Lines, removed: NDArray[np.bool_]) -> NDArray[np.bool_]:
    """`removed` (per line of `lines`) and, in each text that lost a line, every line without words
    whose closest line with words above it and closest below it are both removed or absent: the
    blank lines that stood between removed lines, or before or after them at a text's ends, go with
    them (docs/contract.md, section 6b), so no run of blank lines is left where boilerplate was."""
    out = removed.copy()
    n = len(removed)
    if not n or not removed.any():
        return out
    doc, keyed = lines.doc, lines.keyed
    lost = np.zeros(len(lines.counts), bool)
    lost[doc[removed]] = True
    idx = np.arange(n)
    # the closest line with words above each line (in its text), -1 when none: a running maximum of
    # keyed positions, cut at each text's start
    starts = np.concatenate([[0], np.cumsum(lines.counts)[:-1]]).astype(np.int64)
    first = starts[doc]
    above = np.maximum.accumulate(np.where(keyed, idx, -1))
    above = np.where(above >= first, above, -1)
    ends = first + lines.counts[doc]
    below = np.minimum.accumulate(np.where(keyed, idx, n)[::-1])[::-1]
    below = np.where(below < ends, below, -1)
    gone_above = (above < 0) | removed[np.maximum(above, 0)]
    gone_below = (below < 0) | removed[np.maximum(below, 0)]
    out |= ~keyed & lost[doc] & gone_above & gone_below
    return out


def without_lines(texts: pa.Array | pa.ChunkedArray, doc: NDArray[np.int64], line: NDArray[np.int64]) -> pa.Array:
    """`texts` with line `line[i]` of text `doc[i]` removed for every i, the other lines joined by
    "\\n" as they were; a null stays null. Of the input's Arrow type (string, large_string, string_view
    or dictionary: a kept text is the same value, a column keeps its schema)."""
    source = texts.type
    large = _as_large(texts)
    if not len(doc):
        return large.cast(source)
    flat, counts = _split(large)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    keep = np.ones(len(flat), dtype=bool)
    keep[starts[np.asarray(doc, np.int64)] + np.asarray(line, np.int64)] = False
    left = counts - np.bincount(np.asarray(doc, np.int64), minlength=len(counts))
    offsets = np.concatenate([[0], np.cumsum(left)]).astype(np.int64)
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), flat.filter(pa.array(keep)),
                                          mask=large.is_null())
    return pc.binary_join(lists, pa.scalar(LINE_BREAK, pa.large_string())).cast(source)


def line_texts(texts: pa.Array | pa.ChunkedArray, lines: Lines, where: NDArray[np.int64]) -> pa.Array:
    """The text of the lines at positions `where` of `lines` (the lines of `texts`, `split_lines`)."""
    flat, _ = _split(_as_large(texts))
    return flat.take(pa.array(np.asarray(where, np.int64)))
