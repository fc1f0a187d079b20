"""Exact substring (span) dedup's rule on texts (docs/contract.md, section 6c): a document's tokens
with their character positions, the keys of its k-token windows, and the texts written again without
the runs of tokens a repeated window covers.

Lee et al.'s ExactSubstr removes every substring of at least k tokens that occurs twice; the tokens
such substrings cover are exactly those a repeated k-token window covers, so hashed windows, counted
by key, find them without a suffix array.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

WORD = re.compile(r"\w+")
CHAR = re.compile(r"\w")
"""A token: a run of word characters (the word unit), or one word character (the char unit)."""

BASE1, BASE2 = np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15 | 1)
"""The two odd bases of a window's polynomial keys (`dedup.core._span_kernels.rolling_window_keys`)."""


@dataclass(frozen=True)
class Tokens:
    """The tokens of a batch of texts: `offsets` [n_texts + 1] (text d's tokens are offsets[d] to
    offsets[d + 1]), `start` [n_tokens] each one's first character in its text, and two independent
    64-bit hashes of each one's key (its lowercase form), h1 (xorshift-multiply) and h2 (FNV-1a)."""

    offsets: NDArray[np.int64]
    start: NDArray[np.int64]
    h1: NDArray[np.uint64]
    h2: NDArray[np.uint64]

    @property
    def doc(self) -> NDArray[np.int64]:
        """Each token's text."""
        return np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))


