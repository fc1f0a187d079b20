"""The scale-out job: confirm, components and roots on the workers give exactly the in-memory answer.

Each stage runs under the synchronous scheduler and on a real 2-process LocalCluster, at 1, 3
and 7 partitions, with client and distributed components, estimate and exact confirmation, and
an oversized bucket; outputs are compared byte for byte.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import dask
import dask.dataframe as dd
import pandas as pd
import pytest

from dedup import Params, clusters
from dedup.job.pipeline import process, run
from tests.conftest import write_shards

LOCAL = {"scheduler": "sync", "dataframe.shuffle.method": "tasks"}
@pytest.fixture(scope="module")
def frame(skewed_frame: pd.DataFrame) -> pd.DataFrame:
    return skewed_frame


def _groups(out: pd.DataFrame) -> list[set[str]]:
    g = out.groupby("minhash_cluster")["id"].apply(set)
    return sorted((s for s in g if len(s) > 1), key=min)


MODES = [("estimate", "client"), ("estimate", "distributed"), ("exact", "distributed")]
CASES = [("sync", n, *mode) for n in (1, 3, 7) for mode in MODES] + [  # every case without a cluster, and
    ("cluster", 1, "estimate", "client"), ("cluster", 3, "exact", "distributed"),  # a spread of them on one
    ("cluster", 7, "estimate", "distributed"), ("cluster", 7, "estimate", "client")]


@pytest.mark.parametrize(("where", "npartitions", "confirm", "components"), CASES)
def test_stages_equal_the_in_memory_reference(request, frame: pd.DataFrame, where: str, npartitions: int,
                                              confirm: str, components: str) -> None:
    params = Params(confirm=confirm, max_bucket=4)
    expected = sorted(clusters(dict(zip(frame["id"], frame["text"])), params=params), key=min)
    ddf = dd.from_pandas(frame[["id", "text"]], npartitions=npartitions, sort=False)
    if where == "cluster":
        request.getfixturevalue("client")
        out = process(ddf, params=params, drop=False, components=components).compute()
    else:
        with dask.config.set(LOCAL):
            out = process(ddf, params=params, drop=False, components=components).compute()
    assert _groups(out) == expected
    assert any(g == {f"zz{i:02d}" for i in range(12)} for g in expected)  # the oversized bucket's texts, one cluster
    assert out["id"].tolist() == frame["id"].tolist()  # row order kept


@pytest.mark.parametrize("confirm", ["estimate", "exact"])
def test_byte_identical_output_for_client_and_distributed_components(
        client, tmp_path: Path, frame: pd.DataFrame, confirm: str) -> None:
    params = Params(confirm=confirm, max_bucket=4)
    src = write_shards(frame, tmp_path / "in", 7)
    run(str(src), str(tmp_path / "client"), params=params, drop=False, components="client", partition_rows=100)
    m = run(str(src), str(tmp_path / "dist"), params=params, drop=False, components="distributed", partition_rows=100)
    assert m["components"] == "distributed" and m["component_rounds"] >= 2 and m["partitions"] == 7
    # the shards, the index and the removed list (whose matches meet their components either way)
    assert _output_digests(tmp_path / "client") == _output_digests(tmp_path / "dist")
    expected = sorted(clusters(dict(zip(frame["id"], frame["text"])), params=params), key=min)
    assert _groups(pd.read_parquet(tmp_path / "dist")) == expected
    # one shard or many, other orders, one worker or two: tests/test_pipeline.py, with these parameters


def test_ids_are_never_hashed(client, tmp_path: Path) -> None:
    """Distinct ids that agree on every short hash prefix one might use (long common prefixes, equal
    lengths) are kept apart; integer ids beyond 2^53 keep their exact value in minhash_cluster."""
    text = "one two three four five six seven eight nine ten eleven twelve thirteen"
    ids = [2**62 + 1, 2**62 + 2, 2**62 + 3]
    write_shards(pd.DataFrame({"id": ids, "text": [text, text.upper(), "something else entirely here today"]}),
                 tmp_path / "in", 2)
    run(str(tmp_path / "in"), str(tmp_path / "out"), drop=False, components="distributed", partition_rows=1)
    out = pd.read_parquet(tmp_path / "out").sort_values("id")
    assert out["minhash_cluster"].tolist() == [2**62 + 1, 2**62 + 1, 2**62 + 3]


def _output_digests(out: Path) -> dict[str, str]:
    """Every file of an output but the manifest, the page (timings) and the index's metadata (a new uid)."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in ("_dedup.json", "index.html", "index.json")}


