"""Where the whole job's time goes: the kernels alone on one core, then `dedup run` per stage.

    python benchmarks/stage_profile.py                     # the 204,000-document §7 corpus, 2 workers
    python benchmarks/stage_profile.py --docs 50000 --repeats 1

1. One process, one core, the whole corpus in partitions of 25,000 (CPU seconds): reading the
   texts from Parquet, tokenising, hashing the shingles, the MinHash minimum, and the rest of
   the features stage (text hashes, contamination columns, building the frame), then the band
   keys and the long form the bucket shuffle ships.
2. `dedup run INPUT OUTPUT --n-workers 2` in a subprocess, `repeats` times: seconds per stage
   from the manifest (median), the job's time (the sum of its stages), the rest of the wall
   time (interpreter, imports, cluster start, planning), and documents per CPU-second of job time
   (documents / (workers x job seconds)).
3. With --task-stream, the job once more in this process with Dask's task stream: per stage, the
   tasks it ran, the share of the workers' time they filled, the CPU seconds of the client with
   the scheduler (which share the cores with the workers) and of the workers; then the workers'
   seconds by kind of task.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import corpus_frame, run_cli, write_corpus  # noqa: E402

from dedup.partition.buckets import long_form
from dedup.partition.features import document_features

PARTITION = 25_000


def kernels(src: Path) -> tuple[dict[str, float], int]:
    """CPU seconds of each step of the features stage over every partition, in this process, and
    the shingle x permutation pairs the MinHash minimum went through (its ns a pair: `per_pair`)."""
    import pyarrow.parquet as pq

    from dedup.config import Params
    from dedup.core import _kernels
    from dedup.core import text as text_mod
    from dedup.core.hashing import perm_params

    params = Params()
    a, b = perm_params(params.num_perm, params.seed)
    a32, b32 = a.astype("uint32"), b.astype("uint32")
    import numpy as np
    import pandas as pd

    warm = document_features(pd.DataFrame({"id": ["x"], "text": ["warm up the kernels"]}), "id", "text", params, None)
    long_form(warm, params)
    t: dict[str, float] = dict.fromkeys(("read texts", "tokenise", "shingle hashes", "minhash minimum",
                                         "features stage, total", "band keys + long form"), 0.0)
    files = sorted(src.glob("*.parquet"))
    pairs = 0
    for f in files:
        c = time.process_time()
        table = pq.read_table(f, columns=["id", "text"])
        if hasattr(text_mod, "encode_column"):  # the texts stay in Arrow, as the job reads them
            part = pd.DataFrame({"id": table.column("id").to_pylist(),
                                 "text": pd.arrays.ArrowStringArray(table.column("text").cast("large_string"))})
        else:  # builds before the Arrow text path
            part = table.to_pandas()
        t["read texts"] += time.process_time() - c
        for lo in range(0, len(part), PARTITION):
            p = part.iloc[lo:lo + PARTITION].reset_index(drop=True)
            c = time.process_time()
            batch = (text_mod.encode_column(p["text"]) if hasattr(text_mod, "encode_column")
                     else text_mod.encode_batch(p["text"].tolist()))
            t["tokenise"] += time.process_time() - c
            c = time.process_time()
            if hasattr(batch, "shingle_hashes"):
                h, offsets = batch.shingle_hashes(params.shingle_size, params.shingle_unit)
            else:  # builds before --shingle-unit
                h, offsets = batch.window_hashes(params.shingle_size, short=True)
            t["shingle hashes"] += time.process_time() - c
            c = time.process_time()
            out = np.empty((len(offsets) - 1, params.num_perm), dtype=np.uint32)
            _kernels.minhash_rows(h, offsets, a32, b32, out)  # x = h mod P in the kernel
            t["minhash minimum"] += time.process_time() - c
            pairs += len(h) * params.num_perm
            c = time.process_time()
            feat = document_features(p, "id", "text", params, None)
            t["features stage, total"] += time.process_time() - c
            c = time.process_time()
            long_form(feat, params)
            t["band keys + long form"] += time.process_time() - c
    return t, pairs


def per_pair(steps: dict[str, float], pairs: int) -> str:
    """The MinHash minimum's nanoseconds a shingle x permutation, as a line under the one-core table."""
    return (f"MinHash minimum: {1e9 * steps['minhash minimum'] / max(1, pairs):.2f} ns a shingle x permutation "
            f"({pairs:,} pairs)")


