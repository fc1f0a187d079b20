"""The compiled pass of `dedup.core.order.lex_order` (numba, cached on disk): rows sorted by a first column
put in order within each run of equal first values, by the other columns. Warmed with the other
kernels (`dedup.partition.warm`): the buckets, the pairs and every index file use it."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _tie_less(ties, x, y):  # pragma: no cover - compiled
    """Whether row x comes before row y by the columns of `ties` (one a row of the array), in turn."""
    for r in range(ties.shape[0]):
        if ties[r, x] != ties[r, y]:
            return ties[r, x] < ties[r, y]
    return False


@numba.njit(cache=True, nogil=True, inline="always")
def _merge_sort_run(order, lo, hi, ties, buf):  # pragma: no cover - compiled
    """order[lo:hi] sorted by the columns of `ties` (a stable bottom-up merge sort; `buf`: scratch)."""
    n = hi - lo
    width = 1
    while width < n:
        for left in range(lo, hi, 2 * width):
            mid = min(left + width, hi)
            right = min(left + 2 * width, hi)
            a, b, k = left, mid, left
            while a < mid and b < right:
                if _tie_less(ties, order[b], order[a]):
                    buf[k] = order[b]
                    b += 1
                else:
                    buf[k] = order[a]
                    a += 1
                k += 1
            while a < mid:
                buf[k] = order[a]
                a += 1
                k += 1
            while b < right:
                buf[k] = order[b]
                b += 1
                k += 1
        for k in range(lo, hi):
            order[k] = buf[k]
        width *= 2


@numba.njit(cache=True, nogil=True)
def sort_runs(order, ranked, ties, short):  # pragma: no cover - compiled
    """`order` (rows sorted by a first column; `ranked`: that column's values in that order) with each
    run of equal first values sorted by the columns of `ties`, in place: an insertion sort for runs of
    at most `short` rows (most of them: the first column rarely repeats), a merge sort for longer ones."""
    n = order.shape[0]
    buf = np.empty(0, order.dtype)
    i = 0
    while i < n:
        j = i + 1
        while j < n and ranked[j] == ranked[i]:
            j += 1
        if j - i > short:
            if buf.shape[0] < n:
                buf = np.empty(n, order.dtype)
            _merge_sort_run(order, i, j, ties, buf)
        elif j - i > 1:
            for a in range(i + 1, j):
                x = order[a]
                b = a - 1
                while b >= i and _tie_less(ties, x, order[b]):
                    order[b + 1] = order[b]
                    b -= 1
                order[b + 1] = x
        i = j
