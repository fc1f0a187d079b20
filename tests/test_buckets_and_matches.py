"""Bucket edges, document keys and closest matches as pure functions of one partition, without a cluster."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from dedup.core.text import texts_of
from dedup.partition import keyspace
from dedup.partition.buckets import KIND_APPROX, KIND_CANDIDATE, KIND_SAME_TEXT, _pairs_within, bucket_edges
from dedup.partition.roots import closest_matches


@given(st.lists(st.integers(1, 6), max_size=8))
def test_pairs_within_groups_is_all_pairs(sizes: list[int]) -> None:
    starts = (np.cumsum(sizes) - np.array(sizes, dtype=np.int64)).astype(np.int64)
    left, right = _pairs_within(starts, np.array(sizes, dtype=np.int64))
    expected = [p for s, m in zip(starts, sizes) for p in itertools.combinations(range(s, s + m), 2)]
    assert sorted(zip(left.tolist(), right.tolist())) == sorted(expected)


def _long(rows: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    band, key, doc, tkey = (np.array(c) for c in zip(*rows))
    return pd.DataFrame({"band": band.astype(np.uint8), "key": key.astype(np.uint64), "doc": doc.astype(np.int64),
                         "tkey": tkey.astype(np.uint64), "tkey2": tkey.astype(np.uint64)})


def test_bucket_edges_collapse_same_text_then_pair_or_star() -> None:
    rows = [(0, 7, d, 1) for d in (5, 3, 9)]  # one text, three docs
    rows += [(0, 7, 4, 2), (0, 7, 8, 3)]  # two more distinct texts in the same bucket
    rows += [(1, 7, 1, 5), (1, 8, 2, 5)]  # equal key in another band, and a lone doc
    e = bucket_edges(_long(rows), max_bucket=3)
    got = {(int(a), int(b), int(k)) for a, b, k in e[["left", "right", "kind"]].to_numpy()}
    assert got == {(3, 5, KIND_SAME_TEXT), (3, 9, KIND_SAME_TEXT),
                   (3, 4, KIND_CANDIDATE), (3, 8, KIND_CANDIDATE), (4, 8, KIND_CANDIDATE)}
    star = bucket_edges(_long(rows), max_bucket=2)
    got = {(int(a), int(b), int(k)) for a, b, k in star[["left", "right", "kind"]].to_numpy()}
    assert {(3, 4, KIND_APPROX), (3, 8, KIND_APPROX)} <= got and not any(k == KIND_CANDIDATE for *_, k in got)
    # the star's centre is the text with the smallest hash (tkey 1, docs 3/5/9: doc 3 represents it)


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(1, 3)), min_size=1, max_size=25),
       st.integers(1, 4))
def test_bucket_edges_are_the_edges_of_each_bucket_alone(rows: list[tuple[int, int, int]], max_bucket: int) -> None:
    """Every bucket's edges depend on that bucket's rows only: a partition's edges are the union
    of its buckets' edges computed one bucket at a time (lone rows, skipped before the sort, make none)."""
    long = _long([(b, k, doc, t) for doc, (b, k, t) in enumerate(rows)])
    got = bucket_edges(long, max_bucket)
    each = [bucket_edges(g.reset_index(drop=True), max_bucket) for _, g in long.groupby(["band", "key"])]
    alone = pd.concat(each, ignore_index=True)
    as_set = {tuple(r) for r in got.to_numpy().tolist()}
    assert len(as_set) == len(got) and as_set == {tuple(r) for r in alone.to_numpy().tolist()}
    assert all(len(bucket_edges(g, max_bucket)) == 0 for _, g in long.groupby(["band", "key"]) if len(g) == 1)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-3, 3), st.integers(0, 1)), max_size=120),
       st.sampled_from([np.uint64, np.int64, np.uint8, np.uint32]))
def test_lex_order_is_a_lexsort_of_unique_rows(rows: list[tuple[int, int, int]], first_type: type) -> None:
    """`lex_order` gives numpy's lexsort for rows made unique by their last column, with runs of equal
    first values short (an insertion sort) and long (above `SHORT_RUN`: a lexsort), signed columns and
    booleans, a 32-bit first column (sorted packed with row numbers) up to its largest value; and the order
    of the rows, not where they were, whatever order they arrived in."""
    from dedup.core.order import SHORT_RUN, lex_order

    rows = rows + [(0, 1, 0)] * (SHORT_RUN + 1 if len(rows) % 2 else 0)  # a run longer than SHORT_RUN
    spread = 1_431_655_765 if first_type is np.uint32 else 1  # 3 x spread = 2**32 - 1
    first = np.array([r[0] * spread for r in rows], dtype=first_type)
    signed = np.array([r[1] for r in rows], dtype=np.int64)
    flag = np.array([r[2] for r in rows], dtype=bool)
    last = np.random.default_rng(len(rows)).permutation(len(rows)).astype(np.int64) - len(rows) // 2
    columns = [first, signed, flag, last]
    assert lex_order(columns).tolist() == np.lexsort(columns[::-1]).tolist()
    perm = np.random.default_rng(7).permutation(len(rows))
    assert last[lex_order(columns)].tolist() == last[perm][lex_order([c[perm] for c in columns])].tolist()


