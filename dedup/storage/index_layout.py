"""Where the documents of earlier indexes sit in an `--against` run's key space (`Layout`): after the
run's own partitions, gathered a few index partitions at a time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from dedup.storage.index import KEY_PREFIXES, TKEYS_IN_BANDS, IndexPart

if TYPE_CHECKING:
    from dedup.partition.keyspace import Placement


@dataclass(frozen=True)
class Layout:
    """Where the documents of earlier indexes sit in this run's key space: index part i holds global
    partitions starts[i] .. starts[i] + parts[i].partitions - 1, after this run's `first` ones.
    A document's key names its global partition; the run gathers the index partitions `group` at a
    time (`placement`), so it works on `total` partitions: its own, then the gathered ones."""

    parts: tuple[IndexPart, ...]
    first: int
    group: int = 1

    @classmethod
    def gathering(cls, parts: Sequence[IndexPart], first: int) -> Layout:
        """As many gathered index partitions as the run has its own: an index partition holds only
        the documents sharing a bucket with this run's, about as many as the run's."""
        held = cls(tuple(parts), first).index_partitions
        return cls(tuple(parts), first, max(1, -(-held // max(1, first))))

    @property
    def starts(self) -> list[int]:
        out, at = [], self.first
        for p in self.parts:
            out.append(at)
            at += p.partitions
        return out

    @property
    def index_partitions(self) -> int:
        return sum(p.partitions for p in self.parts)

    @property
    def total(self) -> int:
        return self.first + -(-self.index_partitions // self.group)

    @property
    def placement(self) -> Placement:
        from dedup.partition.keyspace import Placement

        return Placement(self.first, self.group)

    def direct(self, exact: bool) -> bool:
        """Whether matched band rows can join the buckets as read: they carry their text hashes and
        whole keys (formats 3 to 6), and every document they name is in a docs file (with `exact`,
        only those whose text is in their output take part, which the docs files tell)."""
        return not exact and all(TKEYS_IN_BANDS <= p.format < KEY_PREFIXES for p in self.parts)

    @property
    def first_key(self) -> int:
        from dedup.partition.keyspace import ROW_BITS

        return self.first << ROW_BITS

    def locate(self, q: int) -> tuple[IndexPart, int, int]:
        """(index part, its partition, the part's first global partition) of global partition q."""
        for part, start in zip(self.parts, self.starts):
            if start <= q < start + part.partitions:
                return part, q - start, start
        raise IndexError(f"partition {q} is not an index partition")

    def translate(self, part: IndexPart, keys: NDArray[np.int64]) -> NDArray[np.int64]:
        """Keys of the run that wrote `part` (its own partitions first, then its sources' in order) as
        keys of this run (`starts`): where the roots its docs files name are now."""
        from dedup.partition.keyspace import ROW_BITS

        by_uid = {p.uid: (p, s) for p, s in zip(self.parts, self.starts)}
        bounds, moved = [part.partitions], [by_uid[part.uid][1]]
        for uid in part.sources:
            src, start = by_uid[uid]
            bounds.append(bounds[-1] + src.partitions)
            moved.append(start)
        q = keys >> ROW_BITS
        which = np.searchsorted(np.asarray(bounds, np.int64), q, "right")
        first = np.asarray([0, *bounds[:-1]], np.int64)
        moved_to = np.asarray(moved, np.int64)[which] + q - first[which]
        return (moved_to << ROW_BITS) | (keys & ((1 << ROW_BITS) - 1))

    def gathered(self, g: int) -> list[int]:
        """The global index partitions that this run's partition g (>= first) gathers."""
        lo = self.first + (g - self.first) * self.group
        return list(range(lo, min(lo + self.group, self.first + self.index_partitions)))