def task_stream(src: Path, workers: int, extra: list[str]) -> None:
    """The job once more in this process on the local cluster `dedup run` starts, with dask's task
    stream: per stage (its window from the stage's own log line), the tasks run, the share of the
    workers' time they filled, and the CPU seconds of this process (client and scheduler, which
    share the machine's cores with the workers) and of the workers; then the workers' seconds per
    kind of task over the whole job."""
    import logging
    import threading
    from collections import defaultdict

    import psutil
    from distributed import get_task_stream

    from dedup.job.pipeline import run
    from dedup.job.timing import STAGE_LINE
    from dedup.runtime import dask_client

    ends: list[tuple[str, float, float]] = []  # (stage, end, seconds), from Stage's log line

    class StageEnds(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.msg == STAGE_LINE and isinstance(record.args, tuple):
                ends.append((str(record.args[0]), record.created, float(record.args[2])))

    handler = StageEnds(logging.INFO)
    dedup_log = logging.getLogger("dedup")
    level = dedup_log.level
    dedup_log.addHandler(handler)
    dedup_log.setLevel(logging.INFO)
    me = psutil.Process()
    cpu: list[tuple[float, float, float]] = []  # (time, this process's CPU s, the workers' CPU s)
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            kids = 0.0
            for c in me.children(recursive=True):
                try:
                    kids += sum(c.cpu_times()[:2])
                except psutil.Error:
                    pass
            cpu.append((time.time(), sum(me.cpu_times()[:2]), kids))
            sampling.wait(0.05)

    out = Path(tempfile.mkdtemp(prefix="dedup-profile-")) / "out"
    try:
        # the cluster `dedup run` starts: its workers load the kernels as they start (a plain
        # LocalCluster's pay about 1 s for that in their first features task, which is not the job's)
        with dask_client(n_workers=workers) as client:
            client.run(int)
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            start = time.time()
            with get_task_stream(client) as ts:
                run(str(src), str(out), write_report="--no-report" not in extra, write_index="--no-index" not in extra)
            wall = time.time() - start
            sampling.set()
            sampler.join()
    finally:
        dedup_log.removeHandler(handler)
        dedup_log.setLevel(level)
        shutil.rmtree(out.parent, ignore_errors=True)

    def cpu_at(t: float) -> tuple[float, float]:
        near = min(cpu, key=lambda c: abs(c[0] - t))
        return near[1], near[2]

    windows = [(name, end - secs, end) for name, end, secs in ends]
    busy: dict[tuple[str, str], float] = defaultdict(float)
    per_stage: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    tasks: dict[str, int] = defaultdict(int)
    for t in ts.data:
        name = t["key"][0] if isinstance(t["key"], tuple) else str(t["key"])
        prefix = name.rsplit("-", 1)[0] if "-" in name else name
        for ss in t["startstops"]:
            secs = ss["stop"] - ss["start"]
            busy[(prefix, ss["action"])] += secs
            mid = (ss["start"] + ss["stop"]) / 2
            stage = next((w[0] for w in windows if w[1] <= mid < w[2]), "(between stages)")
            per_stage[stage][prefix] += secs
            if ss["action"] == "compute":
                tasks[stage] += 1
    print(f"\n### where the workers' time goes, per stage (task stream, {workers} workers, {wall:.1f} s wall)\n")
    print("| stage | seconds | tasks | workers busy | CPU s, client + scheduler | CPU s, workers | "
          "largest kinds of task (worker seconds) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, a, b in windows:
        (m0, w0), (m1, w1) = cpu_at(a), cpu_at(b)
        kinds = sorted(per_stage[name].items(), key=lambda kv: -kv[1])[:3]
        filled = sum(per_stage[name].values()) / (workers * (b - a)) if b > a else 0.0
        print(f"| {name} | {b - a:.2f} | {tasks[name]} | {100 * filled:.0f}% | {m1 - m0:.2f} | {w1 - w0:.2f} | "
              + ", ".join(f"{k[:40]} {v:.2f}" for k, v in kinds) + " |")
    total = sum(busy.values())
    print(f"\n{sum(tasks.values())} tasks; by kind over the whole job:\n")
    print("| task prefix | action | seconds | share of worker time |")
    print("|---|---|---:|---:|")
    for (prefix, action), secs in sorted(busy.items(), key=lambda kv: -kv[1])[:18]:
        print(f"| {prefix[:60]} | {action} | {secs:.2f} | {100 * secs / (wall * workers):.0f}% |")
    print(f"| (all tasks) | | {total:.2f} | {100 * total / (wall * workers):.0f}% |")
    print(f"| idle: scheduling, client round trips, waiting | | {wall * workers - total:.2f} | "
          f"{100 * (wall * workers - total) / (wall * workers):.0f}% |")


def job(src: Path, workers: int | None, extra: list[str], pythonpath: str | None = None) -> tuple[dict[str, float], float]:
    """`dedup run` in a subprocess (with `pythonpath`, the dedup found there): manifest seconds, wall."""
    out = Path(tempfile.mkdtemp(prefix="dedup-profile-")) / "out"
    manifest, wall = run_cli(src, out, workers, *extra, pythonpath=pythonpath)
    shutil.rmtree(out.parent, ignore_errors=True)
    return manifest["seconds"], wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=204_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--label", default="", help="a name for this build in the tables (e.g. a commit)")
    ap.add_argument("--job-args", default="", help="extra arguments for dedup run, space separated")
    ap.add_argument("--task-stream", action="store_true", help="also break the workers' time down by task")
    ap.add_argument("--job-only", action="store_true", help="skip the one-core breakdown")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dedup-profile-in-"))
    try:
        frame = corpus_frame(args.docs)
        src = write_corpus(frame, work / "in", shards=16)
        n = len(frame)
        if not args.job_only:
            k, pairs = kernels(src)
            print(f"\n### {args.label} one core, {n:,} documents (CPU seconds)\n")
            print("| step | CPU s | docs per CPU-second |")
            print("|---|---:|---:|")
            for name, secs in k.items():
                print(f"| {name} | {secs:.2f} | {n / secs:,.0f} |")
            print(f"\n{per_pair(k, pairs)}")
        runs = [job(src, args.workers, args.job_args.split()) for _ in range(args.repeats)]
        stages = [s for s in runs[0][0] if s != "total"]
        med = {s: statistics.median(r[0].get(s, 0.0) for r in runs) for s in stages}
        job_s = statistics.median(sum(v for s, v in r[0].items() if s != "total") for r in runs)
        wall = statistics.median(r[1] for r in runs)
        print(f"\n### {args.label} dedup run, {n:,} documents, {args.workers} workers, median of {args.repeats}\n")
        print("| stage | seconds | share of the job |")
        print("|---|---:|---:|")
        for s in stages:
            print(f"| {s} | {med[s]:.2f} | {100 * med[s] / job_s:.0f}% |")
        print(f"| **job (sum of stages)** | **{job_s:.2f}** | 100% |")
        print(f"| interpreter, imports, cluster start, planning | {wall - job_s:.2f} | |")
        print(f"| wall | {wall:.2f} | |")
        print(f"\ndocuments per CPU-second of job time: {n / (args.workers * job_s):,.0f}")
        if args.task_stream:
            task_stream(src, args.workers, args.job_args.split())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
