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
from dedup.partition.buckets import KIND_CANDIDATE, KIND_SAME_TEXT, band_documents, long_form, same_text_edges
from dedup.partition.confirm import confirm_routes, graph_pairs, pairs_with_left, score_at_right
from dedup.partition.decisions import attach_roots, row_decisions
from dedup.partition.features import (
    CLEAN,
    document_features,
    first_examples,
    mark_skipped,
    signatures_of,
)
from dedup.partition.roots import OTHER, component_counts, own_documents, roots_of_components, with_ids
from tests.reference import ref_shingles

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
    # some rows of a column (the write's dropped documents, a pair's right ends), repeats and all
    rows = np.arange(len(sigs), dtype=np.int64)[::-2].repeat(2)
    assert np.array_equal(codec.payload_sigs(codec.sig_payload(sigs), 4, rows), sigs[rows])
    # a column whose other rows carry no signature (`present`): its present rows read back
    present = np.arange(len(sigs)) % 3 == 0
    column = codec.sig_payload(sigs, present)
    assert np.array_equal(codec.payload_sigs(column, 4, np.flatnonzero(present)), sigs[present])


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
    assert marked["source"].tolist() == [CLEAN, CLEAN] and marked["skipped"].tolist() == [False, True]
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


def _exact_jaccard(a: str, b: str, k: int) -> float:
    sa, sb = ref_shingles(a, k), ref_shingles(b, k)
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


@given(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), min_size=2, max_size=8),
       st.sampled_from(["estimate", "exact"]))
def test_confirm_scores_each_pair_across_partitions_by_the_plain_rule(docs: list[list[str]], mode: str) -> None:
    """The confirm's two hops done by hand: every pair (a document of partition 0, one of
    partition 1) gets its left payload at partition 0 and is scored at partition 1, to the signature
    estimate and exact Jaccard of the plain rule; a same-text edge is confirmed unscored."""
    params = Params(confirm=mode, threshold=0.5, shingle_size=2, num_perm=64, num_bands=16, rows_per_band=4)
    texts = [" ".join(d) for d in docs]
    half = len(texts) // 2
    parts = [pd.DataFrame({"id": [f"d{i}" for i in rows], "text": pd.Series([texts[i] for i in rows], dtype=TEXT_DTYPE)})
             for rows in (range(half), range(half, len(texts)))]
    feats = [document_features(p, "id", "text", params, None, partition_info={"number": n}) for n, p in enumerate(parts)]
    pairs = [(i, j) for i in range(half) for j in range(half, len(texts))]
    key = [*feats[0]["doc"], *feats[1]["doc"]]
    kinds = [KIND_SAME_TEXT if texts[i] == texts[j] else KIND_CANDIDATE for i, j in pairs]
    edges = pd.DataFrame({"left": [key[i] for i, _ in pairs], "right": [key[j] for _, j in pairs],
                          "kind": np.asarray(kinds, np.uint8), "band": np.zeros(len(pairs), np.uint8)})
    edges = pd.concat([edges, edges.iloc[::2]], ignore_index=True)  # a pair sent by two buckets counts once
    routes = confirm_routes(edges)
    at_left = pairs_with_left(routes, feats[0], parts[0], "text", params)
    scored = score_at_right(at_left, feats[1], parts[1], "text", params)
    assert len(scored) == len(pairs)
    sigs = signatures(texts, num_perm=params.num_perm, seed=params.seed, shingle_size=params.shingle_size)
    got = {(int(r.left), int(r.right)): r for r in scored.itertuples()}
    for i, j in pairs:
        row = got[(key[i], key[j])]
        if texts[i] == texts[j]:
            assert row.same and row.confirmed and row.estimate == 1.0
            continue
        estimate = float(np.mean(sigs[i] == sigs[j]))
        assert not row.same and row.estimate == np.float32(estimate)
        if mode == "exact":
            jaccard = _exact_jaccard(texts[i], texts[j], params.shingle_size)
            assert row.jaccard == np.float32(jaccard) and row.confirmed == (jaccard >= params.threshold)
        else:
            assert np.isnan(row.jaccard) and row.confirmed == (estimate >= params.threshold)
    graph = graph_pairs(scored, feats[1], n_new=2, partition_info={"number": 1})
    want = pd.concat([scored[scored["confirmed"]][["left", "right"]], same_text_edges(feats[1])])
    assert sorted(graph.to_numpy().tolist()) == sorted(want.to_numpy().tolist())


def test_graph_pairs_add_the_partitions_own_same_text_pairs_for_this_runs_documents_only() -> None:
    feat = _features(["a b c", "x y z", "a b c"], ["d0", "d1", "d2"], partition=1)
    scored = pd.DataFrame({"left": np.array([5, 6], np.int64), "right": feat["doc"].iloc[:2].to_numpy(np.int64),
                           "same": [False, False], "estimate": np.float32([0.9, 0.1]),
                           "jaccard": np.float32([np.nan, np.nan]), "confirmed": [True, False]})
    own = graph_pairs(scored, feat, n_new=2, partition_info={"number": 1})
    doc = feat["doc"].to_numpy()
    assert own.values.tolist() == [[5, doc[0]], [doc[0], doc[2]]]
    indexed = graph_pairs(scored, feat, n_new=1, partition_info={"number": 1})  # an earlier output's partition
    assert indexed.values.tolist() == [[5, doc[0]]]


