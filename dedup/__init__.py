"""dedup: near-duplicate removal and eval decontamination for text corpora, exact to docs/contract.md."""

from __future__ import annotations

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

__all__ = [
    "LSH", "MERSENNE_P", "PCG32", "Doc", "Params", "ProtectedNgrams", "UnionFind", "band_keys",
    "clusters", "components", "contaminated", "decontaminate", "estimate", "fnv1a64", "jaccard",
    "minhash", "near_dedup", "optimal_params", "perm_params", "probability", "protected_ngrams",
    "shingle_hashes", "shingles", "signatures", "words",
]
