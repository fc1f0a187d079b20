"""What `--clusters centred` costs against connected clusters, and what each removes.

    pip install -e ".[bench]"
    python benchmarks/clusters.py                       # 200,000 §7 documents; 100,000 plus 20,000 template copies
    python benchmarks/clusters.py --docs 50000 --templates 50 --repeats 1    # a quick look
    python benchmarks/clusters.py --parts exact       # only the boilerplate corpus with --confirm exact

Two corpora, each run by `dedup run --n-workers 2` in a process of its own:
1. the §7 corpus (`corpus.corpus_frame`), whose near duplicates are light edits of one original;
2. a boilerplate-heavy corpus: `--docs // 2` §7 documents plus `--templates` license-like texts of
   300 words, each in `--copies` copies with a share of its words (drawn from 0 to 6%) replaced.
   Copies close to their template join copies far from it: chains, as in a corpus of license texts.
Each corpus in three ways, interleaved, `--repeats` times (medians) after a warm-up run: connected clusters with
`--no-report` (no survivor is scored), connected clusters with the report (every member scored
against its survivor), and `--clusters centred`; the boilerplate corpus with each confirm mode.
Printed: wall seconds, the survivors stage's seconds, the peak RSS of one worker, near duplicates
removed, how many were below the threshold with their connected component's survivor, rounds.
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
from corpus import corpus_frame, run_cli, write_corpus  # noqa: E402
from speed import RESULTS, PeakRSS  # noqa: E402

WAYS = {"connected, --no-report": ("--no-report",), "connected": (), "centred": ("--clusters", "centred")}


def templated(docs: int, templates: int, copies: int, seed: int = 3) -> pd.DataFrame:
    """`docs` §7 documents plus `templates` x `copies` edited copies of 300-word templates."""
    rng = np.random.default_rng(seed)
    texts, ids = [], []
    for t in range(templates):
        words = np.array([f"clause{w}" for w in rng.integers(0, 20_000, size=300)], dtype=object)
        for c in range(copies):
            w = words.copy()
            edit = rng.random(len(w)) < rng.uniform(0.0, 0.06)
            w[edit] = [f"var{t}x{c}x{i}" for i in range(int(edit.sum()))]
            texts.append(" ".join(w))
            ids.append(f"lic{t:04d}-{c:04d}")
    base = corpus_frame(docs)[["id", "text"]]
    return pd.concat([base, pd.DataFrame({"id": ids, "text": texts})], ignore_index=True).sample(frac=1.0, random_state=1)


def compare(label: str, src: Path, tmp: Path, workers: int, repeats: int, *extra: str) -> list[dict]:
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    run_cli(src, tmp / "out", workers, *extra)  # a warm-up, not counted: the first run pays for cold caches
    for _ in range(repeats):
        for way, flags in WAYS.items():
            with PeakRSS(children_only=True) as mem:
                manifest, wall = run_cli(src, tmp / "out", workers, *flags, *extra)
            runs[way].append({"wall": wall, "peak": mem.child_peak, "manifest": manifest})
    print(f"\n### {label}, {workers} local workers, median of {repeats}\n")
    print("| clusters | wall s | survivors stage s | peak RSS of one worker (MiB) | near duplicates removed | "
          "below the threshold with their survivor | rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for way, rs in runs.items():
        m = rs[0]["manifest"]
        scored = "survivors" in m["seconds"]
        row = {"clusters": way, "wall": statistics.median(r["wall"] for r in rs),
               "survivors_s": statistics.median(r["manifest"]["seconds"].get("survivors", 0.0) for r in rs),
               "worker_peak_mib": statistics.median(r["peak"] for r in rs) / 2**20,
               "removed": m["near_duplicates_dropped"],
               "below": m["below_threshold_to_survivor"] if scored else None, "rounds": m["survivor_rounds"]}
        rows.append(row)
        below = f"{row['below']:,}" if row["below"] is not None else "not scored"
        print(f"| {way} | {row['wall']:.1f} | {row['survivors_s']:.2f} | {row['worker_peak_mib']:,.0f} | "
              f"{row['removed']:,} | {below} | {row['rounds'] or ''} |")
    base, report, centred = rows
    print(f"\nwall: the report's scoring {report['wall'] / base['wall']:.2f}x, centred {centred['wall'] / base['wall']:.2f}x "
          f"of connected without the report; centred removes {centred['removed'] / max(base['removed'], 1):.3f}x "
          "the documents")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200_000, help="§7 documents (half of them in the boilerplate corpus)")
    ap.add_argument("--templates", type=int, default=200, help="license-like templates of the boilerplate corpus")
    ap.add_argument("--copies", type=int, default=100, help="copies of each template")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", default="corpus,estimate,exact",
                    help="which runs: the §7 corpus, the boilerplate corpus with each confirm mode (comma separated)")
    args = ap.parse_args()
    parts = args.parts.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="dedup-clusters-"))
    report = {}
    try:
        if "corpus" in parts:
            plain = write_corpus(corpus_frame(args.docs), tmp / "plain", shards=16)
            report["corpus"] = compare(f"the §7 corpus: {args.docs:,} documents", plain, tmp, args.workers,
                                       args.repeats)
        boiler = write_corpus(templated(args.docs // 2, args.templates, args.copies), tmp / "boiler", shards=16)
        label = (f"boilerplate: {args.docs // 2:,} §7 documents and {args.templates} templates x {args.copies} "
                 "copies")
        for confirm in [c for c in ("estimate", "exact") if c in parts]:
            report[f"boilerplate_{confirm}"] = compare(f"{label}, --confirm {confirm}", boiler, tmp, args.workers,
                                                       args.repeats, "--confirm", confirm)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "clusters.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
