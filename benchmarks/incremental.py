"""What a new crawl costs against an index: `--against` over 10% new documents vs a full run.

    python benchmarks/incremental.py                      # 200,000 and 1,000,000 documents
    python benchmarks/incremental.py --docs 50000 --new-share 0.1
    python benchmarks/incremental.py --docs 1000000 --repeats 3   # medians of 3 runs of each
    python benchmarks/incremental.py --baseline CHECKOUT          # beside an earlier build, interleaved

The §7 corpus is shuffled and cut into an old part (90%) and a new part (10%). Runs of
`dedup run --keep-duplicates` on a local cluster: the old part (which writes the index), then,
`--repeats` times, the new part `--against` it and everything at once. Seconds are the
manifest's (`seconds.total`, from the start of the job to the commit, cluster start included) and
the process's wall time. Then, for the new documents: how many each way ends up in a cluster of
two or more, and how many both agree on (the incremental run keeps every indexed document, and
with `--confirm exact` cannot see the duplicates the first run dropped). With `--baseline` (a checkout
of an earlier build), each corpus is also run by that build (its own code first on PYTHONPATH; its
old part indexed by itself), its runs interleaved with this checkout's: a row for each build.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import builds, corpus_frame, run_cli, write_corpus  # noqa: E402


def dedup_run(src: Path, out: Path, workers: int, *extra: str, build: str | None = None) -> tuple[dict, float]:
    return run_cli(src, out, workers, "--keep-duplicates", *extra, pythonpath=build)


def median_run(runs: list[tuple[dict, float]]) -> tuple[dict, float]:
    """The run with the median job time (its manifest), and the median wall time."""
    ordered = sorted(runs, key=lambda r: r[0]["seconds"]["total"])
    return ordered[(len(ordered) - 1) // 2][0], statistics.median(w for _, w in runs)


def clustered(out: Path, ids: set[str]) -> set[str]:
    """The documents of `ids` that are in a cluster of two or more (a root with members counts)."""
    f = pd.read_parquet(out, columns=["id", "minhash_cluster"])
    members = f[f["id"] != f["minhash_cluster"]]
    roots = set(members["minhash_cluster"])
    return ({i for i in members["id"] if i in ids} | {r for r in roots if r in ids})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[200_000, 1_000_000])
    ap.add_argument("--new-share", type=float, default=0.1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="runs of the full and the incremental job, alternated "
                    "(medians are shown: timings on a shared machine vary by about 20%% between runs)")
    ap.add_argument("--baseline", type=Path, help="a checkout of an earlier build, run beside this one")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dedup-incremental-"))
    runs = builds(args.baseline)
    print("| build | documents | new | full run s (wall) | old part s | new --against old s (wall) | share of the full run "
          "(job / wall) | index bytes per document | new docs clustered: full / incremental / both |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    try:
        for docs in args.docs:
            frame = corpus_frame(docs).sample(frac=1.0, random_state=0).reset_index(drop=True)
            cut = int(round(len(frame) * (1 - args.new_share)))
            old, new = frame.iloc[:cut], frame.iloc[cut:]
            write_corpus(old, work / "old", shards=16)
            write_corpus(new, work / "new", shards=2)
            every = work / "all"
            write_corpus(old, every / "old", shards=16)
            write_corpus(new, every / "new", shards=2)
            olds = {label: dedup_run(work / "old", work / f"out-old-{i}", args.workers, build=path)[0]
                    for i, (label, path) in enumerate(runs)}
            incs: dict[str, list[tuple[dict, float]]] = {label: [] for label, _ in runs}
            alls: dict[str, list[tuple[dict, float]]] = {label: [] for label, _ in runs}
            for _ in range(args.repeats):
                for i, (label, path) in enumerate(runs):
                    incs[label].append(dedup_run(work / "new", work / f"out-new-{i}", args.workers, "--against",
                                                 str(work / f"out-old-{i}"), build=path))
                    alls[label].append(dedup_run(every, work / f"out-all-{i}", args.workers, build=path))
            new_ids = set(new["id"])
            for i, (label, _) in enumerate(runs):
                (m_inc, wall_inc), (m_all, wall_all) = median_run(incs[label]), median_run(alls[label])
                full = clustered(work / f"out-all-{i}", new_ids)
                inc = clustered(work / f"out-new-{i}", new_ids)
                t_inc, t_all = m_inc["seconds"]["total"], m_all["seconds"]["total"]
                m_old = olds[label]
                ix = m_old["index"]
                print(f"| {label} | {len(frame):,} | {len(new):,} | {t_all:.1f} ({wall_all:.1f}) | "
                      f"{m_old['seconds']['total']:.1f} | {t_inc:.1f} ({wall_inc:.1f}) | "
                      f"{100 * t_inc / t_all:.0f}% / {100 * wall_inc / wall_all:.0f}% | {ix['bytes_per_document']:.0f} | "
                      f"{len(full):,} / {len(inc):,} / {len(full & inc):,} |", flush=True)
                print(f"  {label}, stages, new --against old: {json.dumps(m_inc['seconds'])}", file=sys.stderr)
                print(f"  {label}, stages, full run:          {json.dumps(m_all['seconds'])}", file=sys.stderr)
            for p in work.iterdir():
                shutil.rmtree(p, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
