"""Compiled inner loops (numba, cached on disk): FNV-1a over byte spans and the MinHash minimum.

These are the only two loops that touch every byte and every (shingle x permutation); the rest
of the package is numpy. Each kernel has a plain-Python reference in the tests.
"""

from __future__ import annotations

import numba
import numpy as np

_P = np.uint64((1 << 31) - 1)
_OFFSET = np.uint64(0xCBF29CE484222325)
_PRIME = np.uint64(0x100000001B3)


@numba.njit(cache=True, nogil=True)
def fnv1a_spans(buf, start, end):  # pragma: no cover - compiled
    out = np.empty(start.shape[0], dtype=np.uint64)
    for i in range(start.shape[0]):
        h = _OFFSET
        for j in range(start[i], end[i]):
            h = (h ^ np.uint64(buf[j])) * _PRIME
        out[i] = h
    return out


@numba.njit(cache=True, nogil=True)
def minhash_rows(x, offsets, a, b, out):  # pragma: no cover - compiled
    """out[d, i] = min over x[offsets[d]:offsets[d+1]] of (a[i] * x + b[i]) mod P.

    x < P and a, b < P, so a*x + b < 2**63 and the Mersenne folds below are exact.
    Rows of documents without shingles stay at P.
    """
    num_perm = a.shape[0]
    row = np.empty(num_perm, dtype=np.uint64)
    for d in range(offsets.shape[0] - 1):
        for i in range(num_perm):
            row[i] = _P
        for s in range(offsets[d], offsets[d + 1]):
            xs = x[s]
            for i in range(num_perm):
                y = a[i] * xs + b[i]
                y = (y & _P) + (y >> np.uint64(31))
                y = (y & _P) + (y >> np.uint64(31))
                if y >= _P:
                    y -= _P
                if y < row[i]:
                    row[i] = y
        for i in range(num_perm):
            out[d, i] = np.uint32(row[i])
