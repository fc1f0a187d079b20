"""Pure pandas/numpy stages of the pipeline, one partition at a time (no Dask here).

Every function takes and returns plain frames with numpy dtypes, so each stage is testable
without a cluster and safe to shuffle or write (no list, fixed-size-list or object-of-array
columns: those break p2p shuffles and Parquet round trips in current pandas/pyarrow).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dedup.config import Params
from dedup.core import _kernels
from dedup.core.decontam import ProtectedNgrams
from dedup.core.lsh import NO_KEY, band_keys
from dedup.core.minhash import SIGNATURE_CHUNK, SIGNATURE_DTYPE, batch_signatures
from dedup.core.text import encode_batch, encode_column_chunks, texts_of
from dedup.partition.codec import payload_sigs, sig_payload
from dedup.partition.keyspace import NO_INDEX, doc_keys, key_row

KIND_CANDIDATE = 0
"""An edge to confirm: the two documents share a bucket."""
KIND_SAME_TEXT = 1
"""An edge between documents with identical words (Jaccard 1): confirmed by construction."""
KIND_APPROX = 2
"""A candidate edge from a bucket too large for all pairs: from the bucket's centre (its smallest text
hash, so the choice depends on texts only) to each other member; left is the centre."""


CLEAN = -1
"""`source` of a document that overlaps no protected record (>= 0: the record it overlaps)."""
SKIPPED = -2
"""`source` of a document skipped because its id is already in an earlier output's index (--skip-existing)."""


def mark_skipped(feat: pd.DataFrame, skipped: pd.DataFrame) -> pd.DataFrame:
    """Mark the documents keyed in `skipped` (this partition's) as SKIPPED: they take no part in near-dedup."""
    if skipped.empty:
        return feat
    rows = rows_of(feat, skipped["doc"].to_numpy(np.int64))
    out = feat.copy()
    for column, value in (("source", SKIPPED), ("tkey", 0), ("tkey2", 0)):
        values = out[column].to_numpy().copy()
        values[rows] = value
        out[column] = values
    return out


SIG = "sig"
"""The features frame's signature column: each document's num_perm uint32 values as one binary
value (`sig_payload`; `signatures_of` reads them back as a 2-D array). One column instead of
num_perm: every task that builds, slices, measures (dask's sizeof) or pickles a features frame
handles one column, not a hundred and thirty."""


def signatures_of(feat: pd.DataFrame, num_perm: int, rows: NDArray[np.int64] | None = None) -> NDArray[np.uint32]:
    """The signatures of a features frame (of `rows` only, when given), uint32 [n, num_perm]."""
    column = feat[SIG] if rows is None else feat[SIG].iloc[rows]
    return payload_sigs(column, num_perm)


def features_meta(num_perm: int, id_dtype: Any) -> pd.DataFrame:
    cols: dict[str, Any] = {
        "_id": pd.Series(dtype=id_dtype),
        "doc": pd.Series(dtype=np.int64),
        "tkey": pd.Series(dtype=np.uint64),
        "tkey2": pd.Series(dtype=np.uint64),
        "source": pd.Series(dtype=np.int32),
        "source_gram": pd.Series(dtype=np.int64),
    }
    cols[SIG] = sig_payload(np.zeros((0, num_perm), dtype=np.uint32))
    return pd.DataFrame(cols)


