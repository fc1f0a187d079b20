"""The buckets stage, per partition: band rows (one per band of each distinct text) and, after the shuffle
on the band key, the edges of each bucket."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dedup.config import Params
from dedup.core.lsh import NO_KEY, band_keys
from dedup.core.order import lex_order
from dedup.partition.features import SCOPE, signatures_of
from dedup.partition.keyspace import NO_INDEX

KIND_CANDIDATE = 0
"""An edge to confirm: the two documents share a bucket."""

KIND_SAME_TEXT = 1
"""An edge between documents with identical words (Jaccard 1): confirmed by construction."""

KIND_APPROX = 2
"""A candidate edge from a bucket too large for all pairs: from the bucket's centre (its smallest text
hash, so the choice depends on texts only) to each other member; left is the centre."""


def _local_reps(feat: pd.DataFrame) -> tuple[pd.DataFrame, NDArray[np.int64], NDArray[np.intp]]:
    """Active documents (their text keys, key and id), per document the key of its representative (the
    document with the smallest id among those with the same words in this partition) and their rows
    in `feat`. If any of them survives, its representative does, so the band rows (and an index)
    always hold the survivor. Only the columns read are taken, not the signatures."""
    text = [*([SCOPE] if SCOPE in feat.columns else []), "tkey", "tkey2"]  # with --within, a text of each value
    at = np.flatnonzero(feat["tkey"].to_numpy() != 0)
    active = feat[[*text, "doc", "_id"]].iloc[at]
    rep = active["doc"].to_numpy(dtype=np.int64).copy()
    shared = active.duplicated(text, keep=False).to_numpy()
    if shared.any():
        grp = active[shared]
        ids = grp["_id"] if pd.api.types.is_integer_dtype(grp["_id"].dtype) else grp["_id"].astype(object)
        order = grp.assign(_k=ids.to_numpy()).sort_values([*text, "_k"], kind="stable")
        first = order.groupby(text, sort=False)["doc"].transform("first")
        rep[shared] = first.reindex(grp.index).to_numpy(dtype=np.int64)
    return active, rep, at


def band_documents(feat: pd.DataFrame) -> NDArray[np.int64]:
    """Keys of the partition's documents that get band rows (`long_form`): active representatives."""
    active, rep, _ = _local_reps(feat)
    return active["doc"].to_numpy(np.int64)[active["doc"].to_numpy(np.int64) == rep]


def same_text_edges(feat: pd.DataFrame) -> pd.DataFrame:
    """Edges (representative -> doc) between documents with the same words inside one partition."""
    active, rep, _ = _local_reps(feat)
    doc = active["doc"].to_numpy(dtype=np.int64)
    keep = doc != rep
    return pd.DataFrame({"left": rep[keep], "right": doc[keep]})

LONG_META = pd.DataFrame({
    "band": pd.Series(dtype=np.uint8), "key": pd.Series(dtype=np.uint64),
    "doc": pd.Series(dtype=np.int64), "tkey": pd.Series(dtype=np.uint64), "tkey2": pd.Series(dtype=np.uint64),
})


def long_form(feat: pd.DataFrame, params: Params) -> pd.DataFrame:
    """(band, key, doc, tkey, tkey2) rows for the partition's local representatives.

    Identical texts are collapsed to one representative before the shuffle (their edges come
    from `same_text_edges`), so boilerplate repeated in a partition ships one row per band.
    """
    active, rep, at = _local_reps(feat)
    is_rep = active["doc"].to_numpy() == rep
    reps = active[is_rep]
    sigs = signatures_of(feat, params.num_perm, at[is_rep])
    keys = band_keys(sigs, num_bands=params.num_bands, rows_per_band=params.rows_per_band)
    if SCOPE in reps.columns:  # --within: a bucket of each value's documents, never two values'
        keys = within_keys(keys, reps[SCOPE].to_numpy(np.uint64))
    n, nb = keys.shape
    key, row, band = keys.ravel(), np.repeat(np.arange(n), nb), np.tile(np.arange(nb, dtype=np.uint8), n)
    has = key != NO_KEY  # a band without a key makes no row: left out before the frame is built
    if not has.all():
        key, row, band = key[has], row[has], band[has]
    return pd.DataFrame({"band": band, "key": key, "doc": reps["doc"].to_numpy(dtype=np.int64)[row],
                         "tkey": reps["tkey"].to_numpy(dtype=np.uint64)[row],
                         "tkey2": reps["tkey2"].to_numpy(dtype=np.uint64)[row]})