def tokens(texts: list[str | None] | pa.Array, unit: str = "word") -> Tokens:
    """The tokens of `texts` (a null has none): each match of `\\w+` (unit "word") or `\\w` (unit
    "char") in the text as it is, at its character position, keyed by its lowercase form. ASCII texts
    with words as the unit are read in place by a compiled loop (for ASCII, Python's `\\w` is
    [A-Za-z0-9_] and a byte a character); the others by Python's `re`, the same tokens."""
    from dedup.core import _kernels, _span_kernels
    from dedup.core.text import _ASCII_LOWER, _ASCII_WORD, string_array

    array = string_array(texts, "span dedup") if isinstance(texts, (pa.Array, pa.ChunkedArray)) else \
        pa.array(texts, type=pa.large_string())
    array = array.cast(pa.large_string())
    n = len(array)
    _, off_buf, data_buf = array.buffers()
    offsets = np.frombuffer(off_buf, np.int64, count=array.offset + n + 1)[array.offset:].copy() \
        if off_buf is not None else np.zeros(n + 1, np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    data = data[offsets[0]:offsets[-1]]  # a slice's bytes only
    offsets -= offsets[0]
    start, end = offsets[:-1].copy(), offsets[1:].copy()
    if array.null_count:
        null = array.is_null().to_numpy(zero_copy_only=False)
        end[null] = start[null]
    other = _kernels.non_ascii(data, start, end).astype(bool) if unit == "word" else end > start
    fast_end = np.where(other, start, end)
    char, h1, h2, counts = _span_kernels.ascii_token_keys(data, start, fast_end, _ASCII_WORD, _ASCII_LOWER)
    h1, h2 = np.asarray(h1, np.uint64), np.asarray(h2, np.uint64)
    if other.any():
        doc = np.repeat(np.arange(n), counts)  # the others by `re`, merged in text order
        pattern = WORD if unit == "word" else CHAR
        slow_doc: list[int] = []
        slow_char: list[int] = []
        keys: list[bytes] = []
        for d in np.flatnonzero(other).tolist():
            for m in pattern.finditer(array[d].as_py()):
                slow_doc.append(d)
                slow_char.append(m.start())
                keys.append(m.group().lower().encode("utf-8"))
        lengths = np.fromiter((len(k) for k in keys), np.int64, len(keys))
        ends = np.cumsum(lengths)
        s1, s2 = _kernels.text_keys(np.frombuffer(b"".join(keys), np.uint8), ends - lengths, ends) if keys else \
            (np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        doc = np.concatenate([doc, np.asarray(slow_doc, np.int64)])
        order = np.argsort(doc, kind="stable")
        doc = doc[order]
        char = np.concatenate([char, np.asarray(slow_char, np.int64)])[order]
        h1 = np.concatenate([h1, np.asarray(s1, np.uint64)])[order]
        h2 = np.concatenate([h2, np.asarray(s2, np.uint64)])[order]
        counts = np.bincount(doc, minlength=n) if len(doc) else np.zeros(n, np.int64)
    return Tokens(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), char.astype(np.int64, copy=False), h1, h2)


def window_keys(tok: Tokens, size: int) -> tuple[NDArray[np.uint64], NDArray[np.uint64], NDArray[np.int64]]:
    """The two keys of every `size`-token window (text order, then position) and its first token."""
    from dedup.core import _span_kernels

    k1, k2, first = _span_kernels.rolling_window_keys(tok.h1, tok.h2, tok.offsets, size, BASE1, BASE2)
    return np.asarray(k1, np.uint64), np.asarray(k2, np.uint64), np.asarray(first, np.int64)


def covered(n_tokens: int, first: NDArray[np.int64], size: int) -> NDArray[np.bool_]:
    """Which of `n_tokens` tokens a window starting at one of `first` (of `size` tokens) covers."""
    delta = np.zeros(n_tokens + 1, np.int64)
    np.add.at(delta, first, 1)
    np.add.at(delta, first + size, -1)
    return np.cumsum(delta[:-1]) > 0


def removed_runs(removed: NDArray[np.bool_], doc: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each maximal run of `removed` tokens within one text (`doc`: each token's text): its first
    token, and the token after its last (the next text's first, or the end, when it ends its text)."""
    same = doc[1:] == doc[:-1]
    begins = removed.copy()
    begins[1:] &= ~(removed[:-1] & same)
    ends = removed.copy()
    ends[:-1] &= ~(removed[1:] & same)
    return np.flatnonzero(begins), np.flatnonzero(ends) + 1


def cut(texts: list[str | None] | pa.Array, tok: Tokens, removed: NDArray[np.bool_]) -> dict[int, str]:
    """The new text of each of `texts` that loses a token: without each maximal run of `removed`
    tokens, from its first token's first character up to the next kept token's first character (to
    the text's end when none follows); every other character as it was. By position in `texts`."""
    out: dict[int, str] = {}
    if not removed.any():
        return out
    doc = tok.doc
    n = len(removed)
    lo, hi = removed_runs(removed, doc)
    last = tok.offsets[doc[lo] + 1]  # the first token of the next text
    cut_from = tok.start[lo]
    cut_to = np.where(hi < last, tok.start[np.minimum(hi, n - 1)], -1)  # -1: to the text's end
    run_doc = doc[lo]
    bounds = np.flatnonzero(np.concatenate([[True], run_doc[1:] != run_doc[:-1], [True]]))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        d = int(run_doc[a])
        text = texts[d].as_py() if isinstance(texts, (pa.Array, pa.ChunkedArray)) else texts[d]
        assert text is not None
        pieces, at = [], 0
        for f, t in zip(cut_from[a:b].tolist(), cut_to[a:b].tolist()):
            pieces.append(text[at:f])
            at = len(text) if t < 0 else t
        pieces.append(text[at:])
        out[d] = "".join(pieces)
    return out


def with_cuts(texts: pa.Array, new: dict[int, str]) -> pa.Array:
    """`texts` (large_string) with the texts at the positions of `new` replaced by its values."""
    if not new:
        return texts
    mask = np.zeros(len(texts), bool)
    at = np.fromiter(new, np.int64, len(new))
    mask[at] = True
    order = np.sort(at)
    return pc.replace_with_mask(texts, pa.array(mask), pa.array([new[int(d)] for d in order], pa.large_string()))
