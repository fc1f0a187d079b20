"""A long job survives its client: a run whose client was killed after any stage, or whose scheduler
died, resumes from the stages it finished and writes byte for byte what an uninterrupted run writes;
a changed input or protected file, or --restart, starts over; two reruns at once never share the
staging directory. A real `dask scheduler` and workers, the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dedup.corpus import generate
from dedup.job.analysis import ORDER as ALL_STAGES
from tests.conftest import (
    DEDUP,
    kill_after,
    parquet_digests,
    run_command,
    start_command,
    start_dask,
    start_scheduler,
    write_shards,
)

ORDER = tuple(s for s in ALL_STAGES if s not in ("common", "lines", "spans"))
"""The stages a run without line dedup or a frequency cap runs and keeps, in order (`test_lines` resumes those
with lines, `test_cut_with_a_cap_resumes_to_the_same_bytes` those with the cap)."""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """About 1,500 documents: five small shards and one file of six row groups that is split across
    partitions (its parts joined at the write), and a protected file holding a few of the texts."""
    root = tmp_path_factory.mktemp("resume")
    docs = generate(800, seed=11)
    frame = pd.DataFrame({"id": [d.id for d in docs], "text": [d.text for d in docs]})
    src = write_shards(frame.iloc[:900], root / "in", 5)
    pq.write_table(pa.Table.from_pandas(frame.iloc[900:1500], preserve_index=False), src / "big.parquet",
                   row_group_size=100)
    prot = root / "eval.jsonl"
    prot.write_text("".join(json.dumps({"text": t}) + "\n" for t in frame["text"].iloc[::300]))
    return src, prot


def _command(src: Path, prot: Path, out: Path, sched: Path, *more: str) -> list[str]:
    return [*DEDUP, "run", str(src), str(out), "--scheduler-file", str(sched), "--protected", str(prot),
            "--partition-rows", "250", "--max-contaminated", "1", *more]


def _staging(out: Path) -> list[Path]:
    return [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.dedup-tmp-")]


@pytest.fixture(scope="module")
def baseline(inputs: tuple[Path, Path], dask_processes: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("baseline") / "out"
    got = run_command(_command(*inputs, out, dask_processes), timeout=240)
    assert got.returncode == 0, got.stderr
    assert "resumed" not in json.loads((out / "_dedup.json").read_text())
    digests = parquet_digests(out)
    assert any(k.startswith("_index/") for k in digests) and any(k.startswith("_report/removed") for k in digests)
    return digests


def test_a_client_killed_after_each_stage_resumes_to_the_same_output(inputs: tuple[Path, Path], dask_processes: Path,
                                                                     baseline: dict[str, str], tmp_path: Path) -> None:
    """The client is SIGKILLed right after each stage's line, one stage further each time: every
    rerun of the same command names the stages it reuses, and the last one writes what an
    uninterrupted run writes."""
    import re

    out = tmp_path / "out"
    cmd = _command(*inputs, out, dask_processes)
    spent = 0.0  # each stage's seconds, as the interrupted run that finished it logged them
    for i, stage in enumerate(ORDER):
        seen = kill_after(cmd, f"{stage}:")
        assert out.exists() is False and len(_staging(out)) == 1, seen
        if i:
            assert f"resuming: reusing {', '.join(ORDER[:i])} from the interrupted run of" in seen, seen
        spent += float(re.search(rf"INFO {stage}: .*\(([\d.]+) s\)$", seen, re.M).group(1))
    got = run_command(cmd, timeout=240)
    assert got.returncode == 0, got.stderr
    assert f"resuming: reusing {', '.join(ORDER)} from the interrupted run of" in got.stderr
    manifest = json.loads((out / "_dedup.json").read_text())
    resumed = manifest.pop("resumed")
    assert {k: resumed[k] for k in ("from", "reused")} == {"from": "report", "reused": list(ORDER)}
    # the stages' seconds as the interrupted runs kept them: what they logged (rounded to 0.1 s) but the
    # time to keep each result, which the line counts too
    assert 0 < resumed["reused_seconds"] <= spent + 0.05 * len(ORDER)
    assert f"(and {resumed['reused_seconds']:.1f} s of the interrupted run's stages, reused)" in got.stdout
    page = (out / manifest["report"]).read_text(encoding="utf-8")  # the page records where the run came from
    assert (f"<tr><th>resumed</th><td>from report, reusing {', '.join(ORDER)} of an interrupted run "
            f"({resumed['reused_seconds']:.1f} s of its stages)</td></tr>") in page
    assert parquet_digests(out) == baseline
    assert not _staging(out) and not (out / "_stages").exists() and not (out / "_resume.json").exists()


def test_a_changed_input_or_protected_file_starts_over(inputs: tuple[Path, Path], dask_processes: Path,
                                                       tmp_path: Path) -> None:
    """Killed after buckets; a protected file changed: the rerun says so and starts over. Killed
    again; an input file rewritten: the same. The output is that of a fresh run on the new files."""
    src, prot = tmp_path / "in", tmp_path / "eval.jsonl"
    shutil.copytree(inputs[0], src)
    shutil.copy(inputs[1], prot)
    out = tmp_path / "out"
    cmd = _command(src, prot, out, dask_processes)
    kill_after(cmd, "buckets:")
    prot.write_text(prot.read_text() + json.dumps({"text": "a record added to the eval set since"}) + "\n")
    seen = kill_after(cmd, "buckets:")
    assert "not resuming the interrupted run of" in seen and "the protected files changed; starting over" in seen, seen
    assert "resuming: reusing" not in seen
    shard = pd.read_parquet(src / "shard-01.parquet")
    shard.loc[0, "text"] = "a text rewritten after the run was interrupted " * 3
    shard.to_parquet(src / "shard-01.parquet", index=False)
    got = run_command(cmd, timeout=240)
    assert got.returncode == 0, got.stderr
    assert "input file shard-01.parquet changed; starting over" in got.stderr, got.stderr
    assert "resumed" not in json.loads((out / "_dedup.json").read_text())
    fresh = tmp_path / "fresh"
    again = run_command(_command(src, prot, fresh, dask_processes), timeout=240)
    assert again.returncode == 0, again.stderr
    assert parquet_digests(out) == parquet_digests(fresh)


def test_restart_discards_what_was_kept(inputs: tuple[Path, Path], dask_processes: Path, baseline: dict[str, str],
                                        tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = _command(*inputs, out, dask_processes)
    kill_after(cmd, "confirm:")
    got = run_command([*cmd, "--restart"], timeout=240)
    assert got.returncode == 0, got.stderr
    assert "--restart: the interrupted run of" in got.stderr and "resuming" not in got.stderr
    assert "resumed" not in json.loads((out / "_dedup.json").read_text())
    assert parquet_digests(out) == baseline and not _staging(out)


def test_two_reruns_at_once_one_is_refused(inputs: tuple[Path, Path], dask_processes: Path, baseline: dict[str, str],
                                           tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = _command(*inputs, out, dask_processes)
    kill_after(cmd, "buckets:")
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=240), p.communicate()[1]) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert "Another dedup run is writing OUTPUT" in refused
    assert parquet_digests(out) == baseline and not _staging(out)


@pytest.fixture()
def own_cluster(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """A scheduler and two workers of this test's own (the test kills the scheduler)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:  # workers whose scheduler is gone take long to close: nothing of theirs is needed
            p.kill()
            p.wait()


