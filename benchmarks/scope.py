"""Dedup scope, measured: one `--within` job against one run per crawl, and the global run beside them.

    python benchmarks/scope.py                  # 1,000,000 documents
    python benchmarks/scope.py --docs 200000

The §7 corpus (`corpus.corpus_frame`), each document given one of three crawls at random, so near
copies of one article sit in different crawls (clusters planted across crawls), in Hive directories
`crawl=CC-…/` of 6 files each. Each run is `dedup near` in a process of its own on a local cluster
of `--workers` workers (its start included), `--no-report --no-index`: the global run over every
crawl, `--within crawl` over every crawl, and each crawl's directory alone. The `--within` output
must equal the three runs' (the same rows, `minhash_cluster` and `minhash_cluster_size`), and its
wall is compared with the global run's.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import corpus_frame  # noqa: E402
from speed import PeakRSS, quiet  # noqa: E402

CRAWLS = ("CC-2024-10", "CC-2024-33", "CC-2025-05")
FILES_PER_CRAWL = 6


def write_crawls(frame: pd.DataFrame, root: Path, seed: int = 2) -> Path:
    rng = random.Random(seed)
    crawl = [rng.choice(CRAWLS) for _ in range(len(frame))]
    frame = frame.assign(crawl=crawl)
    for c in CRAWLS:
        part = frame[frame["crawl"] == c][["id", "text"]]
        (root / f"crawl={c}").mkdir(parents=True)
        for i in range(FILES_PER_CRAWL):
            part.iloc[i::FILES_PER_CRAWL].to_parquet(root / f"crawl={c}" / f"part-{i}.parquet", index=False)
    return root


def run_one(src: Path, out: Path, workers: int, *extra: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    quiet()
    with PeakRSS(children_only=True) as peak:
        start = time.perf_counter()
        got = subprocess.run([sys.executable, "-m", "dedup", "near", str(src), str(out), "--n-workers", str(workers),
                              "--no-report", "--no-index", "--cluster-size", *extra],
                             capture_output=True, text=True, cwd=out.parent)
        wall = time.perf_counter() - start
    if got.returncode:
        raise SystemExit(f"{extra} failed: {got.stderr[-2000:]}")
    return {"wall": wall, "cpu": peak.cpu_total, "worker": peak.child_peak,
            "manifest": json.loads((out / "_dedup.json").read_text())}


def rows_of(out: Path) -> pd.DataFrame:
    """Every output shard's (id, minhash_cluster, minhash_cluster_size), by id."""
    files = sorted(p for p in out.rglob("*.parquet") if not any(q.startswith("_") for q in p.relative_to(out).parts))
    frames = [pd.read_parquet(f, columns=["id", "minhash_cluster", "minhash_cluster_size"]) for f in files]
    return pd.concat(frames).set_index("id").sort_index()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dedup-scope-") as tmp:
        work = Path(tmp)
        frame = corpus_frame(args.docs)
        gb = frame["text"].str.len().sum() / 1e9
        src = write_crawls(frame[["id", "text"]], work / "in")
        del frame
        runs = {"global (every crawl together)": run_one(src, work / "global", args.workers),
                "--within crawl": run_one(src, work / "within", args.workers, "--within", "crawl")}
        alone = {c: run_one(src / f"crawl={c}", work / f"alone-{c}", args.workers) for c in CRAWLS}
        within = rows_of(work / "within")
        separate = pd.concat([rows_of(work / f"alone-{c}") for c in CRAWLS]).sort_index()
        same = within.equals(separate)
        base = runs["global (every crawl together)"]
        print(f"\n{args.docs:,} documents ({gb:.2f} GB of text) in {len(CRAWLS)} crawls of {FILES_PER_CRAWL} files, "
              f"{args.workers} local workers\n")
        print("| run | wall s | CPU s | peak RSS of one worker (MiB) | near duplicates removed | wall against the "
              "global run |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, r in runs.items():
            print(f"| `{name}` | {r['wall']:.1f} | {r['cpu']:.1f} | {r['worker'] / 2**20:,.0f} "
                  f"| {r['manifest']['near_duplicates_dropped']:,} | {r['wall'] / base['wall']:.2f} |")
        wall = sum(r["wall"] for r in alone.values())
        cpu = sum(r["cpu"] for r in alone.values())
        peak = max(r["worker"] for r in alone.values())
        dropped = sum(r["manifest"]["near_duplicates_dropped"] for r in alone.values())
        print(f"| three runs, one per crawl (summed) | {wall:.1f} | {cpu:.1f} | {peak / 2**20:,.0f} | {dropped:,} "
              f"| {wall / base['wall']:.2f} |")
        print(f"\nThe --within output and the three runs' together: {'identical' if same else 'DIFFERENT'} "
              f"({len(within):,} rows: ids, minhash_cluster, minhash_cluster_size).")
        values = runs["--within crawl"]["manifest"]["within"]["values"]
        print("Per crawl (--within): " + "; ".join(f"{v['value']}: {v['documents']:,} documents, "
                                                  f"{v['near_duplicates']:,} near duplicates" for v in values))


if __name__ == "__main__":
    main()
