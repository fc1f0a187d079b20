"""contract §4: band keys, candidates, the S-curve and optimal_params."""

from __future__ import annotations

import numpy as np
import pytest

from dedup import LSH, MERSENNE_P, band_keys, optimal_params, probability, signatures
from dedup.core.lsh import NO_KEY, bucket_pairs


def test_worked_numbers() -> None:
    lsh = LSH(16, 8)
    assert lsh.threshold == pytest.approx(0.7071, abs=5e-5)
    assert lsh.probability(0.8) == pytest.approx(0.9470, abs=5e-5)
    assert lsh.probability(0.5) == pytest.approx(0.0607, abs=5e-5)
    assert probability([0.2, 0.5, 0.8], 20, 5) == pytest.approx([0.0064, 0.4701, 0.9996], abs=5e-5)


@pytest.mark.parametrize(
    ("args", "expected"),
    [((0.5,), (25, 5)), ((0.7,), (14, 9)), ((0.9,), (5, 25)), ((0.7, 128, 0.2, 0.8), (18, 7))],
)
def test_optimal_params_picks(args: tuple, expected: tuple[int, int]) -> None:
    assert optimal_params(*args) == expected


def test_optimal_params_rejects_bad_threshold() -> None:
    with pytest.raises(ValueError, match=r"'threshold' parameter .* \[0, 1\]. Got 1.5"):
        optimal_params(1.5)


def test_banding_larger_than_num_perm_raises() -> None:
    with pytest.raises(ValueError, match="num_bands \\* rows_per_band must be <= num_perm"):
        LSH(16, 9, num_perm=128)
    with pytest.raises(ValueError, match="<= num_perm"):
        band_keys(np.zeros((2, 64), np.uint32), num_bands=16, rows_per_band=8)


def _sig(values: dict[int, int], fill: int) -> np.ndarray:
    sig = np.arange(fill, fill + 128, dtype=np.uint32)
    for pos, v in values.items():
        sig[pos] = v
    return sig


def test_equal_rows_in_different_bands_are_no_candidate() -> None:
    """Pitfall: a bucket key without the band index."""
    rows = {i: 1000 + i for i in range(8)}
    a = _sig(rows, 5000)  # rows 0-7 (band 0) hold the values
    b = _sig({8 + i: v for i, v in enumerate(rows.values())}, 9000)  # the same values in band 1
    keys = band_keys(np.stack([a, b]))
    assert not (keys[0] == keys[1]).any()
    assert set(keys[0].tolist()).isdisjoint(keys[1].tolist())
    lsh = LSH()
    lsh.insert("a", a)
    lsh.insert("b", b)
    assert lsh.candidates() == []


def test_r_minus_one_equal_rows_are_no_candidate_but_r_are() -> None:
    a = _sig({}, 5000)
    b = _sig({i: 5000 + i for i in range(7)}, 9000)  # agrees with a on rows 0-6 only
    c = _sig({i: 5000 + i for i in range(8)}, 20000)  # agrees with a on all of band 0
    lsh = LSH()
    for key, sig in (("a", a), ("b", b), ("c", c)):
        lsh.insert(key, sig)
    assert lsh.candidates() == [("a", "c")]
    left, right = bucket_pairs(band_keys(np.stack([a, b, c])))
    assert list(zip(left.tolist(), right.tolist())) == [(0, 2)]


def test_lsh_rejects_repeated_key_and_wrong_length() -> None:
    lsh = LSH()
    lsh.insert("a", np.zeros(128, np.uint32))
    with pytest.raises(ValueError, match="already in the index"):
        lsh.insert("a", np.zeros(128, np.uint32))
    with pytest.raises(ValueError, match="num_perm=128"):
        lsh.insert("b", np.zeros(64, np.uint32))


def test_empty_documents_are_never_indexed() -> None:
    """Pitfall: every empty text in one bucket."""
    sigs = signatures(["", "!!", None, "   "])
    keys = band_keys(sigs)
    assert (keys == NO_KEY).all()
    assert len(bucket_pairs(keys)[0]) == 0
    lsh = LSH()
    for i, s in enumerate(sigs):
        lsh.insert(i, s)
    assert lsh.candidates() == []
    real = band_keys(np.full((1, 128), 7, np.uint32))
    assert (real != NO_KEY).all() and (sigs == MERSENNE_P).all()


def _pairs_at(s: float, n_pairs: int, rng: np.random.Generator) -> list[str]:
    inter = round(200 * s)
    only = (200 - inter) // 2
    inter = 200 - 2 * only
    texts = []
    for p in range(n_pairs):
        pool = [f"s{s:.3f}p{p}w{i}" for i in rng.permutation(inter + 2 * only)]
        texts.append(" ".join(pool[: inter + only]))
        texts.append(" ".join(pool[:inter] + pool[inter + only :]))
    return texts


def test_s_curve_matches_formula() -> None:
    rng = np.random.default_rng(3)
    sims = np.round(np.linspace(0.50, 0.90, 13), 2)
    n = 150
    rates, chi2 = [], 0.0
    for s in sims:
        texts = _pairs_at(float(s), n, rng)
        keys = band_keys(signatures(texts, shingle_size=1))
        hit = (keys[0::2] == keys[1::2]).any(axis=1)
        inter = 200 - 2 * ((200 - round(200 * s)) // 2)
        p = probability(inter / 200, 16, 8)
        chi2 += (hit.sum() - n * p) ** 2 / (n * p * (1 - p))
        rates.append(hit.mean())
    assert chi2 < 34.53  # chi-square, 13 degrees of freedom, p = 0.001
    half = float(np.interp(0.5, rates, sims))
    assert abs(half - (1 / 16) ** (1 / 8)) < 0.05


def test_recall_banding_keeps_a_pair_at_the_threshold_a_candidate_90_percent_of_the_time() -> None:
    """The most rows per band with p(threshold) >= 0.9: 16 x 8 for 0.8 (the default), 21 x 6 for 0.7."""
    from dedup.core.lsh import recall_banding

    assert recall_banding(0.8, 128) == (16, 8) and recall_banding(0.7, 128) == (21, 6)
    for t in (0.5, 0.75, 0.9, 0.95):
        b, r = recall_banding(t, 128)
        assert probability(t, b, r) >= 0.9 > probability(t, 128 // (r + 1), r + 1)