def test_bucket_edges_are_the_same_rows_whatever_order_rows_arrive_in() -> None:
    """Buckets with repeated texts, text hashes that tie on their first half, and buckets too large for
    all pairs give the same edges, row for row, from rows in any order: the rows are put in one order
    (band, key, tkey, tkey2, doc) before any edge is made."""
    rng = np.random.default_rng(3)
    n = 4000
    long = pd.DataFrame({"band": rng.integers(0, 3, n).astype(np.uint8), "key": rng.integers(0, 300, n).astype(np.uint64),
                         "doc": rng.permutation(n).astype(np.int64), "tkey": rng.integers(1, 40, n).astype(np.uint64)})
    long["tkey2"] = (long["tkey"] % np.uint64(3)).astype(np.uint64)
    got = bucket_edges(long, max_bucket=6)
    ordered = long.sort_values(["band", "key", "tkey", "tkey2", "doc"]).reset_index(drop=True)
    for shuffled in (ordered, ordered.iloc[::-1].reset_index(drop=True)):
        pd.testing.assert_frame_equal(got, bucket_edges(shuffled, max_bucket=6))
    assert (got["kind"] == KIND_APPROX).any() and (got["kind"] == KIND_SAME_TEXT).any()


def test_doc_keys_are_partition_and_row() -> None:
    keys = keyspace.doc_keys(3, 4)
    assert keyspace.key_partition(keys).tolist() == [3] * 4 and keyspace.key_row(keys).tolist() == [0, 1, 2, 3]
    assert len(set(keyspace.doc_keys(0, 5)) | set(keys)) == 9


def test_texts_of_rejects_values_that_are_not_text() -> None:
    import pytest

    assert texts_of(pd.Series(["a", None, float("nan"), pd.NA], dtype=object, name="body")) == ["a", None, None, None]
    with pytest.raises(ValueError, match=r"The text column 'body' holds a bytes value \(b'xy'\)"):
        texts_of(pd.Series(["a", b"xy"], dtype=object, name="body"))


def test_large_bucket_star_starts_at_the_smallest_text_hash() -> None:
    """The centre depends on texts only (never on document keys), and left names it, for counting buckets."""
    rows = [(0, 7, 50, 1), (0, 7, 40, 2), (0, 7, 10, 3), (0, 7, 30, 4)]
    e = bucket_edges(_long(rows), max_bucket=2)
    assert sorted(zip(e["left"].tolist(), e["right"].tolist())) == [(50, 10), (50, 30), (50, 40)]
    assert set(e["kind"].tolist()) == {KIND_APPROX}


def test_label_partition_spreads_one_partitions_components() -> None:
    labels = keyspace.doc_keys(3, 10_000)  # the labels of components found in one input partition
    dest = keyspace.label_partition(labels, 7)
    assert dest.min() >= 0 and dest.max() < 7
    counts = np.bincount(dest, minlength=7)
    assert counts.min() > 10_000 / 7 * 0.8  # about even, not all in one
    assert (keyspace.label_partition(labels, 1) == 0).all()


