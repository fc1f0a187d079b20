"""The confirm stage, per partition: bucket edges as distinct pairs, the left document's payload attached at
its partition, the pair scored at its right document's partition, and the graph's edges."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dedup.config import Params
from dedup.core import _kernels
from dedup.core.order import lex_order
from dedup.core.text import encode_batch, texts_of
from dedup.partition.buckets import KIND_SAME_TEXT, same_text_edges
from dedup.partition.codec import payload_sigs, sig_payload
from dedup.partition.features import signatures_of
from dedup.partition.keyspace import OWN, Placement
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
    """Distinct (left, right, same) rows, sorted (`lex_order`, much faster than np.unique(axis=0))."""
    order = lex_order([lo, hi, same])
    lo, hi, same = lo[order], hi[order], same[order]
    keep = np.ones(len(lo), dtype=bool)
    keep[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1]) | (same[1:] != same[:-1])
    return pd.DataFrame({"left": lo[keep], "right": hi[keep], "same": same[keep].astype(bool)})


CARRIER = "_carrier"
"""With exact Jaccard, the rows routed to the right documents' partitions are of two kinds: a pair
(no payload), and a carrier, one per left document and destination partition, holding that
document's signature and shingle hashes. A document's shingles travel once to each partition
that scores it, not once per pair: memory grows with the documents, not with their pairs."""


def left_payload_meta(params: Params) -> pd.DataFrame:
    cols: dict[str, Any] = {"left": pd.Series(dtype=np.int64), "right": pd.Series(dtype=np.int64),
                            "same": pd.Series(dtype=bool)}
    cols["_sig"] = sig_payload(np.zeros((0, params.num_perm), dtype=np.uint32))
    if params.confirm == "exact":
        cols["_shingles"] = pd.Series(dtype=object)
        cols[CARRIER] = pd.Series(dtype=bool)
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


NEAR_META = pd.DataFrame({"left": pd.Series(dtype=np.int64), "right": pd.Series(dtype=np.int64),
                          "estimate": pd.Series(dtype=np.float32), "jaccard": pd.Series(dtype=np.float32),
                          "confirmed": pd.Series(dtype=bool), "distance": pd.Series(dtype=np.float64)})


def nearest_threshold(scored: pd.DataFrame, column: str, threshold: float, k: int, n_new: int | None = None
                      ) -> pd.DataFrame:
    """The `k` scored candidate pairs (not same-text) nearest the threshold by `column` on each side
    (confirmed, and not), of this run's documents only (keys in partitions below `n_new`), the
    nearest first, ties by keys: the page's pairs to tune by (`NEAR_META`)."""
    from dedup.partition.keyspace import key_partition

    cand = scored[~scored["same"].to_numpy(bool)]
    if n_new is not None and len(cand):
        own = (key_partition(cand["left"].to_numpy(np.int64)) < n_new) & \
            (key_partition(cand["right"].to_numpy(np.int64)) < n_new)
        cand = cand[own]
    distance = np.abs(cand[column].to_numpy(np.float64) - threshold)
    cand = cand.assign(distance=distance).sort_values(["distance", "left", "right"], kind="stable")
    out = cand.groupby("confirmed", sort=True).head(k)
    return out[list(NEAR_META.columns)].reset_index(drop=True)


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


