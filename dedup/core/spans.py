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
from numpy.typing import NDArray

WORD = re.compile(r"\w+")
CHAR = re.compile(r"\w")
"""A token: a run of word characters (the word unit), or one word character (the char unit)."""

BASE1, BASE2 = np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15 | 1)
"""The two odd bases of a window's polynomial keys (`dedup.core._kernels.rolling_window_keys`)."""


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


def tokens(texts: list[str | None], unit: str = "word") -> Tokens:
    """The tokens of `texts` (a null has none): each match of `\\w+` (unit "word") or `\\w` (unit
    "char") in the text as it is, at its character position, keyed by its lowercase form."""
    from dedup.core import _kernels

    pattern = WORD if unit == "word" else CHAR
    starts: list[int] = []
    keys: list[str] = []
    counts = np.zeros(len(texts), np.int64)
    for d, text in enumerate(texts):
        if not text:
            continue
        found = [(m.start(), m.group()) for m in pattern.finditer(text)]
        counts[d] = len(found)
        starts += [s for s, _ in found]
        keys += [w.lower() for _, w in found]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if not keys:
        empty = np.zeros(0, np.uint64)
        return Tokens(offsets, np.zeros(0, np.int64), empty, empty.copy())
    encoded = [k.encode("utf-8") for k in keys]
    lengths = np.fromiter((len(e) for e in encoded), np.int64, len(encoded))
    ends = np.cumsum(lengths)
    buf = np.frombuffer(b"".join(encoded), np.uint8)
    h1, h2 = _kernels.text_keys(buf, ends - lengths, ends)
    return Tokens(offsets, np.asarray(starts, np.int64), np.asarray(h1, np.uint64), np.asarray(h2, np.uint64))


def window_keys(tok: Tokens, size: int) -> tuple[NDArray[np.uint64], NDArray[np.uint64], NDArray[np.int64]]:
    """The two keys of every `size`-token window (text order, then position) and its first token."""
    from dedup.core import _kernels

    k1, k2, first = _kernels.rolling_window_keys(tok.h1, tok.h2, tok.offsets, size, BASE1, BASE2)
    return np.asarray(k1, np.uint64), np.asarray(k2, np.uint64), np.asarray(first, np.int64)


def covered(n_tokens: int, first: NDArray[np.int64], size: int) -> NDArray[np.bool_]:
    """Which of `n_tokens` tokens a window starting at one of `first` (of `size` tokens) covers."""
    delta = np.zeros(n_tokens + 1, np.int64)
    np.add.at(delta, first, 1)
    np.add.at(delta, first + size, -1)
    return np.cumsum(delta[:-1]) > 0


def cut(texts: list[str | None], tok: Tokens, removed: NDArray[np.bool_]) -> list[str | None]:
    """`texts` without each maximal run of `removed` tokens: from its first token's first character up
    to the next kept token's first character (to the text's end when none follows); every other
    character as it was."""
    out = list(texts)
    if not removed.any():
        return out
    doc = tok.doc
    for d in np.unique(doc[removed]).tolist():
        text = texts[d]
        assert text is not None
        lo, hi = int(tok.offsets[d]), int(tok.offsets[d + 1])
        gone = removed[lo:hi]
        start = tok.start[lo:hi]
        pieces, at, i = [], 0, 0
        while i < len(gone):
            if not gone[i]:
                i += 1
                continue
            j = i
            while j < len(gone) and gone[j]:
                j += 1
            pieces.append(text[at:int(start[i])])
            at = int(start[j]) if j < len(gone) else len(text)
            i = j
        pieces.append(text[at:])
        out[d] = "".join(pieces)
    return out
