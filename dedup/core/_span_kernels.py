"""Compiled inner loops of span dedup (numba, cached on disk): a text's tokens read in place, and the
rolling keys of its k-token windows (`dedup.core.spans`). Each has a plain-Python reference in the
tests (`tests/reference.py`); they release the GIL and index bytes with unsigned integers, as
`dedup.core._kernels`' loops do. Not warmed with those (`dedup.partition.warm`): only a run with
span dedup calls them, at its first task a worker (from numba's cache: milliseconds)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def rolling_window_keys(h1, h2, doc_offsets, size, base1, base2):  # pragma: no cover - compiled
    """The keys of every `size`-token window of each document (tokens `doc_offsets[d]` to
    `doc_offsets[d + 1]` of the token hashes h1, h2): two polynomial hashes mod 2^64 of the window's
    token hashes (bases `base1`, `base2`, odd), in document then position order, with each window's
    first token's position in the token arrays. A document of fewer tokens has none."""
    n_docs = doc_offsets.shape[0] - 1
    total = 0
    for d in range(n_docs):
        total += max(0, doc_offsets[d + 1] - doc_offsets[d] - size + 1)
    k1 = np.empty(total, dtype=np.uint64)
    k2 = np.empty(total, dtype=np.uint64)
    first = np.empty(total, dtype=np.int64)
    top1 = np.uint64(1)  # base^(size-1): the weight of the token leaving the window
    top2 = np.uint64(1)
    for _ in range(size - 1):
        top1 = top1 * base1
        top2 = top2 * base2
    at = 0
    for d in range(n_docs):
        lo, hi = doc_offsets[d], doc_offsets[d + 1]
        if hi - lo < size:
            continue
        a = np.uint64(0)
        b = np.uint64(0)
        for t in range(lo, lo + size):
            a = a * base1 + h1[t]
            b = b * base2 + h2[t]
        k1[at], k2[at], first[at] = a, b, lo
        at += 1
        for t in range(lo + size, hi):
            a = (a - h1[t - size] * top1) * base1 + h1[t]
            b = (b - h2[t - size] * top2) * base2 + h2[t]
            k1[at], k2[at], first[at] = a, b, t - size + 1
            at += 1
    return k1, k2, first


@numba.njit(cache=True, nogil=True)
def ascii_token_spans(data, start, end, word):  # pragma: no cover - compiled
    """The runs of word bytes (`word[byte]` 1) of each text data[start[d]:end[d]] (ASCII: a byte is a
    character): their starts and ends in `data`, and each text's count."""
    n = start.shape[0]
    counts = np.zeros(n, dtype=np.int64)
    total = 0
    for d in range(n):
        inside = False
        for j in range(np.uint64(start[d]), np.uint64(end[d])):
            w = word[data[j]] != 0
            if w and not inside:
                total += 1
            inside = w
    tok_start = np.empty(total, dtype=np.int64)
    tok_end = np.empty(total, dtype=np.int64)
    at = 0
    for d in range(n):
        inside = False
        for j in range(np.uint64(start[d]), np.uint64(end[d])):
            w = word[data[j]] != 0
            if w and not inside:
                tok_start[at] = j
                counts[d] += 1
            elif inside and not w:
                tok_end[at] = j
                at += 1
            inside = w
        if inside:
            tok_end[at] = end[d]
            at += 1
    return tok_start, tok_end, counts
