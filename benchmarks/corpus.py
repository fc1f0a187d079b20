"""Write the contract §7 synthetic corpus (id, text, family) as Parquet shards; `run_cli` runs
`dedup run` on such shards the way the other benchmarks time it.

    python benchmarks/corpus.py --docs 200000 --out /tmp/corpus200k --shards 16
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from dedup.corpus import generate

DOCS_PER_ORIGINAL = 1.85  # 0.5*0 + 0.25*1 + 0.15*2 + 0.10*3 copies, plus the original


def corpus_frame(docs: int, seed: int = 0) -> pd.DataFrame:
    """About `docs` documents (cut to exactly `docs`, whole families kept first)."""
    rows = generate(max(1, round(docs / DOCS_PER_ORIGINAL * 1.03) + 50), seed=seed)
    frame = pd.DataFrame({"id": [d.id for d in rows], "text": [d.text for d in rows], "family": [d.family for d in rows]})
    return frame.iloc[:docs].reset_index(drop=True) if len(frame) > docs else frame


def write_corpus(frame: pd.DataFrame, out: Path, shards: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for i in range(shards):
        frame.iloc[i::shards].to_parquet(out / f"shard-{i:04d}.parquet", index=False)
    return out


def builds(baseline: Path | None) -> list[tuple[str, str | None]]:
    """(label, PYTHONPATH for `run_cli`) of each build a benchmark runs: an earlier checkout given with
    `--baseline` first, then this checkout (the dedup installed here)."""
    found: list[tuple[str, str | None]] = [("this checkout", None)]
    if baseline is not None:
        found.insert(0, (f"baseline ({baseline.name})", str(baseline.resolve())))
    return found


def run_cli(src: Path, out: Path, workers: int | None, *extra: str, pythonpath: str | None = None) -> tuple[dict, float]:
    """`dedup run SRC OUT` in a subprocess on a local cluster of `workers` (None: as `extra` says, e.g.
    `--threads 2`; with `pythonpath`, the dedup
    found there), OUTPUT replaced: its manifest and the process's wall seconds. It runs in OUT's
    parent directory: `python -m` puts the working directory first on sys.path, so a checkout
    there would shadow `pythonpath`."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    runtime = ["--n-workers", str(workers)] if workers else []
    subprocess.run([sys.executable, "-m", "dedup", "run", str(src), str(out), *runtime, *extra],
                   check=True, capture_output=True, text=True, env=env, cwd=out.parent)
    wall = time.perf_counter() - start
    return json.loads((out / "_dedup.json").read_text()), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=10_000, help="number of documents (1,000 to 1,000,000)")
    ap.add_argument("--out", type=Path, required=True, help="output directory for the shards")
    ap.add_argument("--shards", type=int, default=8, help="number of Parquet files")
    ap.add_argument("--seed", type=int, default=0, help="generator seed")
    args = ap.parse_args()
    start = time.perf_counter()
    frame = corpus_frame(args.docs, args.seed)
    write_corpus(frame, args.out, args.shards)
    print(f"wrote {len(frame):,} documents ({frame['family'].nunique():,} families) to {args.out} "
          f"in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
