"""Speed and memory of dedup against its peers, measured in one process run.

    python benchmarks/speed.py --baseline /path/to/checkout-of-an-earlier-commit [--baseline another]
    python benchmarks/speed.py --job-docs 50000 --scale 50000,200000      # quicker

1. text -> signatures on one core (CPU seconds): dedup.signatures, datasketch MinHash.bulk (its
   documented way to make many MinHashes: the permutations are drawn once) and rensa
   RMinHash.update, the peers with Python shingling. Repeats interleaved; median and the ratio
   per repeat.
2. the whole job on the §7 corpus, each tool in a process of its own as a user runs it, timed from
   starting the process to its exit (interpreter and imports included): datasketch MinHashLSH
   16 x 8 (a script: query, then insert), `dedup run --threads 2` (no cluster) and `dedup run
   --n-workers 2` (a local cluster of 2 worker processes, its start included), the latter also with
   `--no-index --no-report` (kept rows only, what the datasketch script writes); `--job-repeats`
   rounds, medians and the median of the per-round ratios. Each tool starts on a quiet machine:
   the previous one's processes have exited and the load has settled.
3. where dedup's time goes: the one-core steps of the features stage and the job's stages
   (`benchmarks/stage_profile.py`), for this build and, with --baseline, for earlier ones
   (runs interleaved: build after build, `repeats` rounds, so a slow minute hits them all).
4. scaling: `dedup run` from 50,000 to 2,000,000 documents, seconds and peak memory per document,
   and the datasketch job at each size up to --peer-scale-max (1,000,000): whether dedup's lead grows
   with the corpus.
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
from corpus import corpus_frame, run_cli, write_corpus  # noqa: E402

from dedup import signatures  # noqa: E402
from dedup.core.text import shingles  # noqa: E402

RESULTS = Path(__file__).parent / "results"


class PeakRSS:
    """Samples the RSS of this process (unless `children_only`) and all its children every 50 ms: the
    peak of their sum, the peak of the largest Dask worker alone (a process started by
    multiprocessing's spawn, or forked by its forkserver, as local clusters start their workers: a
    `dedup run` subprocess and the forkserver itself are counted in the sum only), and the peak of
    the largest child process of any kind (`dedup run --threads` works in its own). The sum counts
    pages that processes share (a forked worker's, with the forkserver's) once a process. `cpu_total`:
    the CPU seconds of every child as last sampled (pool workers that nobody waits for are in no
    rusage; a process's last 50 ms may be missed)."""

    def __init__(self, children_only: bool = False) -> None:
        self.peak = 0
        self.child_peak = 0
        self.process_peak = 0  # the largest child process of any kind (a `dedup run --threads` subprocess)
        self.children_only = children_only
        self.cpu: dict[tuple[int, float], float] = {}  # (pid, start time) -> CPU seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process(os.getpid())
        worker: dict[int, bool] = {}
        while not self._stop.is_set():
            total = 0 if self.children_only else me.memory_info().rss
            for p in me.children(recursive=True):
                try:
                    with p.oneshot():
                        rss = p.memory_info().rss
                        t = p.cpu_times()
                        self.cpu[(p.pid, p.create_time())] = t.user + t.system
                    if p.pid not in worker:
                        worker[p.pid] = _is_worker(p)
                except psutil.Error:
                    continue
                total += rss
                self.process_peak = max(self.process_peak, rss)
                if worker[p.pid]:
                    self.child_peak = max(self.child_peak, rss)
            self.peak = max(self.peak, total)
            time.sleep(0.05)

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu.values())

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _is_worker(p: psutil.Process) -> bool:
    """A process multiprocessing started for a Dask worker: spawned, or a fork of the forkserver."""
    if any("spawn_main" in a for a in p.cmdline()):
        return True
    parent = p.parent()
    return parent is not None and any("multiprocessing.forkserver" in a for a in parent.cmdline())


def sig_dedup(texts: Sequence[str]) -> None:
    signatures(texts)


def sig_datasketch(texts: Sequence[str]) -> None:
    from datasketch import MinHash

    for m in MinHash.bulk(([s.encode("utf-8") for s in shingles(t)] for t in texts), num_perm=128, seed=1):
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


def _working_children() -> list[psutil.Process]:
    """This process's children but multiprocessing's resource tracker and forkserver (started with the
    first local cluster in this process, they live as long as it and use no CPU once started)."""
    out = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            line = " ".join(p.cmdline())
            helper = "resource_tracker" in line or ("multiprocessing.forkserver" in line and p.ppid() == os.getpid())
            if not helper:
                out.append(p)
        except psutil.Error:
            pass
    return out


