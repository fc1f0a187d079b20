"""dedup beside datatrove's MinHash pipeline (the one FineWeb was built with), on the same shards.

    pip install -e ".[peers]"
    python benchmarks/peers.py --docs 200000 --docs 1000000 [--repeats 1] [--workers 2]
    python benchmarks/peers.py --docs 1000000 --run "datatrove, words split on spaces"   # without spaCy's 45 minutes

The contract §7 corpus (`benchmarks/corpus.py`) in 16 Parquet files, both tools with 16 bands x 8
rows of word 5-shingles and 2 worker processes, each run in a process of its own as a user runs it,
interleaved (a slow minute of the machine hits every tool):

- `dedup run --n-workers 2`, with the defaults (the report page and the index) and with
  `--no-report --no-index` (the kept rows only, what datatrove writes), and `dedup run --threads 2`;
- datatrove as its example `examples/minhash_deduplication.py` runs it, on its `LocalPipelineExecutor`
  (16 tasks, 2 workers): signatures -> buckets -> clusters -> filter, 64-bit hashes, its default
  English word tokenizer (spaCy); and the same with words split on whitespace (a tokenizer of our
  own given as its `language`), which shows what its tokenizer costs.

Before the rounds, one unmeasured `dedup run` on one file compiles dedup's kernels (`warm_up`).
Measured per run: wall seconds from starting the process to its exit; CPU seconds of the process and
every process it started and waited for (its workers: the rusage of reaped children); the peak of
the summed RSS of the process tree; the documents removed; precision and recall against the
corpus's planted truth. The truth: the corpus plants near copies in families; two documents of a
family are a true pair when the exact Jaccard of their word 5-shingle sets reaches 0.8 (computed
here with integer arithmetic, `truth._reaches`); documents of different families share no shingles
of note. A removed document is correct when it is in a true pair; recall counts, in each connected
component of true pairs, the documents removed up to the component's size - 1 (one must stay),
over the sum of (size - 1).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from corpus import corpus_frame, write_corpus  # noqa: E402
from speed import PeakRSS, quiet  # noqa: E402
from truth import _reaches  # noqa: E402

from dedup.core.text import shingles  # noqa: E402
from dedup.core.unionfind import components  # noqa: E402

RESULTS = Path(__file__).parent / "results"
BANDS, ROWS, SHINGLE, THRESHOLD, SHARDS = 16, 8, 5, 0.8, 16
DATATROVE_TASKS = SHARDS


# --- the truth -------------------------------------------------------------------------------------

def planted_truth(frame: pd.DataFrame) -> tuple[set[str], dict[str, int], dict[int, int]]:
    """(ids in a true pair, id -> its true component, component -> its size) from the families."""
    t = Fraction(str(THRESHOLD))
    in_pair: set[str] = set()
    edges: list[tuple[str, str]] = []
    for _, fam in frame.groupby("family", sort=False):
        if len(fam) < 2:
            continue
        ids = fam["id"].tolist()
        sets = [set(shingles(x or "", SHINGLE)) for x in fam["text"]]
        for i in range(len(ids)):
            for j in range(i + 1, len(ids)):
                a, b = sets[i], sets[j]
                if a and b and _reaches(len(a & b), len(a), len(b), t):
                    edges.append((ids[i], ids[j]))
                    in_pair.update((ids[i], ids[j]))
    index = {d: k for k, d in enumerate(sorted(in_pair))}
    left = np.array([index[a] for a, _ in edges], dtype=np.int64)
    right = np.array([index[b] for _, b in edges], dtype=np.int64)
    members, roots = components(left, right)
    comp = {d: int(roots[np.searchsorted(members, k)]) for d, k in index.items()}
    sizes: dict[int, int] = defaultdict(int)
    for c in comp.values():
        sizes[c] += 1
    return in_pair, comp, dict(sizes)


def scores(removed: set[str], truth: tuple[set[str], dict[str, int], dict[int, int]]) -> dict[str, float]:
    in_pair, comp, sizes = truth
    correct = removed & in_pair
    per_comp: dict[int, int] = defaultdict(int)
    for d in correct:
        per_comp[comp[d]] += 1
    redundant = sum(s - 1 for s in sizes.values())
    found = sum(min(n, sizes[c] - 1) for c, n in per_comp.items())
    return {"precision": len(correct) / len(removed) if removed else 1.0,
            "recall": found / redundant if redundant else 1.0}


# --- running a tool --------------------------------------------------------------------------------

def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measured(cmd: list[str]) -> dict[str, float]:
    """Run `cmd` to its end: wall seconds, CPU seconds of its process tree (the larger of the reaped
    children's rusage and the sampled tree, `PeakRSS.cpu_total`), peak summed RSS (MiB)."""
    quiet()
    cpu0 = _children_cpu()
    with PeakRSS(children_only=True) as mem:
        start = time.perf_counter()
        got = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
    if got.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed:\n{got.stderr[-3000:]}")
    return {"wall": wall, "cpu": max(_children_cpu() - cpu0, mem.cpu_total), "peak_mib": mem.peak / 2**20}


def run_dedup(src: Path, work: Path, mode: str, workers: int) -> tuple[dict[str, float], set[str]]:
    out = work / f"dedup-{mode}"
    runtime = ["--threads", str(workers)] if mode == "threads" else ["--n-workers", str(workers)]
    extra = ["--no-report", "--no-index"] if mode == "kept-only" else []
    m = measured([sys.executable, "-m", "dedup", "run", str(src), str(out), *runtime, *extra,
                  "--num-bands", str(BANDS), "--rows-per-band", str(ROWS)])
    kept = set(pq.read_table(out, columns=["id"]).column("id").to_pylist())
    shutil.rmtree(out)
    return m, kept


def run_datatrove(src: Path, work: Path, tokenizer: str, workers: int) -> tuple[dict[str, float], set[str]]:
    out = work / f"datatrove-{tokenizer}"
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import peers; "
            f"peers.datatrove_job({str(src)!r}, {str(out)!r}, {tokenizer!r}, {workers})")
    m = measured([sys.executable, "-c", code])
    kept = set(pq.read_table(out / "kept", columns=["id"]).column("id").to_pylist())
    shutil.rmtree(out)
    return m, kept


