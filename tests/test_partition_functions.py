"""The per-partition functions (`dedup.partition`), called directly on pandas frames and held to the
plain rule of `dedup.core` where one exists: no Dask, no files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from dedup.config import Params
from dedup.core.lsh import band_keys
from dedup.core.minhash import signatures
from dedup.core.text import TEXT_DTYPE
from dedup.core.unionfind import components
from dedup.partition import codec, keyspace
from dedup.partition.buckets import band_documents, long_form, same_text_edges
from dedup.partition.decisions import attach_roots, row_decisions
from dedup.partition.features import CLEAN, SKIPPED, document_features, mark_skipped, signatures_of
from dedup.partition.roots import component_counts, roots_of_components

PARAMS = Params()
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


def _features(texts: list[str], ids: list[str], partition: int = 0) -> pd.DataFrame:
    part = pd.DataFrame({"id": ids, "text": pd.Series(texts, dtype=TEXT_DTYPE)})
    return document_features(part, "id", "text", PARAMS, None, partition_info={"number": partition})


@given(st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=4, max_size=4), max_size=20))
def test_both_signature_codecs_give_back_what_they_were_given(rows: list[list[int]]) -> None:
    sigs = np.asarray(rows, dtype=np.uint32).reshape(len(rows), 4)
    assert np.array_equal(codec.payload_sigs(codec.sig_payload(sigs), 4), sigs)
    assert np.array_equal(codec.from_fixed_binary(codec.fixed_binary(sigs), 4), sigs)
    assert np.array_equal(codec.from_fixed_binary(pa.chunked_array([codec.fixed_binary(sigs)]), 4), sigs)


@given(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), min_size=1, max_size=12))
def test_features_hold_the_signatures_of_the_plain_rule(docs: list[list[str]]) -> None:
    texts = [" ".join(d) for d in docs]
    feat = _features(texts, [f"d{i}" for i in range(len(texts))], partition=3)
    want = signatures(texts, num_perm=PARAMS.num_perm, seed=PARAMS.seed, shingle_size=PARAMS.shingle_size)
    assert np.array_equal(signatures_of(feat, PARAMS.num_perm), want)
    assert keyspace.key_partition(feat["doc"].to_numpy()).tolist() == [3] * len(texts)
    # equal words, equal text hashes; different words, different ones
    same = pd.Series(texts).duplicated(keep=False).to_numpy()
    assert feat.loc[same, "tkey"].nunique() == pd.Series(texts)[same].nunique()


@given(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=10), min_size=1, max_size=10))
def test_band_rows_are_the_band_keys_of_one_copy_of_each_text(docs: list[list[str]]) -> None:
    texts = [" ".join(d) for d in docs]
    feat = _features(texts, [f"d{i:02d}" for i in range(len(texts))])
    long = long_form(feat, PARAMS)
    reps = band_documents(feat)
    first = {t: i for i, t in reversed(list(enumerate(texts)))}  # the smallest id of each text
    assert sorted(keyspace.key_row(reps).tolist()) == sorted(first.values())
    keys = band_keys(signatures_of(feat, PARAMS.num_perm), num_bands=PARAMS.num_bands,
                     rows_per_band=PARAMS.rows_per_band)
    for doc in reps.tolist():
        got = long[long["doc"] == doc].sort_values("band")["key"].to_numpy()
        assert np.array_equal(got, keys[keyspace.key_row(np.int64(doc))])


def test_same_text_edges_join_each_copy_to_the_smallest_id() -> None:
    feat = _features(["a b c", "x y z", "a b c", "a b c"], ["d3", "d1", "d0", "d2"])
    edges = same_text_edges(feat)
    pairs = {(int(a), int(b)) for a, b in edges[["left", "right"]].to_numpy()}
    assert pairs == {(2, 0), (2, 3)}  # rows of d0 -> d3 and d0 -> d2, by document key (partition 0: the row)


def test_skipped_documents_take_no_part() -> None:
    feat = _features(["a b c", "d e f"], ["x", "y"])
    marked = mark_skipped(feat, pd.DataFrame({"doc": [feat["doc"].iloc[1]], "_id": ["y"]}))
    assert marked["source"].tolist() == [CLEAN, SKIPPED]
    assert marked["tkey"].iloc[1] == 0 and marked["tkey"].iloc[0] != 0
    assert band_documents(marked).tolist() == [feat["doc"].iloc[0]]


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=20))
def test_roots_of_components_are_the_smallest_ids_union_find_gives(pairs: list[tuple[int, int]]) -> None:
    edges = [(a, b) for a, b in pairs if a != b]
    left = np.asarray([a for a, _ in edges], np.int64)
    right = np.asarray([b for _, b in edges], np.int64)
    members, labels = components(left, right)
    if not len(members):
        return
    ids = [f"id{(7 - m) % 8}" for m in range(8)]  # ids in another order than the keys
    rows = pd.DataFrame({"doc": members.astype(np.int64), "label": labels.astype(np.int64),
                         "_id": pd.Series([ids[m] for m in members], dtype=object)})
    got = roots_of_components(rows)
    comp: dict[int, list[int]] = {}
    for m, lab in zip(members.tolist(), labels.tolist()):
        comp.setdefault(lab, []).append(m)
    want = {m: min(ids[x] for x in group) for group in comp.values() for m in group}
    assert dict(zip(got["doc"].tolist(), got["root"].tolist())) == want
    counts = component_counts(got)
    assert int(counts["members"].sum()) == len(members) and int(counts["clusters"].sum()) == len(comp)
    assert int(counts["duplicates"].sum()) == len(members) - len(comp)
    assert int(counts["largest"].max()) == max(len(g) for g in comp.values())


def test_row_decisions_keep_roots_and_clean_rows_only() -> None:
    feat = _features(["a b c", "a b c", "x y z", "p q r"], ["b", "a", "c", "d"])
    feat.loc[3, "source"] = 0  # contaminated
    roots = pd.DataFrame({"doc": feat["doc"].iloc[:2].to_numpy(), "root": ["a", "a"]})
    keep, cluster = row_decisions(feat, roots, drop=True)
    assert keep.tolist() == [False, True, True, False] and cluster.tolist() == ["a", "a", "c", "d"]
    keep, _ = row_decisions(feat, roots, drop=False)
    assert keep.tolist() == [True, True, True, False]
    part = pd.DataFrame({"id": ["b", "a", "c", "d"], "text": ["a b c", "a b c", "x y z", "p q r"]})
    out = attach_roots(part, feat, roots, "id", drop=True)
    assert out["id"].tolist() == ["a", "c"] and out["minhash_cluster"].tolist() == ["a", "c"]