def features(part: pd.DataFrame, id_column: str, text_column: str, params: Params,
             protected: ProtectedNgrams | None, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Per document: id, key (partition, row), two text hashes, contamination source and MinHash signature.

    tkey/tkey2: two independent 64-bit hashes of the document's words (0 for a document with
    no words or a contaminated one: such documents take no part in near-dedup).
    source: the smallest index of a protected record it overlaps, -1 when clean; source_gram: the
    smallest index of an n-gram of that record it holds (for reports), -1 when clean.
    """
    n = len(part)
    if protected is not None and len(protected) and params.ngram_size != protected.ngram_size:
        raise ValueError(f"Protected n-grams were built with ngram_size={protected.ngram_size}, "
                         f"but the job runs with ngram_size={params.ngram_size}.")
    sigs = np.empty((n, params.num_perm), dtype=SIGNATURE_DTYPE)
    source, source_gram = np.full(n, -1, dtype=np.int32), np.full(n, -1, dtype=np.int64)
    tkey = np.zeros(n, dtype=np.uint64)
    tkey2 = np.zeros(n, dtype=np.uint64)
    for lo, batch in encode_column_chunks(part[text_column], SIGNATURE_CHUNK):  # each document on its own
        hi = lo + len(batch.word_offsets) - 1
        sigs[lo:hi] = batch_signatures(batch, num_perm=params.num_perm, seed=params.seed,
                                       shingle_size=params.shingle_size, shingle_unit=params.shingle_unit)
        if protected is not None and len(protected):
            source[lo:hi], source_gram[lo:hi] = protected.first_hits(batch)
        # two independent 64-bit hashes of the document's words (xorshift-multiply and FNV-1a)
        has_words = np.flatnonzero(batch.num_words > 0)
        first = batch.word_offsets[:-1][has_words]
        last = batch.word_offsets[1:][has_words] - 1
        mix, fnv = _kernels.text_keys(batch.buf, np.ascontiguousarray(batch.word_start[first], np.int64),
                                      np.ascontiguousarray(batch.word_ends(last), np.int64))
        tkey[lo + has_words] = np.where(mix == 0, 1, mix)  # 0 is kept for "takes no part"
        tkey2[lo + has_words] = np.where(fnv == 0, 1, fnv)
    inactive = source >= 0  # contaminated documents, like those without words (key 0), take no part
    tkey[inactive] = 0
    tkey2[inactive] = 0
    number = partition_info["number"] if partition_info else 0
    return pd.DataFrame({"_id": part[id_column].to_numpy(), "doc": doc_keys(number, n), "tkey": tkey,
                         "tkey2": tkey2, "source": source.astype(np.int32), "source_gram": source_gram,
                         SIG: sig_payload(sigs).array}, index=range(n))


def _local_reps(feat: pd.DataFrame) -> tuple[pd.DataFrame, NDArray[np.int64]]:
    """Active documents and, per document, the key of its representative: the document with the
    smallest id among those with the same words in this partition. If any of them survives, its
    representative does, so the band rows (and an index) always hold the survivor."""
    active = feat[feat["tkey"] != 0]
    rep = active["doc"].to_numpy(dtype=np.int64).copy()
    shared = active.duplicated(["tkey", "tkey2"], keep=False).to_numpy()
    if shared.any():
        grp = active[shared]
        ids = grp["_id"] if pd.api.types.is_integer_dtype(grp["_id"].dtype) else grp["_id"].astype(object)
        order = grp.assign(_k=ids.to_numpy()).sort_values(["tkey", "tkey2", "_k"], kind="stable")
        first = order.groupby(["tkey", "tkey2"], sort=False)["doc"].transform("first")
        rep[shared] = first.reindex(grp.index).to_numpy(dtype=np.int64)
    return active, rep


def band_documents(feat: pd.DataFrame) -> NDArray[np.int64]:
    """Keys of the partition's documents that get band rows (`long_form`): active representatives."""
    active, rep = _local_reps(feat)
    return active["doc"].to_numpy(np.int64)[active["doc"].to_numpy(np.int64) == rep]


def same_text_edges(feat: pd.DataFrame) -> pd.DataFrame:
    """Edges (representative -> doc) between documents with the same words inside one partition."""
    active, rep = _local_reps(feat)
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
    active, rep = _local_reps(feat)
    reps = active[active["doc"].to_numpy() == rep]
    sigs = signatures_of(reps, params.num_perm)
    keys = band_keys(sigs, num_bands=params.num_bands, rows_per_band=params.rows_per_band)
    n, nb = keys.shape
    out = pd.DataFrame({
        "band": np.tile(np.arange(nb, dtype=np.uint8), n),
        "key": keys.ravel(),
        "doc": np.repeat(reps["doc"].to_numpy(dtype=np.int64), nb),
        "tkey": np.repeat(reps["tkey"].to_numpy(dtype=np.uint64), nb),
        "tkey2": np.repeat(reps["tkey2"].to_numpy(dtype=np.uint64), nb),
    })
    return out[out["key"] != NO_KEY].reset_index(drop=True)


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
    df = long[shared].sort_values(["band", "key", "tkey", "tkey2", "doc"], kind="stable")
    band = df["band"].to_numpy()
    key = df["key"].to_numpy()
    tk = df["tkey"].to_numpy()
    tk2 = df["tkey2"].to_numpy()
    doc = df["doc"].to_numpy(dtype=np.int64)
    new_bucket = np.ones(len(df), dtype=bool)
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


