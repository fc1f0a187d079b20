"""Client, scheduler and worker memory as the corpus grows: does the client stay small?

Starts a separate `dask scheduler` and two `dask worker --preload dedup.runtime` processes (1
thread each, as docs/operations.md recommends for a cluster of your own), writes
generated corpora of ~60-word documents (shards of 50,000, 10% planted near copies, one word changed), runs
`dedup run --scheduler-file` on each for `--components client` and `distributed`, and prints
every process's peak RSS (sampled every 0.1 s), seconds and documents per second.

    pip install -e ".[bench]"
    python benchmarks/scale.py                          # 250,000 and 2,000,000 documents
    python benchmarks/scale.py --docs 50000 200000      # a quick look
    python benchmarks/scale.py --docs 1000000 --modes client --job-args=--no-index
    python benchmarks/scale.py --docs 1000000 10000000 --modes client --memory-limit 2GiB   # memory-limited workers
    python benchmarks/scale.py --docs 1000000 --modes client --baseline CHECKOUT   # beside an earlier build

With `--baseline` (a checkout of an earlier commit, repeatable), each corpus is also run by that build,
its client and its workers importing it (a cluster of its own, started the same way), interleaved
with this one, and the table gives each run's time per document against this build's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

SHARD = 50_000
ROW_GROUP = 25_000
"""Rows a row group of the shards: a shard is read as two partitions of whole row groups."""
WORDS = 60


def write_corpus(docs: int, out: Path, seed: int = 0) -> None:
    """`docs` documents of WORDS words from a Zipf vocabulary; 10% are near copies (one word changed)."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(50_000)], dtype=object)
    out.mkdir(parents=True, exist_ok=True)
    for start in range(0, docs, SHARD):
        n = min(SHARD, docs - start)
        words = np.minimum(rng.zipf(1.3, size=(n, WORDS)) - 1, len(vocab) - 1)
        copies = rng.random(n) < 0.1
        src = rng.integers(0, n, size=n)
        words[copies] = words[src[copies]]
        pos = rng.integers(0, WORDS, size=n)
        rows = np.flatnonzero(copies)
        words[rows, pos[rows]] = rng.integers(0, len(vocab), len(rows))
        texts = [" ".join(vocab[w]) for w in words]
        ids = [f"doc-{start + i:010d}" for i in range(n)]
        pq.write_table(pa.table({"id": ids, "text": texts}), out / f"shard-{start // SHARD:05d}.parquet",
                       row_group_size=ROW_GROUP)


