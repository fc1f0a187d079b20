"""LSH banding (contract §4): bucket keys, candidate pairs, the S-curve and parameter choice."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dedup.config import check_banding
from dedup.core.hashing import MERSENNE_P

NO_KEY = np.uint64(0)
"""The band key of a document without shingles: it is never put in a bucket."""


def band_keys(signatures: ArrayLike, *, num_bands: int = 16, rows_per_band: int = 8) -> NDArray[np.uint64]:
    """One 64-bit bucket key per band: uint64 [n, num_bands].

    key = FNV-1a 64 over the little-endian bytes of (band index as uint32, the band's
    rows_per_band values as uint32), so equal rows in different bands get different keys.
    A key that comes out as 0 becomes 1; 0 (`NO_KEY`) marks documents without shingles
    (all-P signatures), which are never indexed.
    """
    sigs = np.asarray(signatures)
    if sigs.ndim != 2:
        raise ValueError(f"band_keys() takes a 2-D array of signatures [n, num_perm]. Got shape {sigs.shape}.")
    check_banding(num_bands, rows_per_band, sigs.shape[1])
    from dedup.core import _kernels

    h = _kernels.band_keys(np.ascontiguousarray(sigs, dtype=np.uint32), num_bands, rows_per_band)
    h[h == NO_KEY] = 1
    h[np.all(sigs == MERSENNE_P, axis=1)] = NO_KEY
    return h


def bucket_pairs(keys: NDArray[np.uint64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Every pair of rows that share a bucket key in some band, each once, left < right.

    keys: uint64 [n, num_bands] from `band_keys`. All pairs within a bucket: for in-memory use;
    the Dask pipeline bounds its buckets instead.
    """
    n, nb = keys.shape
    band = np.repeat(np.arange(nb, dtype=np.int64)[None, :], n, axis=0).ravel()
    doc = np.repeat(np.arange(n, dtype=np.int64), nb)
    flat = keys.ravel()
    keep = flat != NO_KEY
    band, doc, flat = band[keep], doc[keep], flat[keep]
    order = np.lexsort((doc, flat, band))
    band, doc, flat = band[order], doc[order], flat[order]
    new = np.ones(len(flat), dtype=bool)
    new[1:] = (flat[1:] != flat[:-1]) | (band[1:] != band[:-1])
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, len(flat)))
    lefts: list[NDArray[np.int64]] = []
    rights: list[NDArray[np.int64]] = []
    for s, m in zip(starts[sizes > 1], sizes[sizes > 1]):
        members = doc[s : s + m]
        i, j = np.triu_indices(m, k=1)
        lefts.append(members[i])
        rights.append(members[j])
    if not lefts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    pairs = np.unique(np.stack([np.concatenate(lefts), np.concatenate(rights)], axis=1), axis=0)
    return pairs[:, 0], pairs[:, 1]


def probability(similarity: ArrayLike, num_bands: int, rows_per_band: int) -> Any:
    """p(s) = 1 - (1 - s**r)**b: the chance two documents of Jaccard s become candidates."""
    s = np.asarray(similarity, dtype=np.float64)
    p = 1.0 - (1.0 - s**rows_per_band) ** num_bands
    return float(p) if p.ndim == 0 else p