def rows_of(feat: pd.DataFrame, keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """Positions of document keys in a features partition (its `doc` column is sorted; an index
    partition holds only the documents a run needs, so positions are looked up, not computed)."""
    return np.searchsorted(feat["doc"].to_numpy(np.int64), keys)


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


def concat_rows(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The rows of `parts` (at least one) in order, with a fresh index. Empty parts are left out, as
    Dask's own concatenation does: pandas can give an empty frame's columns other dtypes."""
    full = [p for p in parts if len(p)] or [parts[0]]
    return pd.concat(full, ignore_index=True) if len(full) > 1 else full[0].reset_index(drop=True)


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


def own_documents(rows: pd.DataFrame, first_indexed: int = NO_INDEX) -> pd.DataFrame:
    """The rows whose `doc` is one of this run's documents: all of them without an earlier index."""
    if first_indexed >= NO_INDEX:
        return rows
    return rows[rows["doc"].to_numpy(np.int64) < first_indexed]


MEMBER_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "label": pd.Series(dtype=np.int64)})

OTHER = "other"
"""In `with_ids` rows for matches: -1 on a member's row; on a pair's row, the key of the document
that `doc` was confirmed against (a pair of different texts)."""


def component_rows_meta(id_meta: pd.Series, matches: bool) -> pd.DataFrame:
    """`with_ids` rows: (doc, label, _id), and for matches the text keys and the pair rows' columns."""
    meta = MEMBER_META.assign(_id=id_meta.iloc[:0])
    if not matches:
        return meta
    return meta.assign(tkey=pd.Series(dtype=np.uint64), tkey2=pd.Series(dtype=np.uint64),
                       **{OTHER: pd.Series(dtype=np.int64)}, estimate=pd.Series(dtype=np.float32),
                       jaccard=pd.Series(dtype=np.float32))


def with_ids(members: pd.DataFrame, feat: pd.DataFrame, scored: pd.DataFrame | None = None) -> pd.DataFrame:
    """(doc, label) rows at their documents' partition, given each document's id.

    With `scored` (this partition's scored pairs: each pair's right document is here), for the
    report's matches: each member's text keys too, and a row per confirmed pair of different texts
    (doc = its right document, `OTHER` = its left one, its similarities, the right document's
    label), so that a component's pairs meet its members (`roots_of_components`)."""
    keys = members["doc"].to_numpy(np.int64)
    at = rows_of(feat, keys)
    out = members[["doc", "label"]].reset_index(drop=True).assign(_id=feat["_id"].to_numpy()[at])
    if scored is None:
        return out
    out = out.assign(tkey=feat["tkey"].to_numpy(np.uint64)[at], tkey2=feat["tkey2"].to_numpy(np.uint64)[at],
                     **{OTHER: np.int64(-1)}, estimate=np.float32(np.nan), jaccard=np.float32(np.nan))
    pairs = scored[scored["confirmed"].to_numpy(bool) & ~scored["same"].to_numpy(bool)]
    right = pairs["right"].to_numpy(np.int64)
    order = np.argsort(keys, kind="stable")
    pos = np.searchsorted(keys[order], right)
    if len(right) and (pos.max() >= len(keys) or not np.array_equal(keys[order][pos], right)):
        raise RuntimeError("A confirmed pair's document has no component label; please report this as a bug.")
    label = members["label"].to_numpy(np.int64)[order][pos]
    n = len(right)
    at = rows_of(feat, right)
    rows = pd.DataFrame({"doc": right, "label": label, "_id": feat["_id"].to_numpy()[at],
                         "tkey": np.zeros(n, np.uint64), "tkey2": np.zeros(n, np.uint64),
                         OTHER: pairs["left"].to_numpy(np.int64), "estimate": pairs["estimate"].to_numpy(np.float32),
                         "jaccard": pairs["jaccard"].to_numpy(np.float32)})
    return concat_rows([out, rows])