def test_with_ids_gives_members_their_ids_and_the_pairs_that_joined_them() -> None:
    feat = _features(["a b c", "a b d", "x y z"], ["b", "a", "c"])
    doc = feat["doc"].to_numpy(np.int64)
    members = pd.DataFrame({"doc": doc[[1, 0]], "label": [doc[0], doc[0]]})
    plain = with_ids(members, feat)
    assert plain["_id"].tolist() == ["a", "b"] and plain["label"].tolist() == [doc[0], doc[0]]
    scored = pd.DataFrame({"left": [doc[0]], "right": [doc[1]], "same": [False], "estimate": np.float32([0.8]),
                           "jaccard": np.float32([0.75]), "confirmed": [True]})
    rows = with_ids(members, feat, scored)
    pair = rows[rows[OTHER] >= 0]
    assert pair[["doc", OTHER, "_id"]].values.tolist() == [[doc[1], doc[0], "a"]]
    roots = roots_of_components(rows, exact=True)
    assert roots.set_index("_id")[["root", "matched"]].to_dict("index") == {
        "a": {"root": "a", "matched": "b"}, "b": {"root": "a", "matched": "a"}}
    assert roots["jaccard"].tolist() == [np.float32(0.75)] * 2


def test_each_protected_records_example_holds_the_ngram_shown() -> None:
    """A record's example is the smallest-id document among those holding the record's smallest n-gram
    found, whatever record each document is listed under first (the page showed examples that did not
    hold the n-gram shown, and none for a record that was no document's first); partitions combine
    to the same."""
    from dedup.core.decontam import ProtectedNgrams

    first = " ".join(f"alpha{i}" for i in range(14))
    second = " ".join(f"beta{i}" for i in range(13))
    prot = ProtectedNgrams.from_records(["e.jsonl"], [(0, "line 1", [first]), (0, "line 2", [second + " " + first])], 13)
    texts = ["clean words", f"x {second} y", " ".join(first.split()[1:]), f"z {second}", f"{second} {first}"]
    ids = ["e", "d", "c", "b", "a"]
    part = pd.DataFrame({"id": ids, "text": pd.Series(texts, dtype=TEXT_DTYPE)})
    feat = document_features(part, "id", "text", Params(), prot, partition_info={"number": 0})
    got = _examples(part, feat, prot)
    assert sorted(got["source"]) == [0, 1]
    for rec, gram, ident in zip(got["source"], got["gram"], got["_id"]):
        shown = prot.ngram_text(int(gram))
        assert shown in (first, second + " " + first)[rec]
        holding = sorted(i for i, t in zip(ids, texts) if shown in " ".join(t.lower().split()))
        assert ident == holding[0]  # the smallest id among the documents holding the n-gram shown
    halves = []
    for number, rows in enumerate((slice(0, 2), slice(2, 5))):
        half = part.iloc[rows].reset_index(drop=True)
        halves.append(_examples(half, document_features(half, "id", "text", Params(), prot,
                                                        partition_info={"number": number}), prot))
    columns = ["source", "gram", "_id"]
    assert first_examples(pd.concat(halves))[columns].values.tolist() == got[columns].values.tolist()


def _examples(part: pd.DataFrame, feat: pd.DataFrame, prot: object) -> pd.DataFrame:
    """A partition's examples per record (`hit_examples`), from its hits."""
    from dedup.partition.contamination import hit_examples, partition_hits

    return hit_examples(partition_hits(part, feat, prot, "text"), feat, prot)  # type: ignore[arg-type]


def test_own_documents_are_those_before_the_first_indexed_key() -> None:
    assert own_documents(pd.DataFrame({"doc": np.int64([1, 9, 20])}), first_indexed=9)["doc"].tolist() == [1]


def test_exact_confirm_carries_each_left_document_once_to_each_partition_that_scores_it() -> None:
    """Three documents each paired with 40 near copies in two other partitions: 6 carriers travel,
    not 240 copies of shingles, and every pair gets the plain rule's exact Jaccard."""
    params = Params(confirm="exact", threshold=0.5, shingle_size=2, num_perm=64, num_bands=16, rows_per_band=4)
    lefts = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(3)]
    rights = [[f"{lefts[j % 3]} extra{p}{j}" for j in range(20)] for p in (1, 2)]
    parts = [pd.DataFrame({"id": [f"p{n}-{i}" for i in range(len(t))], "text": pd.Series(t, dtype=TEXT_DTYPE)})
             for n, t in enumerate([lefts, *rights])]
    feats = [document_features(p, "id", "text", params, None, partition_info={"number": n}) for n, p in enumerate(parts)]
    pairs = [(i, n, j) for i in range(3) for n in (1, 2) for j in range(20)]
    routes = pd.DataFrame({"left": [feats[0]["doc"].iloc[i] for i, _, _ in pairs],
                           "right": [feats[n]["doc"].iloc[j] for _, n, j in pairs], "same": False})
    at_left = pairs_with_left(routes, feats[0], parts[0], "text", params)
    assert int(at_left["_carrier"].sum()) == 6 and (at_left[~at_left["_carrier"]]["_shingles"] == b"").all()
    for n in (1, 2):
        here = at_left[keyspace.key_partition(at_left["right"].to_numpy()) == n]
        scored = score_at_right(here, feats[n], parts[n], "text", params)
        assert len(scored) == 60
        for row in scored.itertuples():
            i, j = keyspace.key_row(np.int64(row.left)), keyspace.key_row(np.int64(row.right))
            assert row.jaccard == np.float32(_exact_jaccard(lefts[i], rights[n - 1][j], params.shingle_size))
