"""dedup: near-duplicate removal and eval decontamination for text corpora, exact to docs/contract.md.

Names are imported on first use (PEP 562), so `dedup --help` and usage errors answer without
loading numba, dask or the kernels.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time names load on first use
    from dedup.config import Params
    from dedup.decontam import ProtectedNgrams, contaminated, decontaminate, protected_ngrams
    from dedup.docs import Doc
    from dedup.hashing import MERSENNE_P, PCG32, fnv1a64, perm_params, shingle_hashes
    from dedup.lsh import LSH, band_keys, optimal_params, probability
    from dedup.minhash import estimate, minhash, signatures
    from dedup.near import clusters, near_dedup
    from dedup.text import jaccard, shingles, words
    from dedup.unionfind import UnionFind, components

__version__ = "0.1.0"

_HOME = {
    "Params": "config", "ProtectedNgrams": "decontam", "contaminated": "decontam", "decontaminate": "decontam",
    "protected_ngrams": "decontam", "Doc": "docs", "MERSENNE_P": "hashing", "PCG32": "hashing", "fnv1a64": "hashing",
    "perm_params": "hashing", "shingle_hashes": "hashing", "LSH": "lsh", "band_keys": "lsh", "optimal_params": "lsh",
    "probability": "lsh", "estimate": "minhash", "minhash": "minhash", "signatures": "minhash", "clusters": "near",
    "near_dedup": "near", "jaccard": "text", "shingles": "text", "words": "text", "UnionFind": "unionfind",
    "components": "unionfind",
}

__all__ = [
    "LSH", "MERSENNE_P", "PCG32", "Doc", "Params", "ProtectedNgrams", "UnionFind", "band_keys",
    "clusters", "components", "contaminated", "decontaminate", "estimate", "fnv1a64", "jaccard",
    "minhash", "near_dedup", "optimal_params", "perm_params", "probability", "protected_ngrams",
    "shingle_hashes", "shingles", "signatures", "words",
]





def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(importlib.import_module(f"dedup.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dedup' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])


class _Package(types.ModuleType):
    """Keeps `dedup.minhash` the function: importing the submodule of the same name must not replace it."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOME and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
