"""Data safety: nothing outside OUTPUT is modified or deleted, whatever the paths, globs, symlinks or flags.

Every case builds a scratch tree (inputs, a protected file, a user's own files), hashes every
entry, runs the CLI as a subprocess, and checks the exit code, the one-line message and that
the tree hashes the same afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from dedup.storage.staging import Staging
from tests.conftest import DEDUP, run_command, write_shards

TEXT = "the quick brown fox jumps over the lazy dog near the quiet river bank at dawn again and again"


def _tree(root: Path) -> dict[str, str]:
    """Every file, directory and symlink under root, with a digest of each file's bytes."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture()
def scratch(tmp_path: Path) -> Path:
    """proj/data/{a,b}.parquet, proj/evals/mmlu.jsonl, proj/notes.txt, proj/link -> data, proj/mine/keep.txt."""
    proj = tmp_path / "proj"
    write_shards(pd.DataFrame({"id": ["a", "b", "c", "d"], "text": [TEXT, TEXT + " x", "other words", None]}),
                 proj / "data", 2)
    (proj / "evals").mkdir()
    (proj / "evals" / "mmlu.jsonl").write_text(json.dumps({"question": "What is two plus two?"}) + "\n")
    (proj / "notes.txt").write_text("my notes")
    (proj / "link").symlink_to("data")
    (proj / "mine").mkdir()
    (proj / "mine" / "keep.txt").write_text("keep me")
    (proj / "outlink").symlink_to("mine")
    return proj


