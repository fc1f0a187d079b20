"""The contamination cut (docs/contract.md §6e; GPT-3's rule, lm-eval's Janitor's parameters).

Each matched n-gram's character span, widened by `CUT_MARGIN` characters on each side (overlaps
merge), is cut from the document; the pieces left are joined by "\\n", pieces of `CUT_MIN_PIECE`
characters or fewer dropped; a document with more than `CUT_MAX_WINDOWS` matching windows, or
with no word left, is dropped (None). Positions are the §1 words' (`words`), found in the text as
written, so every character kept is the input's, byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from dedup.config import CUT_MARGIN, CUT_MAX_WINDOWS, CUT_MIN_PIECE
from dedup.core.decontam import ProtectedNgrams
from dedup.core.text import _WORD, encode_batch


def word_spans(text: str) -> NDArray[np.int64]:
    """The character spans in `text` of its §1 words (those of `text.lower()`), int64 [words, 2].

    A character whose lower case is longer than itself ("İ") is mapped back to itself, so each span
    covers the characters of `text` its word came from."""
    low = text.lower()
    if len(low) == len(text):  # lower() maps one character to one: positions agree
        return np.asarray([m.span() for m in _WORD.finditer(low)], np.int64).reshape(-1, 2)
    origin = np.fromiter((i for i, c in enumerate(text) for _ in c.lower()), np.int64, count=len(low))
    spans = np.asarray([m.span() for m in _WORD.finditer(low)], np.int64).reshape(-1, 2)
    if len(spans):
        spans = np.stack([origin[spans[:, 0]], origin[spans[:, 1] - 1] + 1], axis=1)
    return spans


def cut_text(text: str, first_words: Sequence[int] | NDArray[np.int64], ngram_size: int) -> str | None:
    """`text` without the matched windows starting at word `first_words` (and their margins), or
    None when the cut drops the document (more than `CUT_MAX_WINDOWS` windows, or no word left)."""
    starts = np.unique(np.asarray(first_words, np.int64))
    if len(starts) > CUT_MAX_WINDOWS:
        return None
    if not len(starts):
        return text
    spans = word_spans(text)
    lo = np.maximum(spans[starts, 0] - CUT_MARGIN, 0)
    hi = np.minimum(spans[starts + ngram_size - 1, 1] + CUT_MARGIN, len(text))
    pieces: list[str] = []
    at = 0
    for a, b in zip(lo.tolist(), hi.tolist()):  # starts sorted, so lo is: merge as they come
        if a > at:
            pieces.append(text[at:a])
        at = max(at, b)
    pieces.append(text[at:])
    kept = [p for p in pieces if len(p) > CUT_MIN_PIECE]
    if not any(_WORD.search(p.lower()) for p in kept):
        return None
    return "\n".join(kept)


def cut_texts(texts: Sequence[str | None], rule: ProtectedNgrams) -> list[str | None]:
    """Each text with the §6e cut applied (None: the cut drops it); a text without a hit as it is."""
    doc, _, word = rule.hits_at(encode_batch(texts))
    out = list(texts)
    if not len(doc):
        return out
    order = np.lexsort((word, doc))
    doc, word = doc[order], word[order]
    bounds = np.flatnonzero(np.r_[True, doc[1:] != doc[:-1], True])
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        d = int(doc[lo])
        text = texts[d]
        assert text is not None
        out[d] = cut_text(text, word[lo:hi], rule.ngram_size)
    return out
