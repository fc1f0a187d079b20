"""What a route costs on a local cluster: a shuffle against one gathering task (`route_small`).

    python benchmarks/route_cost.py                      # 16 partitions, 2 workers
    python benchmarks/route_cost.py --rows 2000 100000 --repeats 3

Each frame has the shape of the job's routed frames: a document key, a short string id and a
512-byte signature a row. Both ways move every row to the partition its key names (`dedup.job.routing`);
seconds are the wall time of routing plus counting each partition's rows, median of interleaved
repeats. `dedup.job.routing.SMALL_ROUTE_BYTES` decides which one the job takes.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import numpy as np
import pandas as pd


def _part(i: int, rows: int) -> pd.DataFrame:
    from dedup.partition.codec import sig_payload

    rng = np.random.default_rng(i)
    return pd.DataFrame({"doc": rng.integers(0, 16 << 40, rows, dtype=np.int64),
                         "_id": [f"doc-{i}-{r}" for r in range(rows)],
                         "sig": sig_payload(rng.integers(0, 2**32, (rows, 128), dtype=np.uint32))})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[2_000, 20_000, 100_000, 400_000],
                    help="rows of the whole frame")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    from dedup.job import routing

    n = args.partitions

    def dest(d: pd.DataFrame) -> np.ndarray:
        return (d["doc"].to_numpy(np.int64) >> 40) % n

    print(f"| rows | MB | shuffle s | one task s | shuffle / one task |  ({args.workers} workers, {n} partitions, "
          f"median of {args.repeats})")
    print("|---:|---:|---:|---:|---:|")
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster):
        for rows in args.rows:
            frame = dd.from_map(_part, range(n), rows=rows // n).persist()
            mb = frame.memory_usage(deep=True).sum().compute() / 2**20
            times: dict[str, list[float]] = {"shuffle": [], "small": []}
            for _ in range(args.repeats):
                for way in times:
                    start = time.perf_counter()
                    routed = routing.route_by(frame, dest, n, rows=rows if way == "small" else None, row_bytes=0)
                    routed.map_partitions(len).compute()
                    times[way].append(time.perf_counter() - start)
            s, o = statistics.median(times["shuffle"]), statistics.median(times["small"])
            print(f"| {rows:,} | {mb:,.0f} | {s:.2f} | {o:.2f} | {s / o:.1f} |", flush=True)


if __name__ == "__main__":
    main()
