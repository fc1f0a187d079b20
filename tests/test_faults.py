"""Faults: a worker killed mid-route (a shuffle or a small route), an interrupted run, a worker that keeps dying; skew."""

from __future__ import annotations

import contextvars
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dedup.corpus import generate
from dedup.job.failures import explain_killed_worker
from dedup.job.pipeline import run
from tests.conftest import (
    ASSIGNMENTS_ONLY,
    end_process,
    fork_local_workers,
    run_command,
    start_command,
    wait_for_line,
    write_shards,
)
from tests.warm import WarmChild


def _assignments(out: Path) -> bytes:
    return pd.read_parquet(out).sort_values("id")[["id", "minhash_cluster"]].to_csv(index=False).encode()


@pytest.fixture(scope="module")
def bigger_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = generate(2000, seed=7)
    frame = pd.DataFrame({"id": [d.id for d in docs], "text": [d.text for d in docs]})
    return write_shards(frame, tmp_path_factory.mktemp("bigger") / "in", 6)


@pytest.fixture(scope="module")
def undisturbed(bigger_corpus: Path, tmp_path_factory: pytest.TempPathFactory, cluster_client: Any) -> bytes:
    """The assignments an undisturbed run gives, on the suite's shared cluster (the same whatever the
    partitioning and the cluster: the contract)."""
    out = tmp_path_factory.mktemp("undisturbed") / "out"
    with cluster_client.as_current():
        run(str(bigger_corpus), str(out), drop=False, **ASSIGNMENTS_ONLY)
    return _assignments(out)


@pytest.fixture(scope="module")
def killable() -> Iterator[Any]:
    """A local cluster of two worker processes whose nannies start a killed worker again, shared by
    the tests that kill one (each waits for both workers before it ends)."""
    from distributed import Client, LocalCluster

    fork_local_workers()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as lc, \
            Client(lc) as client:
        yield client


@pytest.mark.parametrize("task", ["shuffle", "cut-gathered", "pieces-", "exchanged", "cut-fanned"])
def test_worker_killed_mid_route_gives_identical_output(bigger_corpus: Path, undisturbed: bytes, tmp_path: Path,
                                                        task: str, monkeypatch: pytest.MonkeyPatch,
                                                        killable: Any) -> None:
    """A worker killed while it runs a shuffle task (no route small), a task cutting a group of a
    grouped shuffle into its destinations (`dedup.job.routing.route_grouped`), the one task of a small route
    that gathers and cuts (`dedup.job.routing.route_small`, `dedup.job.graphs.gathered`; `pieces-` when each
    piece is taken by the task using it, `dedup.job.graphs.Piece`), or a task of a direct
    route to key ranges (`dedup.job.routing.route_direct`, `dedup.job.graphs.exchanged`: a split, a piece or a
    join): the job retries and writes what an undisturbed run writes."""
    from dedup.job import routing

    if task == "shuffle":
        monkeypatch.setattr(routing, "SMALL_ROUTE_BYTES", 0)
        monkeypatch.setattr(routing, "ROUTE_GROUP_BYTES", 1)  # between every partition
    if task == "exchanged":  # band rows are few enough for one task unless small routes are off
        monkeypatch.setattr(routing, "SMALL_ROUTE_BYTES", 0)
    if task == "cut-fanned":  # a shuffle between groups of partitions, each then cut by destination
        monkeypatch.setattr(routing, "SMALL_ROUTE_BYTES", 0)
        monkeypatch.setattr(routing, "ROUTE_GROUP_BYTES", 80_000)
    # a grouped route needs more partitions than groups
    sizes = {"partition_rows": 400} if task == "cut-fanned" else {}
    if task == "cut-gathered":  # the ids' and labels' routes are small enough to take their pieces inline
        monkeypatch.setattr(routing, "INLINE_ROUTE_BYTES", 0)
    client = killable
    client.wait_for_workers(2, timeout=60)
    with client.as_current():
        pids = client.run(os.getpid)
        outcome: dict[str, object] = {}

        def job() -> None:
            try:
                outcome["manifest"] = run(str(bigger_corpus), str(tmp_path / "killed"), drop=False, **sizes)
            except BaseException as exc:  # noqa: BLE001 - reported below
                outcome["error"] = exc

        thread = threading.Thread(target=contextvars.copy_context().run, args=(job,))  # on this cluster's client
        thread.start()
        killed = None
        deadline = time.time() + 120
        while thread.is_alive() and killed is None and time.time() < deadline:
            for addr, keys in client.processing().items():
                if any(task in str(k) for k in keys) and addr in pids:
                    os.kill(pids[addr], signal.SIGKILL)
                    killed = addr
                    break
            time.sleep(0.005)
        thread.join(timeout=300)
        assert killed is not None, f"no {task} task was seen running, so no worker was killed"
        assert "error" not in outcome, outcome.get("error")
        client.wait_for_workers(2, timeout=60)
    assert _assignments(tmp_path / "killed") == undisturbed


