"""Failures clean up: a run that fails on a real cluster leaves no staging directory, not even
seconds later, and names the first real cause; write tasks of an ended run write nothing."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import fsspec
import pandas as pd
import pytest

from dedup.corpus import generate
from dedup.storage.staging import LIVE, RunEnded, Staging, check_live
from tests.conftest import DEDUP, run_command, write_shards


@pytest.fixture(scope="module")
def corpus_3mb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = generate(3000, seed=2)
    frame = pd.DataFrame({"id": [d.id for d in docs], "text": [d.text for d in docs]})
    return write_shards(frame, tmp_path_factory.mktemp("full") / "in", 8)


@pytest.fixture()
def small_disk(tmp_path: Path) -> object:
    """A 3 MiB tmpfs (root only: CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_disk_full_on_a_real_scheduler_leaves_nothing_and_says_no_space(dask_processes: Path, corpus_3mb: Path,
                                                                         small_disk: Path) -> None:
    out = small_disk / "out"
    got = run_command([*DEDUP, "run", str(corpus_3mb), str(out), "--scheduler-file", str(dask_processes),
                          "--partition-rows", "500"], timeout=300)
    assert got.returncode == 1, got.stderr
    last = got.stderr.strip().splitlines()[-1]
    assert last.startswith("dedup: error: no space left on the device") and "OUTPUT was left as it was" in last, last
    assert "Traceback" not in got.stderr
    for _ in range(5):  # tasks that were running when the run failed must not write afterwards
        assert list(small_disk.iterdir()) == [], list(small_disk.rglob("*"))[:5]
        time.sleep(1)


def test_write_tasks_of_an_ended_run_write_nothing(tmp_path: Path) -> None:
    staging = Staging(str(tmp_path / "out"))
    fs = fsspec.filesystem("file")
    inside = f"{staging.tmp}/part/shard.parquet"
    check_live(fs, inside)  # the run lives
    check_live(fs, str(tmp_path / "elsewhere.parquet"))  # not a staging path: nothing to check
    staging.discard()
    with pytest.raises(RunEnded, match="has ended"):
        check_live(fs, inside)
    assert not os.path.exists(staging.tmp)
    staging.close()


def test_the_run_token_never_reaches_output(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 2)
    got = run_command([*DEDUP, "run", str(src), str(tmp_path / "out"), "--threads", "1"], timeout=240)
    assert got.returncode == 0, got.stderr
    assert not (tmp_path / "out" / LIVE).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]


def test_a_cancelled_gather_and_an_interrupted_one_read_as_one_line() -> None:
    """A lost scheduler's cancelled futures give one line naming the reason, never the task's key;
    asyncio's report of a gather ended by an interrupt (AllExit) and the client's reconnect error
    are left out of the log (the CLI's own line replaces them)."""
    import argparse
    import logging

    from distributed.client import AllExit, FutureCancelledError

    from dedup.cli import _message, _replaced

    exc = FutureCancelledError(("kept-graph-0123abcd", 3), "scheduler-connection-lost", "Client lost the connection.")
    said = _message(exc, argparse.Namespace(output="out"))
    assert "\n" not in said and "kept-graph" not in said and "scheduler-connection-lost" in said, said
    try:
        raise AllExit()
    except AllExit:
        import sys

        gathered = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "Task exception was never retrieved", None,
                                     sys.exc_info())
    lost = logging.LogRecord("distributed.client", logging.ERROR, __file__, 1,
                             "Failed to reconnect to scheduler after %.2f seconds, closing client", (5.0,), None)
    other = logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "something else", None, None)
    assert [_replaced(r) for r in (gathered, lost, other)] == [False, False, True]
