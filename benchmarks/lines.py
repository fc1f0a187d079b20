"""What exact line dedup costs beside the near-dedup job, on the §7 corpus with boilerplate lines added.

    python benchmarks/lines.py                          # 200,000 documents, 3 interleaved rounds
    python benchmarks/lines.py --docs 50000 --repeats 1

Each document of the §7 corpus (`corpus.corpus_frame`) is written one sentence a line, between a
navigation or cookie line (one of 30, in a few spellings that share a key) and a footer (one of 10);
one in five also gets a line of its own before the footer. Then, each in a process of its own on a
local cluster of `--workers` workers (its start included), interleaved round by round: `dedup lines`,
`dedup near`, and `dedup run --lines` (lines, then near duplicates on the new texts), all with
`--no-report`. Per run: wall seconds, µs per document, CPU seconds of every process, the peak RSS of
all processes and of the largest worker, the lines removed and the near duplicates found; medians
of the rounds, and each run's time against `dedup near`'s.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd  # noqa: E402
from corpus import corpus_frame, write_corpus  # noqa: E402
from speed import PeakRSS, quiet  # noqa: E402

NAV = [f"Home | News | Section {i} | Contact" for i in range(20)] + \
      [f"We use cookies to improve site {i}. Accept all?" for i in range(10)]
FOOTERS = [f"Copyright 20{10 + i} Example Media Group. All rights reserved." for i in range(10)]


def with_boilerplate(frame: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """The corpus with each text one sentence a line, between a navigation line (in one of three
    spellings) and a footer; one document in five with a line of its own before the footer."""
    rng = random.Random(seed)
    texts = []
    for i, text in enumerate(frame["text"]):
        nav = rng.choice(NAV)
        nav = rng.choice([nav, nav.upper(), nav.replace(" | ", " / ")])
        body = text.replace(". ", ".\n")
        own = [f"Posted by reader {i} on day {rng.randrange(365)}"] if rng.random() < 0.2 else []
        texts.append("\n".join([nav, body, *own, rng.choice(FOOTERS)]))
    return frame.assign(text=texts)


def run_one(command: list[str], src: Path, out: Path, workers: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    quiet()
    with PeakRSS(children_only=True) as peak:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dedup", *command, str(src), str(out), "--n-workers", str(workers),
                        "--no-report"], check=True, capture_output=True, text=True, cwd=out.parent)
        wall = time.perf_counter() - start
    m = json.loads((out / "_dedup.json").read_text())
    return {"wall": wall, "cpu": peak.cpu_total, "peak": peak.peak, "worker": peak.child_peak,
            "lines": (m.get("lines") or {}).get("lines_removed"), "near": m["near_duplicates_found"],
            "dropped": (m.get("lines") or {}).get("documents_dropped"), "job": m["seconds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    runs = {"dedup lines": ["lines"], "dedup near": ["near"], "dedup run --lines": ["run", "--lines"]}
    with tempfile.TemporaryDirectory(prefix="dedup-lines-") as tmp:
        work = Path(tmp)
        frame = with_boilerplate(corpus_frame(args.docs))
        src = write_corpus(frame, work / "in", args.shards)
        n = len(frame)
        got: dict[str, list[dict]] = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, command in runs.items():
                got[name].append(run_one(command, src, work / "out", args.workers))
                print(f"  {name}: {json.dumps({k: v for k, v in got[name][-1].items() if k != 'job'})}", file=sys.stderr)
    med = {name: {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "peak", "worker")}
           for name, rs in got.items()}
    print(f"{n:,} documents ({args.shards} files), {args.workers} local workers, median of {args.repeats} "
          "interleaved rounds\n")
    print("| run | wall s | µs per document | CPU s, every process | peak RSS, all processes (MiB) | peak RSS of one "
          "worker (MiB) | lines removed | documents dropped | near duplicates found | time against `dedup near` |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = med["dedup near"]["wall"]
    for name, rs in got.items():
        m, last = med[name], rs[-1]
        lines = f"{last['lines']:,}" if last["lines"] is not None else "-"
        dropped = f"{last['dropped']:,}" if last["dropped"] is not None else "-"
        print(f"| `{name}` | {m['wall']:.1f} | {1e6 * m['wall'] / n:.0f} | {m['cpu']:.1f} | {m['peak'] / 2**20:,.0f} | "
              f"{m['worker'] / 2**20:,.0f} | {lines} | {dropped} | {last['near']:,} | {m['wall'] / base:.2f} |")
    print("\nstages of the last round, seconds:", file=sys.stderr)
    for name, rs in got.items():
        print(f"  {name}: {json.dumps(rs[-1]['job'])}", file=sys.stderr)


if __name__ == "__main__":
    main()