def blob_jaccard(blobs: list[bytes], left_at: NDArray[np.int64], b_vals: NDArray[np.uint64],
                 b_off: NDArray[np.int64], right_at: NDArray[np.int64]) -> NDArray[np.float64]:
    """Exact Jaccard of each pair: the left document's shingle set as a blob of sorted uint64 hashes
    (`blobs[left_at[i]]`, as carriers hold them) against the right one's (`shingle_sets`' values and
    offsets, at `right_at[i]`)."""
    lengths = np.fromiter((len(b) // 8 for b in blobs), dtype=np.int64, count=len(blobs))
    a_off = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=a_off[1:])
    a_vals = np.frombuffer(b"".join(blobs), dtype=np.uint64)
    result: NDArray[np.float64] = _kernels.sorted_jaccard(a_vals, a_off[left_at], a_off[left_at + 1],
                                                          b_vals, b_off[right_at], b_off[right_at + 1])
    return result


def pairs_with_left(routes: pd.DataFrame, feat: pd.DataFrame, part: pd.DataFrame | None, text_column: str,
                    params: Params, placement: Placement = OWN) -> pd.DataFrame:
    """At the partition of each pair's left document: one row per distinct pair (`confirm_routes`
    rows), with what scoring needs from the left side: its signature on each pair to score, or,
    with exact Jaccard, on a `CARRIER` row per left document and destination partition (by
    `placement` of the right document) with its shingle hashes too."""
    if routes.empty:
        return left_payload_meta(params)
    routes = _distinct_routes(routes["left"].to_numpy(np.int64), routes["right"].to_numpy(np.int64),
                              routes["same"].to_numpy(bool))  # distinct across the bucket ranges that sent them
    lo, hi = routes["left"].to_numpy(np.int64), routes["right"].to_numpy(np.int64)
    same = routes["same"].to_numpy(bool)
    if params.confirm == "estimate":
        sigs = signatures_of(feat, params.num_perm, rows_of(feat, lo))
        return pd.DataFrame({"left": lo, "right": hi, "same": same}).assign(_sig=sig_payload(sigs, ~same).values)
    assert part is not None
    score = np.flatnonzero(~same)
    # one carrier per (left document, destination partition), routed with the smallest right key there
    dest = placement(hi[score])
    order = np.lexsort((hi[score], dest, lo[score]))
    s_lo, s_hi, s_dest = lo[score][order], hi[score][order], dest[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (s_lo[1:] != s_lo[:-1]) | (s_dest[1:] != s_dest[:-1])
    c_lo, c_hi = s_lo[first], s_hi[first]
    docs, inverse = np.unique(rows_of(feat, c_lo), return_inverse=True)
    values, offsets = shingle_sets(texts_of(part[text_column].iloc[docs]), params.shingle_size, params.shingle_unit)
    blobs = [values[offsets[d]:offsets[d + 1]].tobytes() for d in range(len(docs))]
    sigs = signatures_of(feat, params.num_perm, docs)[inverse]
    n, m = len(lo), len(c_lo)
    pairs = pd.DataFrame({"left": lo, "right": hi, "same": same,
                          "_sig": sig_payload(np.zeros((n, params.num_perm), np.uint32), np.zeros(n, bool)).values,
                          "_shingles": pd.Series([b""] * n, dtype=object), CARRIER: np.zeros(n, bool)})
    carriers = pd.DataFrame({"left": c_lo, "right": c_hi, "same": np.zeros(m, bool), "_sig": sig_payload(sigs).values,
                             "_shingles": pd.Series([blobs[d] for d in inverse], dtype=object),
                             CARRIER: np.ones(m, bool)})
    return concat_rows([pairs, carriers])


def score_at_right(rows: pd.DataFrame, feat: pd.DataFrame, part: pd.DataFrame | None, text_column: str,
                   params: Params) -> pd.DataFrame:
    """At the partition of each pair's right document: every pair to score gets its estimate (and
    exact Jaccard) and whether it reaches the threshold by the chosen confirm mode; same-text pairs
    are confirmed with similarity 1. Each right document's signature and shingles are taken once,
    however many pairs it is in; with exact Jaccard, each left document's come once, on its carrier."""
    from dedup.core.minhash import pair_estimates

    if len(rows) == 0:
        return SCORED_META.copy()
    rows = rows.reset_index(drop=True)
    exact = params.confirm == "exact"
    carriers = None
    if exact:
        is_carrier = rows[CARRIER].to_numpy(bool)
        carriers, rows = rows[is_carrier], rows[~is_carrier].reset_index(drop=True)
    same = rows["same"].to_numpy(bool)
    score = np.flatnonzero(~same)
    n = len(score)
    right_keys = rows["right"].to_numpy(np.int64)
    right_docs, right_at = np.unique(rows_of(feat, right_keys[score]), return_inverse=True)
    if carriers is None:
        left_sigs, left_at = payload_sigs(rows["_sig"].iloc[score], params.num_perm), np.arange(n)
    else:
        keys, first = np.unique(carriers["left"].to_numpy(np.int64), return_index=True)
        carriers = carriers.iloc[first]
        left_keys = rows["left"].to_numpy(np.int64)[score]
        left_at = np.searchsorted(keys, left_keys)
        if n and (left_at.max() >= len(keys) or not np.array_equal(keys[left_at], left_keys)):
            raise RuntimeError("A pair to score arrived without its left document; please report this as a bug.")
        left_sigs = payload_sigs(carriers["_sig"], params.num_perm)
    sigs = np.concatenate([left_sigs, signatures_of(feat, params.num_perm, right_docs)])
    estimate = np.ones(len(rows), dtype=np.float64)
    estimate[score] = pair_estimates(sigs, left_at, len(left_sigs) + right_at)
    jaccard = np.full(len(rows), 1.0 if exact else np.nan)
    confirmed = np.ones(len(rows), dtype=bool)
    if carriers is not None:
        assert part is not None
        b_vals, b_off = shingle_sets(texts_of(part[text_column].iloc[right_docs]), params.shingle_size,
                                     params.shingle_unit)
        jaccard[score] = blob_jaccard(carriers["_shingles"].tolist(), left_at, b_vals, b_off, right_at)
        confirmed[score] = jaccard[score] >= params.threshold
    else:
        confirmed[score] = estimate[score] >= params.threshold
    return pd.DataFrame({"left": rows["left"].to_numpy(np.int64), "right": right_keys, "same": same,
                         "estimate": estimate.astype(np.float32), "jaccard": jaccard.astype(np.float32),
                         "confirmed": confirmed})
