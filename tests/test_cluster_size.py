"""`--cluster-size`: every row written carries how many input documents its cluster holds (1 alone),
the same whatever the partitioning, equal to the rows a cluster has with --keep-duplicates."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.job.pipeline import run
from dedup.partition.roots import SIZE, roots_of_components
from tests.conftest import ASSIGNMENTS_ONLY, DEDUP, run_command, write_shards

FIRST_INDEXED = 1_000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=40), st.randoms())
def test_sizes_count_this_runs_documents_and_an_indexed_root(members: list[tuple[int, bool]], rnd: object) -> None:
    """Against a plain count: a component's size is its documents of this run, plus one when its root
    is an earlier output's document (which always wins)."""
    docs = [(FIRST_INDEXED + i if indexed else i, label) for i, (label, indexed) in enumerate(members)]
    rnd.shuffle(docs)  # type: ignore[attr-defined]
    rows = pd.DataFrame({"doc": np.array([d for d, _ in docs], np.int64),
                         "label": np.array([lab for _, lab in docs], np.int64),
                         "_id": [f"id-{d:05d}" for d, _ in docs]})
    got = roots_of_components(rows, FIRST_INDEXED, sizes=True)
    own = Counter(lab for d, lab in docs if d < FIRST_INDEXED)
    indexed = {lab for d, lab in docs if d >= FIRST_INDEXED}
    want = {d: own[lab] + (lab in indexed) for d, lab in docs}
    assert dict(zip(got["doc"], got[SIZE])) == want
    assert got[SIZE].dtype == np.int64


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, corpus_frame: pd.DataFrame) -> Path:
    return write_shards(corpus_frame, tmp_path_factory.mktemp("sizes") / "in", 5)


def test_sizes_are_the_rows_of_each_cluster_whatever_the_partitioning(client, shards: Path, tmp_path: Path) -> None:
    """With --keep-duplicates, `minhash_cluster_size` equals the rows of its `minhash_cluster`; the kept
    rows of a default run carry the same sizes; both at 1 and at several partitions."""
    tagged = {}
    for rows in (100, 25_000):
        out = tmp_path / f"tagged-{rows}"
        run(str(shards), str(out), drop=False, cluster_size=True, partition_rows=rows, **ASSIGNMENTS_ONLY)
        tagged[rows] = pd.read_parquet(out).sort_values("id").reset_index(drop=True)
    t = tagged[100]
    assert t["minhash_cluster_size"].dtype == np.int64
    counts = t.groupby("minhash_cluster")["id"].transform("size")
    assert (t["minhash_cluster_size"] == counts).all()
    assert (t["minhash_cluster_size"] > 1).any() and (t["minhash_cluster_size"] == 1).any()
    assert t.equals(tagged[25_000])
    run(str(shards), str(tmp_path / "dropped"), cluster_size=True, partition_rows=100)
    kept = pd.read_parquet(tmp_path / "dropped")
    assert list(kept.columns)[-2:] == ["minhash_cluster", "minhash_cluster_size"]
    size_of = dict(zip(t["minhash_cluster"], t["minhash_cluster_size"]))
    assert (kept["minhash_cluster_size"] == kept["minhash_cluster"].map(size_of)).all()
    assert kept["minhash_cluster_size"].sum() == len(t)


def test_cli_cluster_size_and_a_column_of_that_name(shards: Path, tmp_path: Path) -> None:
    got = run_command([*DEDUP, "near", str(shards), str(tmp_path / "out"), "--threads", "2", "--cluster-size"],
                      timeout=240)
    assert got.returncode == 0, got.stderr
    assert pd.read_parquet(tmp_path / "out")["minhash_cluster_size"].min() >= 1
    taken = tmp_path / "taken"
    taken.mkdir()
    frame = pd.read_parquet(shards).assign(minhash_cluster_size=1)
    frame.to_parquet(taken / "a.parquet", index=False)
    bad = run_command([*DEDUP, "near", str(taken), str(tmp_path / "out2"), "--threads", "2", "--cluster-size"],
                      timeout=240)
    assert bad.returncode == 2 and "already has a 'minhash_cluster_size' column" in bad.stderr, bad.stderr
