"""Object storage for real: an S3 protocol server (moto's, as its own process), a `dask scheduler`
and two workers each in a working and temporary directory of its own (so nothing may rely on a
shared local path), the CLI as a subprocess. s3:// INPUT, OUTPUT and --protected, --against, a
resume after a killed client and a damaged release refused; every output equal, byte for byte, to
the same run's on local disk."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import DASK_BIN, DEDUP, run_command, start_command, start_scheduler, stop_processes, write_shards

BUCKET = "dedup-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """moto's S3 server on a free port, and the environment that points the AWS clients at it (the
    one a user sets for any S3-compatible store: docs/operations.md)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=2)
            break
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                stop_processes([server])
                raise RuntimeError(f"moto's server did not start: {log.read_text()}") from None
            time.sleep(0.2)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}
    try:
        yield env
    finally:
        stop_processes([server])


def _fs(env: dict[str, str]) -> Any:
    import s3fs

    return s3fs.S3FileSystem(key=env["AWS_ACCESS_KEY_ID"], secret=env["AWS_SECRET_ACCESS_KEY"],
                             endpoint_url=env["AWS_ENDPOINT_URL"], use_listings_cache=False)


@pytest.fixture(scope="module")
def isolated_cluster(s3_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A scheduler and two one-process workers, each run from a directory of its own that is also its
    temporary and local (spill, shuffle) directory, started as docs/operations.md says (`--preload
    dedup.runtime`: the job's modules and kernels loaded before the first task); the scheduler file."""
    root = tmp_path_factory.mktemp("isolated")
    scheduler, sched_file = start_scheduler(root)
    procs = [scheduler]
    try:
        for name in ("worker-a", "worker-b"):
            home = root / name
            home.mkdir()
            procs.append(subprocess.Popen(
                [str(DASK_BIN), "worker", "--scheduler-file", str(sched_file), "--nworkers", "1", "--nthreads", "1",
                 "--no-dashboard", "--host", "127.0.0.1", "--local-directory", str(home), "--preload", "dedup.runtime"],
                cwd=home, env={**s3_env, "TMPDIR": str(home), "PYTHONUNBUFFERED": "1"},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield sched_file
    finally:
        stop_processes(procs)


def _digests_local(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*.parquet"))
            if p.is_file()}


def _digests_s3(fs: Any, out: str) -> dict[str, str]:
    return {p.removeprefix(out + "/"): hashlib.sha256(fs.cat_file(p)).hexdigest() for p in sorted(fs.find(out))
            if p.endswith(".parquet")}


def test_s3_input_output_protected_against_resume_and_a_damaged_release(
        s3_env: dict[str, str], isolated_cluster: Path, tmp_path: Path, corpus_frame: pd.DataFrame,
        protected_file: Path) -> None:
    fs = _fs(s3_env)
    fs.mkdir(BUCKET)
    half = len(corpus_frame) // 2
    local = {c: write_shards(f, tmp_path / c, 3) for c, f in (("crawl1", corpus_frame.iloc[:half]),
                                                              ("crawl2", corpus_frame.iloc[half:]))}
    for crawl, directory in local.items():
        for f in sorted(directory.iterdir()):
            fs.put_file(str(f), f"{BUCKET}/{crawl}/{f.name}")
    fs.put_file(str(protected_file), f"{BUCKET}/evals/eval.jsonl")
    s3 = f"s3://{BUCKET}"

    def dedup(inp: str, out: str, *more: str) -> subprocess.CompletedProcess[str]:
        where = ("--threads", "2") if not out.startswith("s3://") else ("--scheduler-file", str(isolated_cluster))
        return run_command([*DEDUP, "run", inp, out, *where, "--protected", f"{s3}/evals/eval.jsonl",
                            "--max-contaminated", "1", *more], timeout=300, env=s3_env, cwd=tmp_path)

    # a first release, and a second one --against it: on S3 (the cluster) and on local disk (threads in
    # one process), the same bytes
    for inp, out, more in ((f"{s3}/crawl1", f"{s3}/r1", ()), (str(local["crawl1"]), str(tmp_path / "l1"), ()),
                           (f"{s3}/crawl2", f"{s3}/r2", ("--against", f"{s3}/r1")),
                           (str(local["crawl2"]), str(tmp_path / "l2"), ("--against", str(tmp_path / "l1")))):
        got = dedup(inp, out, *more)
        assert got.returncode == 0, got.stderr
        assert "Traceback" not in got.stderr and "botocore" not in got.stderr
        talkers = {line.split()[1] for line in got.stderr.splitlines() if " INFO " in line}
        assert talkers == {"dedup"}, got.stderr  # other libraries' INFO lines stay out of a run's log
    for r in ("r1", "r2"):
        on_s3, on_disk = _digests_s3(fs, f"{BUCKET}/{r}"), _digests_local(tmp_path / f"l{r[1]}")
        assert on_s3 == on_disk and len(on_s3) > 8, (sorted(on_s3), sorted(on_disk))
        assert fs.exists(f"{BUCKET}/{r}/_dedup.json") and fs.exists(f"{BUCKET}/{r}/_report/index.html")
    # a client killed once the buckets are done: the same command resumes (the dead run's lock is taken
    # over: its process is gone) and writes the same bytes
    cmd = [*DEDUP, "run", f"{s3}/crawl2", f"{s3}/r2k", "--scheduler-file", str(isolated_cluster), "--protected",
           f"{s3}/evals/eval.jsonl", "--max-contaminated", "1", "--against", f"{s3}/r1"]
    proc = start_command(cmd, env=s3_env)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.split(" ", 3)[-1].startswith("buckets:"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    again = run_command(cmd, timeout=300, env=s3_env)
    assert again.returncode == 0, again.stderr
    assert "resuming: reusing features, contamination, buckets" in again.stderr, again.stderr
    assert "no longer alive" in again.stderr
    assert _digests_s3(fs, f"{BUCKET}/r2k") == _digests_s3(fs, f"{BUCKET}/r2")
    # a release one of whose shards was replaced since: refused before any work, naming the file
    fs.pipe_file(f"{BUCKET}/r1/shard-01.parquet", fs.cat_file(f"{BUCKET}/r1/shard-00.parquet"))
    refused = dedup(f"{s3}/crawl2", f"{s3}/r3", "--against", f"{s3}/r1")
    assert refused.returncode == 2, refused.stderr
    assert "shard-01.parquet" in refused.stderr and "run that output again" in refused.stderr, refused.stderr
    assert not fs.exists(f"{BUCKET}/r3")
