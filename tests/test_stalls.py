"""No silent waits: paused workers and empty clusters are named within a minute and end the run
after --stall-timeout; local workers import the installed dedup whatever the working directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from dedup.job.watchdog import WARN_AFTER, Watchdog
from tests.conftest import DEDUP, run_command, start_dask, start_scheduler, stop_processes, write_shards

PAUSE_AT_ONCE = {"DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "100ms"}
"""Dask's default: the workers see their memory, and pause, within 0.1 s of loading the job's modules,
before a stage can finish (the suite's clusters look every second, `QUIET_DASK`)."""


def test_memory_paused_workers_are_named_within_a_minute_then_fail_the_run(tmp_path: Path,
                                                                          corpus_frame: pd.DataFrame) -> None:
    """Workers without a nanny and a 300 MB limit pause (memory above 80% of it) once the job's
    modules are loaded: Dask waits for them for ever; dedup says why and ends the run."""
    src = write_shards(corpus_frame, tmp_path / "in", 2)
    scheduler, sched = start_scheduler(tmp_path)
    procs = [scheduler]
    try:
        procs += [start_dask("worker", "--scheduler-file", str(sched), "--nthreads", "1", "--no-dashboard", "--host",
                             "127.0.0.1", "--memory-limit", "300MB", "--no-nanny", env=PAUSE_AT_ONCE) for _ in range(2)]
        started = time.monotonic()
        got = run_command([*DEDUP, "run", str(src), str(tmp_path / "out"), "--scheduler-file", str(sched),
                          "--stall-timeout", "6"], timeout=240)
        took = time.monotonic() - started
    finally:
        for p in procs[1:]:  # paused workers take long to close: nothing of theirs is needed
            p.kill()
        stop_processes(procs)
    assert got.returncode == 1, got.stderr
    # a warning names the paused workers (at load, one may come first that sees the workers idle before
    # they pause: the modules they load take longer), and so does the error that ends the run
    warned = [line for line in got.stderr.splitlines() if " WARNING no progress for " in line and "paused" in line]
    assert warned and "memory limit" in warned[0], got.stderr
    assert "interrupt received" not in got.stderr  # the watchdog's own interrupt is no user's Ctrl-C
    last = got.stderr.strip().splitlines()[-1]
    assert last.startswith("dedup: error: no progress for") and "paused" in last and "--stall-timeout 6" in last, last
    assert "Traceback" not in got.stderr and took < 180
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir() if "dedup-tmp" in p.name] == []


class _Client:
    """What the watchdog reads from a client, as a scheduler would answer (for `Watchdog.cause`)."""


@pytest.mark.parametrize(("workers", "processing", "paused_seen", "says", "blocks"), [
    ({}, frozenset(), False, "has no workers", True),
    ({"a": {"status": "paused", "memory_limit": 300 * 2**20}, "b": {"status": "running", "memory_limit": 300 * 2**20}},
     frozenset({"x"}), False, "1 of 2 worker(s) paused", True),
    ({"a": {"status": "running", "memory_limit": 2**30}}, frozenset({"x"}), True, "paused", True),
    ({"a": {"status": "running", "memory_limit": 2**30}}, frozenset(), False, "none of the job's tasks", True),
    ({"a": {"status": "running", "memory_limit": 2**30}}, frozenset({"x", "y"}), False, "2 task(s) still running", False),
])
def test_the_cause_named_is_what_the_scheduler_reports(workers: dict, processing: frozenset, paused_seen: bool,
                                                       says: str, blocks: bool) -> None:
    why, blocking = Watchdog(_Client(), 10).cause(workers, processing, paused_seen)
    assert says in why and blocking is blocks
    assert WARN_AFTER <= 60


def test_local_workers_import_the_installed_dedup_from_a_folder_holding_a_clone(tmp_path: Path,
                                                                                corpus_frame: pd.DataFrame) -> None:
    """A newcomer runs dedup from the folder they cloned it into: `./dedup/` is the clone (its
    `docs/`, its `dedup/` package), which the local workers must not import instead of the install."""
    src = write_shards(corpus_frame, tmp_path / "in", 2)
    clone = tmp_path / "here" / "dedup"
    shutil.copytree(Path(__file__).resolve().parents[1] / "dedup", clone / "dedup")
    (clone / "docs").mkdir()
    (clone / "docs" / "contract.md").write_text("# contract\n")
    got = subprocess.run(["dedup", "run", str(src), str(tmp_path / "out"), "--n-workers", "1", "--stall-timeout", "60"],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path / "here",
                         env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert got.returncode == 0, got.stderr
    assert "ImportError" not in got.stderr and "Traceback" not in got.stderr