def _cluster(directory: Path, procs: list[subprocess.Popen[bytes]]) -> Path:
    directory.mkdir()
    scheduler, sched_file = start_scheduler(directory)
    procs.append(scheduler)
    procs.append(start_dask("worker", "--scheduler-file", str(sched_file), "--nworkers", "2", "--nthreads", "1",
                            "--no-dashboard", "--host", "127.0.0.1"))
    return sched_file


def test_a_lost_scheduler_resumes_on_a_new_one(inputs: tuple[Path, Path], baseline: dict[str, str], tmp_path: Path,
                                               own_cluster: list[subprocess.Popen[bytes]], dask_processes: Path) -> None:
    """The scheduler is SIGKILLed once the confirm stage has finished; the run fails, keeping what it
    finished; the same command on another scheduler (the suite's shared one) resumes and writes what
    an uninterrupted run writes."""
    out = tmp_path / "out"
    first = _cluster(tmp_path / "first", own_cluster)
    # the client gives a lost scheduler 5 s to come back, not the default 30 s
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "5s"}
    proc = start_command(_command(*inputs, out, first), env=env)
    seen = ""
    assert proc.stderr is not None
    for got in proc.stderr:
        seen += got
        if got.split(" ", 3)[-1].startswith("confirm:"):
            own_cluster[0].send_signal(signal.SIGKILL)
            break
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, seen + err
    assert "are kept in" in err and "the same command resumes from them" in err, err
    # one line says what happened: no traceback, no library's own error line, no task key
    assert "Traceback" not in err and "distributed.client" not in err and "asyncio" not in err, err
    [line] = [x for x in err.splitlines() if x.startswith("dedup: error:")]
    assert "scheduler" in line and "OUTPUT was left as it was" in line and "kept-" not in line, line
    got = run_command(_command(*inputs, out, dask_processes), timeout=240)
    assert got.returncode == 0, got.stderr
    reused = json.loads((out / "_dedup.json").read_text())["resumed"]["reused"]
    assert reused[:4] == ["features", "contamination", "buckets", "confirm"], reused
    assert parquet_digests(out) == baseline and not _staging(out)