def closest_matches(doc: NDArray[np.int64], rank: NDArray[np.int64], tkey: NDArray[np.uint64],
                    tkey2: NDArray[np.uint64], left: NDArray[np.int64], right: NDArray[np.int64],
                    estimate: NDArray[np.float32], jaccard: NDArray[np.float32], exact: bool
                    ) -> tuple[NDArray[np.int64], NDArray[np.float32], NDArray[np.float32]]:
    """Each member's matched document (its position among the members, -1 if none) and that pair's
    estimate and Jaccard, for one component's (or several whole components') members.

    Members with the same words (tkey, tkey2) are one text. A member's matched document is
    the one with the smallest `rank` among the other members of its text (similarity 1) and the
    smallest-ranked member of each text confirmed against its own by a pair (left, right) of
    different texts (that pair's similarities); of equal ranks (an earlier run's indexed near
    duplicate carries its root's id), the higher similarity. Texts, not documents: which copy of a text a pair
    joins depends on where the copies fall, the answer does not (docs/contract.md, report).
    """
    n = len(doc)
    text = pd.DataFrame({"a": tkey, "b": tkey2}).groupby(["a", "b"], sort=False).ngroup().to_numpy()
    order = np.lexsort((rank, text))
    starts = np.flatnonzero(np.r_[True, text[order][1:] != text[order][:-1]]) if n else np.zeros(0, np.int64)
    first = order[starts]  # per text (ngroup numbers them 0, 1, ...: sorted, text t starts at starts[t])
    sizes = np.diff(np.r_[starts, n])
    second = np.where(sizes > 1, order[np.minimum(starts + 1, max(n - 1, 0))], -1)  # its second best
    own = np.where(first[text] != np.arange(n), first[text], second[text])
    # pairs of different texts: each side's text gets the other text's best member
    sorted_doc = np.argsort(doc, kind="stable")
    a = sorted_doc[np.searchsorted(doc[sorted_doc], left)]
    b = sorted_doc[np.searchsorted(doc[sorted_doc], right)]
    apart = text[a] != text[b]
    a, b, est, jac = a[apart], b[apart], estimate[apart], jaccard[apart]
    cand_text = np.r_[text[a], text[b]]
    cand = np.r_[first[text[b]], first[text[a]]]
    cand_est, cand_jac = np.r_[est, est].astype(np.float32), np.r_[jac, jac].astype(np.float32)
    best = np.full(len(first), -1, np.int64)
    best_est = np.full(len(first), np.nan, np.float32)
    best_jac = np.full(len(first), np.nan, np.float32)
    if len(cand):
        # ties of rank: indexed near duplicates count with their root's id (docs/contract.md), so two
        # texts can offer the same id; the closer one is taken, whatever order the rows came in
        o = np.lexsort((-cand_jac, -cand_est, rank[cand], cand_text))
        top = o[np.r_[True, cand_text[o][1:] != cand_text[o][:-1]]]
        best[cand_text[top]], best_est[cand_text[top]], best_jac[cand_text[top]] = cand[top], cand_est[top], cand_jac[top]
    cross = best[text]
    big = np.iinfo(np.int64).max  # the rank of "none"
    use_cross = np.where(cross >= 0, rank[cross], big) < np.where(own >= 0, rank[own], big)
    matched = np.where(use_cross, cross, own)
    same = np.float32(1.0)
    out_est = np.where(use_cross, best_est[text], np.where(own >= 0, same, np.float32(np.nan))).astype(np.float32)
    out_jac = np.where(use_cross, best_jac[text],
                       np.where(own >= 0, same if exact else np.float32(np.nan), np.float32(np.nan))).astype(np.float32)
    return matched, out_est, out_jac


def roots_meta(id_meta: pd.Series, matches: bool) -> pd.DataFrame:
    """`roots_of_components` rows: (doc, root, _id), and with matches (matched, estimate, jaccard)."""
    meta = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "root": id_meta.iloc[:0], "_id": id_meta.iloc[:0]})
    if not matches:
        return meta
    return meta.assign(matched=id_meta.iloc[:0], estimate=pd.Series(dtype=np.float32),
                       jaccard=pd.Series(dtype=np.float32))


