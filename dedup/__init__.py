"""dedup: near-duplicate removal and eval decontamination for text corpora, exact to docs/contract.md.

Names are imported on first use (PEP 562), so `dedup --help` and usage errors answer without
loading numba, dask or the kernels.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time names load on first use
    from dedup.config import Params
    from dedup.core.decontam import ProtectedNgrams, contaminated
    from dedup.core.docs import Doc
    from dedup.core.hashing import MERSENNE_P, PCG32, fnv1a64, perm_params, shingle_hashes
    from dedup.core.lsh import LSH, band_keys, optimal_params, probability
    from dedup.core.minhash import estimate, minhash, signatures
    from dedup.core.near import clusters, near_dedup
    from dedup.core.text import jaccard, shingles, words
    from dedup.core.unionfind import UnionFind, components
    from dedup.storage.protected import decontaminate, protected_ngrams, read_protected

__version__ = "0.1.0"

_HOME = {
    "Params": "config", "ProtectedNgrams": "core.decontam", "contaminated": "core.decontam",
    "decontaminate": "storage.protected", "protected_ngrams": "storage.protected",
    "read_protected": "storage.protected", "Doc": "core.docs",
    "MERSENNE_P": "core.hashing", "PCG32": "core.hashing", "fnv1a64": "core.hashing", "perm_params": "core.hashing",
    "shingle_hashes": "core.hashing", "LSH": "core.lsh", "band_keys": "core.lsh", "optimal_params": "core.lsh",
    "probability": "core.lsh", "estimate": "core.minhash", "minhash": "core.minhash", "signatures": "core.minhash",
    "clusters": "core.near", "near_dedup": "core.near", "jaccard": "core.text", "shingles": "core.text",
    "words": "core.text", "UnionFind": "core.unionfind", "components": "core.unionfind",
}
"""Where each public name lives (a module of `dedup.core`, `dedup.storage.protected` or `dedup.config`)."""

__all__ = [
    "LSH", "MERSENNE_P", "PCG32", "Doc", "Params", "ProtectedNgrams", "UnionFind", "band_keys",
    "clusters", "components", "contaminated", "decontaminate", "estimate", "fnv1a64", "jaccard",
    "minhash", "near_dedup", "optimal_params", "perm_params", "probability", "protected_ngrams",
    "read_protected", "shingle_hashes", "shingles", "signatures", "words",
]





MODULES = {"pipeline": "job.pipeline"}
"""Modules of the public API by their short name: `from dedup import pipeline` (Parquet to Parquet on
Dask: `pipeline.run`, and `pipeline.near_dedup_frame` on a Dask frame of your own)."""


def __getattr__(name: str) -> Any:
    if name in MODULES:
        module = importlib.import_module(f"dedup.{MODULES[name]}")
        globals()[name] = module
        return module
    if name in _HOME:
        value = getattr(importlib.import_module(f"dedup.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dedup' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME, *MODULES])
