"""The benchmarks' exact ground truth equals brute force (so recall and precision mean what they say)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from truth import brute_force_pairs, true_pairs  # noqa: E402


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8, 0.9, 1.0])
def test_true_pairs_equal_brute_force(corpus_frame, threshold: float) -> None:
    texts = corpus_frame["text"].iloc[:300].tolist() + ["", None, "a b c d e", "a b c d e"]
    assert true_pairs(texts, threshold) == brute_force_pairs(texts, threshold)


def test_pairs_exactly_on_the_threshold_are_kept() -> None:
    # 4 shared of 5 distinct shingles: Jaccard exactly 0.8 (shingle_size 1)
    texts = ["a b c d", "a b c d e"]
    assert true_pairs(texts, 0.8, shingle_size=1) == {(0, 1)}
    assert true_pairs(texts, 0.81, shingle_size=1) == set()