try:
    from datatrove.utils.word_tokenizers import WordTokenizer
except ImportError:  # without the peers extra: `main` says what to install
    WordTokenizer = object


class SpaceTokenizer(WordTokenizer):  # type: ignore[misc, valid-type]
    """Words split on whitespace, given to datatrove as its `language`."""

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return [text]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        return [(0, len(text))]


def datatrove_job(src: str, out: str, tokenizer: str, workers: int) -> None:
    """datatrove's four MinHash stages on its local executor, as its example chains them."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import ParquetWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.typeshelper import Languages

    config = MinhashConfig(n_grams=SHINGLE, num_buckets=BANDS, hashes_per_bucket=ROWS,
                           hash_config=HashConfig(precision=64))
    language = Languages.english if tokenizer == "default" else SpaceTokenizer("en")
    logs = f"{out}/logs"
    stage1 = LocalPipelineExecutor(
        pipeline=[ParquetReader(src), MinhashDedupSignature(output_folder=f"{out}/signatures", config=config,
                                                            language=language)],
        tasks=DATATROVE_TASKS, workers=workers, logging_dir=f"{logs}/signatures")
    stage2 = LocalPipelineExecutor(
        pipeline=[MinhashDedupBuckets(input_folder=f"{out}/signatures", output_folder=f"{out}/buckets", config=config)],
        tasks=BANDS, workers=workers, logging_dir=f"{logs}/buckets", depends=stage1)
    stage3 = LocalPipelineExecutor(
        pipeline=[MinhashDedupCluster(input_folder=f"{out}/buckets", output_folder=f"{out}/remove_ids", config=config)],
        tasks=1, logging_dir=f"{logs}/clusters", depends=stage2)
    stage4 = LocalPipelineExecutor(
        pipeline=[ParquetReader(src), MinhashDedupFilter(input_folder=f"{out}/remove_ids"),
                  ParquetWriter(output_folder=f"{out}/kept")],
        tasks=DATATROVE_TASKS, workers=workers, logging_dir=f"{logs}/filter", depends=stage3)
    stage4.run()


# --- the table -------------------------------------------------------------------------------------

TOOLS = {
    "dedup defaults": ("dedup", "defaults"),
    "dedup --no-report --no-index": ("dedup", "kept-only"),
    "dedup --threads 2": ("dedup", "threads"),
    "datatrove": ("datatrove", "default"),
    "datatrove, words split on spaces": ("datatrove", "space"),
}


def warm_up(src: Path, work: Path, workers: int) -> None:
    """One `dedup run` on the corpus's first file, not measured: numba compiles dedup's kernels at a
    checkout's (or an install's) first run and caches them beside the code, which took 15 to 20 of
    the first measured run's CPU-seconds at 1,000,000 documents; every later run loads them."""
    first = work / "warm-up"
    first.mkdir()
    shutil.copy(sorted(src.glob("*.parquet"))[0], first)
    run_dedup(first, work, "defaults", workers)
    shutil.rmtree(first)


