"""The Dask stages (`dedup.job`), run on the synchronous scheduler, give what the per-partition
functions (`dedup.partition`) give when the whole corpus is one partition, whatever the
partitioning: each stage's rows and counts, then the roots."""

from __future__ import annotations

from pathlib import Path

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dedup.config import Params
from dedup.core.text import TEXT_DTYPE
from dedup.core.unionfind import components
from dedup.job.buckets import buckets
from dedup.job.components import components_on_client, components_on_cluster
from dedup.job.confirm import confirm
from dedup.job.features import feature_counts, features
from dedup.job.roots import roots
from dedup.partition.buckets import bucket_edges, long_form
from dedup.partition.confirm import confirm_routes, graph_pairs, pairs_with_left, score_at_right
from dedup.partition.features import document_features, signatures_of
from dedup.partition.roots import roots_of_components, with_ids

LOCAL = {"scheduler": "sync", "dataframe.shuffle.method": "tasks", "dataframe.convert-string": False}
"""The synchronous scheduler, and ids as the job reads them (Python strings, not dask's string dtype)."""
PARAMS = Params(max_bucket=4)


@pytest.fixture(scope="module")
def documents(skewed_frame: pd.DataFrame) -> pd.DataFrame:
    """The §7 corpus with a bucket too large for all pairs, texts typed as the job reads them."""
    return pd.DataFrame({"id": skewed_frame["id"], "text": skewed_frame["text"].astype(TEXT_DTYPE)})


def _by_hand(part: pd.DataFrame, params: Params) -> dict[str, pd.DataFrame]:
    """Every stage by the per-partition functions, the whole corpus as one partition."""
    feat = document_features(part, "id", "text", params, None, partition_info={"number": 0})
    edges = bucket_edges(long_form(feat, params), params.max_bucket)
    scored = score_at_right(pairs_with_left(confirm_routes(edges), feat, part, "text", params), feat, part, "text",
                            params)
    graph = graph_pairs(scored, feat, n_new=1, partition_info={"number": 0})
    members, labels = components(graph["left"].to_numpy(np.int64), graph["right"].to_numpy(np.int64))
    rows = with_ids(pd.DataFrame({"doc": members.astype(np.int64), "label": labels.astype(np.int64)}), feat)
    return {"feat": feat, "edges": edges, "scored": scored, "roots": roots_of_components(rows)}


def _ids(pairs: pd.DataFrame, feat: pd.DataFrame, *columns: str) -> set[tuple[str, ...]]:
    """Rows of document keys as rows of ids (keys depend on the partitioning, ids do not)."""
    by_key = dict(zip(feat["doc"].tolist(), feat["_id"].tolist()))
    return {tuple(by_key[int(v)] for v in row) for row in pairs[list(columns)].to_numpy()}


@pytest.mark.parametrize("npartitions,confirm_mode", [(1, "estimate"), (3, "estimate"), (7, "estimate"), (1, "exact"),
                                                      (5, "exact")])
def test_stages_on_dask_give_what_the_partition_functions_give(documents: pd.DataFrame, npartitions: int,
                                                               confirm_mode: str) -> None:
    params = Params(max_bucket=4, confirm=confirm_mode)
    want = _by_hand(documents, params)
    with dask.config.set(LOCAL):
        ddf = dd.from_pandas(documents, npartitions=npartitions, sort=False)
        feat, lazy = features(ddf, id_column="id", text_column="text", params=params, protected=None, features_dir=None)
        fc = feature_counts(lazy.compute())
        assert (fc.rows, fc.contaminated, fc.null_ids) == (len(documents), 0, 0)
        got_feat = feat.compute()
        assert np.array_equal(signatures_of(got_feat, params.num_perm), signatures_of(want["feat"], params.num_perm))
        assert got_feat["tkey"].tolist() == want["feat"]["tkey"].tolist()

        edges, _, b = buckets(feat, params)
        got_edges = edges.compute()
        assert b.edges == len(got_edges) and b.approximated_buckets >= 1
        if npartitions == 1:  # same-text copies collapse per partition: the edges differ, the clusters do not
            assert _ids(got_edges, got_feat, "left", "right") == _ids(want["edges"], want["feat"], "left", "right")

        graph, scored, c = confirm(edges, feat, ddf, text_column="text", params=params, edge_rows=b.edges)
        got_scored = scored.compute()
        candidates = want["scored"][~want["scored"]["same"]]
        assert c.candidate_pairs == len(got_scored[~got_scored["same"]])
        if npartitions == 1:
            assert c.candidate_pairs == len(candidates)
            assert c.confirmed_pairs == int(candidates["confirmed"].sum())

        labels = components_on_client(graph, feat.npartitions)
        placed, r = roots(labels, feat, placed=True, edge_rows=c.graph_edges)
        got_roots = placed.compute()
    by_doc = dict(zip(got_feat["doc"].tolist(), got_feat["_id"].tolist()))
    got = dict(zip((by_doc[int(d)] for d in got_roots["doc"]), got_roots["root"]))
    assert got == dict(zip(want["roots"]["_id"], want["roots"]["root"]))
    assert r.duplicates == int((want["roots"]["root"] != want["roots"]["_id"]).sum())
    assert r.clusters == want["roots"]["root"].nunique()
    # every root row is at its document's own partition, for the write
    for i in range(placed.npartitions):
        piece = placed.partitions[i].compute(scheduler="sync")
        assert np.isin(piece["doc"].to_numpy(), feat.partitions[i].compute(scheduler="sync")["doc"].to_numpy()).all()


def test_components_on_the_cluster_label_the_job_graph_as_the_client_does(documents: pd.DataFrame) -> None:
    with dask.config.set(LOCAL):
        ddf = dd.from_pandas(documents, npartitions=4, sort=False)
        feat, _ = features(ddf, id_column="id", text_column="text", params=PARAMS, protected=None, features_dir=None)
        edges, _, b = buckets(feat, PARAMS)
        graph, _, _ = confirm(edges, feat, ddf, text_column="text", params=PARAMS, edge_rows=b.edges)
        client = components_on_client(graph, feat.npartitions).compute()
        cluster, rounds = components_on_cluster(graph, feat.npartitions)
        cluster = cluster.compute()
    assert rounds >= 1
    assert dict(zip(client["doc"], client["label"])) == dict(zip(cluster["doc"], cluster["label"]))


def test_features_on_disk_are_the_features_in_memory(documents: pd.DataFrame, tmp_path: Path) -> None:
    with dask.config.set(LOCAL):
        ddf = dd.from_pandas(documents, npartitions=3, sort=False)
        memory, _ = features(ddf, id_column="id", text_column="text", params=PARAMS, protected=None, features_dir=None)
        disk, _ = features(ddf, id_column="id", text_column="text", params=PARAMS, protected=None,
                           features_dir=str(tmp_path / "features"))
        assert disk.npartitions == 3
        pd.testing.assert_frame_equal(disk.compute(), memory.compute())
    assert sorted(p.name for p in (tmp_path / "features").iterdir())[0] == "part-000000.parquet"
