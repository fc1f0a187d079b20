"""Compiled inner loops of span dedup (numba, cached on disk): a text's tokens read in place, and the
rolling keys of its k-token windows (`dedup.core.spans`). Each has a plain-Python reference in the
tests (`tests/reference.py`); they release the GIL and index bytes with unsigned integers, as
`dedup.core._kernels`' loops do. Not warmed with those (`dedup.partition.warm`): only a run with
span dedup calls them, at its first task a worker (from numba's cache: milliseconds)."""

from __future__ import annotations

import numba
import numpy as np

from dedup.core._kernels import _MIX_MUL, _MIX_SEED, _OFFSET, _PRIME


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
def ascii_token_keys(data, start, end, word, lower):  # pragma: no cover - compiled
    """The runs of word bytes (`word[byte]` 1) of each text data[start[d]:end[d]] (ASCII: a byte is a
    character), read in place: each one's first character in its text, the two hashes of its
    lowercase form (`lower[byte]`) that `dedup.core._kernels.text_keys` gives (mix, FNV-1a), and
    each text's count. One pass counts, one finds and hashes: no lowercase copy of the texts."""
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
    char = np.empty(total, dtype=np.int64)
    mix = np.empty(total, dtype=np.uint64)
    fnv = np.empty(total, dtype=np.uint64)
    at = 0
    for d in range(n):
        j = np.uint64(start[d])
        stop = np.uint64(end[d])
        while j < stop:
            if word[data[j]] == 0:
                j += np.uint64(1)
                continue
            k = j
            while k < stop and word[data[k]] != 0:
                k += np.uint64(1)
            h = _MIX_SEED ^ (k - j)
            f = _OFFSET
            for i in range(j, k):
                c = np.uint64(lower[data[i]])
                h = (h ^ c) * _MIX_MUL
                h ^= h >> np.uint64(31)
                f = (f ^ c) * _PRIME
            char[at] = np.int64(j) - start[d]
            mix[at] = h
            fnv[at] = f
            at += 1
            counts[d] += 1
            j = k
    return char, mix, fnv, counts
