"""What exact substring dedup costs beside near dedup, on the §7 corpus.

    python benchmarks/spans.py                       # 200,000 and 1,000,000 documents
    python benchmarks/spans.py --docs 200000

For each size, the §7 corpus (`corpus.corpus_frame`, about 1 GB of text at 1,000,000 documents) in
16 files, each command in a process of its own on a local cluster of `--workers` workers (its start
included), `--no-report`: `dedup near`, then `dedup spans` (k = 50, keep first). Per run: wall
seconds, CPU seconds of every process, the peak RSS of the largest worker, and what it removed;
each time against `dedup near`'s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import corpus_frame, write_corpus  # noqa: E402
from speed import PeakRSS, quiet  # noqa: E402


def run_one(command: list[str], src: Path, out: Path, workers: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    quiet()
    with PeakRSS(children_only=True) as peak:
        start = time.perf_counter()
        got = subprocess.run([sys.executable, "-m", "dedup", *command, str(src), str(out), "--n-workers",
                              str(workers), "--no-report"], capture_output=True, text=True, cwd=out.parent)
        wall = time.perf_counter() - start
    if got.returncode:
        raise SystemExit(f"{command} failed: {got.stderr[-2000:]}")
    m = json.loads((out / "_dedup.json").read_text())
    return {"wall": wall, "cpu": peak.cpu_total, "worker": peak.child_peak, "manifest": m}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, action="append", help="corpus sizes (default: 200,000 and 1,000,000)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="dedup-spans-") as tmp:
        work = Path(tmp)
        for docs in args.docs or [200_000, 1_000_000]:
            frame = corpus_frame(docs)
            src = write_corpus(frame[["id", "text"]], work / "in", 16)
            gb = frame["text"].str.len().sum() / 1e9
            del frame
            near = run_one(["near"], src, work / "out", args.workers)
            spans = run_one(["spans"], src, work / "out", args.workers)
            for name, r in (("dedup near", near), ("dedup spans", spans)):
                m = r["manifest"]
                s = m.get("spans") or {}
                what = (f"{s['spans_cut']:,} spans, {s['tokens_removed']:,} tokens, {s['documents_changed']:,} documents"
                        if s else f"{m['near_duplicates_found']:,} near duplicates")
                rows.append((f"{docs:,} ({gb:.2f} GB)", name, r["wall"], r["cpu"], r["worker"], what,
                             r["wall"] / near["wall"]))
                print(f"  {rows[-1]}", file=sys.stderr)
            shutil.rmtree(work / "in")
    print(f"{args.workers} local workers, each command in its own process, cluster start included, `--no-report`\n")
    print("| documents | run | wall s | CPU s, every process | peak RSS of one worker (MiB) | found | wall against "
          "`dedup near` |")
    print("|---|---|---:|---:|---:|---|---:|")
    for docs, name, wall, cpu, worker, what, ratio in rows:
        print(f"| {docs} | `{name}` | {wall:.1f} | {cpu:.1f} | {worker / 2**20:,.0f} | {what} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
