"""In-memory near-duplicate detection: candidates by LSH, confirmed, merged by min-root union-find.

This is the reference the Dask pipeline must agree with, and the API for corpora that fit in
memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dedup.config import Params
from dedup.core.docs import Doc
from dedup.core.lsh import band_keys, bucket_pairs
from dedup.core.minhash import pair_estimates, signatures
from dedup.core.text import jaccard, shingles
from dedup.core.unionfind import components


def confirm_pairs(
    left: NDArray[np.int64],
    right: NDArray[np.int64],
    params: Params,
    *,
    sigs: NDArray[np.uint32] | None = None,
    texts: Sequence[str | None] | None = None,
) -> NDArray[np.bool_]:
    """Which candidate pairs (row indices) reach the threshold, by estimate or exact Jaccard."""
    if params.confirm == "estimate":
        if sigs is None:
            raise ValueError("confirm='estimate' needs the signatures")
        return pair_estimates(sigs, left, right) >= params.threshold
    if texts is None:
        raise ValueError("confirm='exact' needs the texts")
    cache: dict[int, set[str]] = {}

    def sh(i: int) -> set[str]:
        if i not in cache:
            cache[i] = shingles(texts[i] or "", params.shingle_size, params.shingle_unit)
        return cache[i]

    return np.fromiter(
        (jaccard(sh(int(a)), sh(int(b))) >= params.threshold for a, b in zip(left, right)), dtype=bool, count=len(left)
    )


def cluster_roots(ids: Sequence[Any], texts: Sequence[str | None], params: Params) -> list[Any]:
    """The root (smallest id of its component) of every document, in input order."""
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    sorted_ids = [ids[i] for i in order]
    for a, b in itertools.pairwise(sorted_ids):
        if a == b:
            raise ValueError(f"Document id {a!r} occurs more than once; ids must be unique.")
    sorted_texts = [texts[i] for i in order]
    sigs = signatures(sorted_texts, num_perm=params.num_perm, seed=params.seed, shingle_size=params.shingle_size,
                      shingle_unit=params.shingle_unit)
    keys = band_keys(sigs, num_bands=params.num_bands, rows_per_band=params.rows_per_band)
    left, right = bucket_pairs(keys)
    ok = confirm_pairs(left, right, params, sigs=sigs, texts=sorted_texts)
    members, roots = components(left[ok], right[ok])
    root_of = np.arange(len(sorted_ids))
    root_of[members] = roots
    out: list[Any] = [None] * len(ids)
    for pos, i in enumerate(order):
        out[i] = sorted_ids[root_of[pos]]
    return out


def clusters(docs: Mapping[str, str], *, num_perm: int | None = None, num_bands: int | None = None,
             rows_per_band: int | None = None, threshold: float | None = None, shingle_size: int | None = None,
             shingle_unit: str | None = None, seed: int | None = None, confirm: str | None = None,
             params: Params | None = None) -> list[set[str]]:
    """Groups of near-duplicate ids (two or more members each), ordered by their smallest id.

    The parameters are those of `Params` (None: its default); pass `params=` to use a ready-made one instead.
    """
    p = params or Params.of(num_perm=num_perm, num_bands=num_bands, rows_per_band=rows_per_band, threshold=threshold,
                            shingle_size=shingle_size, shingle_unit=shingle_unit, seed=seed, confirm=confirm)
    ids = list(docs)
    roots = cluster_roots(ids, [docs[i] for i in ids], p)
    groups: dict[str, set[str]] = {}
    for i, r in zip(ids, roots):
        groups.setdefault(r, set()).add(i)
    return [groups[r] for r in sorted(groups) if len(groups[r]) > 1]


def near_dedup(docs: Iterable[Doc], *, num_perm: int | None = None, num_bands: int | None = None,
               rows_per_band: int | None = None, threshold: float | None = None, shingle_size: int | None = None,
               shingle_unit: str | None = None, seed: int | None = None, confirm: str | None = None,
               drop: bool = True, params: Params | None = None) -> Iterator[Doc]:
    """Tag each document's meta["minhash_cluster"] with its cluster root; with drop, keep roots only.

    Order and meta are kept. Clustering needs every document, so the input is read in full
    before the first document is yielded. Repeated ids raise.
    """
    p = params or Params.of(num_perm=num_perm, num_bands=num_bands, rows_per_band=rows_per_band, threshold=threshold,
                            shingle_size=shingle_size, shingle_unit=shingle_unit, seed=seed, confirm=confirm)
    items = list(docs)
    roots = cluster_roots([d.id for d in items], [d.text for d in items], p)
    for doc, root in zip(items, roots):
        doc.meta["minhash_cluster"] = root
        if not drop or doc.id == root:
            yield doc
