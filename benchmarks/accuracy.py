"""Recall and precision against exact ground truth, for dedup and the peers, in one run.

    python benchmarks/accuracy.py                      # the contract §7 corpus, ~12,000 documents
    python benchmarks/accuracy.py --input corpus/ --id-column id --text-column text   # any Parquet corpus

Pair level: a true pair is two documents with exact Jaccard >= t of word 5-shingles; a tool
reports the pairs it would merge (dedup: confirmed pairs; peers: LSH query hits). Document level:
a document is a true duplicate when it is in a true pair; a tool flags the documents in the
pairs it reports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from truth import true_pairs  # noqa: E402

from dedup import Params, optimal_params  # noqa: E402
from dedup.core.lsh import band_keys, bucket_pairs  # noqa: E402
from dedup.core.minhash import signatures  # noqa: E402
from dedup.core.near import confirm_pairs  # noqa: E402
from dedup.core.text import shingles  # noqa: E402

Pairs = set[tuple[int, int]]


def dedup_pairs(texts: Sequence[str | None], params: Params) -> Pairs:
    sigs = signatures(texts, num_perm=params.num_perm, seed=params.seed, shingle_size=params.shingle_size)
    left, right = bucket_pairs(band_keys(sigs, num_bands=params.num_bands, rows_per_band=params.rows_per_band))
    ok = confirm_pairs(left, right, params, sigs=sigs, texts=texts)
    return set(zip(left[ok].tolist(), right[ok].tolist()))


def _query_pairs(lsh: object, hashes: list, texts: Sequence[str | None]) -> Pairs:
    """Pairs a peer's LSH index reports: each document queried against all, empty texts skipped."""
    has_words = [bool(shingles(t or "")) for t in texts]
    out: Pairs = set()
    for i, m in enumerate(hashes):
        if has_words[i]:
            out.update((min(i, j), max(i, j)) for j in lsh.query(m) if j != i and has_words[j])  # type: ignore[attr-defined]
    return out


def datasketch_pairs(texts: Sequence[str | None], threshold: float, bands_rows: tuple[int, int] | None) -> Pairs:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=128, params=bands_rows)
    hashes = []
    for i, t in enumerate(texts):
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([s.encode("utf-8") for s in shingles(t or "")])
        hashes.append(m)
        lsh.insert(i, m)
    return _query_pairs(lsh, hashes, texts)


def rensa_pairs(texts: Sequence[str | None], threshold: float, num_bands: int) -> Pairs:
    from rensa import RMinHash, RMinHashLSH

    lsh = RMinHashLSH(threshold=threshold, num_perm=128, num_bands=num_bands)
    hashes = []
    for i, t in enumerate(texts):
        m = RMinHash(num_perm=128, seed=1)
        m.update(list(shingles(t or "")))
        hashes.append(m)
        lsh.insert(i, m)
    return _query_pairs(lsh, hashes, texts)


def find_pairs(tool: str, texts: Sequence[str | None], threshold: float, bands: int, rows: int) -> Pairs:
    if tool.startswith("dedup"):
        confirm = tool.split()[-1]
        return dedup_pairs(texts, Params(threshold=threshold, num_bands=bands, rows_per_band=rows, confirm=confirm))
    if tool.startswith("datasketch"):
        return datasketch_pairs(texts, threshold, (bands, rows))
    return rensa_pairs(texts, threshold, bands)


def scores(found: Pairs, truth: Pairs) -> dict[str, float]:
    tp = len(found & truth)
    docs_true = {d for p in truth for d in p}
    docs_found = {d for p in found for d in p}
    return {
        "pairs_found": len(found),
        "pair_recall": tp / len(truth) if truth else 1.0,
        "pair_precision": tp / len(found) if found else 1.0,
        "doc_recall": len(docs_true & docs_found) / len(docs_true) if docs_true else 1.0,
        "doc_precision": len(docs_true & docs_found) / len(docs_found) if docs_found else 1.0,
    }


def load_texts(args: argparse.Namespace) -> list[str | None]:
    if args.input:
        import pandas as pd

        frame = pd.read_parquet(args.input, columns=[args.id_column, args.text_column])
        return [t if isinstance(t, str) else None for t in frame[args.text_column].tolist()]
    from corpus import corpus_frame

    return corpus_frame(args.docs)["text"].tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=12_000, help="size of the generated corpus")
    ap.add_argument("--input", help="score a Parquet corpus instead (file, directory or glob)")
    ap.add_argument("--id-column", default="id")
    ap.add_argument("--text-column", default="text")
    ap.add_argument("--thresholds", default="0.7,0.8,0.9", help="comma-separated thresholds")
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "accuracy.json")
    args = ap.parse_args()
    texts = load_texts(args)
    results = []
    print(f"{len(texts):,} documents\n")
    print("| t | tool | bands x rows | true pairs | found | pair recall | pair precision | doc recall | doc precision | seconds |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in (float(x) for x in args.thresholds.split(",")):
        truth = true_pairs(texts, t)
        ob, orr = optimal_params(t, 128)
        tools = [("dedup estimate", ob, orr), ("dedup exact", ob, orr), ("dedup estimate", 16, 8), ("dedup exact", 16, 8),
                 ("datasketch MinHashLSH", ob, orr), ("datasketch MinHashLSH", 16, 8), ("rensa RMinHashLSH", 16, 8)]
        for name, b, r in tools:
            start = time.perf_counter()
            found = find_pairs(name, texts, t, b, r)
            secs = time.perf_counter() - start
            s = scores(found, truth)
            results.append({"threshold": t, "tool": name, "bands": b, "rows": r, "true_pairs": len(truth),
                            "seconds": round(secs, 2), **s})
            print(f"| {t} | {name} | {b} x {r} | {len(truth):,} | {s['pairs_found']:,} | {s['pair_recall']:.3f} | "
                  f"{s['pair_precision']:.3f} | {s['doc_recall']:.3f} | {s['doc_precision']:.3f} | {secs:.1f} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"documents": len(texts), "results": results}, indent=2))
    print(f"\nsaved {args.json}")


if __name__ == "__main__":
    main()
