"""Union-find whose root is always the smallest id (contract §5).

With the minimum as root, components and their representatives never depend on the order of
the unions, the input order, partitioning or worker count.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray


class UnionFind:
    """A dict-backed union-find over any orderable ids, with min-root and path compression."""

    def __init__(self, ids: Iterable[Hashable] = ()) -> None:
        self._parent: dict[Any, Any] = {}
        for i in ids:
            self._parent.setdefault(i, i)

    def __contains__(self, x: object) -> bool:
        return x in self._parent

    def __len__(self) -> int:
        return len(self._parent)

    def add(self, x: Any) -> None:
        """Make `x` known as a group of its own (no-op if known)."""
        self._parent.setdefault(x, x)

    def find(self, x: Any) -> Any:
        """The root (smallest id) of x's group; an unknown id is its own group."""
        parent = self._parent
        parent.setdefault(x, x)
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, x: Any, y: Any) -> Any:
        """Merge the groups of x and y; returns the new root, the smaller of the two roots."""
        rx, ry = self.find(x), self.find(y)
        if rx == ry:
            return rx
        if ry < rx:
            rx, ry = ry, rx
        self._parent[ry] = rx
        return rx

    def groups(self) -> list[set[Any]]:
        """Every group as a set, ordered by root."""
        out: dict[Any, set[Any]] = {}
        for x in self._parent:
            out.setdefault(self.find(x), set()).add(x)
        return [out[r] for r in sorted(out)]


def components(left: ArrayLike, right: ArrayLike) -> tuple[NDArray[Any], NDArray[Any]]:
    """Connected components of an edge list, vectorised.

    left, right: equal-length 1-D arrays of ids (integers, or strings compared in string order).
    Returns (ids, roots): every id that appears in an edge, sorted, and the smallest id of its
    component. Works by min-label hooking with pointer jumping: O(log n) rounds of numpy passes.
    """
    left_arr = np.asarray(left)
    right_arr = np.asarray(right)
    if left_arr.ndim != 1 or left_arr.shape != right_arr.shape:
        raise ValueError(
            f"components() takes two 1-D arrays of equal length. Got shapes {left_arr.shape} and {right_arr.shape}."
        )
    ids, inverse = np.unique(np.concatenate([left_arr, right_arr]), return_inverse=True)
    n_edges = len(left_arr)
    li = inverse[:n_edges].astype(np.int64)
    ri = inverse[n_edges:].astype(np.int64)
    parent = np.arange(len(ids), dtype=np.int64)
    while True:
        pl, pr = parent[li], parent[ri]
        differ = pl != pr
        if not differ.any():
            break
        pl, pr = pl[differ], pr[differ]
        low = np.minimum(pl, pr)
        # Hook each root onto the smallest root it touches; parent[x] <= x always holds.
        np.minimum.at(parent, pl, low)
        np.minimum.at(parent, pr, low)
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped
        li, ri = li[differ], ri[differ]
    return ids, ids[parent]
