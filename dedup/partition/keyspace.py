"""Document keys: a document's (partition, row) as one int64, and which partition of a run holds it.

Keys are unique by construction and never a hash of an id, so no collision can merge two
documents; the index stores them, and a later run places an earlier output's keys after its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

ROW_BITS = 32
"""A document's key is (partition index << ROW_BITS) | row: unique by construction, never a hash of its id."""
NO_INDEX = 1 << 62
"""`first_indexed` (the first key of an earlier output's documents) when a run has no --against."""


def doc_keys(partition: int, n: int) -> NDArray[np.int64]:
    """The keys of the n rows of one partition."""
    if n >= 1 << ROW_BITS or partition >= 1 << (63 - ROW_BITS):
        raise ValueError(f"Partition {partition} has {n} rows; at most {1 << ROW_BITS} rows a partition and "
                         f"{1 << (63 - ROW_BITS)} partitions are supported.")
    return (np.int64(partition) << ROW_BITS) | np.arange(n, dtype=np.int64)


def key_partition(keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """The partition a document key belongs to."""
    return keys >> ROW_BITS


def label_partition(labels: NDArray[np.int64], npartitions: int) -> NDArray[np.int64]:
    """Which of `npartitions` gathers a component (by its label, a document key): a multiplicative
    hash, so that the components of one input partition spread over all of them."""
    mixed = labels.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return ((mixed >> np.uint64(32)) % np.uint64(npartitions)).astype(np.int64)


@dataclass(frozen=True)
class Placement:
    """Which partition of a run holds a document key: its own (`key_partition`), except that the
    earlier indexes' partitions, from `first` on, are gathered `group` at a time (each holds only
    the indexed documents that share a bucket with this run's, so a few partitions hold them all)."""

    first: int = NO_INDEX >> ROW_BITS
    group: int = 1

    def __call__(self, keys: NDArray[np.int64]) -> NDArray[np.int64]:
        p = key_partition(keys)
        if self.group == 1:
            return p
        return np.where(p >= self.first, self.first + (p - self.first) // self.group, p)


OWN = Placement()
"""Every key in its own partition."""


def key_row(keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """The row inside its partition of a document key."""
    return keys & ((1 << ROW_BITS) - 1)
