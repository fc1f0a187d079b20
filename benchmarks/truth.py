"""Exact ground truth: every pair of documents with exact Jaccard >= t of word shingle sets.

Prefix filtering over integer shingle ids (rarest first), then exact verification with integer
arithmetic: |A ∩ B| * den >= num * |A ∪ B| where t = num/den exactly, so pairs that sit exactly on
the threshold are never lost to floating point.

    python benchmarks/truth.py --docs 2000 --threshold 0.8
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dedup.core.text import shingles


def shingle_id_sets(texts: Sequence[str | None], shingle_size: int = 5) -> list[np.ndarray]:
    """Each document's shingle set as a sorted int64 array of global shingle ids."""
    vocab: dict[str, int] = {}
    out = []
    for t in texts:
        ids = sorted(vocab.setdefault(s, len(vocab)) for s in shingles(t or "", shingle_size))
        out.append(np.array(ids, dtype=np.int64))
    return out


def _reaches(inter: int, size_a: int, size_b: int, t: Fraction) -> bool:
    return inter * t.denominator >= t.numerator * (size_a + size_b - inter)


def true_pairs(texts: Sequence[str | None], threshold: float, shingle_size: int = 5) -> set[tuple[int, int]]:
    """(i, j), i < j, of every pair with exact Jaccard >= threshold (empty sets never match)."""
    t = Fraction(str(threshold))
    sets = shingle_id_sets(texts, shingle_size)
    freq: dict[int, int] = defaultdict(int)
    for s in sets:
        for x in s.tolist():
            freq[x] += 1
    index: dict[int, list[int]] = defaultdict(list)
    pairs: set[tuple[int, int]] = set()
    as_sets = [set(s.tolist()) for s in sets]
    order = sorted(range(len(sets)), key=lambda i: len(sets[i]))
    for i in order:  # by size, so every earlier document is no larger
        s = sets[i]
        n = len(s)
        if n == 0:
            continue
        ranked = sorted(s.tolist(), key=lambda x: (freq[x], x))
        prefix = n - math.ceil(t * n) + 1 if t > 0 else n
        seen: set[int] = set()
        for x in ranked[:prefix]:
            for j in index[x]:
                if j in seen:
                    continue
                seen.add(j)
                m = len(sets[j])
                if m * t.denominator < t.numerator * n:  # size filter: |B|/|A| >= t
                    continue
                if _reaches(len(as_sets[i] & as_sets[j]), n, m, t):
                    pairs.add((min(i, j), max(i, j)))
            index[x].append(i)
    return pairs


def brute_force_pairs(texts: Sequence[str | None], threshold: float, shingle_size: int = 5) -> set[tuple[int, int]]:
    """All pairs compared: the check for `true_pairs` on small corpora."""
    t = Fraction(str(threshold))
    sets = [shingles(x or "", shingle_size) for x in texts]
    out = set()
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            if sets[i] and sets[j] and _reaches(len(sets[i] & sets[j]), len(sets[i]), len(sets[j]), t):
                out.add((i, j))
    return out


def main() -> None:
    import time

    from corpus import corpus_frame

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1200)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--check", action="store_true", help="also run brute force and compare")
    args = ap.parse_args()
    texts = corpus_frame(args.docs)["text"].tolist()
    start = time.perf_counter()
    pairs = true_pairs(texts, args.threshold)
    print(f"{len(pairs):,} pairs with exact Jaccard >= {args.threshold} among {len(texts):,} documents "
          f"({time.perf_counter() - start:.1f} s)")
    if args.check:
        brute = brute_force_pairs(texts, args.threshold)
        print(f"brute force: {len(brute):,} pairs; equal: {brute == pairs}")


if __name__ == "__main__":
    main()
