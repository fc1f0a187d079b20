"""contract §2: FNV-1a, PCG32 and the permutation parameters, pinned by their test vectors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dedup import MERSENNE_P, PCG32, fnv1a64, perm_params, shingle_hashes
from tests.reference import ref_fnv1a64, ref_mix, ref_perm_params


def test_fnv1a64_vectors() -> None:
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


def test_pcg32_vector() -> None:
    rng = PCG32(42)
    assert [rng.next() for _ in range(6)] == [0xA15C02B7, 0x7B47F409, 0xBA1D3330, 0x83D2F293, 0xBFA4784B, 0xCBED606E]


def test_below_is_in_range_and_rejects_bad_bounds() -> None:
    rng = PCG32(7)
    draws = [rng.below(3) for _ in range(300)]
    assert set(draws) == {0, 1, 2}
    with pytest.raises(ValueError, match="bound"):
        rng.below(0)


def test_perm_params_interleaved_draws() -> None:
    a, b = perm_params(128, 0)
    expected = ref_perm_params(128, 0)
    assert list(zip(a.tolist(), b.tolist())) == expected
    assert a.dtype == np.uint64 and (a >= 1).all() and (a < MERSENNE_P).all() and (b < MERSENNE_P).all()
    # interleaved, not "all a then all b": the first b is the second draw of the generator
    rng = PCG32(0)
    assert a[0] == 1 + rng.below(MERSENNE_P - 1) and b[0] == rng.below(MERSENNE_P)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_perm_params_rejects_bad_num_perm(bad: object) -> None:
    with pytest.raises(ValueError, match="'num_perm' parameter"):
        perm_params(bad, 0)  # type: ignore[arg-type]


@given(st.lists(st.text(max_size=40), max_size=20))
def test_shingle_hashes_match_reference(items: list[str]) -> None:
    got = shingle_hashes(items)
    assert got.dtype == np.uint64
    assert got.tolist() == [ref_fnv1a64(s.encode("utf-8")) % MERSENNE_P for s in items]


@given(st.lists(st.binary(max_size=40), max_size=8))
def test_text_keys_are_both_text_hashes_in_one_pass(parts: list[bytes]) -> None:
    """The features stage's fused kernel gives exactly the two text hashes (tkey, tkey2) that the
    separate kernels give, so earlier indexes' text keys still match."""
    from dedup.core import _kernels

    buf = np.frombuffer(b"".join(parts) or b"\0", dtype=np.uint8)
    end = np.cumsum([len(p) for p in parts], dtype=np.int64)
    start = end - np.array([len(p) for p in parts], dtype=np.int64)
    mix, fnv = _kernels.text_keys(buf, start, end)
    assert mix.tolist() == [ref_mix(p) for p in parts] == _kernels.mix_spans(buf, start, end).tolist()
    assert fnv.tolist() == [ref_fnv1a64(p) for p in parts] == _kernels.fnv1a_spans(buf, start, end).tolist()


EDGES = [0, 1, MERSENNE_P - 1, MERSENNE_P, MERSENNE_P + 1, 2 * MERSENNE_P, (1 << 62) - 1, (1 << 64) - 1,
         (1 << 64) - MERSENNE_P]


@given(st.lists(st.one_of(st.integers(0, (1 << 64) - 1), st.sampled_from(EDGES)), min_size=1, max_size=30))
def test_minhash_kernel_reduces_raw_hashes_mod_p(hashes: list[int]) -> None:
    """The kernel takes the shingles' 64-bit hashes and reduces them itself: the same signature as
    Python's exact x = h % P followed by min over (a x + b) % P."""
    from dedup.core import _kernels

    a, b = perm_params(16, 3)
    out = np.empty((1, 16), dtype=np.uint32)
    _kernels.minhash_rows(np.array(hashes, dtype=np.uint64), np.array([0, len(hashes)]), a.astype(np.uint32),
                          b.astype(np.uint32), out)
    want = [min((int(ai) * (h % MERSENNE_P) + int(bi)) % MERSENNE_P for h in hashes) for ai, bi in zip(a, b)]
    assert out[0].tolist() == want


@given(st.lists(st.one_of(st.integers(0, (1 << 64) - 1), st.sampled_from(EDGES)), min_size=1, max_size=20),
       st.lists(st.tuples(st.one_of(st.integers(1, MERSENNE_P - 1), st.sampled_from([1, 2, MERSENNE_P - 1])),
                          st.one_of(st.integers(0, MERSENNE_P - 1), st.sampled_from([0, 1, MERSENNE_P - 1]))),
                min_size=1, max_size=8))
def test_minhash_kernel_is_exact_at_the_extremes_of_a_and_b(hashes: list[int], ab: list[tuple[int, int]]) -> None:
    """The kernel reduces a x + b with one Mersenne fold and one wrap-around minimum, which is exact
    only because a, b, x < P (the contract's ranges): pinned at their largest and smallest values."""
    from dedup.core import _kernels

    a = np.array([p[0] for p in ab], dtype=np.uint32)
    b = np.array([p[1] for p in ab], dtype=np.uint32)
    out = np.empty((1, len(ab)), dtype=np.uint32)
    _kernels.minhash_rows(np.array(hashes, dtype=np.uint64), np.array([0, len(hashes)]), a, b, out)
    want = [min((ai * (h % MERSENNE_P) + bi) % MERSENNE_P for h in hashes) for ai, bi in ab]
    assert out[0].tolist() == want


def test_hashes_do_not_depend_on_the_process() -> None:
    """Pitfall: Python's hash() is salted per process; our hashes must not be."""
    code = "import dedup; print(dedup.signatures(['one two three four five six'])[0, :8].tolist())"
    outs = {
        subprocess.run([sys.executable, "-c", code], env={"PYTHONHASHSEED": seed}, capture_output=True, text=True,
                       check=True).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