def test_threads_resume_too(inputs: tuple[Path, Path], dask_processes: Path, baseline: dict[str, str],
                            tmp_path: Path) -> None:
    """`--threads` (no cluster: the killed process was the whole job) resumes from what it kept, and
    writes what the cluster writes."""
    out = tmp_path / "out"
    cmd = [arg for arg in _command(*inputs, out, dask_processes) if arg not in ("--scheduler-file", str(dask_processes))]
    cmd += ["--threads", "2"]
    kill_after(cmd, "roots:")
    got = run_command(cmd, timeout=240)
    assert got.returncode == 0, got.stderr
    resumed = json.loads((out / "_dedup.json").read_text())["resumed"]
    upto = ORDER.index("roots") + 1
    assert resumed["reused"][:upto] == list(ORDER[:upto]) and resumed["from"] in ("write", "report"), resumed
    assert parquet_digests(out) == baseline and not _staging(out)


def test_an_edit_that_keeps_size_and_mtime_starts_over(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    """An input file rewritten with other texts of the same size (no compression, no statistics: the
    same footer too) and its modification time set back, as `touch -r` or a build tool would: the rerun
    does not take it for the file it recorded, says so and starts over; the output is that of the new texts."""
    src, prot = tmp_path / "in", inputs[1]
    src.mkdir()
    frame = pd.read_parquet(inputs[0] / "shard-01.parquet")

    def write(f: pd.DataFrame) -> None:
        pq.write_table(pa.Table.from_pandas(f, preserve_index=False), src / "shard-01.parquet", compression="none",
                       write_statistics=False)

    write(frame)
    shutil.copy(inputs[0] / "shard-02.parquet", src / "shard-02.parquet")
    out = tmp_path / "out"
    cmd = [*DEDUP, "run", str(src), str(out), "--protected", str(prot), "--threads", "1", "--max-contaminated", "1"]
    kill_after(cmd, "buckets:")
    before = os.stat(src / "shard-01.parquet")
    footer = pq.ParquetFile(src / "shard-01.parquet").metadata.to_dict()
    edited = frame.copy()
    edited.loc[0, "text"] = edited.loc[0, "text"][::-1]  # the same characters, so the same size
    write(edited)
    os.utime(src / "shard-01.parquet", ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(src / "shard-01.parquet")
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert pq.ParquetFile(src / "shard-01.parquet").metadata.to_dict() == footer
    got = run_command(cmd, timeout=240)
    assert got.returncode == 0, got.stderr
    assert "input file shard-01.parquet changed; starting over" in got.stderr, got.stderr
    fresh = tmp_path / "fresh"
    again = run_command([*cmd[:4], str(src), str(fresh), *cmd[6:]],
                        timeout=240)
    assert again.returncode == 0, again.stderr
    assert parquet_digests(out) == parquet_digests(fresh)


def test_a_damaged_kept_stage_is_named_and_computed_again(inputs: tuple[Path, Path], dask_processes: Path,
                                                          baseline: dict[str, str], tmp_path: Path) -> None:
    """A kept part truncated, then a kept table overwritten: the rerun names the file, computes that
    stage and the ones after it again (never failing the same way twice), and writes what an
    uninterrupted run writes."""
    out = tmp_path / "out"
    cmd = [arg for arg in _command(*inputs, out, dask_processes) if arg not in ("--scheduler-file", str(dask_processes))]
    cmd += ["--threads", "2"]
    kill_after(cmd, "roots:")
    [staging] = _staging(out)
    part = sorted((staging / "_stages" / "confirm" / "graph").glob("part-*.parquet"))[0]
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    got = run_command(cmd, timeout=240)
    assert got.returncode == 0, got.stderr
    assert f"a kept result of the interrupted run is damaged ({part} is not a Parquet file" in got.stderr, got.stderr
    assert "computing confirm, components, survivors, roots again" in got.stderr
    resumed = json.loads((out / "_dedup.json").read_text())["resumed"]
    assert {k: resumed[k] for k in ("from", "reused")} == {"from": "confirm",
                                                          "reused": ["features", "contamination", "buckets"]}, resumed
    assert resumed["reused_seconds"] > 0
    assert parquet_digests(out) == baseline
    kill_after([*cmd, "--overwrite"], "roots:")
    [staging] = _staging(out)
    table = staging / "_stages" / "roots" / "summary.pkl"
    table.write_bytes(b"not the pickle that was kept")
    got = run_command([*cmd, "--overwrite"], timeout=240)
    assert got.returncode == 0, got.stderr
    assert f"({table} is not the file that was kept (28 bytes)): computing roots again" in got.stderr, got.stderr
    assert parquet_digests(out) == baseline and not _staging(out)


def test_cut_with_a_cap_resumes_to_the_same_bytes(inputs: tuple[Path, Path], dask_processes: Path,
                                                  tmp_path: Path) -> None:
    """`--contaminated cut --max-ngram-docs 2`, its client killed after the contamination stage: the
    rerun reuses it and the stages before it (the cap's among them) and writes, byte for byte, what
    an uninterrupted run writes (the cut texts, the removed list, the eval side)."""
    quotes = tmp_path / "quotes.jsonl"  # 20 words of a few documents: eight windows each, cut out of them
    texts = pd.concat([pd.read_parquet(f) for f in sorted(inputs[0].glob("*.parquet"))])["text"].iloc[5::400]
    quotes.write_text("".join(json.dumps({"q": " ".join(t.split()[40:60])}) + "\n" for t in texts))
    more = ("--contaminated", "cut", "--max-ngram-docs", "2", "--protected", str(quotes))
    ref = tmp_path / "ref"
    got = run_command(_command(*inputs, ref, dask_processes, *more), timeout=240)
    assert got.returncode == 0, got.stderr
    manifest = json.loads((ref / "_dedup.json").read_text())
    assert manifest["contamination"]["cut"] > 0 and manifest["contamination"]["common_ngrams"] > 0
    out = tmp_path / "out"
    cmd = _command(*inputs, out, dask_processes, *more)
    kill_after(cmd, "contamination:")
    got = run_command(cmd, timeout=240)
    assert got.returncode == 0, got.stderr
    assert "resuming: reusing common, features, contamination from the interrupted run of" in got.stderr
    digests = parquet_digests(out)
    assert "_report/eval_records.parquet" in digests
    assert digests == parquet_digests(ref)
