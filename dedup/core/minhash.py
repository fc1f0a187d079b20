"""MinHash signatures (contract §3), one document or a whole batch in one pass."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dedup.core import _kernels
from dedup.core.hashing import MERSENNE_P, perm_params, shingle_hashes
from dedup.core.text import TextBatch, _check_size, check_unit, encode_arrow, encode_batch

SIGNATURE_DTYPE = np.uint32
SIGNATURE_CHUNK = 2048
"""Texts that `signatures` and the features stage tokenise, hash and sign at a time: a chunk's
buffers (a few MB) stay in cache and the allocator reuses them, where one pass over a whole
partition touches fresh pages for all of it."""


def _minhash_rows(x: NDArray[np.uint64], offsets: NDArray[np.int64], num_perm: int, seed: int) -> NDArray[np.uint32]:
    """Signatures of the shingle hashes x (any uint64: reduced mod P in the kernel), per offsets' documents."""
    a, b = perm_params(num_perm, seed)
    out = np.empty((len(offsets) - 1, num_perm), dtype=SIGNATURE_DTYPE)
    _kernels.minhash_rows(np.ascontiguousarray(x, dtype=np.uint64), offsets, a.astype(np.uint32), b.astype(np.uint32),
                          out)
    return out


def minhash(shingles: Iterable[str], num_perm: int = 128, seed: int = 0) -> NDArray[np.uint32]:
    """The signature of one shingle set: uint32 [num_perm]; all P when there are no shingles."""
    x = shingle_hashes(set(shingles))
    return _minhash_rows(x, np.array([0, len(x)], dtype=np.int64), num_perm, seed)[0]


def batch_signatures(batch: TextBatch, *, num_perm: int = 128, seed: int = 0, shingle_size: int = 5,
                     shingle_unit: str = "word") -> NDArray[np.uint32]:
    """Signatures of every document of an encoded batch: uint32 [n_docs, num_perm]."""
    h, offsets = batch.shingle_hashes(shingle_size, shingle_unit)
    return _minhash_rows(h, offsets, num_perm, seed)  # x = h mod P, taken in the kernel


def signatures(texts: Sequence[str | None], *, num_perm: int = 128, seed: int = 0, shingle_size: int = 5,
               shingle_unit: str = "word") -> NDArray[np.uint32]:
    """Signatures of a sequence of texts, `SIGNATURE_CHUNK` at a time: uint32 [len(texts), num_perm].

    Equal, row for row, to ``minhash(shingles(text, shingle_size, shingle_unit), num_perm, seed)``.
    """
    _check_size("shingle_size", shingle_size)
    check_unit(shingle_unit)
    perm_params(num_perm, seed)  # validates both before any work
    texts = texts if isinstance(texts, (list, tuple)) else list(texts)
    out = np.empty((len(texts), num_perm), dtype=SIGNATURE_DTYPE)
    for lo in range(0, len(texts), SIGNATURE_CHUNK):
        out[lo:lo + SIGNATURE_CHUNK] = batch_signatures(encode_batch(texts[lo:lo + SIGNATURE_CHUNK]), num_perm=num_perm,
                                                        seed=seed, shingle_size=shingle_size, shingle_unit=shingle_unit)
    return out


def arrow_signatures(array: Any, *, num_perm: int = 128, seed: int = 0, shingle_size: int = 5,
                     shingle_unit: str = "word") -> NDArray[np.uint32]:
    """`signatures` of an Arrow string array (nulls count as texts without words), read in place
    (`encode_arrow`): no Python string is made for an ASCII text."""
    _check_size("shingle_size", shingle_size)
    check_unit(shingle_unit)
    perm_params(num_perm, seed)
    out = np.empty((len(array), num_perm), dtype=SIGNATURE_DTYPE)
    for lo in range(0, len(array), SIGNATURE_CHUNK):
        out[lo:lo + SIGNATURE_CHUNK] = batch_signatures(encode_arrow(array.slice(lo, SIGNATURE_CHUNK)),
                                                        num_perm=num_perm, seed=seed, shingle_size=shingle_size,
                                                        shingle_unit=shingle_unit)
    return out


def is_empty(sigs: ArrayLike) -> NDArray[np.bool_]:
    """True for all-P signatures (documents without shingles); works on one row or a 2-D batch."""
    return np.all(np.asarray(sigs) == MERSENNE_P, axis=-1)


def estimate(sig_a: ArrayLike, sig_b: ArrayLike) -> float:
    """Fraction of positions where two signatures agree; 0.0 when either is all P."""
    a = np.asarray(sig_a)
    b = np.asarray(sig_b)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"estimate() takes two 1-D signatures. Got shapes {a.shape} and {b.shape}.")
    if a.shape != b.shape:
        raise ValueError(
            f"Signatures of different lengths ({len(a)} and {len(b)}) cannot be compared: "
            "compute both with the same num_perm and seed."
        )
    if len(a) == 0 or is_empty(a) or is_empty(b):
        return 0.0
    return float(np.count_nonzero(a == b)) / len(a)


def pair_estimates(
    sigs: NDArray[np.uint32], left: NDArray[np.int64], right: NDArray[np.int64], *, chunk: int = 65536
) -> NDArray[np.float64]:
    """`estimate` for many pairs of rows of `sigs` at once: float64 [len(left)]."""
    out = np.empty(len(left), dtype=np.float64)
    empty = is_empty(sigs) if len(sigs) else np.zeros(0, dtype=bool)
    for lo in range(0, len(left), chunk):
        li, ri = left[lo : lo + chunk], right[lo : lo + chunk]
        est = np.count_nonzero(sigs[li] == sigs[ri], axis=1) / sigs.shape[1]
        est[empty[li] | empty[ri]] = 0.0
        out[lo : lo + chunk] = est
    return out
