"""The page's what-if table: what each threshold from 0.7 to 0.9 would remove, counted in one task
while the weighed pairs are few, on the cluster beyond (`dedup.job.what_if`): the same counts, against
a plain search of the pairs' components, with and without an earlier output's documents."""

from __future__ import annotations

from pathlib import Path

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.job.pipeline import run
from dedup.job.what_if import removed_on_cluster
from dedup.partition.what_if import removed_at
from tests.conftest import write_shards
from tests.reference import ref_components

THRESHOLDS = (0.7, 0.75, 0.8, 0.85, 0.9)
FIRST_INDEXED = 1_000


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.sampled_from([0.7, 0.72, 0.8, 0.86, 0.95, 1.0]),
                          st.booleans()), max_size=60), st.integers(1, 4))
def test_the_cluster_counts_what_a_union_find_of_the_pairs_counts(pairs: list[tuple[int, int, float, bool]],
                                                                  parts: int) -> None:
    """Keys from 20 up stand for an earlier output's documents: a component holding one loses every
    document of this run, any other all but one; at the run's threshold, its confirmed pairs exactly."""
    first = 20
    rows = [(a, b, s, s >= 0.8 if not odd else s >= 0.8 and a % 3 != 0) for a, b, s, odd in pairs
            if a != b and not (a >= first and b >= first)]
    edges = pd.DataFrame({"left": np.array([r[0] for r in rows], np.int64), "right": np.array([r[1] for r in rows], np.int64),
                          "score": np.array([r[2] for r in rows], np.float32), "confirmed": np.array([r[3] for r in rows], bool)})
    want = [_plain(rows, t, 0.8, first) for t in THRESHOLDS]
    assert removed_at(edges, THRESHOLDS, 0.8, first) == want
    with dask.config.set(scheduler="sync"):
        got = removed_on_cluster(dd.from_pandas(edges, npartitions=parts), max(len(edges), 1), THRESHOLDS, 0.8, first,
                                 parts)
    assert got == want


def _plain(rows: list[tuple[int, int, float, bool]], t: float, run_t: float, first: int) -> int:
    """The rule read plainly: the components of the pairs a run at `t` joins (its confirmed ones at the
    run's own), found by search; all of this run's documents of one holding an earlier output's
    document are removed, all but one of any other's."""
    adjacent: dict[int, set[int]] = {}
    for a, b, s, confirmed in rows:
        if (confirmed if t == run_t else np.float32(s) >= np.float32(t)):
            adjacent.setdefault(a, set()).add(b)
            adjacent.setdefault(b, set()).add(a)
    removed = 0
    for part in ref_components(adjacent, set(adjacent)):
        new = [x for x in part if x < first]
        removed += len(new) if len(new) < len(part) else len(new) - 1
    return removed


def test_a_run_counts_the_same_on_the_client_and_on_the_cluster(client, tmp_path: Path, corpus_frame: pd.DataFrame,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run with the weighed pairs' budget for one task set to none: every pair stays on the
    workers and the table is the same; so with an earlier output's documents (--against)."""
    half = len(corpus_frame) // 2
    first = write_shards(corpus_frame.iloc[:half], tmp_path / "c1", 2)
    second = write_shards(corpus_frame.iloc[half:], tmp_path / "c2", 2)
    run(str(first), str(tmp_path / "r1"))
    tables = {}
    for budget in (10**9, 0):
        monkeypatch.setattr("dedup.job.confirm.WHAT_IF_TASK_PAIRS", budget)
        m = run(str(second), str(tmp_path / f"r2-{budget}"), against=[str(tmp_path / "r1")], dry_run=True)
        tables[budget] = [(r["threshold"], r["removed"]) for r in m["what_if"]]
        assert dict(tables[budget])[0.8] == m["near_duplicates_found"]
    assert tables[0] == tables[10**9]
    assert tables[0][0][1] >= tables[0][-1][1] > 0


def test_each_edge_is_given_its_left_documents_component() -> None:
    """Labels may repeat a document (a star's centre); a document in no labelled edge is its own."""
    from dedup.partition.what_if import with_component

    edges = pd.DataFrame({"left": np.array([5, 9, 7, 40], np.int64), "right": np.array([6, 5, 8, 41], np.int64),
                          "score": np.ones(4, np.float32), "confirmed": np.ones(4, bool)})
    labels = pd.DataFrame({"doc": np.array([5, 5, 9, 7, 6], np.int64), "label": np.array([5, 5, 5, 7, 5], np.int64)})
    got = with_component(edges, labels)
    assert got["component"].tolist() == [5, 5, 7, 40]
    assert got[["left", "right"]].equals(edges[["left", "right"]])
    empty = with_component(edges.iloc[:0], labels.iloc[:0])
    assert empty.empty and list(empty.columns) == [*edges.columns, "component"]
