"""Connected components on the cluster (large-star / small-star) equal the client's union-find."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup import components
from dedup.job.components import components_on_client, components_on_cluster
from dedup.partition import ccstar

LOCAL = {"scheduler": "sync", "dataframe.shuffle.method": "tasks"}


def _labels(left: list[int], right: list[int], npartitions: int, where: str) -> dict[int, int]:
    frame = pd.DataFrame({"left": np.asarray(left, np.int64), "right": np.asarray(right, np.int64)})
    graph = dd.from_pandas(frame, npartitions=npartitions, sort=False)
    if where == "cluster":
        labels, _ = components_on_cluster(graph, npartitions)
    else:
        labels = components_on_client(graph, npartitions)
    got = labels.compute()
    assert not got["doc"].duplicated().any() or (got.groupby("doc")["label"].nunique() == 1).all()
    return dict(zip(got["doc"].tolist(), got["label"].tolist()))


def _expected(left: list[int], right: list[int]) -> dict[int, int]:
    members, roots = components(np.asarray(left, np.int64), np.asarray(right, np.int64))
    return dict(zip(members.tolist(), roots.tolist()))


edges = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=80)


@settings(max_examples=30)
@given(edges, st.integers(1, 4))
def test_cluster_components_equal_the_union_find_on_random_graphs(pairs: list[tuple[int, int]], npartitions: int) -> None:
    left, right = [a for a, _ in pairs], [b for _, b in pairs]
    with dask.config.set(LOCAL):
        got = _labels(left, right, npartitions, "cluster")
    expected = {k: v for k, v in _expected(left, right).items()}
    assert got == {k: v for k, v in expected.items() if k in got}
    assert set(got) == {k for a, b in pairs if a != b for k in (a, b)}  # self loops alone make no component


def _path(order: list[int]) -> tuple[list[int], list[int]]:
    return order[:-1], order[1:]


WORST = {
    "path ascending": _path(list(range(300))),
    "path descending": _path(list(range(300))[::-1]),
    "path with alternating ids": _path([i // 2 if i % 2 == 0 else 299 - i // 2 for i in range(300)]),
    "star around the largest id": ([299] * 299, list(range(299))),
    "two paths and a triangle": ([0, 1, 2, 10, 11, 20, 21, 22], [1, 2, 3, 11, 12, 21, 22, 20]),
}


@pytest.mark.parametrize("case", list(WORST))
def test_cluster_components_on_worst_cases_for_rounds(case: str) -> None:
    left, right = WORST[case]
    with dask.config.set(LOCAL):
        assert _labels(left, right, 3, "cluster") == _expected(left, right)
        assert _labels(left, right, 2, "client") == _expected(left, right)


def test_cluster_components_on_a_real_cluster(client) -> None:
    rng = np.random.default_rng(5)
    left, right = rng.integers(0, 2000, 1500).tolist(), rng.integers(0, 2000, 1500).tolist()
    left += WORST["path with alternating ids"][0]
    right += WORST["path with alternating ids"][1]
    assert _labels(left, right, 4, "cluster") == _labels(left, right, 4, "client") == _expected(left, right)


def test_star_steps() -> None:
    edges = ccstar.normalised(np.array([3, 1, 2]), np.array([1, 2, 2]))
    assert edges.to_numpy().tolist() == [[1, 3], [1, 2]]
    adj = ccstar.both_directions(edges)
    # large-star at node 1 (neighbours 2, 3): both already point at 1; at 2 and 3 nothing is larger
    assert sorted(map(tuple, ccstar.large_star(adj).to_numpy().tolist())) == [(1, 2), (1, 3)]
    # small-star at 3 with smaller neighbours {1, 2}: both go to 1
    small = ccstar.small_star(pd.DataFrame({"a": [1, 2], "b": [3, 3]}))
    assert sorted(map(tuple, small.to_numpy().tolist())) == [(1, 2), (1, 3)]
    assert ccstar.checksum(adj)["count"].iloc[0] == 2