@pytest.mark.parametrize("confirm", ["estimate", "exact"])
def test_small_routes_write_what_shuffles_write(client, tmp_path: Path, frame: pd.DataFrame, confirm: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A small frame goes through one task (`route_small`), a route to key ranges between few
    partitions through plain tasks (`route_direct`), a larger one of known rows through a shuffle
    to groups of partitions (`route_grouped`), any other through a shuffle (as tasks between few
    partitions, else p2p); the shards, the index and the removed list are the same bytes every way,
    on a real cluster. Each route is
    computed on its own from the rows the one before gave, so a run taking each of them the second
    way (ranges direct, known rows grouped) and a run shuffling every one cover every way."""
    from dedup.job import graphs, routing

    params = Params(confirm=confirm, max_bucket=4)
    src = write_shards(frame, tmp_path / "in", 7)
    taken: dict[str, set[str]] = {}

    def run_taking(name: str) -> dict[str, str]:
        """The run's output, and the ways its routes took (a shuffle not under a grouped route: "shuffled")."""
        calls: Counter[str] = Counter()
        for kind in ("route_small", "route_direct", "route_grouped", "shuffled"):
            original = getattr(routing, kind)
            monkeypatch.setattr(routing, kind, lambda *a, _f=original, _k=kind, **kw: calls.update([_k]) or _f(*a, **kw))
        run(str(src), str(tmp_path / name), params=params, partition_rows=100)
        monkeypatch.undo()  # the constants too
        calls["shuffled"] -= calls["route_grouped"]
        taken[name] = {kind for kind, n in calls.items() if n > 0}
        return _output_digests(tmp_path / name)

    small = run_taking("small")
    monkeypatch.setattr(routing, "SMALL_ROUTE_BYTES", 0)  # no route is small: ranges direct,
    monkeypatch.setattr(routing, "ROUTE_GROUP_BYTES", 4096)  # the rest of known rows between groups
    direct_grouped = run_taking("direct-grouped")
    monkeypatch.setattr(routing, "SMALL_ROUTE_BYTES", 0)
    monkeypatch.setattr(routing, "ROUTE_GROUP_BYTES", 1)  # between every partition
    monkeypatch.setattr(routing, "DIRECT_ROUTE_PIECES", 0)  # every route a shuffle,
    monkeypatch.setattr(graphs, "TASK_SHUFFLE_PIECES", 0)  # by Dask's p2p (the other runs' are tasks)
    shuffled = run_taking("shuffled")
    assert taken["small"] == {"route_small"} and taken["shuffled"] == {"shuffled"}, taken
    assert {"route_direct", "route_grouped"} <= taken["direct-grouped"] and "route_small" not in taken["direct-grouped"]
    assert any(name.startswith("_index/") for name in small)
    assert any(name.startswith("_report/removed.parquet/") for name in small)
    assert small == direct_grouped == shuffled


@pytest.mark.parametrize("where", ["sync", "cluster"])
@pytest.mark.parametrize("npartitions", [1, 4])
@pytest.mark.parametrize("how", ["small", "small-pieces", "direct", "grouped"])
def test_small_and_direct_routes_put_every_row_where_a_shuffle_does(request, where: str, npartitions: int,
                                                                    how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from dedup.job import routing

    frame = pd.DataFrame({"doc": np.arange(500, dtype=np.int64) * 7919 % 1000, "v": [f"x{i}" for i in range(500)]})
    ddf = dd.from_pandas(frame, npartitions=5, sort=False)

    def dest(d: pd.DataFrame) -> np.ndarray:
        return d["doc"].to_numpy() % npartitions

    def parts(routed: dd.DataFrame) -> list[list[tuple[int, str]]]:
        got = dask.compute(*routed.to_delayed(), **({"scheduler": "sync"} if where == "sync" else {}))
        assert all(list(p.columns) == ["doc", "v"] for p in got)  # the destination column is not kept
        return [sorted(zip(p["doc"], p["v"])) for p in got]

    if where == "cluster":
        request.getfixturevalue("client")
    with dask.config.set(LOCAL if where == "sync" else {}):
        if how.startswith("small"):  # each piece taken by the task using it, or (larger frames) a task of its own
            if how == "small-pieces":
                monkeypatch.setattr(routing, "INLINE_ROUTE_BYTES", 0)
            small = routing.route_by(ddf, dest, npartitions, rows=len(frame), row_bytes=16)
            named = {str(k[0] if isinstance(k, tuple) else k).split("-")[0] for k in small.__dask_graph__()}
            assert ("gathered" in named) == (how == "small-pieces") and ("piece" in named) == (how == "small")
        elif how == "grouped":  # two groups of destinations (a shuffle to 2 partitions), when 4 of them
            monkeypatch.setattr(routing, "SMALL_ROUTE_BYTES", 0)
            monkeypatch.setattr(routing, "ROUTE_GROUP_BYTES", 5000)
            small = routing.route_by(ddf, dest, npartitions, rows=len(frame), row_bytes=16)
            cuts = [k for k in small.__dask_graph__() if str(k[0] if isinstance(k, tuple) else k).startswith("cut-fanned")]
            assert len(cuts) == (2 if npartitions == 4 else 0)
        else:
            small = routing.route_by(ddf, dest, npartitions, ranges=True)
            assert any(str(k[0] if isinstance(k, tuple) else k).startswith("piece-") for k in small.__dask_graph__())
        monkeypatch.setattr(routing, "DIRECT_ROUTE_PIECES", 0)
        shuffled = routing.route_by(ddf, dest, npartitions, ranges=True)
        assert small.npartitions == shuffled.npartitions == npartitions
        got, want = parts(small), parts(shuffled)
        for i in range(npartitions):  # a selection of partitions holds those partitions' rows
            assert parts(small.partitions[i]) == [got[i]]
    assert got == want
    assert sum(len(p) for p in got) == len(frame)
    assert all(doc % npartitions == part for part, rows in enumerate(got) for doc, _ in rows)


@pytest.mark.parametrize("where", ["sync", "cluster"])
def test_a_persisted_frames_bytes_choose_the_small_route(request, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame whose rows are not known but which is persisted (exact confirmation's second hop) takes
    one gathering task when its bytes, as Dask sizes its partitions, are small; else a shuffle. Both
    put every row where the other does."""
    import numpy as np
    from dask.sizeof import sizeof

    from dedup.job import graphs, routing

    frame = pd.DataFrame({"doc": np.arange(400, dtype=np.int64) * 7919 % 1000, "v": [f"x{i}" for i in range(400)]})
    if where == "cluster":
        request.getfixturevalue("client")
    with dask.config.set(LOCAL if where == "sync" else {}):
        held = graphs.persist(dd.from_pandas(frame, npartitions=4, sort=False))
        nbytes = graphs.persisted_bytes(held)
        here = sum(sizeof(p) for p in dask.compute(*held.to_delayed()))
        # the workers size frames by their arrays (`dedup.job.frame_size`), this process by Dask's sampling
        assert nbytes == here if where == "sync" else here / 2 < nbytes < here * 2
        assert graphs.persisted_bytes(dd.from_pandas(frame, npartitions=2)) is None  # not persisted: not known

        def dest(d: pd.DataFrame) -> np.ndarray:
            return d["doc"].to_numpy() % 3

        def names(routed: dd.DataFrame) -> set[str]:
            return {str(k[0] if isinstance(k, tuple) else k).split("-")[0] for k in routed.__dask_graph__()}

        small = routing.route_by(held, dest, 3, nbytes=nbytes)
        monkeypatch.setattr(routing, "SMALL_ROUTE_BYTES", nbytes - 1)
        shuffled = routing.route_by(held, dest, 3, nbytes=nbytes)
        assert "piece" in names(small) and "piece" not in names(shuffled) and "gathered" not in names(shuffled)
        got = [sorted(zip(p["doc"], p["v"])) for p in dask.compute(*small.to_delayed())]
        assert got == [sorted(zip(p["doc"], p["v"])) for p in dask.compute(*shuffled.to_delayed())]
    assert sum(len(p) for p in got) == len(frame)


def test_run_leaves_nothing_in_cluster_memory(client, tmp_path: Path, frame: pd.DataFrame) -> None:
    """The job's persisted features, edges and roots are released when `run` returns, even with
    Python's cyclic collector off: exceptions that libraries raise and catch during the job keep
    frames, and the collections in them, in reference cycles."""
    import gc
    import time

    src = write_shards(frame, tmp_path / "in", 3)
    before = set(client.who_has())
    gc.disable()
    try:
        run(str(src), str(tmp_path / "out"), partition_rows=100)
        deadline = time.monotonic() + 10
        while set(client.who_has()) - before and time.monotonic() < deadline:
            time.sleep(0.05)
        left = set(client.who_has()) - before
    finally:
        gc.enable()
    assert not left, sorted(map(str, left))[:5]
