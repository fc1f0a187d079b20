"""The index's bytes per kept document, on long and on short documents, by part of the index.

    pip install -e ".[bench]"
    python benchmarks/index_size.py                                  # 200,000 documents of each shape
    python benchmarks/index_size.py --docs 50000 --baseline CHECKOUT # beside an earlier build

Two corpora: the contract §7 corpus (`corpus.py`, 16 shards) and short documents of 20-60 words
with 10% planted near copies (`scale.py`'s, shards of 50,000 rows), the shape of docstrings and
message catalogues, where the index outweighed the corpus. Each is run with the defaults (`dedup
run --n-workers 2`, near duplicates dropped, the index written) by this checkout and, with
`--baseline`, by that checkout (its own code first on PYTHONPATH). The table gives, per kept
document (the rows of OUTPUT), the bytes of `_index/` (every file in it) and of its band, docs and
id files, and the index's size against the shards'.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import builds, corpus_frame, run_cli  # noqa: E402
from corpus import write_corpus as write_long  # noqa: E402
from scale import write_corpus as write_short  # noqa: E402

PARTS = ("bands", "docs", "ids")


def _bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def measure(out: Path) -> dict[str, float]:
    """Bytes per kept document: the whole index, each of its parts, and the shards (OUTPUT's Parquet files)."""
    kept = sum(pq.ParquetFile(p).metadata.num_rows for p in out.glob("*.parquet"))
    index = out / "_index"
    got = {"kept": kept, "index": _bytes(index) / kept,
           "shards": sum(p.stat().st_size for p in out.glob("*.parquet")) / kept}
    got.update({part: _bytes(index / part) / kept for part in PARTS})
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--baseline", type=Path, help="a checkout of an earlier build, run on the same corpora")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dedup-index-size-"))
    runs = builds(args.baseline)
    print("| corpus | build | kept documents | index B/doc | bands | docs | ids | index / shards |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    try:
        corpora = {"§7 (long)": lambda d: write_long(corpus_frame(args.docs), d, shards=16),
                   "short, 20-60 words": lambda d: write_short(args.docs, d)}
        for name, write in corpora.items():
            src = work / "in"
            write(src)
            for label, path in runs:
                out = work / "out"
                run_cli(src, out, args.workers, pythonpath=path)
                m = measure(out)
                print(f"| {name} | {label} | {m['kept']:,} | {m['index']:,.0f} | {m['bands']:,.0f} | "
                      f"{m['docs']:,.0f} | {m['ids']:,.0f} | {100 * m['index'] / m['shards']:.0f}% |", flush=True)
                shutil.rmtree(out)
            shutil.rmtree(src)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
