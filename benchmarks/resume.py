"""What resuming saves, and what keeping the stage results costs.

On the contract §7 corpus, with a separate `dask scheduler` and two `dask worker --preload
dedup.runtime` processes (1 thread each), so that killing the client leaves the cluster: an
uninterrupted `dedup run`; then, for each stage, the client SIGKILLed right after the stage's log
line and the same command run again, timed to the end (the kept results reused); and, with
`--baseline CHECKOUT` (a checkout of dedup that keeps nothing), the same uninterrupted run with that
code, interleaved, for the cost of keeping. Prints one table per corpus size.

    pip install -e ".[bench]"
    python benchmarks/resume.py --docs 200000 1000000 --baseline /path/to/older/checkout
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from corpus import corpus_frame, write_corpus  # noqa: E402

from dedup.job.analysis import ORDER  # noqa: E402


def _env(pythonpath: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def _run(cmd: list[str], cwd: Path, pythonpath: str | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=cwd, env=_env(pythonpath))
    return time.perf_counter() - start


def _killed_after(cmd: list[str], stage: str, cwd: Path) -> float:
    """Run `cmd` until it logs `stage`'s line, SIGKILL it; the seconds it ran."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=cwd, env=_env(None))
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.split(" ", 3)[-1].startswith(f"{stage}:"):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return time.perf_counter() - start
    proc.wait()
    raise SystemExit(f"dedup run ended (exit {proc.returncode}) without a {stage} line")


def _kept_bytes(out: Path) -> int:
    """Bytes under `_stages/` of the staging directory a killed run left beside `out`."""
    tmp = [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.dedup-tmp-")]
    return sum(f.stat().st_size for d in tmp for f in (d / "_stages").rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[200_000, 1_000_000])
    ap.add_argument("--baseline", help="a checkout of dedup that keeps no stage results, for the cost of keeping")
    ap.add_argument("--repeats", type=int, default=3, help="uninterrupted runs of each code, interleaved (median)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dedup-resume-"))
    dask = Path(sys.executable).parent / "dask"
    sched = work / "scheduler.json"
    procs = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(sched)], env=_env(None),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        while not sched.exists():
            time.sleep(0.2)
        for i in range(2):
            procs.append(subprocess.Popen([str(dask), "worker", "--scheduler-file", str(sched), "--nthreads", "1",
                                           "--no-dashboard", "--host", "127.0.0.1", "--name", f"w{i}",
                                           "--local-directory", str(work / f"w{i}"), "--preload", "dedup.runtime"],
                                          env=_env(None), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(5)
        for docs in args.docs:
            src = write_corpus(corpus_frame(docs), work / f"corpus-{docs}", shards=max(16, docs // 25_000))
            out = work / f"out-{docs}"
            cmd = [sys.executable, "-m", "dedup", "run", str(src), str(out), "--scheduler-file", str(sched),
                   "--overwrite"]
            full, base = [], []
            for _ in range(args.repeats):
                full.append(_run(cmd, work))
                if args.baseline:
                    base.append(_run(cmd, work, args.baseline))
            stages = json.loads((out / "_dedup.json").read_text())["seconds"]
            full_s = sorted(full)[len(full) // 2]
            print(f"\n{docs:,} documents: uninterrupted {full_s:.1f} s (median of {len(full)})", end="")
            if base:
                base_s = sorted(base)[len(base) // 2]
                print(f"; without keeping {base_s:.1f} s: keeping costs {full_s - base_s:+.1f} s "
                      f"({(full_s / base_s - 1) * 100:+.0f}%)", end="")
            print("\n\n| killed after | ran before the kill (s) | rerun to the end (s) | rerun / uninterrupted | "
                  "kept (MiB) | stage's own seconds |")
            print("|---|---:|---:|---:|---:|---:|")
            for stage in [s for s in ORDER if s in stages]:
                shutil.rmtree(out, ignore_errors=True)
                ran = _killed_after(cmd, stage, work)
                kept = _kept_bytes(out)
                rerun = _run(cmd, work)
                print(f"| {stage} | {ran:.1f} | {rerun:.1f} | {rerun / full_s:.2f} | {kept / 2**20:,.0f} | "
                      f"{stages[stage]:.1f} |", flush=True)
            shutil.rmtree(src)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
