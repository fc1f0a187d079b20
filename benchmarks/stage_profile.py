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

PARTITION = 25_000


def kernels(src: Path) -> tuple[dict[str, float], int]:
    """CPU seconds of each step of the features stage over every partition, in this process, and
    the shingle x permutation pairs the MinHash minimum went through (its ns a pair: `per_pair`)."""
    import pyarrow.parquet as pq

    from dedup import _kernels, frames
    from dedup import text as text_mod
    from dedup.config import Params
    from dedup.hashing import perm_params

    params = Params()
    a, b = perm_params(params.num_perm, params.seed)
    a32, b32 = a.astype("uint32"), b.astype("uint32")
    import numpy as np
    import pandas as pd

    warm = frames.features(pd.DataFrame({"id": ["x"], "text": ["warm up the kernels"]}), "id", "text", params, None)
    frames.long_form(warm, params)
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
            feat = frames.features(p, "id", "text", params, None)
            t["features stage, total"] += time.process_time() - c
            c = time.process_time()
            frames.long_form(feat, params)
            t["band keys + long form"] += time.process_time() - c
    return t, pairs


def per_pair(steps: dict[str, float], pairs: int) -> str:
    """The MinHash minimum's nanoseconds a shingle x permutation, as a line under the one-core table."""
    return (f"MinHash minimum: {1e9 * steps['minhash minimum'] / max(1, pairs):.2f} ns a shingle x permutation "
            f"({pairs:,} pairs)")


def task_stream(src: Path, workers: int, extra: list[str]) -> None:
    """The job once more in this process on the local cluster `dedup run` starts, with dask's task stream: seconds of
    computing and of moving data, summed per kind of task over both workers, and the idle rest."""
    from collections import defaultdict

    from distributed import get_task_stream

    from dedup.pipeline import run
    from dedup.runtime import dask_client

    out = Path(tempfile.mkdtemp(prefix="dedup-profile-")) / "out"
    # the cluster `dedup run` starts: its workers load the kernels as they start (a plain
    # LocalCluster's pay about 1 s for that in their first features task, which is not the job's)
    with dask_client(n_workers=workers) as client:
        client.run(lambda: None)
        start = time.perf_counter()
        with get_task_stream(client) as ts:
            run(str(src), str(out), write_report="--no-report" not in extra, write_index="--no-index" not in extra)
        wall = time.perf_counter() - start
    shutil.rmtree(out.parent, ignore_errors=True)
    busy: dict[tuple[str, str], float] = defaultdict(float)
    for t in ts.data:
        name = t["key"][0] if isinstance(t["key"], tuple) else str(t["key"])
        prefix = name.rsplit("-", 1)[0] if "-" in name else name
        for ss in t["startstops"]:
            busy[(prefix, ss["action"])] += ss["stop"] - ss["start"]
    total = sum(busy.values())
    print(f"\n### where the workers' time goes (task stream, {workers} workers, {wall:.1f} s wall)\n")
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
