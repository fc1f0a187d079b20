"""PNG plots: measured LSH candidate rate against the S-curve formula, and job time per document
against corpus size (from results/speed.json, written by speed.py).

    python benchmarks/plots.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dedup import band_keys, probability, signatures  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def candidate_rate(similarity: float, pairs: int, rng: np.random.Generator, bands: int, rows: int) -> tuple[float, float]:
    """(exact Jaccard, share of pairs that share a bucket) for pairs of 200-token sets."""
    only = (200 - int(round(200 * similarity))) // 2
    inter = 200 - 2 * only
    texts = []
    for p in range(pairs):
        pool = [f"s{similarity:.3f}p{p}w{i}" for i in rng.permutation(inter + 2 * only)]
        texts += [" ".join(pool[: inter + only]), " ".join(pool[:inter] + pool[inter + only :])]
    keys = band_keys(signatures(texts, shingle_size=1), num_bands=bands, rows_per_band=rows)
    return inter / (inter + 2 * only), float((keys[0::2] == keys[1::2]).any(axis=1).mean())


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    fig, ax = plt.subplots(figsize=(6, 4))
    grid = np.linspace(0, 1, 201)
    for bands, rows in ((16, 8), (9, 13)):
        measured = [candidate_rate(s, 300, rng, bands, rows) for s in np.arange(0.3, 1.0, 0.05)]
        ax.plot(grid, probability(grid, bands, rows), label=f"formula {bands} x {rows}")
        ax.plot(*zip(*measured), "o", label=f"measured {bands} x {rows} (300 pairs each)")
    ax.set_xlabel("Jaccard similarity")
    ax.set_ylabel("P(candidate)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "s_curve.png", dpi=120)
    print(f"saved {RESULTS / 's_curve.png'}")
    speed = RESULTS / "speed.json"
    if speed.exists():
        scale = json.loads(speed.read_text()).get("scaling", [])
        if scale:
            fig, ax = plt.subplots(figsize=(6, 4))
            docs = [r["docs"] for r in scale]
            ax.plot(docs, [r["seconds"] / r["docs"] * 1e6 for r in scale], "o-")
            ax.set_xscale("log")
            ax.set_xlabel("documents")
            ax.set_ylabel("µs per document (dedup run, 2 workers)")
            fig.tight_layout()
            fig.savefig(RESULTS / "time_per_doc.png", dpi=120)
            print(f"saved {RESULTS / 'time_per_doc.png'}")


if __name__ == "__main__":
    main()
