"""What the run report costs: `dedup run` with and without `--no-report`, interleaved repeats.

    python benchmarks/report_cost.py                        # 200,000 and 1,000,000 documents
    python benchmarks/report_cost.py --docs 50000 --repeats 2

Job seconds come from the manifest (`seconds.total`, the same clock for both); the share is
(median with report - median without) / median with report.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import corpus_frame, run_cli, write_corpus  # noqa: E402


def job_seconds(src: Path, out: Path, extra: list[str], workers: int) -> tuple[float, float]:
    m, _ = run_cli(src, out, workers, *extra)
    return m["seconds"]["total"], m["seconds"].get("report", 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[200_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dedup-report-cost-"))
    print("| documents | job s, with report | job s, --no-report | report stage s | report's share of the job |")
    print("|---:|---:|---:|---:|---:|")
    try:
        for docs in args.docs:
            src = write_corpus(corpus_frame(docs), work / f"in-{docs}", shards=16)
            with_r, without, stage = [], [], []
            for _ in range(args.repeats):
                total, rep = job_seconds(src, work / "out", [], args.workers)
                with_r.append(total)
                stage.append(rep)
                without.append(job_seconds(src, work / "out", ["--no-report"], args.workers)[0])
            a, b = statistics.median(with_r), statistics.median(without)
            print(f"| {docs:,} | {a:.1f} | {b:.1f} | {statistics.median(stage):.1f} | {100 * (a - b) / a:.0f}% |",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
