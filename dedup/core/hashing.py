"""Fixed hashes (contract §2): FNV-1a 64, the PCG32 generator and the permutation parameters.

Everything here is a pure function of its input, so every run, worker and port computes the
same values. Python's built-in ``hash()`` is salted per process and is never used.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from dedup.core import _kernels

MERSENNE_P = (1 << 31) - 1
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1
_PCG_MULT = 6364136223846793005


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64-bit hash of `data` (reference implementation, one byte at a time)."""
    h = FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & _MASK64
    return h


class PCG32:
    """The PCG-XSH-RR 64/32 generator, seeded as ``pcg32_srandom_r(seed, initseq=54)``."""

    def __init__(self, seed: int, initseq: int = 54) -> None:
        self._state = 0
        self._inc = ((initseq << 1) | 1) & _MASK64
        self.next()
        self._state = (self._state + seed) & _MASK64
        self.next()

    def next(self) -> int:
        """The next 32-bit output."""
        old = self._state
        self._state = (old * _PCG_MULT + self._inc) & _MASK64
        xorshifted = (((old >> 18) ^ old) >> 27) & _MASK32
        rot = old >> 59
        return ((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & _MASK32

    def below(self, bound: int) -> int:
        """An unbiased integer in [0, bound), as ``pcg32_boundedrand_r``."""
        if not 1 <= bound <= _MASK32 + 1:
            raise ValueError(f"The 'bound' parameter must be in [1, 2**32]. Got {bound!r} instead.")
        threshold = ((1 << 32) - bound) % bound
        while True:
            r = self.next()
            if r >= threshold:
                return r % bound


@lru_cache(maxsize=32)
def _perm_params(num_perm: int, seed: int) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    rng = PCG32(seed)
    a = np.empty(num_perm, dtype=np.uint64)
    b = np.empty(num_perm, dtype=np.uint64)
    for i in range(num_perm):
        a[i] = 1 + rng.below(MERSENNE_P - 1)
        b[i] = rng.below(MERSENNE_P)
    a.flags.writeable = False
    b.flags.writeable = False
    return a, b


def perm_params(num_perm: int = 128, seed: int = 0) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """Permutation parameters (a, b), uint64 [num_perm] each, drawn interleaved from PCG32(seed)."""
    if isinstance(num_perm, bool) or not isinstance(num_perm, (int, np.integer)) or num_perm < 1:
        raise ValueError(f"The 'num_perm' parameter must be an integer >= 1. Got {num_perm!r} instead.")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"The 'seed' parameter must be an integer in [0, 2**64). Got {seed!r} instead.")
    return _perm_params(int(num_perm), int(seed))


def span_hashes(buf: NDArray[np.uint8], start: NDArray[np.int64], end: NDArray[np.int64]) -> NDArray[np.uint64]:
    """FNV-1a 64 of every byte span buf[start[i]:end[i]]; uint64 [len(start)]."""
    return _kernels.fnv1a_spans(buf, np.ascontiguousarray(start, dtype=np.int64),
                                np.ascontiguousarray(end, dtype=np.int64))


def shingle_hashes(shingles: Iterable[str]) -> NDArray[np.uint64]:
    """x(s) of contract §2: FNV-1a 64 of each shingle's UTF-8 bytes, mod P; uint64 array."""
    encoded = [s.encode("utf-8") for s in shingles]
    lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    end = np.cumsum(lengths)
    buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return span_hashes(buf, end - lengths, end) % np.uint64(MERSENNE_P)


def id_hashes(ids: NDArray) -> NDArray[np.uint64]:
    """A stable 64-bit hash of each document id, to route ids (never to compare them): splitmix64 of
    an integer id, FNV-1a 64 of a string id's UTF-8 bytes. The same on every machine and version."""
    arr = np.asarray(ids)
    if arr.dtype.kind in "iu":
        z = arr.astype(np.int64).view(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
    parts = [str(i).encode("utf-8") for i in arr.tolist()]
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    ends = np.cumsum(lengths)
    buf = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return _kernels.fnv1a_spans(buf, ends - lengths, ends)
