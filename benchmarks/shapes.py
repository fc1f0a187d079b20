"""Production shapes: one big file against the same rows in many files, and a boilerplate corpus
with `--confirm estimate` and `--confirm exact`.

    pip install -e ".[bench]"
    python benchmarks/shapes.py                        # 204,000 documents; 2,000 near copies of a 1,500-word page
    python benchmarks/shapes.py --docs 50000 --copies 500 --ordinary 20000    # a quick look

1. The §7 corpus written as one Parquet file (row groups of 10,000 rows) and as 16 files: `dedup
   run --n-workers 2` on each, in a process of its own; partitions, wall seconds, the peak RSS of
   one worker, and whether the same documents are kept.
2. `--ordinary` documents of the §7 corpus plus `--copies` near copies of one ~1,500-word page (one
   word changed in each, so every copy is a distinct text and a member of the same buckets), in
   4 shards: `dedup run --n-workers 2` with each confirm mode; seconds, the peak RSS of one worker,
   candidate pairs, and the exact run's time and peak against the estimate run's.
Each run `--repeats` times, interleaved; medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from corpus import corpus_frame, run_cli, write_corpus  # noqa: E402
from speed import RESULTS, PeakRSS  # noqa: E402


def _timed(src: Path, out: Path, workers: int, *extra: str) -> dict:
    with PeakRSS(children_only=True) as mem:
        manifest, wall = run_cli(src, out, workers, *extra)
    kept = set(pq.read_table(out, columns=["id"]).column("id").to_pylist()) if out.exists() else set()
    return {"wall": wall, "worker_peak": mem.child_peak, "manifest": manifest, "kept": kept}


def big_file(frame: pd.DataFrame, tmp: Path, workers: int, repeats: int) -> list[dict]:
    one = tmp / "one"
    one.mkdir()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), one / "corpus.parquet", row_group_size=10_000)
    many = write_corpus(frame, tmp / "many", shards=16)
    runs: dict[str, list[dict]] = {"one file": [], "16 files": []}
    for _ in range(repeats):
        for label, src in (("one file", one), ("16 files", many)):
            runs[label].append(_timed(src, tmp / "out", workers))
    same = runs["one file"][0]["kept"] == runs["16 files"][0]["kept"]
    print(f"\n### one file against 16 files: {len(frame):,} documents, {workers} local workers, median of {repeats}\n")
    print("| input | partitions | wall s | peak RSS of one worker (MiB) | documents kept |")
    print("|---|---:|---:|---:|---:|")
    rows = []
    for label, rs in runs.items():
        row = {"input": label, "partitions": rs[0]["manifest"]["partitions"],
               "wall": statistics.median(r["wall"] for r in rs),
               "worker_peak_mib": statistics.median(r["worker_peak"] for r in rs) / 2**20,
               "kept": len(rs[0]["kept"])}
        rows.append(row)
        print(f"| {label} | {row['partitions']} | {row['wall']:.1f} | {row['worker_peak_mib']:,.0f} | {row['kept']:,} |")
    print(f"\nThe same documents kept: {same}; one worker's peak, one file against 16 files: "
          f"{rows[0]['worker_peak_mib'] / rows[1]['worker_peak_mib']:.2f}x")
    return rows


def boilerplate(ordinary: int, copies: int, tmp: Path, workers: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(7)
    words = [f"term{i}" for i in rng.integers(0, 5_000, size=1_500)]
    texts = []
    for i in range(copies):
        w = list(words)
        w[int(rng.integers(0, len(w)))] = f"edit{i}"
        texts.append(" ".join(w))
    base = corpus_frame(ordinary)[["id", "text"]]
    frame = pd.concat([base, pd.DataFrame({"id": [f"page{i:05d}" for i in range(copies)], "text": texts})],
                      ignore_index=True).sample(frac=1.0, random_state=1)
    src = write_corpus(frame, tmp / "boiler", shards=4)
    runs: dict[str, list[dict]] = {"estimate": [], "exact": []}
    for _ in range(repeats):
        for mode in runs:
            runs[mode].append(_timed(src, tmp / "out", workers, "--confirm", mode))
    print(f"\n### boilerplate: {ordinary:,} ordinary documents and {copies:,} near copies of one 1,500-word page, "
          f"{workers} local workers, median of {repeats}\n")
    print("| confirm | wall s | confirm stage s | peak RSS of one worker (MiB) | candidate pairs | near duplicates |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = []
    for mode, rs in runs.items():
        m = rs[0]["manifest"]
        row = {"confirm": mode, "wall": statistics.median(r["wall"] for r in rs),
               "confirm_s": statistics.median(r["manifest"]["seconds"]["confirm"] for r in rs),
               "worker_peak_mib": statistics.median(r["worker_peak"] for r in rs) / 2**20,
               "candidate_pairs": m["candidate_pairs"], "near": m["near_duplicates_found"]}
        rows.append(row)
        print(f"| {mode} | {row['wall']:.1f} | {row['confirm_s']:.2f} | {row['worker_peak_mib']:,.0f} | "
              f"{row['candidate_pairs']:,} | {row['near']:,} |")
    print(f"\nexact against estimate: {rows[1]['wall'] / rows[0]['wall']:.2f}x the wall, "
          f"{rows[1]['worker_peak_mib'] / rows[0]['worker_peak_mib']:.2f}x one worker's peak")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=204_000, help="documents of the one-file comparison")
    ap.add_argument("--ordinary", type=int, default=200_000, help="ordinary documents of the boilerplate corpus")
    ap.add_argument("--copies", type=int, default=2_000, help="near copies of the 1,500-word page")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", default="big-file,boilerplate", help="which comparisons to run, comma separated")
    args = ap.parse_args()
    parts = args.parts.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="dedup-shapes-"))
    report = {}
    try:
        if "big-file" in parts:
            report["big_file"] = big_file(corpus_frame(args.docs), tmp, args.workers, args.repeats)
        if "boilerplate" in parts:
            report["boilerplate"] = boilerplate(args.ordinary, args.copies, tmp, args.workers, args.repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "shapes.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