def quiet(settle: float = 2.0, timeout: float = 60.0) -> None:
    """Wait until this process has no working children left (a closed cluster's workers exit
    asynchronously), the files written so far are on disk (the corpus just written, or the last
    tool's output: its writeback would otherwise run during the next tool's run) and the machine
    has had `settle` seconds to itself."""
    import gc

    gc.collect()
    os.sync()
    deadline = time.monotonic() + timeout
    while _working_children() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(settle)


def run_dedup_job(src: Path, workers: int, threads: bool = False, extra: Sequence[str] = ()
                  ) -> tuple[float, PeakRSS, dict]:
    """`dedup run SRC OUT` as a user runs it, in a process of its own: on a local cluster of `workers`
    worker processes, or with `threads` on that many threads (`--threads`, no cluster); `extra`: more
    options. Seconds from starting the process to its exit (interpreter, imports, planning, cluster
    start, the job, the page and the commit), the memory peaks of its processes (all, and the largest
    worker), the manifest."""
    quiet()
    out = Path(tempfile.mkdtemp(prefix="dedup-bench-out-")) / "out"
    runtime = ["--threads", str(workers)] if threads else ["--n-workers", str(workers)]
    with PeakRSS(children_only=True) as mem:
        manifest, secs = run_cli(src, out, None, *runtime, *extra)
    shutil.rmtree(out.parent, ignore_errors=True)
    return secs, mem, manifest


KEPT_ONLY = ("--no-index", "--no-report")
"""Options with which `dedup run` writes what the datasketch script writes: the kept rows, without
the index a later `--against` run reads and without the report page and removed list."""


def run_datasketch_job(src: Path) -> tuple[float, int]:
    """MinHashLSH 16 x 8 as its docs show it, in a process of its own as a user's script runs
    (`datasketch_job`): seconds from starting the process to its exit, and its peak RSS."""
    import subprocess

    quiet()
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import speed; " \
           f"speed.datasketch_job({str(src)!r})"
    with PeakRSS(children_only=True) as mem:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        secs = time.perf_counter() - start
    return secs, mem.peak


def datasketch_job(src: str) -> None:
    """The datasketch job: read the Parquet, MinHash.bulk per batch of 10,000 (its documented way for
    many documents), query then insert each into MinHashLSH 16 x 8, write the kept rows."""
    import pandas as pd
    from datasketch import MinHash, MinHashLSH

    frame = pd.read_parquet(src)
    lsh = MinHashLSH(threshold=0.8, num_perm=128, params=(16, 8))
    keep = []
    ids, texts = frame["id"].tolist(), frame["text"].tolist()
    for lo in range(0, len(ids), 10_000):
        batch = MinHash.bulk(([s.encode("utf-8") for s in shingles(t)] for t in texts[lo:lo + 10_000]),
                             num_perm=128, seed=1)
        for doc_id, m in zip(ids[lo:lo + 10_000], batch):
            if not lsh.query(m):
                keep.append(doc_id)
            lsh.insert(doc_id, m)
    out = Path(tempfile.mkdtemp(prefix="ds-bench-out-"))
    try:
        frame[frame["id"].isin(set(keep))].to_parquet(out / "kept.parquet")
    finally:
        shutil.rmtree(out, ignore_errors=True)


