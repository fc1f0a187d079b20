"""The whole job against its kernel: CPU per document of `dedup run` at 1,000,000 documents beside the signature
kernel's, what the page and the index add, and the local cluster beside datasketch, per document.

    python benchmarks/whole_job.py                                   # 1,000,000 §7 documents, 16 files
    python benchmarks/whole_job.py --docs 200000 --baseline CHECKOUT # and an earlier build, side by side

Each `dedup run` runs as a user runs it, in a process of its own (interpreter, imports, planning, the
cluster's start, the job, the page and the commit), started on a quiet machine; CPU seconds are every
process's it started (workers included). Rows: `--threads 2` with the defaults (the page and the index),
`--threads 2 --no-report --no-index` (the lean run: the kept rows only), `--n-workers 2` with the defaults.
The kernel: `dedup.signatures` over the same texts on one core (CPU seconds, the texts already in memory).
datasketch: `MinHash.bulk` and `MinHashLSH` 16 x 8, query then insert, as `benchmarks/speed.py` runs it, on
the first `--ds-docs` documents (its time per document grows with its index: it is measured at that size).
The runs are interleaved over `--repeats` rounds (each run of each build once a round) and each figure is
the median of its rounds: this kind of machine drifts by more than the differences between builds.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_frame, run_cli, write_corpus  # noqa: E402
from speed import PeakRSS, quiet  # noqa: E402

RUNS = (("`dedup run --threads 2` (defaults: page and index)", ["--threads", "2"]),
        ("`dedup run --threads 2 --no-report --no-index`", ["--threads", "2", "--no-report", "--no-index"]),
        ("`dedup run --n-workers 2` (defaults)", ["--n-workers", "2"]))


def kernel_us(src: Path) -> float:
    """CPU µs a document of the signature kernel alone, one core, over every text of `src`."""
    from dedup import signatures

    texts = pd.read_parquet(src, columns=["text"])["text"].tolist()
    signatures(texts[:10])  # the compiled kernels loaded first
    start = time.process_time()
    for lo in range(0, len(texts), 65_536):
        signatures(texts[lo:lo + 65_536])
    return 1e6 * (time.process_time() - start) / len(texts)


def dedup_run(src: Path, args: list[str], pythonpath: str | None) -> dict[str, float]:
    quiet()
    out = Path(tempfile.mkdtemp(prefix="dedup-whole-")) / "out"
    try:
        with PeakRSS(children_only=True) as mem:
            manifest, wall = run_cli(src, out, None, *args, pythonpath=pythonpath)
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
    rows = int(manifest["input_rows"])
    return {"wall": wall, "cpu": mem.cpu_total, "cpu_us": 1e6 * mem.cpu_total / rows, "wall_us": 1e6 * wall / rows,
            "peak": max(mem.child_peak, mem.process_peak) / 2**20}


def datasketch_us(src: Path) -> float:
    import subprocess

    quiet()
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import speed; "
            f"speed.datasketch_job({str(src)!r})")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    rows = len(pd.read_parquet(src, columns=["id"]))
    return 1e6 * (time.perf_counter() - start) / rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--ds-docs", type=int, default=200_000, help="documents datasketch runs on (0: skip it)")
    ap.add_argument("--baseline", type=Path, help="an earlier checkout, run beside this one")
    ap.add_argument("--repeats", type=int, default=3, help="rounds, interleaved; each figure is the median")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dedup-whole-in-"))
    try:
        frame = corpus_frame(args.docs)
        src = write_corpus(frame[["id", "text"]], work / "corpus", args.files)
        ds_src = write_corpus(frame[["id", "text"]].iloc[:args.ds_docs], work / "ds", 1) if args.ds_docs else None
        del frame
        kernel = kernel_us(src)
        builds = [("this checkout", None)] + ([(f"baseline ({args.baseline.name})", str(args.baseline.resolve()))]
                                              if args.baseline else [])
        rounds: dict[tuple[str, str], list[dict[str, float]]] = {}
        for _ in range(args.repeats):  # interleaved: a slow minute of the machine falls on every build alike
            for name, run_args in RUNS:
                for b, path in builds:
                    rounds.setdefault((b, name), []).append(dedup_run(src, run_args, path))
        got = {k: {f: statistics.median(r[f] for r in runs) for f in runs[0]} for k, runs in rounds.items()}
        ds = datasketch_us(ds_src) if ds_src is not None else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.docs:,} documents of the §7 shape in {args.files} files, median of {args.repeats} interleaved rounds; "
          "the signature kernel alone "
          f"{kernel:.1f} CPU µs a document (one core)" + (f"; datasketch {ds:.0f} µs a document, wall, at "
                                                          f"{args.ds_docs:,}" if ds else ""))
    print()
    print("| build | run | wall s | CPU s | CPU µs per document | kernel / job CPU | peak RSS of one process (MiB) |"
          " wall against the lean run |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for b, _ in builds:
        lean = got[(b, RUNS[1][0])]["wall"]
        for name, _ in RUNS:
            r = got[(b, name)]
            print(f"| {b} | {name} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['cpu_us']:.1f} | {kernel / r['cpu_us']:.2f} | "
                  f"{r['peak']:,.0f} | {r['wall'] / lean:.2f} |")
    if ds:
        print()
        for b, _ in builds:
            r = got[(b, RUNS[2][0])]
            print(f"{b}: the local cluster {r['wall_us']:.1f} µs a document (wall), datasketch {ds:.0f}: "
                  f"{ds / r['wall_us']:.1f}x")


if __name__ == "__main__":
    main()