@given(st.data())
def test_closest_matches_depend_on_texts_not_on_which_copies_a_pair_joins(data: st.DataObject) -> None:
    """A member's matched document is the smallest-ranked among the other copies of its text
    (similarity 1) and the best member of every text confirmed against its own, whichever copies
    the confirming pair happened to join (that depends on how the corpus is partitioned)."""
    copies = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=5), label="copies per text")
    n = sum(copies)
    text = np.repeat(np.arange(len(copies)), copies)
    rank = np.array(data.draw(st.permutations(range(n)), label="ranks"), dtype=np.int64)
    doc = np.array(data.draw(st.permutations(range(100, 100 + n)), label="keys"), dtype=np.int64)
    members_of = {t: np.flatnonzero(text == t) for t in range(len(copies))}
    left, right, est = [], [], []
    similarity = {}
    for t, u in itertools.combinations(range(len(copies)), 2):
        if data.draw(st.booleans(), label=f"texts {t} and {u} confirmed"):
            similarity[t, u] = similarity[u, t] = data.draw(st.sampled_from([0.8, 0.85, 0.9, 1.0]))
            a = data.draw(st.sampled_from(members_of[t].tolist()))
            b = data.draw(st.sampled_from(members_of[u].tolist()))
            if data.draw(st.booleans()):
                a, b = b, a
            left.append(doc[a])
            right.append(doc[b])
            est.append(similarity[t, u])
    tkey = (text + 1).astype(np.uint64)
    estimate = np.array(est, dtype=np.float32)
    matched, got_est, got_jac = closest_matches(
        doc, rank, tkey, tkey * np.uint64(7), np.array(left, np.int64), np.array(right, np.int64),
        estimate, estimate, exact=True)
    best = {t: int(m[np.argmin(rank[m])]) for t, m in members_of.items()}
    for i in range(n):
        t = int(text[i])
        options = [(int(rank[j]), j, 1.0) for j in members_of[t] if j != i]
        options += [(int(rank[best[u]]), best[u], similarity[t, u]) for u in members_of if (t, u) in similarity]
        if not options:
            assert matched[i] == -1
            continue
        _, j, s = min(options)
        assert (matched[i], got_est[i], got_jac[i]) == (j, np.float32(s), np.float32(s))


def test_closest_matches_take_the_closer_text_when_two_offer_the_same_id() -> None:
    """An earlier run's indexed near duplicate counts with its root's id: a new document confirmed
    against both the root's text and the near duplicate's is matched to that id with the closer
    pair's similarities, in whichever order the pairs arrive."""
    doc = np.array([10, 20, 30], np.int64)  # a new document, an indexed root, its indexed near duplicate
    rank = np.array([1, 0, 0], np.int64)  # both indexed documents carry the root's id
    tkey = np.array([1, 2, 3], np.uint64)
    for right, jaccard in (([20, 30], [0.85, 0.95]), ([30, 20], [0.95, 0.85])):  # equal estimates
        matched, est, jac = closest_matches(doc, rank, tkey, tkey, np.array([10, 10], np.int64),
                                                   np.array(right, np.int64), np.full(2, 0.9, np.float32),
                                                   np.array(jaccard, np.float32), exact=True)
        assert rank[matched[0]] == 0 and jac[0] == np.float32(0.95) and est[0] == np.float32(0.9)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 15), st.sampled_from(["same", "low bits", "other band"])),
                min_size=1, max_size=30))
def test_a_key_prefix_match_counts_only_where_the_whole_key_does(offers: list[tuple[int, int, str]]) -> None:
    """Format 7 band files hold the upper 32 bits of each key: a new (band, key) takes every indexed
    document with that prefix, and the document's signature then keeps exactly the rows whose whole
    key, in that band, is the new one (the set a whole-key index gives, computed here directly)."""
    import pyarrow as pa

    from dedup.config import Params
    from dedup.core.lsh import band_keys
    from dedup.core.minhash import signatures
    from dedup.storage.index_files import key_prefixes
    from dedup.storage.index_lookup import _bucket_codes, _prefix_matches, verified

    params = Params()
    sigs = signatures([f"indexed document number {i} with some words of its own {i * 7}" for i in range(6)])
    whole = band_keys(sigs, num_bands=params.num_bands, rows_per_band=params.rows_per_band)  # [doc, band]
    docs = np.arange(6, dtype=np.int64)
    bands = pa.table({"key": pa.array(key_prefixes(whole.ravel())), "doc": pa.array(np.repeat(docs, whole.shape[1]))})
    new = []  # (band, key) of this run: a document's own key, its prefix with other low bits, or another band's key
    for d, b, how in offers:
        key = int(whole[d, b])
        new.append((b, key) if how == "same" else (b, key ^ 0x5A5A) if how == "low bits" else ((b + 1) % 16, key))
    keys, which = np.unique(np.array([k for _, k in new], np.uint64), return_inverse=True)
    codes = np.sort(_bucket_codes(which, np.array([b for b, _ in new])))
    rows = _prefix_matches(bands, keys, codes, np.int64(0))
    kept = rows[verified(rows, docs, sigs, params)]
    expect = {(b, k, d) for b, k in set(new) for d in range(6) if int(whole[d, b]) == k}
    assert set(zip(kept["band"].tolist(), kept["key"].tolist(), kept["doc"].tolist())) == expect
    assert len(kept) == len(expect)  # each once
    assert len(rows) >= len(set(new))  # every offer found its document by prefix, true or not
