"""Stage 4, per partition: bucket edges as distinct pairs, the left document's payload attached at
its partition, the pair scored at its right document's partition, and the graph's edges."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dedup.config import Params
from dedup.core import _kernels
from dedup.core.text import encode_batch, texts_of
from dedup.partition.buckets import KIND_SAME_TEXT, same_text_edges
from dedup.partition.codec import payload_sigs, sig_payload
from dedup.partition.features import signatures_of
from dedup.partition.rows import concat_rows, rows_of

PAIR_META = pd.DataFrame({"left": pd.Series(dtype=np.int64), "right": pd.Series(dtype=np.int64)})

ROUTED_META = PAIR_META.assign(same=pd.Series(dtype=bool))


def confirm_routes(edges: pd.DataFrame) -> pd.DataFrame:
    """Bucket edges as distinct pairs (left < right) with `same`: True for a same-text edge
    (confirmed by construction), False for a candidate to score. Both travel the confirm's two
    hops together; a pair is never both (same-text members of a bucket collapse to one)."""
    if edges.empty:
        return ROUTED_META.copy()
    lo = np.minimum(edges["left"].to_numpy(np.int64), edges["right"].to_numpy(np.int64))
    hi = np.maximum(edges["left"].to_numpy(np.int64), edges["right"].to_numpy(np.int64))
    return _distinct_routes(lo, hi, edges["kind"].to_numpy() == KIND_SAME_TEXT)


def _distinct_routes(lo: NDArray[np.int64], hi: NDArray[np.int64], same: NDArray[np.bool_]) -> pd.DataFrame:
    """Distinct (left, right, same) rows, sorted (by a lexsort, much faster than np.unique(axis=0))."""
    order = np.lexsort((same, hi, lo))
    lo, hi, same = lo[order], hi[order], same[order]
    keep = np.ones(len(lo), dtype=bool)
    keep[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1]) | (same[1:] != same[:-1])
    return pd.DataFrame({"left": lo[keep], "right": hi[keep], "same": same[keep].astype(bool)})


def left_payload_meta(params: Params) -> pd.DataFrame:
    cols: dict[str, Any] = {"left": pd.Series(dtype=np.int64), "right": pd.Series(dtype=np.int64),
                            "same": pd.Series(dtype=bool)}
    cols["_sig"] = sig_payload(np.zeros((0, params.num_perm), dtype=np.uint32))
    if params.confirm == "exact":
        cols["_shingles"] = pd.Series(dtype=object)
    return pd.DataFrame(cols)

SCORED_META = pd.DataFrame({
    "left": pd.Series(dtype=np.int64), "right": pd.Series(dtype=np.int64), "same": pd.Series(dtype=bool),
    "estimate": pd.Series(dtype=np.float32), "jaccard": pd.Series(dtype=np.float32), "confirmed": pd.Series(dtype=bool)})
"""A scored pair (keys only: ids are looked up where a component's members meet, `with_ids`): its
signature estimate, its exact Jaccard (NaN unless exact); `same` pairs (identical words) are
confirmed with similarity 1, unscored."""

GRAPH_META = PAIR_META
"""The graph's edges: (left, right) document keys."""


def graph_pairs(scored: pd.DataFrame, feat: pd.DataFrame, n_new: int,
                partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """One partition's graph edges (left, right): its scored pairs that were confirmed, then, on a
    partition of this run's documents (below `n_new`), the same-text pairs inside it.
    One task a partition, where a concatenation of the two frames made two (and a partition each)."""
    confirmed = scored[scored["confirmed"].to_numpy(bool)][["left", "right"]]
    if partition_info is None or partition_info["number"] >= n_new:
        return confirmed.reset_index(drop=True)
    return concat_rows([confirmed, same_text_edges(feat)])


def shingle_sets(texts: list[str | None], shingle_size: int,
                 unit: str = "word") -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
    """Each text's distinct shingles as sorted FNV-1a 64 hashes: (values, offsets [n + 1]).

    Exact Jaccard on these equals exact Jaccard on the shingle strings unless two distinct
    shingles of one pair share a 64-bit hash (probability about 1e-15 for a pair of web pages).
    """
    batch = encode_batch(texts)
    h, offsets = batch.shingle_hashes(shingle_size, unit)
    values, out = _kernels.sorted_unique_segments(h, offsets)
    return values, out


def pairs_with_left(routes: pd.DataFrame, feat: pd.DataFrame, part: pd.DataFrame | None, text_column: str,
                    params: Params) -> pd.DataFrame:
    """At the partition of each pair's left document: one row per distinct pair (`confirm_routes`
    rows), with, for pairs to score, what scoring needs from the left side (its
    signature, and for exact Jaccard its shingle hashes)."""
    if routes.empty:
        return left_payload_meta(params)
    routes = _distinct_routes(routes["left"].to_numpy(np.int64), routes["right"].to_numpy(np.int64),
                              routes["same"].to_numpy(bool))  # distinct across the bucket ranges that sent them
    lo, hi = routes["left"].to_numpy(np.int64), routes["right"].to_numpy(np.int64)
    same = routes["same"].to_numpy(bool)
    rows = rows_of(feat, lo)
    sigs = signatures_of(feat, params.num_perm, rows)
    out = pd.DataFrame({"left": lo, "right": hi, "same": same})
    out = out.assign(_sig=sig_payload(sigs, ~same).values)
    if params.confirm == "estimate":
        return out
    assert part is not None
    texts = texts_of(part[text_column])
    score = np.flatnonzero(~same)
    values, offsets = shingle_sets([texts[rows[i]] for i in score], params.shingle_size, params.shingle_unit)
    blobs: list[bytes] = [b""] * len(out)
    for j, i in enumerate(score):
        blobs[i] = values[offsets[j]:offsets[j + 1]].tobytes()
    return out.assign(_shingles=pd.Series(blobs, dtype=object))


def score_at_right(rows: pd.DataFrame, feat: pd.DataFrame, part: pd.DataFrame | None, text_column: str,
                   params: Params) -> pd.DataFrame:
    """At the partition of each pair's right document: every pair to score gets its estimate (and
    exact Jaccard) and whether it reaches the threshold by the chosen confirm mode; same-text pairs
    are confirmed with similarity 1."""
    from dedup.core.minhash import pair_estimates

    if len(rows) == 0:
        return SCORED_META.copy()
    rows = rows.reset_index(drop=True)
    same = rows["same"].to_numpy(bool)
    score = np.flatnonzero(~same)
    n = len(score)
    right_keys = rows["right"].to_numpy(np.int64)
    right_rows = rows_of(feat, right_keys[score])
    sigs = np.concatenate([payload_sigs(rows["_sig"].iloc[score], params.num_perm),
                           signatures_of(feat, params.num_perm, right_rows)])
    estimate = np.ones(len(rows), dtype=np.float64)
    estimate[score] = pair_estimates(sigs, np.arange(n), np.arange(n, 2 * n))
    jaccard = np.full(len(rows), 1.0 if params.confirm == "exact" else np.nan)
    confirmed = np.ones(len(rows), dtype=bool)
    if params.confirm == "exact":
        assert part is not None
        texts = texts_of(part[text_column])
        b_vals, b_off = shingle_sets([texts[r] for r in right_rows], params.shingle_size, params.shingle_unit)
        blobs = rows["_shingles"].iloc[score].tolist()
        lengths = np.fromiter((len(b) // 8 for b in blobs), dtype=np.int64, count=n)
        a_off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=a_off[1:])
        a_vals = np.frombuffer(b"".join(blobs), dtype=np.uint64)
        jaccard[score] = _kernels.sorted_jaccard(a_vals, a_off[:-1], a_off[1:], b_vals, b_off[:-1], b_off[1:])
        confirmed[score] = jaccard[score] >= params.threshold
    else:
        confirmed[score] = estimate[score] >= params.threshold
    return pd.DataFrame({"left": rows["left"].to_numpy(np.int64), "right": right_keys, "same": same,
                         "estimate": estimate.astype(np.float32), "jaccard": jaccard.astype(np.float32),
                         "confirmed": confirmed})
