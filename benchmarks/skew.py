"""Skew: one boilerplate page copied 25k, 50k and 100k times among ordinary documents.

    python benchmarks/skew.py [--copies 25000,50000,100000]

Shows that time grows linearly with the number of copies (identical texts collapse to one
representative per partition and per bucket, so no partition holds a quadratic pair list) and
that every copy lands in one cluster.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd  # noqa: E402
from corpus import corpus_frame, write_corpus  # noqa: E402
from speed import RESULTS, PeakRSS  # noqa: E402


def main() -> None:
    from distributed import Client, LocalCluster

    from dedup.job.pipeline import run

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", default="25000,50000,100000")
    ap.add_argument("--ordinary", type=int, default=5000, help="ordinary documents beside the copies")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    page = "We use cookies. Accept all. " + " ".join(f"boiler{i}" for i in range(170))
    base = corpus_frame(args.ordinary)[["id", "text"]]
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="dedup-skew-"))
    print("| copies | documents | seconds | µs per document | peak RSS (MiB) | largest cluster | same-text pairs "
          "| approximated buckets |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    try:
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                          silence_logs=40) as cluster, Client(cluster):
            for copies in (int(x) for x in args.copies.split(",")):
                frame = pd.concat([pd.DataFrame({"id": [f"copy{i:07d}" for i in range(copies)], "text": page}), base])
                src = write_corpus(frame, tmp / f"in{copies}", shards=8)
                with PeakRSS() as mem:
                    start = time.perf_counter()
                    m = run(str(src), str(tmp / f"out{copies}"), drop=False)
                    secs = time.perf_counter() - start
                out = pd.read_parquet(tmp / f"out{copies}", columns=["id", "minhash_cluster"])
                one = out.loc[out["id"].str.startswith("copy"), "minhash_cluster"].nunique() == 1
                rows.append({"copies": copies, "docs": len(frame), "seconds": secs, "peak_rss": mem.peak,
                             "largest_cluster": m["largest_cluster"], "all_copies_one_cluster": bool(one),
                             "same_text_pairs": m["same_text_pairs"], "approximated_buckets": m["approximated_buckets"]})
                print(f"| {copies:,} | {len(frame):,} | {secs:.1f} | {secs / len(frame) * 1e6:.0f} | {mem.peak / 2**20:,.0f} | "
                      f"{m['largest_cluster']:,} | {m['same_text_pairs']:,} | {m['approximated_buckets']} |")
                shutil.rmtree(src, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "skew.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