def profile_section(src: Path, n: int, workers: int, baselines: Sequence[Path], repeats: int) -> dict:
    """One-core steps and per-stage seconds (benchmarks/stage_profile.py) for this build and the baselines."""
    import subprocess

    import stage_profile as prof

    # (label, checkout, runtime arguments): this build on the local cluster and with --threads, the
    # baselines on the local cluster (what they had)
    cluster = ["--n-workers", str(workers)]
    builds: list[tuple[str, Path | None, list[str]]] = [("this build", None, cluster),
                                                        (f"this build, --threads {workers}", None,
                                                         ["--threads", str(workers)])]
    for path in baselines:
        label = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                               text=True).stdout.strip() or path.name
        builds.append((label, path, cluster))
    steps, pairs = prof.kernels(src)
    print(f"\n### where the time goes: one core, {n:,} documents (CPU seconds, this build)\n")
    print("| step | CPU s | docs per CPU-second |")
    print("|---|---:|---:|")
    for name, secs in steps.items():
        print(f"| {name} | {secs:.2f} | {n / secs:,.0f} |")
    print(f"\n{prof.per_pair(steps, pairs)}")
    runs: dict[str, list[tuple[dict[str, float], float]]] = {label: [] for label, _, _ in builds}
    peaks: dict[str, list[int]] = {label: [] for label, _, _ in builds}
    for _ in range(repeats):  # interleaved, so that a slow minute of the machine hits every build
        for label, path, runtime in builds:
            quiet()
            with PeakRSS() as mem:
                runs[label].append(prof.job(src, None, runtime, pythonpath=str(path) if path else None))
            threads = "--threads" in runtime  # the job runs in the dedup process itself: its peak
            peaks[label].append(mem.process_peak if threads else mem.child_peak)
    stages: dict[str, dict[str, float]] = {}
    walls: dict[str, float] = {}
    for label, rs in runs.items():
        names = sorted({s for r in rs for s in r[0] if s != "total"})
        stages[label] = {s: statistics.median(r[0].get(s, 0.0) for r in rs) for s in names}
        stages[label]["job"] = statistics.median(sum(v for k, v in r[0].items() if k != "total") for r in rs)
        walls[label] = statistics.median(r[1] for r in rs)
    names = sorted({s for st in stages.values() for s in st if s != "job"})
    print(f"\n### where the time goes: dedup run, {n:,} documents, {workers} workers, seconds per stage "
          f"(median of {repeats})\n")
    print("| stage | " + " | ".join(stages) + " |")
    print("|---|" + "---:|" * len(stages))
    for s in names:
        print(f"| {s} | " + " | ".join(f"{st.get(s, 0.0):.2f}" for st in stages.values()) + " |")
    print("| **job (sum of stages)** | " + " | ".join(f"**{st['job']:.2f}**" for st in stages.values()) + " |")
    print("| docs per CPU-second of job time | " + " | ".join(f"{n / (workers * st['job']):,.0f}"
                                                          for st in stages.values()) + " |")
    print("| wall of `dedup run` (process, cluster start included) | " +
          " | ".join(f"{w:.2f}" for w in walls.values()) + " |")
    worker_peak = {label: statistics.median(p) for label, p in peaks.items()}
    print("| peak RSS of one worker, or of the process with --threads (MiB) | " +
          " | ".join(f"{p / 2**20:,.0f}" for p in worker_peak.values()) + " |")
    quiet()
    prof.task_stream(src, workers, [])  # this build: per stage, tasks, the workers' busy share, each side's CPU
    return {"steps": steps, "minhash_pairs": pairs, "stages": stages, "walls": walls, "worker_peak_rss": worker_peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sig-docs", type=int, default=20_000, help="documents for the one-core signature benchmark")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds of the per-stage profile")
    ap.add_argument("--sig-repeats", type=int, default=5,
                    help="interleaved repeats of the one-core signature benchmark (each dedup call is about 0.2 s)")
    ap.add_argument("--job-docs", type=int, default=204_000, help="documents for the whole-job comparison")
    ap.add_argument("--scale", default="50000,200000,1000000,2000000", help="corpus sizes for the scaling table")
    ap.add_argument("--peer-scale-max", type=int, default=1_000_000,
                    help="the largest scaling size datasketch also runs at (its index lives in memory: about 2.4 GB "
                         "at 204,000 documents)")
    ap.add_argument("--job-repeats", type=int, default=3, help="interleaved runs of each tool in the whole-job table")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--baseline", type=Path, action="append", default=[],
                    help="a checkout of an earlier commit, profiled next to this build (repeatable)")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    report: dict = {"cpu": psutil.cpu_count(), "workers": args.workers}

    frame = corpus_frame(max(args.sig_docs, args.job_docs))
    report["signatures"] = bench_signatures(frame["text"].iloc[: args.sig_docs].tolist(), args.sig_repeats)

    tmp = Path(tempfile.mkdtemp(prefix="dedup-bench-"))
    try:
        src = write_corpus(frame.iloc[: args.job_docs], tmp / "job", shards=16)
        n = args.job_docs
        peer_runs: list[tuple[float, int]] = []
        modes = {"threads": f"dedup run --threads {args.workers} (in one process, no cluster)",
                 "cluster": f"dedup run --n-workers {args.workers} (local cluster, its start included)",
                 "kept-only": f"dedup run --n-workers {args.workers} {' '.join(KEPT_ONLY)} (the same, writing only "
                              "the kept rows, as the datasketch script does)"}
        dedup_runs: dict[str, list[tuple[float, PeakRSS, dict]]] = {m: [] for m in modes}
        for _ in range(args.job_repeats):  # interleaved: a slow minute of the machine hits every tool
            peer_runs.append(run_datasketch_job(src))
            for mode in modes:
                dedup_runs[mode].append(run_dedup_job(src, args.workers, threads=mode == "threads",
                                                      extra=KEPT_ONLY if mode == "kept-only" else ()))
        p_secs, p_mem = statistics.median(p[0] for p in peer_runs), max(p[1] for p in peer_runs)
        report["job"] = {"docs": n, "repeats": args.job_repeats, "datasketch_seconds": [p[0] for p in peer_runs],
                         "datasketch_peak_rss": p_mem}
        print(f"\n### the whole job, {n:,} documents, Parquet in and out (median of {args.job_repeats}, interleaved)\n")
        print("| tool | processes | wall seconds | docs per second | job seconds (sum of stages) | "
              "docs per CPU-second of job time | peak RSS, all processes (MiB) | peak RSS of one worker (MiB) | "
              "dedup is x faster (median of per-repeat ratios) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        per_repeat = []
        for mode, label in modes.items():
            runs = dedup_runs[mode]
            ratios = [p[0] / d[0] for p, d in zip(peer_runs, runs)]
            d_secs = statistics.median(d[0] for d in runs)
            d_peak, d_worker = max(d[1].peak for d in runs), max(d[1].child_peak for d in runs)
            jobs = [sum(v for k, v in d[2]["seconds"].items() if k != "total") for d in runs]
            job_s = statistics.median(jobs)
            report["job"][mode] = {"dedup_seconds": [d[0] for d in runs], "dedup_job_seconds": jobs,
                                   "dedup_peak_rss": d_peak, "dedup_worker_peak_rss": d_worker, "ratios": ratios}
            processes = "1" if mode == "threads" else f"{args.workers} workers + client + forkserver"
            worker = "-" if mode == "threads" else f"{d_worker / 2**20:,.0f}"
            print(f"| {label} | {processes} | {d_secs:.1f} | {n / d_secs:,.0f} | {job_s:.1f} | "
                  f"{n / (args.workers * job_s):,.0f} | {d_peak / 2**20:,.0f} | {worker} | "
                  f"{statistics.median(ratios):.1f} |")
            per_repeat.append(f"{mode} {', '.join(f'{d[0]:.1f}' for d in runs)} s (job "
                              f"{', '.join(f'{j:.1f}' for j in jobs)} s)")
        print(f"| datasketch MinHashLSH 16 x 8 | 1 | {p_secs:.1f} | {n / p_secs:,.0f} | - | - | {p_mem / 2**20:,.0f} | - "
              "| 1.0 |")
        print(f"\nper repeat: dedup {'; '.join(per_repeat)}; datasketch {', '.join(f'{p[0]:.1f}' for p in peer_runs)} s. "
              f"Docs per CPU-second of job time: documents / ({args.workers} x job seconds). Peak RSS of all "
              "processes: the tool's own (on Linux a local cluster's include the forkserver its workers are "
              "forked from, whose pages they share and which the sum counts in each).")

        report["profile"] = profile_section(src, n, args.workers, args.baseline, args.repeats)

        scale = []
        print(f"\n### scaling: dedup run, {args.workers} local workers (its process, cluster start included), and "
              f"datasketch up to {args.peer_scale_max:,} documents\n")
        print("| documents | seconds | µs per document | docs per second | peak RSS, all processes (MiB) | "
              "peak RSS of one worker (MiB) | clusters | datasketch seconds | dedup is x faster |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for size in (int(x) for x in args.scale.split(",")):
            big = corpus_frame(size) if size > len(frame) else frame.iloc[:size]
            src = write_corpus(big, tmp / f"scale{size}", shards=max(4, size // 25_000))
            peer = run_datasketch_job(src)[0] if size <= args.peer_scale_max else None
            secs, mem, manifest = run_dedup_job(src, args.workers)
            scale.append({"docs": size, "seconds": secs, "peak_rss": mem.peak, "worker_peak_rss": mem.child_peak,
                          "clusters": manifest["clusters"], "datasketch_seconds": peer})
            versus = f"{peer:.1f} | {peer / secs:.1f}" if peer is not None else "- | -"
            print(f"| {size:,} | {secs:.1f} | {secs / size * 1e6:.0f} | {size / secs:,.0f} | {mem.peak / 2**20:,.0f} | "
                  f"{mem.child_peak / 2**20:,.0f} | {manifest['clusters']:,} | {versus} |", flush=True)
            shutil.rmtree(src, ignore_errors=True)
            del big
        report["scaling"] = scale
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (RESULTS / "speed.json").write_text(json.dumps(report, indent=2))
    print(f"\nsaved {RESULTS / 'speed.json'}")


if __name__ == "__main__":
    main()
