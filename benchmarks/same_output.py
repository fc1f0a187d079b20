"""Same input, same output: run five jobs with this checkout and with another one (a baseline
build), and compare every file each OUTPUT holds, byte for byte.

    python benchmarks/same_output.py --baseline /path/to/a/checkout --docs 200000

The jobs: the demo corpus with its protected file; the contract §7 corpus (`--docs`, 16 shards),
once more with its features on disk (`--features-on-disk`, the path of corpora beyond memory);
a corpus of typed and nested columns (timestamps, lists, structs, maps, decimals, nulls) in Hive
directories; and a second crawl run `--against` the §7 output. Every Parquet file (the shards,
`_report/removed.parquet`, `_index/`) must be identical; of the JSON files, the fields that name
a run (its token, timings, versions, the stamps and checksum of index format 4) are left out.
Each build runs as `python -m dedup` with its own checkout first on PYTHONPATH, on 2 local workers,
with the same `--partition-rows` (the index is laid out by partition).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_frame, write_corpus  # noqa: E402

from dedup.corpus import generate, protected_example  # noqa: E402

RUN_FIELDS = {"uid", "seconds", "versions", "files", "checksum", "format", "output", "input", "against", "sources",
              "protected_files", "report", "removed"}
"""JSON fields that name a run or a place, not what it decided."""


def _typed(root: Path) -> Path:
    """A corpus of the column types real corpora have, in two Hive directories."""
    body = "the quick brown fox jumps over the lazy dog near the quiet river bank at dawn again and again"
    for lang, n0 in (("en", 0), ("de", 100)):
        rows = 60
        texts = [f"{body} {i % 7}" if i % 3 else f"document {n0 + i} about {i} things and more words here" for i in
                 range(rows)]
        table = pa.table({
            "id": [f"doc-{n0 + i}" for i in range(rows)],
            "text": texts,
            "crawled": pa.array([dt.datetime(2024, 1, 1 + i % 28, tzinfo=dt.UTC) if i % 5 else None for i in range(rows)],
                                pa.timestamp("us", "UTC")),
            "tags": pa.array([[f"t{i}", "x"] if i % 4 else None for i in range(rows)], pa.list_(pa.string())),
            "meta": pa.array([{"source": "cc", "p": i / 10} if i % 6 else None for i in range(rows)]),
            "attrs": pa.array([[("k", i)] for i in range(rows)], pa.map_(pa.string(), pa.int32())),
            "price": pa.array([decimal.Decimal(f"{i}.25") for i in range(rows)], pa.decimal128(10, 2)),
        })
        (root / f"lang={lang}").mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / f"lang={lang}" / "part-0.parquet")
    return root


def _jobs(work: Path, docs: int) -> list[tuple[str, list[str]]]:
    """(name, `dedup` arguments without OUTPUT) of each job; inputs written under `work`."""
    demo = generate(650, seed=0)
    frame = pd.DataFrame({"id": [d.id for d in demo], "text": [d.text for d in demo], "family": [d.family for d in demo]})
    write_corpus(frame, work / "demo", 4)
    (work / "protected.jsonl").write_text("".join(json.dumps(r) + "\n" for r in protected_example(demo)))
    big = corpus_frame(docs)
    cut = int(0.9 * len(big))
    write_corpus(big.iloc[:cut], work / "first", 16)
    write_corpus(big.iloc[cut:], work / "second", 2)
    _typed(work / "typed")
    return [("demo", ["run", str(work / "demo"), "--protected", str(work / "protected.jsonl")]),
            ("corpus", ["run", str(work / "first"), "--keep-duplicates"]),
            ("corpus on disk", ["run", str(work / "first"), "--features-on-disk"]),
            ("typed", ["near", str(work / "typed"), "--keep-duplicates", "--confirm", "exact"]),
            ("against", ["run", str(work / "second"), "--against", "{corpus}"])]


def _run(build: Path, args: list[str], out: Path, partition_rows: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(build)}
    subprocess.run([sys.executable, "-m", "dedup", *args, str(out), "--n-workers", "2", "--partition-rows",
                    str(partition_rows)], check=True, env=env,
                   cwd=out.parent, capture_output=True, text=True)


def _digest(path: Path) -> str:
    if path.suffix == ".json" or path.name.endswith(".json"):
        return json.dumps(_without_run(json.loads(path.read_text())), sort_keys=True)
    if path.name == "index.html":
        return "(the page: timings differ)"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _without_run(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_run(v) for k, v in value.items() if k not in RUN_FIELDS}
    if isinstance(value, list):
        return [_without_run(v) for v in value]
    return value


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): _digest(p) for p in sorted(root.rglob("*")) if p.is_file()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the build to compare with")
    ap.add_argument("--docs", type=int, default=200_000, help="documents of the §7 corpus (default 200,000)")
    ap.add_argument("--partition-rows", type=int, default=25_000,
                    help="the rows bound both builds run with (default 25,000, the default of builds before it "
                         "became 65,536): the index is laid out by partition, so two builds compare file for file "
                         "at the same bound; the shards and the removed list are the same at any bound")
    args = ap.parse_args()
    this = Path(__file__).resolve().parent.parent
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        jobs = _jobs(work / "in", args.docs)
        for build_name, build in (("baseline", args.baseline.resolve()), ("this", this)):
            (work / build_name).mkdir()
            for name, job in jobs:
                job = [a.replace("{corpus}", str(work / build_name / "corpus")) for a in job]
                _run(build, job, work / build_name / name, args.partition_rows)
        for name, _ in jobs:
            a, b = tree(work / "baseline" / name), tree(work / "this" / name)
            same = [k for k in a if a[k] == b.get(k)]
            diff = sorted(set(a) ^ set(b)) + [k for k in a if k in b and a[k] != b[k]]
            differ += len(diff)
            print(f"{name}: {len(a)} files, {len(same)} identical" + (f"; DIFFERENT: {diff[:10]}" if diff else ""))
    print("byte-identical" if not differ else f"{differ} file(s) differ")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
