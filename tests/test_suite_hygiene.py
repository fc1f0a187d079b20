"""The suite cleans up after itself: a Ctrl-C while the shared `dask_processes` cluster starts leaves no
`dask scheduler` or `dask worker` running, whether the terminal signals the whole process group or a
CI runner signals pytest alone, with pytest-xdist or without."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]


def _ours(base: Path) -> list[str]:
    """The command lines of the processes still running that name the session's base directory."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(base) in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(cmd[:200])
    return found


@pytest.mark.parametrize(("workers", "target"), [((), "pytest"), (("-n", "1"), "group")])
def test_ctrl_c_as_the_shared_cluster_starts_leaves_no_process(tmp_path: Path, workers: tuple[str, ...],
                                                               target: str) -> None:
    base = tmp_path / "session"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, "--basetemp", str(base),
           "tests/test_cli.py::test_run_against_real_scheduler_and_workers"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a shell's foreground job
    try:
        deadline = time.monotonic() + 120
        while not list(base.glob("**/dask-processes/scheduler.json")):  # the scheduler is up: the worker is next
            assert proc.poll() is None and time.monotonic() < deadline, "the shared cluster never started"
            time.sleep(0.05)
        if target == "group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0
    deadline = time.monotonic() + 60  # a process told to stop may take a moment
    while (left := _ours(base)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], left