def _wait_for(proc: subprocess.Popen | WarmChild, text: str, timeout: float = 120) -> str:
    return wait_for_line(proc, lambda line: text in line, timeout)


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def first_output(bigger_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("first") / "out"
    got = run_command([sys.executable, "-m", "dedup", "near", str(bigger_corpus), str(out), "--n-workers", "2"],
                      timeout=300)
    assert got.returncode == 0, got.stderr
    return out


@pytest.mark.parametrize(("after", "sig"), [("features:", signal.SIGINT), ("write:", signal.SIGINT),
                                          ("wrote ", signal.SIGINT), ("features:", signal.SIGTERM),
                                          ("features:", signal.SIGKILL)])
def test_interrupts_report_what_output_holds(bigger_corpus: Path, first_output: Path, tmp_path: Path, after: str,
                                             sig: int) -> None:
    """A signal at several points: the exit code and message always match what OUTPUT holds; an
    interrupted run keeps the stages it finished for the same command to resume from."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dedup", "near", str(bigger_corpus), str(out), "--n-workers", "2"]
    shutil.copytree(first_output, out)
    before = _snapshot(out)
    proc = start_command([*cmd, "--overwrite", "--keep-duplicates"])
    try:
        seen = _wait_for(proc, after)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        end_process(proc)
    stderr = seen + err
    assert "Traceback" not in stderr and "AllExit" not in stderr, stderr
    rows = len(pd.read_parquet(out))
    if proc.returncode == 0:  # the signal came after the new output was in place
        assert after != "features:", stderr
        assert rows == len(pd.read_parquet(bigger_corpus)) and _snapshot(out) != before
    else:
        assert after != "wrote ", stderr
        assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 130, signal.SIGKILL: -9}[sig], stderr
        assert _snapshot(out) == before  # no partial shards, nothing replaced
        if sig != signal.SIGKILL:
            assert "interrupted; OUTPUT was left as it was" in stderr
            # said as the signal arrives, before the tasks are ended (Ctrl-C said nothing for 14 s)
            said = err.find("dedup: interrupt received: stopping the run's tasks; OUTPUT is left as it was")
            assert 0 <= said < err.find("interrupted; OUTPUT was left as it was"), err
            # the lock is released; the staging directory stays, with the stages finished, to resume
            # from, unless the interrupt came once they were no longer needed (the write done)
            left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
            if left:
                assert len(left) == 1 and ".out.dedup-tmp-" in left[0], left
                assert "are kept in" in stderr and "the same command resumes from them" in stderr, stderr
                assert (tmp_path / left[0] / "_stages" / "features" / "_done.json").exists()
            else:
                assert "are kept in" not in stderr and "write:" in stderr, stderr
    if sig != signal.SIGKILL:
        return
    res = run_command([*cmd, "--overwrite", "--keep-duplicates"], timeout=300)
    assert res.returncode == 0, res.stderr
    assert len(pd.read_parquet(out)) == len(pd.read_parquet(bigger_corpus))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # a killed run's staging is cleaned up


def test_worker_that_keeps_dying_names_the_input_file_only_when_reading_it() -> None:
    from distributed.scheduler import KilledWorker

    groups = [["data/a.parquet"], ["data/b.parquet"], ["data/c.parquet", "data/d.parquet"]]
    exc = KilledWorker(("read-shards-0123", 1), "tcp://127.0.0.1:1234", 3)
    with pytest.raises(RuntimeError, match=r"while reading input file 'data/b.parquet' \(partition 1\)") as info:
        explain_killed_worker(exc, groups)
    assert info.value.__cause__ is exc
    with pytest.raises(RuntimeError, match=r"input partition 2 \(files \['data/c.parquet', 'data/d.parquet'\]\)"):
        explain_killed_worker(KilledWorker(("features-99", 2), "tcp://127.0.0.1:1234", 3), groups)
    with pytest.raises(RuntimeError, match=r"running 'shuffle-transfer-abc'.*protected n-grams \(120 MB\)") as info:
        explain_killed_worker(KilledWorker(("shuffle-transfer-abc", 0), "tcp://127.0.0.1:1234", 3), groups, 120.0)
    assert "data/a.parquet" not in str(info.value)
    explain_killed_worker(ValueError("other errors pass through"), groups)


def test_boilerplate_copies_finish_in_one_cluster_without_pair_blowup(client, tmp_path: Path) -> None:
    page = "Accept cookies. " + " ".join(f"boiler{i}" for i in range(150))
    docs = generate(150, seed=3)
    copies = 20_000
    frame = pd.DataFrame({"id": [f"b{i:06d}" for i in range(copies)] + [d.id for d in docs],
                          "text": [page] * copies + [d.text for d in docs]})
    write_shards(frame, tmp_path / "in", 8)
    m = run(str(tmp_path / "in"), str(tmp_path / "out"), drop=False, **ASSIGNMENTS_ONLY)
    out = pd.read_parquet(tmp_path / "out")
    assert (out.loc[out["id"].str.startswith("b"), "minhash_cluster"] == "b000000").all()
    assert m["approximated_buckets"] == 0 and m["candidate_pairs"] < 1000
    assert copies - 1 <= m["same_text_pairs"] < copies + 100  # a star, not 200 million pairs
    assert m["input_rows"] == m["output_rows"]


def test_shared_header_and_footer_on_every_document(client, tmp_path: Path) -> None:
    from dedup import clusters
    from dedup.corpus import BANNER_FOOT, BANNER_HEAD

    docs = generate(150, seed=4)
    frame = pd.DataFrame({"id": [d.id for d in docs], "text": [f"{BANNER_HEAD} {d.text} {BANNER_FOOT}" for d in docs]})
    write_shards(frame, tmp_path / "in", 3)
    run(str(tmp_path / "in"), str(tmp_path / "out"), drop=False, **ASSIGNMENTS_ONLY)
    out = pd.read_parquet(tmp_path / "out")
    got = sorted(sorted(g) for g in out.groupby("minhash_cluster")["id"].apply(list) if len(g) > 1)
    assert got == sorted(sorted(g) for g in clusters(dict(zip(frame["id"], frame["text"]))))
