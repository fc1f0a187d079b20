"""Speed and memory of dedup against its peers, measured in one process run.

    python benchmarks/speed.py                   # signatures on one core, the whole job, scaling to 200k
    python benchmarks/speed.py --scale 10000,50000,200000,1000000

1. text -> signatures on one core (CPU seconds): dedup.signatures, datasketch MinHash.update_batch
   and rensa RMinHash.update, the peers with Python shingling. Repeats interleaved; median and
   the ratio per repeat.
2. the whole job: `dedup run` (Parquet in, Parquet out, 2 local worker processes) against
   datasketch MinHashLSH insert + query in one process; wall time, peak RSS of all processes.
3. scaling: `dedup run` at several corpus sizes, seconds and peak memory per document.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402
from corpus import corpus_frame, write_corpus  # noqa: E402

from dedup import signatures  # noqa: E402
from dedup.text import shingles  # noqa: E402

RESULTS = Path(__file__).parent / "results"


class PeakRSS:
    """Samples the RSS of this process and all its children (Dask workers) every 50 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process(os.getpid())
        while not self._stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.05)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def sig_dedup(texts: Sequence[str]) -> None:
    signatures(texts)


def sig_datasketch(texts: Sequence[str]) -> None:
    from datasketch import MinHash

    for t in texts:
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([s.encode("utf-8") for s in shingles(t)])
        m.digest()


def sig_rensa(texts: Sequence[str]) -> None:
    from rensa import RMinHash

    for t in texts:
        m = RMinHash(num_perm=128, seed=1)
        m.update(list(shingles(t)))
        m.digest()


def cpu_seconds(fn: Callable[[Sequence[str]], None], texts: Sequence[str]) -> float:
    start = time.process_time()
    fn(texts)
    return time.process_time() - start


def bench_signatures(texts: Sequence[str], repeats: int) -> list[dict]:
    tools = {"dedup": sig_dedup, "datasketch": sig_datasketch, "rensa": sig_rensa}
    sig_dedup(texts[:10])  # load the compiled kernels (numba cache) before timing
    times: dict[str, list[float]] = {k: [] for k in tools}
    for _ in range(repeats):
        for name, fn in tools.items():
            times[name].append(cpu_seconds(fn, texts))
    rows = []
    for name, ts in times.items():
        ratios = [o / d for o, d in zip(ts, times["dedup"])]
        rows.append({"tool": name, "docs": len(texts), "median_cpu_s": statistics.median(ts),
                     "docs_per_cpu_s": len(texts) / statistics.median(ts),
                     "dedup_speedup": statistics.median(ratios)})
    print("\n### text to signatures, one core\n")
    print("| tool | docs | median CPU s | docs per CPU-second | dedup is x faster (median of per-repeat ratios) |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['tool']} | {r['docs']:,} | {r['median_cpu_s']:.2f} | {r['docs_per_cpu_s']:,.0f} | {r['dedup_speedup']:.1f} |")
    return rows


def run_dedup_job(src: Path, workers: int) -> tuple[float, int, dict]:
    from distributed import Client, LocalCluster

    from dedup.pipeline import run

    out = Path(tempfile.mkdtemp(prefix="dedup-bench-out-")) / "out"
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=40) as cluster, Client(cluster):
        with PeakRSS() as mem:
            start = time.perf_counter()
            manifest = run(str(src), str(out))
            secs = time.perf_counter() - start
    shutil.rmtree(out.parent, ignore_errors=True)
    return secs, mem.peak, manifest


def run_datasketch_job(src: Path) -> tuple[float, int]:
    import pandas as pd
    from datasketch import MinHash, MinHashLSH

    with PeakRSS() as mem:
        start = time.perf_counter()
        frame = pd.read_parquet(src)
        lsh = MinHashLSH(threshold=0.8, num_perm=128, params=(16, 8))
        keep = []
        for doc_id, text in zip(frame["id"], frame["text"]):
            m = MinHash(num_perm=128, seed=1)
            m.update_batch([s.encode("utf-8") for s in shingles(text)])
            if not lsh.query(m):
                keep.append(doc_id)
            lsh.insert(doc_id, m)
        out = Path(tempfile.mkdtemp(prefix="ds-bench-out-"))
        frame[frame["id"].isin(set(keep))].to_parquet(out / "kept.parquet")
        secs = time.perf_counter() - start
    shutil.rmtree(out, ignore_errors=True)
    return secs, mem.peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sig-docs", type=int, default=10_000, help="documents for the one-core signature benchmark")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--job-docs", type=int, default=50_000, help="documents for the whole-job comparison")
    ap.add_argument("--scale", default="10000,50000,200000", help="corpus sizes for the scaling table")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    report: dict = {"cpu": psutil.cpu_count(), "workers": args.workers}

    frame = corpus_frame(max(args.sig_docs, args.job_docs))
    report["signatures"] = bench_signatures(frame["text"].iloc[: args.sig_docs].tolist(), args.repeats)

    tmp = Path(tempfile.mkdtemp(prefix="dedup-bench-"))
    try:
        src = write_corpus(frame.iloc[: args.job_docs], tmp / "job", shards=8)
        d_secs, d_mem, _ = run_dedup_job(src, args.workers)
        p_secs, p_mem = run_datasketch_job(src)
        n = args.job_docs
        report["job"] = {"docs": n, "dedup_seconds": d_secs, "dedup_peak_rss": d_mem,
                         "datasketch_seconds": p_secs, "datasketch_peak_rss": p_mem}
        print(f"\n### the whole job, {n:,} documents, Parquet in and out\n")
        print("| tool | processes | seconds | docs per second | peak RSS (MiB) | dedup is x faster |")
        print("|---|---:|---:|---:|---:|---:|")
        print(f"| dedup run | {args.workers} workers + client | {d_secs:.1f} | {n / d_secs:,.0f} | {d_mem / 2**20:,.0f} | "
              f"{p_secs / d_secs:.1f} |")
        print(f"| datasketch MinHashLSH 16 x 8 | 1 | {p_secs:.1f} | {n / p_secs:,.0f} | {p_mem / 2**20:,.0f} | 1.0 |")

        scale = []
        print("\n### scaling: dedup run, 2 local workers\n")
        print("| documents | seconds | µs per document | docs per second | peak RSS (MiB) | clusters |")
        print("|---:|---:|---:|---:|---:|---:|")
        for size in (int(x) for x in args.scale.split(",")):
            big = corpus_frame(size) if size > len(frame) else frame.iloc[:size]
            src = write_corpus(big, tmp / f"scale{size}", shards=max(4, size // 25_000))
            secs, mem, manifest = run_dedup_job(src, args.workers)
            scale.append({"docs": size, "seconds": secs, "peak_rss": mem, "clusters": manifest["clusters"]})
            print(f"| {size:,} | {secs:.1f} | {secs / size * 1e6:.0f} | {size / secs:,.0f} | {mem / 2**20:,.0f} | "
                  f"{manifest['clusters']:,} |")
            shutil.rmtree(src, ignore_errors=True)
        report["scaling"] = scale
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (RESULTS / "speed.json").write_text(json.dumps(report, indent=2))
    print(f"\nsaved {RESULTS / 'speed.json'}")


if __name__ == "__main__":
    main()