class Peak:
    """Peak RSS of a process and its children, sampled in a thread."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _rss(self) -> int:
        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
            return sum(p.memory_info().rss for p in procs)
        except psutil.Error:
            return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(0.1)

    def reset(self) -> None:
        self.peak = self._rss()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


class Spill:
    """The most bytes any worker held spilled to disk, and the most it held in managed memory, as the
    scheduler reports them (polled every second through a client of its own)."""

    def __init__(self, sched_file: Path) -> None:
        from distributed import Client
        self.client = Client(scheduler_file=str(sched_file), timeout=30)
        self.disk = self.managed = 0
        self._start = self._durations()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for w in self.client.scheduler_info(n_workers=-1)["workers"].values():
                    spilled = w["metrics"].get("spilled_bytes", {})
                    self.disk = max(self.disk, spilled.get("disk", 0))
                    self.managed = max(self.managed, w["metrics"].get("managed_bytes", 0) - spilled.get("disk", 0))
            except Exception:  # the scheduler is busy: the next poll will do
                pass
            time.sleep(1)

    def _durations(self) -> dict[str, float]:
        """Seconds the workers spent on each task prefix (computing, transferring, spilling), so far."""
        def durations(dask_scheduler) -> dict[str, float]:
            return {f"{name} {action}": secs for name, tp in dask_scheduler.task_prefixes.items()
                    for action, secs in tp.all_durations.items()}
        return self.client.run_on_scheduler(durations)

    def stop(self) -> tuple[int, int, dict[str, float]]:
        """The spilled and managed peaks, and the seconds spent on each task prefix during the run."""
        self._stop.set()
        self._thread.join()
        end = self._durations()
        self.client.close()
        spent = {k: v - self._start.get(k, 0.0) for k, v in end.items()}
        return self.disk, self.managed, {k: round(v, 1) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
                                         if v >= 0.5}


class Cluster:
    """A `dask scheduler` and two `dask worker --preload dedup.runtime` processes (1 thread each), all
    importing dedup from `tree` (None: this build), and the peak RSS of each, sampled from `watch()`."""

    def __init__(self, work: Path, memory_limit: str, tree: Path | None) -> None:
        dask = Path(sys.executable).parent / "dask"
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"PYTHONPATH": str(tree)} if tree else {})}
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.sched_file = work / "scheduler.json"
        self.sched_file.unlink(missing_ok=True)
        self.procs = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                        "--scheduler-file", str(self.sched_file)], env=self.env, cwd=work,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        while not self.sched_file.exists():
            time.sleep(0.2)
        for i in range(2):
            self.procs.append(subprocess.Popen(
                [str(dask), "worker", "--scheduler-file", str(self.sched_file), "--nthreads", "1",
                 "--memory-limit", memory_limit, "--no-dashboard", "--host", "127.0.0.1", "--name", f"w{i}",
                 "--local-directory", str(work / f"w{i}"), "--preload", "dedup.runtime"],
                env=self.env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(scheduler_file=str(self.sched_file), timeout=30) as client:  # the run starts on a whole cluster
            client.wait_for_workers(2, timeout=300)

    def close(self) -> None:
        """Stop the processes and every process they started (a nanny's worker): one left running could
        reconnect to the next cluster's scheduler, should that take the same port."""
        family = [psutil.Process(p.pid) for p in self.procs]
        for p in list(family):
            try:
                family += p.children(recursive=True)
            except psutil.Error:
                pass
        for p in reversed(self.procs):
            p.terminate()
        _, alive = psutil.wait_procs(family, timeout=60)
        for p in alive:
            p.kill()
        for p in self.procs:
            p.wait(timeout=60)


def run_job(cluster: Cluster, corpus: Path, out: Path, mode: str, job_args: list[str]) -> dict:
    """`dedup run --scheduler-file` on `cluster`, by the build the cluster imports; what it measured."""
    peaks = [Peak(p.pid) for p in cluster.procs]
    spill = Spill(cluster.sched_file)
    t = time.perf_counter()
    client = subprocess.Popen([sys.executable, "-m", "dedup", "run", str(corpus), str(out),
                               "--scheduler-file", str(cluster.sched_file), "--components", mode, *job_args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env,
                              cwd=cluster.work)  # not the caller's: `-m` puts the current directory first on sys.path
    client_peak = Peak(client.pid)
    _, err = client.communicate()
    secs = time.perf_counter() - t
    spilled, managed, prefixes = spill.stop()
    if client.returncode:
        raise SystemExit(f"dedup run failed:\n{err}")
    m = json.loads((out / "_dedup.json").read_text())
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return {"seconds": secs, "client": client_peak.stop(), "scheduler": peaks[0].stop(),
            "workers": [p.stop() for p in peaks[1:]], "large_graph": err.count("Sending large graph"),
            "dropped": m["near_duplicates_dropped"], "rounds": m.get("component_rounds", 0),
            "on_disk": m["features_on_disk"], "partitions": m["partitions"], "stages": m["seconds"],
            "paused": err.count("paused"), "spilled": spilled, "managed": managed, "prefixes": prefixes,
            "candidates": m["candidate_pairs"], "confirmed": m["confirmed_pairs"]}


def _commit(checkout: Path) -> str:
    """The checkout's commit, short (its folder's name if it is not a git checkout)."""
    got = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return got.stdout.strip() if got.returncode == 0 else checkout.name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[250_000, 2_000_000])
    ap.add_argument("--modes", nargs="+", default=["client", "distributed"])
    ap.add_argument("--memory-limit", default="8GiB", help="per worker (default: 8GiB)")
    ap.add_argument("--job-args", default="", help="extra arguments for dedup run, space separated (e.g. --job-args=--no-index)")
    ap.add_argument("--baseline", type=Path, action="append", default=[],
                    help="a checkout of an earlier commit, run on each corpus after this build (repeatable)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dedup-scale-"))
    builds: list[tuple[str, Path | None]] = [("this build", None)] + [(_commit(b), b.resolve()) for b in args.baseline]
    rows = []
    clusters = 0
    for docs in args.docs:
        corpus = work / f"corpus-{docs}"
        t = time.perf_counter()
        write_corpus(docs, corpus)
        print(f"wrote {docs:,} documents in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        for mode in args.modes:
            for name, tree in builds:  # interleaved: each build right after the other, on the same corpus
                clusters += 1  # each in a directory of its own: nothing a stopped one left behind is shared
                cluster = Cluster(work / f"cluster-{clusters}", args.memory_limit, tree)
                try:
                    row = run_job(cluster, corpus, work / f"out-{docs}-{mode}", mode, args.job_args.split())
                finally:
                    cluster.close()
                rows.append({"docs": docs, "mode": mode, "build": name, **row})
                print(rows[-1], file=sys.stderr)
        subprocess.run(["rm", "-rf", str(corpus)], check=True)
    mib = 2**20
    ours = {(r["docs"], r["mode"]): r["seconds"] for r in rows if r["build"] == "this build"}
    print("| documents | build | components | partitions | features | seconds | µs per document | time / this build's "
          "| docs/s | client peak (MiB) | scheduler peak (MiB) | worker peaks (MiB) | near duplicates dropped "
          "| 'large graph' warnings |")
    print("|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        mode = r["mode"] + (f" ({r['rounds']} rounds)" if r["rounds"] else "")
        print(f"| {r['docs']:,} | {r['build']} | {mode} | {r['partitions']} | {'disk' if r['on_disk'] else 'memory'} | "
              f"{r['seconds']:.1f} | {r['seconds'] / r['docs'] * 1e6:.1f} | {r['seconds'] / ours[(r['docs'], r['mode'])]:.2f} | "
              f"{r['docs'] / r['seconds']:,.0f} | {r['client'] / mib:,.0f} | {r['scheduler'] / mib:,.0f} | "
              f"{' / '.join(f'{w / mib:,.0f}' for w in r['workers'])} | {r['dropped']:,} | {r['large_graph']} |")
    print("\nSeconds per stage (the manifest's), pairs, the most a worker held in managed memory and spilled "
          "to disk, log lines naming paused workers, and the workers' seconds by task prefix:\n")
    for r in rows:
        stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())
        top = ", ".join(f"{k} {v:.1f}" for k, v in list(r["prefixes"].items())[:12])
        print(f"- {r['docs']:,} documents, {r['build']}, {r['mode']}: {stages}; {r['candidates']:,} candidate and "
              f"{r['confirmed']:,} confirmed pairs; managed {r['managed'] / mib:,.0f} MiB, spilled "
              f"{r['spilled'] / mib:,.0f} MiB; {r['paused']} line(s) on paused workers; {top}")


if __name__ == "__main__":
    main()