def _dedup(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_command([*DEDUP, *args], cwd=cwd, timeout=120)


REFUSED = [
    # (INPUT, OUTPUT, extra args, message)
    ("data", ".", ["--overwrite"], "is, contains or lies inside the input"),  # OUTPUT a parent of INPUT
    ("proj/data", "proj", ["--overwrite"], "is, contains or lies inside the input"),
    ("data/*.parquet", "data", ["--overwrite"], "is, contains or lies inside the input"),  # glob whose directory is OUTPUT
    ("data/*.parquet", "data/out", [], "is, contains or lies inside the input"),  # OUTPUT inside a glob's directory
    ("data", "data/out", [], "is, contains or lies inside the input"),
    ("data/shard-00.parquet", "data/shard-00.parquet", ["--overwrite"], "is, contains or lies inside the input"),
    ("link", "data/out", [], "is, contains or lies inside the input"),  # through a symlink
    ("data", "mine/../data/../data", ["--overwrite"], "is, contains or lies inside the input"),  # through ..
    ("data", "evals", ["--overwrite", "--protected", "evals/mmlu.jsonl"], "protected path"),
    ("data", "outlink", ["--overwrite"], "is a symbolic link"),
    ("data", "notes.txt", ["--overwrite"], "is not a directory"),
    ("data", "mine", [], "is not empty; pass --overwrite"),
    ("data", "mine", ["--overwrite"], "holds files dedup did not write"),
    ("data", "/proc", ["--overwrite"], "is a mount point"),
    ("data", "out", ["--n-workers", "-1"], "--n-workers must be an integer >= 1"),
    ("data", "out", ["--threads", "0"], "--threads must be an integer >= 1"),
    ("data", "out", ["--threads", "2", "--n-workers", "2"], "--threads runs without a cluster"),
    ("data", "out", ["--max-bucket", "-5"], "'max_bucket' parameter must be an integer >= 2"),
    ("data", "out", ["--scheduler-file", "nowhere.json"], "does not exist; start the scheduler"),
    ("missing", "out", [], "Input 'missing' does not exist"),
]


@pytest.mark.parametrize(("src", "out", "extra", "message"), REFUSED, ids=[f"{r[0]} -> {r[1]} {' '.join(r[2])}" for r in REFUSED])
def test_unsafe_or_bad_paths_are_refused_and_nothing_changes(scratch: Path, src: str, out: str, extra: list[str],
                                                             message: str) -> None:
    cwd = scratch.parent if src.startswith("proj/") else scratch
    before = _tree(scratch.parent)
    res = _dedup(cwd, "run", src, out, *extra)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dedup: error: ") and message in lines[0], res.stderr
    assert _tree(scratch.parent) == before


def test_overwrite_replaces_only_our_own_output_and_cleans_stale_staging(scratch: Path) -> None:
    first = _dedup(scratch, "run", "data", "out", "--n-workers", "1")
    assert first.returncode == 0, first.stderr
    stale = scratch / ".out.dedup-tmp-0123456789ab"
    stale.mkdir()
    (stale / "part.parquet").write_text("left by a killed run")
    (scratch / "out" / "extra.txt").write_text("inside OUTPUT: replaced with it")
    outside = {k: v for k, v in _tree(scratch).items() if not k.startswith(("out/", ".out.")) and k != "out"}
    again = _dedup(scratch, "run", "data", "out", "--n-workers", "1", "--overwrite")
    assert again.returncode == 0, again.stderr
    assert "removed 1 staging directory left by earlier runs" in again.stderr
    assert not stale.exists() and not (scratch / "out" / "extra.txt").exists()
    assert {k: v for k, v in _tree(scratch).items() if not k.startswith(("out/",)) and k != "out"} == outside
    assert not [p for p in scratch.iterdir() if p.name.startswith(".out.")]  # no staging, no lock left


def test_a_second_run_on_the_same_output_fails_clearly(scratch: Path) -> None:
    holder = Staging(str(scratch / "out"))  # what a running job holds: the lock and its staging directory
    try:
        res = _dedup(scratch, "run", "data", "out")
        assert res.returncode == 2 and "Another dedup run is writing OUTPUT" in res.stderr
        assert Path(holder.tmp).is_dir()  # the running job's staging is left alone
    finally:
        holder.discard()
        holder.close()
    assert not [p for p in scratch.iterdir() if p.name.startswith(".out.")]


def test_object_store_output_commits_manifest_last(tmp_path: Path) -> None:
    """fsspec's memory file system renames by copy-then-delete, as s3/gcs do; the job runs in-process."""
    import dask
    import fsspec

    from dedup.job.pipeline import run

    src = write_shards(pd.DataFrame({"id": ["a", "b", "c"], "text": [TEXT, TEXT + " x", "other"]}), tmp_path / "in", 2)
    fs = fsspec.filesystem("memory")
    fs.pipe("/bucket/out/stale-shard.parquet", b"old")
    with dask.config.set({"scheduler": "sync", "dataframe.shuffle.method": "tasks"}):  # memory fs: this process only
        with pytest.raises(ValueError, match="did not write"):  # not ours: refused even with overwrite
            run(str(src), "memory://bucket/out", overwrite=True)
        fs.rm("/bucket/out", recursive=True)
        m = run(str(src), "memory://bucket/out")
        names = sorted(p.removeprefix("/bucket/out/") for p in fs.find("/bucket/out"))
        assert names == ["_dedup.json", "_index/bands/part-000000.parquet", "_index/docs/part-000000.parquet",
                         "_index/ids/part-000000.parquet", "_index/index.json", "_index/sizes/part-000000.parquet",
                         "_report/index.html",
                         "_report/removed.parquet/shard-00.parquet", "_report/removed.parquet/shard-01.parquet",
                         "shard-00.parquet", "shard-01.parquet"]
        m2 = run(str(src), "memory://bucket/out", overwrite=True, drop=False)
    assert m2["output_rows"] == 3 and m["output_rows"] == 2
    assert not [p for p in fs.ls("/bucket", detail=False) if ".dedup-" in p]  # staging and lock removed
    fs.rm("/bucket", recursive=True)


def _flaky_memory() -> type:
    """fsspec's memory file system as `flakymem://`, whose `fail_on`-th copy fails (as a flaky object store's would)."""
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    class FlakyMemory(MemoryFileSystem):
        protocol = "flakymem"
        fail_on: int | None = None
        calls = 0

        @classmethod
        def _strip_protocol(cls, path: str) -> str:
            return MemoryFileSystem._strip_protocol(path.replace("flakymem://", "memory://", 1))

        def cp_file(self, path1: str, path2: str, **kwargs: object) -> None:
            FlakyMemory.calls += 1
            if FlakyMemory.fail_on == FlakyMemory.calls:
                raise OSError("connection reset")
            super().cp_file(path1, path2, **kwargs)

    fsspec.register_implementation("flakymem", FlakyMemory, clobber=True)
    return FlakyMemory


def test_object_store_commit_failing_midway_leaves_no_manifest_and_can_be_rerun(tmp_path: Path) -> None:
    """A copy that fails mid-commit (as a flaky object store would): OUTPUT has no manifest, the error says so."""
    import dask
    import fsspec

    from dedup.job.pipeline import run

    FlakyMemory = _flaky_memory()
    src = write_shards(pd.DataFrame({"id": [f"d{i}" for i in range(6)], "text": [f"{TEXT} {i}" for i in range(6)]}),
                       tmp_path / "in", 6)
    fs = fsspec.filesystem("flakymem")
    with dask.config.set({"scheduler": "sync", "dataframe.shuffle.method": "tasks"}):
        run(str(src), "flakymem://b/out", near=False)
        FlakyMemory.calls, FlakyMemory.fail_on = 0, 2
        with pytest.raises(RuntimeError, match=r"OUTPUT has no _dedup.json and is incomplete"):
            run(str(src), "flakymem://b/out", overwrite=True, drop=False)
        assert not fs.exists("/b/out/_dedup.json") and fs.exists("/b/out/_dedup.incomplete")
        FlakyMemory.fail_on = None
        m = run(str(src), "flakymem://b/out", overwrite=True, drop=False)  # ours, incomplete: may be replaced
    assert m["output_rows"] == 6 and fs.exists("/b/out/_dedup.json") and not fs.exists("/b/out/_dedup.incomplete")
    assert not [p for p in fs.ls("/b", detail=False) if ".dedup-" in p]
    fs.rm("/b", recursive=True)


def test_a_publish_cut_short_is_finished_by_the_same_command_without_computing_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A first release's publish to an object store stops midway (OUTPUT empty before it, so no --overwrite):
    the same call publishes the output the run left, computing nothing, and the bytes are a fresh run's."""
    import dask
    import fsspec

    from dedup.job.pipeline import run

    flaky = _flaky_memory()
    texts = [f"{TEXT} {i}" for i in range(5)] + [TEXT + " 0", "other words entirely"]
    src = write_shards(pd.DataFrame({"id": [f"d{i}" for i in range(7)], "text": texts}), tmp_path / "in", 3)
    fs = fsspec.filesystem("flakymem")
    with dask.config.set({"scheduler": "sync", "dataframe.shuffle.method": "tasks"}):
        flaky.calls, flaky.fail_on = 0, 3
        with pytest.raises(RuntimeError, match="incomplete"):
            run(str(src), "flakymem://c/out")
        assert fs.exists("/c/out/_dedup.incomplete") and not fs.exists("/c/out/_dedup.json")
        flaky.fail_on = None
        caplog.clear()
        with caplog.at_level("INFO", logger="dedup"):
            m = run(str(src), "flakymem://c/out")
        said = caplog.text
        fresh = run(str(src), "flakymem://c/fresh")
    assert "publishing its output, nothing computed again" in said
    assert "buckets:" not in said and "features:" not in said  # no stage ran
    assert m["output_rows"] == fresh["output_rows"] == 2  # the near copies of TEXT are one cluster
    assert not fs.exists("/c/out/_dedup.incomplete") and fs.exists("/c/out/_dedup.json")
    files = {p.removeprefix("/c/out/") for p in fs.find("/c/out")}
    assert files == {p.removeprefix("/c/fresh/") for p in fs.find("/c/fresh")} and "_resume.json" not in files
    for name in files:
        if name.endswith(".parquet"):
            assert fs.cat_file(f"/c/out/{name}") == fs.cat_file(f"/c/fresh/{name}"), name
    assert not [p for p in fs.ls("/c", detail=False) if ".dedup-" in p]
    fs.rm("/c", recursive=True)


def test_a_run_refused_by_an_object_store_lock_leaves_that_lock(scratch: Path) -> None:
    """`local://` takes the object-store lock (a file naming its holder): a second run is refused and must
    not remove the first one's lock, so a third is refused too (two publishes would overwrite each other)."""
    out = f"local://{scratch}/published"
    holder = Staging(out)  # a live run: its lock and its staging directory
    lock = Path(holder.lock_path)
    held = lock.read_bytes()
    try:
        for _ in range(2):
            res = _dedup(scratch, "run", "data", out, "--threads", "1")
            assert res.returncode == 2 and "Another dedup run is writing OUTPUT" in res.stderr, res.stderr
            assert lock.read_bytes() == held  # the holder's lock, untouched
        assert Path(holder.tmp).is_dir()
    finally:
        holder.discard()
        holder.close()
    assert not lock.exists()  # its owner removes it


def test_a_lock_left_by_a_dead_run_is_taken_over_naming_its_holder(scratch: Path) -> None:
    lock = scratch / ".published.dedup-lock"
    pid = subprocess.Popen(["true"])  # a process id that has ended
    pid.wait()
    lock.write_text(json.dumps({"host": os.uname().nodename, "pid": pid.pid, "time": 31579200.0, "token": "theirs"}))
    res = _dedup(scratch, "run", "data", f"local://{scratch}/published", "--threads", "1")
    assert res.returncode == 0, res.stderr
    assert f"no longer alive (pid {pid.pid} on {os.uname().nodename}, locked since 1971-01-01" in res.stderr
    assert not lock.exists()