def bench(docs: int, repeats: int, workers: int, names: list[str] | None = None) -> dict:
    frame = corpus_frame(docs)
    work = Path(tempfile.mkdtemp(prefix="dedup-peers-"))
    try:
        src = write_corpus(frame[["id", "text"]], work / "in", SHARDS)
        truth = planted_truth(frame)
        all_ids = set(frame["id"])
        tools = {name: TOOLS[name] for name in names or TOOLS}
        runs: dict[str, list[dict]] = {name: [] for name in tools}
        warm_up(src, work, workers)
        for _ in range(repeats):
            for name, (tool, mode) in tools.items():
                m, kept = (run_dedup if tool == "dedup" else run_datatrove)(src, work, mode, workers)
                removed = all_ids - kept
                runs[name].append({**m, "removed": len(removed), **scores(removed, truth)})
                print(f"{docs:,} {name}: {json.dumps(runs[name][-1])}", flush=True)
        return {"docs": docs, "runs": runs}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def table(result: dict) -> str:
    runs = result["runs"]
    base = statistics.median(r["cpu"] for r in runs["dedup defaults"])
    lines = [f"{result['docs']:,} documents, median of {len(runs['dedup defaults'])} run(s):", "",
             "| run | wall s | CPU s | CPU / dedup defaults | peak RSS MiB | removed | precision | recall |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        lines.append(f"| {name} | {med['wall']:.1f} | {med['cpu']:.1f} | {med['cpu'] / base:.1f}x | {med['peak_mib']:,.0f} "
                     f"| {med['removed']:,.0f} | {med['precision']:.3f} | {med['recall']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, action="append", help="corpus size (repeatable; default 200,000)")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved rounds of every tool")
    ap.add_argument("--workers", type=int, default=2, help="worker processes of each tool")
    ap.add_argument("--run", action="append", choices=list(TOOLS),
                    help="a run to make (repeatable; default: every one); 'dedup defaults' is always made, the ratios are to it")
    args = ap.parse_args()
    names = list(dict.fromkeys(["dedup defaults", *args.run])) if args.run else None
    if WordTokenizer is object:
        sys.exit("datatrove is not installed: pip install -e '.[peers]'")
    RESULTS.mkdir(parents=True, exist_ok=True)
    results = []
    for docs in args.docs or [200_000]:
        results.append(bench(docs, args.repeats, args.workers, names))
        print(table(results[-1]), flush=True)
    (RESULTS / "peers.json").write_text(json.dumps({"cpu": os.cpu_count(), "results": results}, indent=1))
    print("\n\n".join(table(r) for r in results))


if __name__ == "__main__":
    main()