def _areas(
    threshold: float, num_bands: NDArray[np.int64], rows_per_band: NDArray[np.int64], steps: int = 2000
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(area under p below the threshold, area of 1 - p above it) by the midpoint rule."""
    lo = (np.arange(steps) + 0.5) / steps * threshold
    hi = threshold + (np.arange(steps) + 0.5) / steps * (1.0 - threshold)
    b = num_bands[:, None].astype(np.float64)
    r = rows_per_band[:, None].astype(np.float64)
    fp = (1.0 - (1.0 - lo[None, :] ** r) ** b).mean(axis=1) * threshold
    fn = ((1.0 - hi[None, :] ** r) ** b).mean(axis=1) * (1.0 - threshold)
    return fp, fn


def optimal_params(threshold: float, num_perm: int = 128, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(num_bands, rows_per_band) with b*r <= num_perm minimising the weighted FP and FN areas.

    The same criterion as datasketch's MinHashLSH: fp_weight * area under p(s) on [0, t] plus
    fn_weight * area under 1 - p(s) on [t, 1]. Ties go to the smallest num_bands, then rows.
    """
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"The 'threshold' parameter must be a float in [0, 1]. Got {threshold!r} instead.")
    check_banding(1, 1, num_perm)
    for name, w in (("fp_weight", fp_weight), ("fn_weight", fn_weight)):
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not 0.0 <= w <= 1.0:
            raise ValueError(f"The {name!r} parameter must be a float in [0, 1]. Got {w!r} instead.")
    bs, rs = [], []
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            bs.append(b)
            rs.append(r)
    b_arr, r_arr = np.array(bs), np.array(rs)
    fp, fn = _areas(float(threshold), b_arr, r_arr)
    best = int(np.argmin(fp_weight * fp + fn_weight * fn))
    return int(b_arr[best]), int(r_arr[best])


RECALL_AT_THRESHOLD = 0.9
"""`recall_banding`: how often a pair exactly at the threshold must become a candidate."""


def recall_banding(threshold: float, num_perm: int = 128, recall: float = RECALL_AT_THRESHOLD) -> tuple[int, int]:
    """(num_bands, rows_per_band): the most rows per band (the fewest dissimilar candidates) whose
    banding, with as many bands as num_perm allows, still makes a pair at the threshold a candidate
    at least `recall` of the time. Candidates are confirmed before anything is merged, so a missed
    pair is lost where an extra candidate costs only its scoring: recall near the threshold is
    weighed first (16 x 8 for 0.8 and 128 permutations, the default)."""
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0.0 < threshold <= 1.0:
        raise ValueError(f"The 'threshold' parameter must be a float in (0, 1]. Got {threshold!r} instead.")
    check_banding(1, 1, num_perm)
    best = (num_perm, 1)
    for r in range(1, num_perm + 1):
        b = num_perm // r
        if probability(float(threshold), b, r) >= recall:
            best = (b, r)
    return best


class LSH:
    """An in-memory LSH index over MinHash signatures, keyed by any orderable document key."""

    def __init__(self, num_bands: int = 16, rows_per_band: int = 8, num_perm: int = 128) -> None:
        check_banding(num_bands, rows_per_band, num_perm)
        self.num_bands = num_bands
        self.rows_per_band = rows_per_band
        self.num_perm = num_perm
        self._buckets: dict[tuple[int, bytes], list[Any]] = defaultdict(list)
        self._keys: set[Hashable] = set()

    @property
    def threshold(self) -> float:
        """The approximate 50% point of the S-curve, (1/b)**(1/r)."""
        return float((1.0 / self.num_bands) ** (1.0 / self.rows_per_band))

    def probability(self, similarity: ArrayLike) -> Any:
        """p(s) for this banding."""
        return probability(similarity, self.num_bands, self.rows_per_band)

    def insert(self, key: Hashable, signature: ArrayLike) -> None:
        """Index one signature under `key`; a key may be inserted only once."""
        sig = np.asarray(signature)
        if sig.shape != (self.num_perm,):
            raise ValueError(
                f"Signature for key {key!r} has shape {sig.shape}, but this LSH was built for "
                f"num_perm={self.num_perm}. Did you compute it with a different num_perm?"
            )
        if key in self._keys:
            raise ValueError(f"Key {key!r} is already in the index; each document may be inserted once.")
        self._keys.add(key)
        if np.all(sig == MERSENNE_P):
            return
        rows = sig[: self.num_bands * self.rows_per_band].astype("<u4")
        r = self.rows_per_band
        for band in range(self.num_bands):
            self._buckets[(band, rows[band * r : (band + 1) * r].tobytes())].append(key)

    def candidates(self) -> list[tuple[Any, Any]]:
        """Sorted unique candidate pairs (smaller key first): keys sharing all rows of a band."""
        pairs: set[tuple[Any, Any]] = set()
        for members in self._buckets.values():
            ordered = sorted(members)
            for i, left in enumerate(ordered):
                for right in ordered[i + 1 :]:
                    pairs.add((left, right))
        return sorted(pairs)
