"""Row orders by several columns, as `np.lexsort` gives them, for columns that make rows unique and
whose first column rarely repeats (hashes, document keys): one quicksort of the first column, then
each run of equal first values sorted by the others (`_order_kernels.sort_runs`). A lexsort is a stable
sort a column; this is one sort in all: 0.2 s for two million rows of five columns, not 0.9."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

SHORT_RUN = 32
"""Runs of equal first values up to this long are sorted by an insertion sort; longer ones (a document
in many pairs, a key many rows share) by a merge sort, in the same compiled pass: never a call from
Python for each run."""


def ordered_u64(column: NDArray) -> NDArray[np.uint64]:
    """`column`'s values as uint64 in the same order (signed ones with their sign bit flipped)."""
    if column.dtype.kind == "i":
        return column.astype(np.int64, copy=False).view(np.uint64) ^ np.uint64(1 << 63)
    if column.dtype.kind in "ub":
        return column.astype(np.uint64, copy=False)
    raise TypeError(f"lex_order orders integer columns, not {column.dtype}")


def lex_order(columns: Sequence[NDArray]) -> NDArray[np.intp]:
    """The order sorting rows by columns[0] (integers), then columns[1], ...: `np.lexsort(columns[::-1])`
    when the columns make every row unique (else rows that tie on all of them may come in another
    order). A column after the first that is not of integers (string ids) is compared by a lexsort of
    the rows whose first value repeats."""
    first = columns[0]
    ranked = None
    if first.dtype.kind in "ub" and first.dtype.itemsize <= 4 and len(first) <= ROW_MASK:
        order, ranked = _packed_order(first)
    else:
        order = np.argsort(first)  # not stable: the other columns decide every tie
    if len(columns) == 1 or len(order) < 2:
        return order
    if all(c.dtype.kind in "iub" for c in columns[1:]):
        from dedup.core import _order_kernels

        ties = np.stack([ordered_u64(c) for c in columns[1:]])
        _order_kernels.sort_runs(order, ordered_u64(first[order]) if ranked is None else ranked, ties, SHORT_RUN)
        return order
    ranked = first[order]
    same = ranked[1:] == ranked[:-1]
    if same.any():
        tied = np.zeros(len(order), dtype=bool)
        tied[1:] |= same
        tied[:-1] |= same
        at = np.flatnonzero(tied)  # the runs of equal first values, in order: sorting them keeps them in place
        order[at] = _lexsorted(order[at], columns)
    return order


ROW_MASK = 2**32 - 1
"""The row numbers a 32-bit first column is packed with (`_packed_order`)."""


def _packed_order(first: NDArray) -> tuple[NDArray[np.intp], NDArray[np.uint64]]:
    """The rows in order of a column of at most 32 bits, and its values in that order: each value packed
    above its row number into one 64-bit word, and the words sorted by value: a sort of values, not an
    argsort, and the sorted values come with it, not gathered again in a random order. `lex_order` of
    1,300,000 band-file rows (key prefix, doc): 46 ms, against 72 ms through an argsort."""
    packed = (first.astype(np.uint64) << np.uint64(32)) | np.arange(len(first), dtype=np.uint64)
    packed.sort()
    return (packed & np.uint64(ROW_MASK)).astype(np.intp), packed >> np.uint64(32)


def _lexsorted(rows: NDArray[np.intp], columns: Sequence[NDArray]) -> NDArray[np.intp]:
    return rows[np.lexsort([c[rows] for c in reversed(columns)])]
