"""The Dask job on real Parquet files and a real multi-process cluster."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dedup import Params, clusters, contaminated, protected_ngrams
from dedup.job.pipeline import run
from tests.conftest import ASSIGNMENTS_ONLY, write_shards


def _groups(frame: pd.DataFrame) -> list[set[str]]:
    g = frame.groupby("minhash_cluster")["id"].apply(lambda s: set(s.astype(str)))
    return sorted((s for s in g if len(s) > 1), key=min)


def _assignments(out: Path) -> bytes:
    frame = pd.read_parquet(out)
    return frame.sort_values("id")[["id", "minhash_cluster"]].to_csv(index=False).encode()


def _check_accounting(out: Path) -> dict:
    m = json.loads((out / "_dedup.json").read_text())
    assert m["input_rows"] == m["output_rows"] + m["near_duplicates_dropped"] + m["contaminated_dropped"]
    assert len(pd.read_parquet(out)) == m["output_rows"]
    return m


@pytest.mark.parametrize("confirm", ["estimate", "exact"])
def test_pipeline_equals_in_memory_clusters(client, tmp_path: Path, corpus_frame: pd.DataFrame, confirm: str) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 3)
    params = Params(confirm=confirm)
    m = run(str(src), str(tmp_path / "out"), params=params, drop=False)
    _check_accounting(tmp_path / "out")
    got = _groups(pd.read_parquet(tmp_path / "out"))
    expected = clusters(dict(zip(corpus_frame["id"], corpus_frame["text"])), params=params)
    assert got == sorted(expected, key=min)
    assert m["clusters"] == len(expected) and m["approximated_buckets"] == 0


def test_same_assignments_for_any_partitioning_order_and_cluster(client, tmp_path: Path,
                                                                 skewed_frame: pd.DataFrame) -> None:
    """One shard or many, whole or grouped into partitions of 200 rows, or each shard read in row ranges
    of 30 rows (partitions smaller than a file), shuffled rows, client or distributed components,
    two worker processes or one worker's two threads: the same assignments. A bucket of 12 texts
    (more than max_bucket 4) is joined by star edges, so that path is held to it too."""
    from distributed import Client, LocalCluster

    params = Params(max_bucket=4)
    outputs = []
    for shards, rows, components in ((1, 10**6, "client"), (3, 10**6, "client"), (7, 200, "distributed"),
                                     (7, 30, "client")):
        src = write_shards(skewed_frame, tmp_path / f"in{shards}-{rows}", shards)
        m = run(str(src), str(tmp_path / f"out{shards}-{rows}"), params=params, drop=False, partition_rows=rows,
                components=components, **ASSIGNMENTS_ONLY)
        partitions = {10**6: 1, 200: range(2, 7), 30: range(-(-len(skewed_frame) // 30), 29)}[rows]
        assert m["partitions"] in (partitions if isinstance(partitions, range) else [partitions])
        assert m["approximated_buckets"] > 0 and m["components"] == components
        outputs.append(_assignments(tmp_path / f"out{shards}-{rows}"))
    shuffled = skewed_frame.sample(frac=1.0, random_state=3)
    src = write_shards(shuffled, tmp_path / "in-shuffled", 4)
    run(str(src), str(tmp_path / "out-shuffled"), params=params, drop=False, components="distributed",
        partition_rows=60, **ASSIGNMENTS_ONLY)
    outputs.append(_assignments(tmp_path / "out-shuffled"))
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as lc, \
            Client(lc) as threads_client, threads_client.as_current():
        run(str(tmp_path / "in3-1000000"), str(tmp_path / "out-threads"), params=params, drop=False,
            components="distributed", **ASSIGNMENTS_ONLY)
    outputs.append(_assignments(tmp_path / "out-threads"))
    assert all(o == outputs[0] for o in outputs)
    assert outputs[0].count(b"\n") == len(skewed_frame) + 1


def test_drop_keeps_roots_in_input_order_and_mirrors_shards(client, tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 3)
    run(str(src), str(tmp_path / "out"))
    m = _check_accounting(tmp_path / "out")
    parts = sorted((tmp_path / "out").glob("*.parquet"))
    assert len(parts) == 3
    for i, part in enumerate(parts):
        shard = pd.read_parquet(src / f"shard-{i:02d}.parquet")
        kept = pd.read_parquet(part)
        assert (kept["id"] == kept["minhash_cluster"]).all()
        assert list(kept.columns) == ["id", "text", "family", "minhash_cluster"]
        order = shard.reset_index(drop=True).reset_index().set_index("id").loc[kept["id"], "index"].to_numpy()
        assert (np.diff(order) > 0).all()  # row order kept
    assert m["near_duplicates_dropped"] > 50 and m["contaminated_dropped"] == 0


def test_decontamination_in_the_job(client, tmp_path: Path, corpus_frame: pd.DataFrame, protected_file: Path) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 2)
    m = run(str(src), str(tmp_path / "out"), protected=[str(protected_file)], drop=False)
    grams = protected_ngrams(protected_file)
    dirty = {i for i, t in zip(corpus_frame["id"], corpus_frame["text"]) if contaminated(t, grams)}
    assert len(dirty) >= 3
    out = pd.read_parquet(tmp_path / "out")
    assert dirty.isdisjoint(out["id"]) and len(out) == len(corpus_frame) - len(dirty)
    assert m["contaminated_by_file"] == {str(protected_file): len(dirty)}
    _check_accounting(tmp_path / "out")


def test_integer_ids_use_numeric_order(client, tmp_path: Path) -> None:
    text = "one two three four five six seven eight nine ten eleven twelve"
    frame = pd.DataFrame({"doc_no": [10, 9, 100], "body": [text, text.upper(), "something else entirely here"]})
    write_shards(frame, tmp_path / "in", 1)
    run(str(tmp_path / "in"), str(tmp_path / "out"), id_column="doc_no", text_column="body", drop=False)
    out = pd.read_parquet(tmp_path / "out")
    assert out["minhash_cluster"].tolist() == [9, 9, 100]
    assert out["minhash_cluster"].dtype == out["doc_no"].dtype == np.int64


def test_boilerplate_collapses_and_large_buckets_are_reported(client, tmp_path: Path) -> None:
    page = "Cookie notice. " + " ".join(f"word{i}" for i in range(60))
    rng = np.random.default_rng(0)
    near = [page + " " + " ".join(f"tail{i}x{j}" for j in range(2)) for i in range(12)]  # distinct texts, J > 0.9
    other = [" ".join(f"w{x}" for x in rng.integers(0, 10**6, 80)) for _ in range(50)]
    texts = [page] * 2000 + near + other
    frame = pd.DataFrame({"id": [f"id{i:05d}" for i in range(len(texts))], "text": texts})
    write_shards(frame, tmp_path / "in", 4)
    m = run(str(tmp_path / "in"), str(tmp_path / "out"), params=Params(max_bucket=5), drop=False)
    out = pd.read_parquet(tmp_path / "out")
    assert (out.loc[out["id"] < "id02000", "minhash_cluster"] == "id00000").all()
    assert m["approximated_buckets"] > 0 and 5 < m["largest_approximated_bucket"] <= 13
    assert m["largest_cluster"] == 2012
    _check_accounting(tmp_path / "out")


def test_refuses_non_empty_output_and_output_inside_input(client, tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    src = write_shards(corpus_frame.head(50), tmp_path / "in", 1)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("keep me")
    with pytest.raises(ValueError, match="--overwrite"):
        run(str(src), str(out))
    with pytest.raises(ValueError, match="did not write"):
        run(str(src), str(out), overwrite=True)
    assert (out / "old.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="inside the input"):
        run(str(src), str(src / "nested"))
    (out / "old.txt").unlink()
    run(str(src), str(out))
    (out / "stray.txt").write_text("replaced with the output")
    run(str(src), str(out), overwrite=True)
    assert not (out / "stray.txt").exists() and (out / "_dedup.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_missing_column_names_the_columns_found(client, tmp_path: Path) -> None:
    write_shards(pd.DataFrame({"id": ["a"], "body": ["x"]}), tmp_path / "in", 1)
    with pytest.raises(ValueError, match=r"shard-00.parquet: the text column 'text' is missing; "
                                         r"columns found: \['id', 'body'\]"):
        run(str(tmp_path / "in"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_duplicate_ids_raise_before_output(client, tmp_path: Path) -> None:
    frame = pd.DataFrame({"id": ["a", "b", "c"], "text": ["x y", "y z", "z w"]})
    write_shards(frame, tmp_path / "in", 1)
    write_shards(frame.iloc[[1]], tmp_path / "in2", 1)
    (tmp_path / "in2" / "shard-00.parquet").rename(tmp_path / "in" / "shard-99.parquet")
    with pytest.raises(ValueError, match=r"occur more than once, e.g. \['b'\] \('b' in .*shard-00.parquet row 1, "
                                         r"'b' in .*shard-99.parquet row 0\)"):
        run(str(tmp_path / "in"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_decontaminate_only_keeps_columns_and_every_clean_row(client, tmp_path: Path, corpus_frame: pd.DataFrame,
                                                              protected_file: Path) -> None:
    import dask.dataframe as dd

    from dedup.job import pipeline

    src = write_shards(corpus_frame, tmp_path / "in", 2)
    m = run(str(src), str(tmp_path / "out"), protected=[str(protected_file)], near=False)
    out = pd.read_parquet(tmp_path / "out")
    assert list(out.columns) == ["id", "text", "family"]
    assert m["near_duplicates_dropped"] == 0 and len(out) == len(corpus_frame) - m["contaminated_dropped"] > 0
    lazy = pipeline.decontaminate_frame(dd.read_parquet(str(src)), [str(protected_file)])
    assert sorted(lazy.compute()["id"]) == sorted(out["id"])
    tagged = pipeline.near_dedup_frame(dd.read_parquet(str(src)), drop=False).compute()
    assert len(tagged) == len(corpus_frame) and "minhash_cluster" in tagged.columns


def test_features_on_disk_give_identical_output(client, tmp_path: Path, corpus_frame: pd.DataFrame,
                                                protected_file: Path) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 3)
    run(str(src), str(tmp_path / "mem"), protected=[str(protected_file)], drop=False)
    m = run(str(src), str(tmp_path / "disk"), protected=[str(protected_file)], drop=False, features_on_disk=True)
    assert m["features_on_disk"] and not (tmp_path / "disk" / "_features").exists()
    assert _assignments(tmp_path / "disk") == _assignments(tmp_path / "mem")
    _check_accounting(tmp_path / "disk")