def within_keys(keys: NDArray[np.uint64], scope: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """Band keys (documents x bands) made the keys of each document's `--within` value: the scope key
    mixed in (never making `NO_KEY`, and leaving an unindexed band unindexed)."""
    mixed = keys ^ scope[:, None]
    mixed[mixed == NO_KEY] ^= np.uint64(1)
    return np.where(keys == NO_KEY, NO_KEY, mixed)


EDGE_META = pd.DataFrame({
    "left": pd.Series(dtype=np.int64), "right": pd.Series(dtype=np.int64),
    "kind": pd.Series(dtype=np.uint8), "band": pd.Series(dtype=np.uint8),
})


def _pairs_within(starts: NDArray[np.int64], sizes: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """All (i, j), i < j, of positions inside each group [start, start + size), vectorised."""
    pos = np.repeat(starts, sizes) + (np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes))
    group_end = np.repeat(starts + sizes, sizes)
    partners = group_end - pos - 1
    left = np.repeat(pos, partners)
    offs = np.arange(partners.sum()) - np.repeat(np.cumsum(partners) - partners, partners)
    return left, left + 1 + offs


def bucket_edges(long: pd.DataFrame, max_bucket: int, first_indexed: int = NO_INDEX) -> pd.DataFrame:
    """Edges of the buckets in one shuffled partition (every bucket lives in one partition).

    Same-text members of a bucket collapse to their smallest key (KIND_SAME_TEXT edges); the
    distinct texts of a bucket are paired all against all (KIND_CANDIDATE) when there are at
    most `max_bucket` of them, otherwise joined by star edges from the member with the smallest
    text hash (KIND_APPROX, left = the centre, so (band, left) names the bucket). Candidate and
    same-text edges have left < right. Choices depend on texts, never on document keys, so the
    edges between texts do not depend on how the corpus is partitioned.
    """
    # a row whose key no other row has is alone in its bucket and makes no edge: sort only the rest
    shared = pd.Series(long["key"].to_numpy()).duplicated(keep=False).to_numpy()
    if not shared.any():
        return EDGE_META.copy()
    band, key, tk, tk2, doc = (long[c].to_numpy()[shared] for c in ("band", "key", "tkey", "tkey2", "doc"))
    # sorted by (band, key, tkey, tkey2, doc): by key then the rest, then by band (a stable radix sort)
    order = lex_order([key, band, tk, tk2, doc])
    order = order[np.argsort(band[order], kind="stable")]
    band, key, tk, tk2, doc = band[order], key[order], tk[order], tk2[order], doc[order].astype(np.int64, copy=False)
    new_bucket = np.ones(len(doc), dtype=bool)
    new_bucket[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    new_text = new_bucket.copy()
    new_text[1:] |= (tk[1:] != tk[:-1]) | (tk2[1:] != tk2[:-1])
    # same text inside a bucket: edge to the first (smallest) member
    text_id = np.cumsum(new_text) - 1
    text_first = np.flatnonzero(new_text)
    dup = ~new_text
    same_l, same_r = doc[text_first[text_id[dup]]], doc[dup]
    # distinct texts per bucket
    rep_pos = text_first
    rep_bucket = np.cumsum(new_bucket)[rep_pos] - 1
    _, starts, sizes = np.unique(rep_bucket, return_index=True, return_counts=True)
    small = (sizes > 1) & (sizes <= max_bucket)
    li, ri = _pairs_within(starts[small].astype(np.int64), sizes[small].astype(np.int64))
    rep_doc, rep_band = doc[rep_pos], band[rep_pos]
    # buckets too large for all pairs: star edges from the smallest key to every other member
    big = sizes > max_bucket
    big_sizes = sizes[big].astype(np.int64)
    big_first = np.cumsum(big_sizes) - big_sizes
    big_pos = np.repeat(starts[big], big_sizes) + (np.arange(big_sizes.sum()) - np.repeat(big_first, big_sizes))
    if len(big_pos):
        center = rep_doc[big_pos][big_first]  # members are sorted by text hash: the first is the centre
        star_l = np.repeat(center, big_sizes)
        not_center = rep_doc[big_pos] != star_l
        star_l, star_r, star_band = star_l[not_center], rep_doc[big_pos][not_center], rep_band[big_pos][not_center]
    else:
        star_l = star_r = np.zeros(0, np.int64)
        star_band = np.zeros(0, np.uint8)
    left = np.concatenate([same_l, rep_doc[li], star_l])
    right = np.concatenate([same_r, rep_doc[ri], star_r])
    kind = np.concatenate([
        np.full(len(same_l), KIND_SAME_TEXT, np.uint8),
        np.full(len(li), KIND_CANDIDATE, np.uint8),
        np.full(len(star_l), KIND_APPROX, np.uint8),
    ])
    bands = np.concatenate([band[dup], rep_band[li], star_band]).astype(np.uint8)
    approx = kind == KIND_APPROX
    lo = np.where(approx, left, np.minimum(left, right))
    hi = np.where(approx, right, np.maximum(left, right))
    out = pd.DataFrame({"left": lo, "right": hi, "kind": kind, "band": bands})
    if (hi >= first_indexed).any():  # two documents of earlier outputs: both survive, nothing to decide
        out = out[(lo < first_indexed) | (hi < first_indexed)].reset_index(drop=True)
    return out
