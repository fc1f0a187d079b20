"""What a small job costs on a local cluster: its tasks and round trips, not its documents.

    python benchmarks/small_runs.py                    # 544 documents, 7 partitions, 2 workers
    PYTHONPATH=<another checkout> python benchmarks/small_runs.py   # the same runs of that version

A corpus of a few hundred documents takes seconds whatever its size, as a test suite's runs and
a newcomer's first runs do: every task costs the scheduler and a worker a few milliseconds, and
every step that waits for its results a round trip. On the contract's corpus (`dedup.corpus`,
300 families) written as 7 shards, each run is `dedup.job.pipeline.run` with the defaults (the
page and the index, kept stages), with `--clusters centred` and components on the cluster, and with `--confirm exact`;
the table gives the median of `--repeats` runs after one unmeasured run: wall seconds, CPU seconds
of every process (this one holds the client and the scheduler), and the tasks the workers ran.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

MODES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "centred, components on the cluster": {"clusters": "centred", "components": "distributed"},
    "--confirm exact": {"confirm": "exact"},
}
"""Each mode's options to `run`; `confirm` is set on the run's `Params`."""


def _cpu_seconds() -> float:
    """CPU seconds of this process and its children (the local workers) so far."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            continue
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", type=int, default=300, help="families of the contract's corpus (300: 544 documents)")
    ap.add_argument("--shards", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    from distributed import Client, LocalCluster, get_task_stream

    import dedup
    from dedup import Params
    from dedup.corpus import generate
    from dedup.job.pipeline import run

    docs = generate(args.families, seed=1)
    frame = pd.DataFrame({"id": [d.id for d in docs], "text": [d.text for d in docs]})
    root = Path(tempfile.mkdtemp(prefix="dedup-small-runs-"))
    try:
        src = root / "in"
        src.mkdir()
        for i in range(args.shards):
            frame.iloc[i::args.shards].to_parquet(src / f"shard-{i:02d}.parquet", index=False)
        print(f"dedup from {Path(dedup.__file__).parent.parent}: {len(frame)} documents in {args.shards} shards, "
              f"{args.workers} local workers, median of {args.repeats}")
        print("| run | wall s | CPU s, all processes | tasks | stages (s) |")
        print("|---|---:|---:|---:|---|")
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                          silence_logs=logging.ERROR) as cluster, Client(cluster):
            for name, options in MODES.items():
                walls, cpus, tasks = [], [], []
                seconds: dict[str, list[float]] = {}
                for k in range(args.repeats + 1):
                    out = root / f"out-{k}"
                    wall, cpu = time.perf_counter(), _cpu_seconds()
                    with get_task_stream() as stream:
                        given = dict(options)
                        if "confirm" in given:
                            given["params"] = Params(confirm=given.pop("confirm"))
                        manifest = run(str(src), str(out), drop=False, partition_rows=len(frame) // args.shards + 1,
                                       **given)
                    wall, cpu = time.perf_counter() - wall, _cpu_seconds() - cpu
                    shutil.rmtree(out)
                    if k == 0:
                        continue  # imports and first calls
                    walls.append(wall)
                    cpus.append(cpu)
                    tasks.append(len(stream.data))
                    for stage, s in manifest["seconds"].items():
                        seconds.setdefault(stage, []).append(s)
                stages = ", ".join(f"{s} {statistics.median(v):.2f}" for s, v in seconds.items() if s != "total")
                print(f"| {name} | {statistics.median(walls):.2f} | {statistics.median(cpus):.2f} | "
                      f"{statistics.median(tasks):.0f} | {stages} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