def roots_of_components(rows: pd.DataFrame, first_indexed: int = NO_INDEX, exact: bool = False) -> pd.DataFrame:
    """(doc, root) for every member, where root is the smallest id of its component (all of a
    component's rows are in this partition): numeric order for integer ids, string order otherwise.

    Documents of an earlier output's index (keys >= first_indexed) always survive: a component
    holding one has the smallest indexed id as its root, whatever the new ids are. Rows from
    `with_ids` with pairs also give each member its matched document (`closest_matches`) and
    that pair's similarities (Jaccard 1 for identical words when `exact`, else NaN).
    """
    matches = OTHER in rows.columns
    if rows.empty:
        return roots_meta(rows["_id"], matches)
    pairs = None
    if matches:
        other = rows[OTHER].to_numpy(np.int64)
        pairs, rows = rows[other >= 0], rows[other < 0]
    rows = rows.drop_duplicates("doc")
    ids = rows["_id"]
    if not pd.api.types.is_integer_dtype(ids.dtype):
        ids = ids.astype(object)
    doc = rows["doc"].to_numpy(np.int64)
    # ids ranked once (factorize sorts them: numeric or string order), then the smallest rank per
    # label in numpy: a groupby min over Python strings runs a Python loop per component
    codes, uniques = pd.factorize(ids.to_numpy(), sort=True)
    n = max(len(uniques), 1)
    rank = codes.astype(np.int64) + np.where(doc < first_indexed, n, 0)  # indexed documents rank first
    labels, group = np.unique(rows["label"].to_numpy(np.int64), return_inverse=True)
    best = np.full(len(labels), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(best, group, rank)
    root = np.asarray(uniques)[best[group] % n]
    out = pd.DataFrame({"doc": doc, "root": root, "_id": ids.to_numpy()})
    if pairs is None:
        return out
    matched, est, jac = closest_matches(doc, codes.astype(np.int64), rows["tkey"].to_numpy(np.uint64),
                                        rows["tkey2"].to_numpy(np.uint64), pairs[OTHER].to_numpy(np.int64),
                                        pairs["doc"].to_numpy(np.int64), pairs["estimate"].to_numpy(np.float32),
                                        pairs["jaccard"].to_numpy(np.float32), exact)
    if (matched < 0).any():
        raise RuntimeError("A clustered document has no matched document; please report this as a bug.")
    return out.assign(matched=ids.to_numpy()[matched], estimate=est, jaccard=jac)


def component_counts(roots: pd.DataFrame, first_indexed: int = NO_INDEX) -> pd.DataFrame:
    """In one partition of `roots_of_components` output: members and duplicates (this run's documents
    in a cluster, and those that are not its root), clusters, the largest, and duplicates of indexed
    documents."""
    sizes = roots.groupby("root").size() if len(roots) else pd.Series(dtype=np.int64)
    new = roots[roots["doc"].to_numpy(np.int64) < first_indexed]
    dup = new["root"].astype(object).to_numpy() != new["_id"].astype(object).to_numpy()
    indexed_roots = set(roots["root"][roots["doc"].to_numpy(np.int64) >= first_indexed].astype(object))
    of_indexed = int(new["root"].astype(object).isin(indexed_roots).sum()) if indexed_roots else 0
    return pd.DataFrame({"members": [len(new)], "duplicates": [int(dup.sum())], "clusters": [len(sizes)],
                         "largest": [int(sizes.max()) if len(sizes) else 0], "of_indexed": [of_indexed]})


def first_per_record(feat: pd.DataFrame) -> pd.DataFrame:
    """(source, doc, _id) per protected record (as a document's first record) of one features
    partition: its contaminated document with the smallest id (the report's example)."""
    c = feat[feat["source"] >= 0]
    c = c.assign(_k=c["_id"].astype(object)).sort_values(["source", "_k"], kind="stable")
    return c.drop_duplicates("source")[["source", "doc", "_id"]]


def row_decisions(feat: pd.DataFrame, roots: pd.DataFrame | None, drop: bool) -> tuple[NDArray[np.bool_], NDArray[Any]]:
    """Per row of a features partition: keep it?, and its cluster root id (its own id when alone).

    roots: (doc, root) of this partition's documents that are in a cluster of two or more
    (root ids are int64 for integer ids, str otherwise). Contaminated rows are never kept; with
    drop, only roots are.
    """
    own = feat["_id"].to_numpy(dtype=np.int64 if pd.api.types.is_integer_dtype(feat["_id"].dtype) else object)
    cluster = own.copy()
    if roots is not None and len(roots):
        rows = key_row(roots["doc"].to_numpy(np.int64))
        cluster[rows] = roots["root"].to_numpy()
    keep = feat["source"].to_numpy() == CLEAN
    if drop:
        keep &= cluster == own
    return keep, cluster


def attach_roots(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, id_column: str, drop: bool,
                 tag: bool = True) -> pd.DataFrame:
    """Add `minhash_cluster` (the root id, typed like the id column) and drop contaminated rows
    (and non-roots if drop). With tag=False (decontamination only) no column is added."""
    keep, cluster = row_decisions(feat, roots, drop)
    if not tag:
        return part[keep]
    out = part.copy()
    out["minhash_cluster"] = pd.array(cluster, dtype=part[id_column].dtype)
    return out[keep]


def warm_kernels() -> None:
    """Run the features and band keys once on a tiny frame, so a worker loads their compiled kernels now."""
    from dedup.core.text import TEXT_DTYPE

    feat = features(pd.DataFrame({"id": ["a"], "text": pd.Series(["warm up the compiled kernels of dedup"],
                                                                 dtype=TEXT_DTYPE)}), "id", "text", Params(), None)
    long_form(feat, Params())  # the band keys' kernel
