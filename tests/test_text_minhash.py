"""contract §1 and §3: words, shingles, Jaccard, signatures and the estimate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dedup import MERSENNE_P, estimate, jaccard, minhash, shingles, signatures, words
from tests.reference import ref_shingles, ref_signature


def test_hand_example() -> None:
    a = shingles("the cat sat on the mat today", 3)
    b = shingles("the cat sat on the mat again", 3)
    assert len(a & b) == 4 and len(a | b) == 6
    assert jaccard(a, b) == pytest.approx(0.667, abs=5e-4)


def test_case_and_punctuation_never_matter() -> None:
    assert words("Hello,   WORLD!!") == words("hello world") == ["hello", "world"]
    assert shingles("Hello,   WORLD!!", 5) == shingles("hello world", 5)


@pytest.mark.parametrize("n_words", [1, 2, 3, 4])
def test_short_text_is_one_shingle(n_words: int) -> None:
    text = " ".join([f"w{i}" for i in range(n_words)])
    assert shingles(text, 5) == {text}
    # a short line still matches its copy
    assert estimate(*signatures([text, text.upper() + "!"])) == 1.0


def test_k_words_give_one_shingle_and_more_give_windows() -> None:
    assert shingles("a b c d e", 5) == {"a b c d e"}
    assert shingles("a b c d e f", 5) == {"a b c d e", "b c d e f"}


def test_jaccard_of_empty_sets_is_zero() -> None:
    assert jaccard(set(), set()) == 0.0
    assert jaccard({"a"}, set()) == 0.0


@pytest.mark.parametrize("text", ["", "   ", "!!! ...", "\u200b", None])
def test_wordless_text_has_all_p_signature_and_zero_estimate(text: str | None) -> None:
    sig = signatures([text])[0]
    assert (sig == MERSENNE_P).all()
    assert estimate(sig, sig) == 0.0
    assert shingles(text or "") == set()


def test_signature_equals_plain_python_reference() -> None:
    texts = ["the quick brown fox jumps over the lazy dog again and again", "short one", "Ünïcödé wörds ñ 日本語 テキスト"]
    sigs = signatures(texts, num_perm=64, seed=3, shingle_size=3)
    assert sigs.dtype == np.uint32 and sigs.shape == (3, 64)
    for text, sig in zip(texts, sigs):
        assert sig.tolist() == ref_signature(text, k=3, num_perm=64, seed=3)


def test_minhash_of_one_set_equals_batch_row() -> None:
    text = "a b c d e f g h i j k"
    assert (minhash(shingles(text)) == signatures([text])[0]).all()


def test_batch_does_not_depend_on_chunking() -> None:
    """Pitfall: a seed per worker chunk. Any split of the batch gives the same rows."""
    texts = [f"doc {i} " + " ".join(f"w{j % (i + 3)}" for j in range(30)) for i in range(50)]
    whole = signatures(texts)
    parts = np.concatenate([signatures(texts[i : i + 7]) for i in range(0, 50, 7)])
    assert (whole == parts).all()


def test_signature_ignores_shingle_order_and_repetition() -> None:
    s = ["x y", "y z", "z w"]
    assert (minhash(s) == minhash(list(reversed(s)) + s)).all()


def test_union_signature_is_elementwise_min() -> None:
    a, b = {"p q", "q r", "r s"}, {"r s", "s t"}
    assert (minhash(a | b) == np.minimum(minhash(a), minhash(b))).all()


def test_estimate_is_positional_not_set_based() -> None:
    """Pitfall: comparing signatures as sets. A permuted signature shares values, not positions."""
    sig = signatures(["one two three four five six seven eight nine ten"])[0]
    assert estimate(sig, np.roll(sig, 1)) < 0.1
    assert estimate(sig, sig) == 1.0


def test_estimate_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="same num_perm"):
        estimate(np.zeros(128, np.uint32), np.zeros(64, np.uint32))


def _pair_with_jaccard(rng: np.random.Generator, inter: int, only: int, tag: str) -> tuple[str, str]:
    pool = [f"{tag}x{i}" for i in rng.permutation(inter + 2 * only)]
    common, a_only, b_only = pool[:inter], pool[inter : inter + only], pool[inter + only :]
    return " ".join(common + a_only), " ".join(common + b_only)


def test_estimator_is_unbiased_at_one_third() -> None:
    rng = np.random.default_rng(11)
    j = 1 / 3
    pairs = [_pair_with_jaccard(rng, 50, 50, f"p{n}") for n in range(40)]
    sigs = signatures([t for p in pairs for t in p], shingle_size=1)
    ests = [estimate(sigs[2 * n], sigs[2 * n + 1]) for n in range(40)]
    z = (np.mean(ests) - j) / np.sqrt(j * (1 - j) / 128 / 40)
    assert abs(z) < 3.29


unicode_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\u0301", "\u200b", "\u200d", "日", "本", "😀", "é", "İ", "ß", " ", "\n", "_"]),
    ),
    max_size=60,
)


@given(st.lists(unicode_text, max_size=6), st.integers(1, 4))
def test_signatures_equal_reference_for_arbitrary_unicode(texts: list[str], k: int) -> None:
    sigs = signatures(texts, num_perm=16, seed=5, shingle_size=k)
    for text, sig in zip(texts, sigs):
        assert shingles(text, k) == ref_shingles(text, k)
        assert sig.tolist() == ref_signature(text, k=k, num_perm=16, seed=5)


ascii_text = st.text(alphabet=st.characters(max_codepoint=127), max_size=80)


@given(st.lists(st.one_of(st.none(), ascii_text, unicode_text), max_size=8))
def test_batch_tokeniser_equals_reference_words(texts: list[str | None]) -> None:
    """The compiled ASCII tokeniser and the Unicode path give exactly the contract's words, in any mix."""
    from dedup.core.text import encode_batch

    batch = encode_batch(texts)
    for d, text in enumerate(texts):
        got = [bytes(batch.buf[batch.word_start[w] : batch.word_end[w]]).decode("utf-8")
               for w in range(batch.word_offsets[d], batch.word_offsets[d + 1])]
        assert got == words(text or "")
    start, end, offsets = batch.spans(3, short=True)
    hashes, offsets2 = batch.window_hashes(3, short=True)
    from dedup.core.hashing import span_hashes

    assert (offsets == offsets2).all() and (span_hashes(batch.buf, start, end) == hashes).all()


@given(st.lists(st.one_of(st.none(), ascii_text, unicode_text), max_size=10), st.integers(0, 3),
       st.booleans(), st.integers(1, 3))
def test_arrow_text_columns_tokenise_in_place_like_python_strings(texts: list[str | None], cut: int, large: bool,
                                                                  chunks: int) -> None:
    """An Arrow-backed column (string or large_string, sliced, in several chunks, with nulls) is
    read from its buffers, and gives the batch of its Python strings byte for byte."""
    import pandas as pd
    import pyarrow as pa

    from dedup.core.text import TEXT_DTYPE, encode_batch, encode_column

    kind = pa.large_string() if large else pa.string()
    whole = pa.array(["padding"] * cut + texts, type=kind).slice(cut)
    step = max(1, -(-len(texts) // chunks))
    pieces = [whole.slice(i, step) for i in range(0, len(texts), step)] or [whole]
    column = pd.Series(pd.arrays.ArrowStringArray(pa.chunked_array(pieces, kind).cast(pa.large_string())),
                       dtype=TEXT_DTYPE)
    want, got = encode_batch(texts), encode_column(column)
    for field in ("buf", "word_start", "word_end", "word_offsets"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field
    from dedup.core.text import encode_arrow

    same = encode_arrow(whole)
    assert np.array_equal(same.buf, want.buf) and np.array_equal(same.word_offsets, want.word_offsets)


def test_signatures_in_chunks_equal_one_batch() -> None:
    """`signatures` works SIGNATURE_CHUNK texts at a time; across chunk edges (and for a generator)
    the rows are those of one batch over every text."""
    from dedup.core.minhash import SIGNATURE_CHUNK, batch_signatures
    from dedup.core.text import encode_batch

    texts = [None if i % 97 == 0 else f"doc {i % 13} " + "word " * (i % 17) + f"end {i % 5} é" * (i % 3 == 0)
             for i in range(2 * SIGNATURE_CHUNK + 5)]
    want = batch_signatures(encode_batch(texts), num_perm=16, seed=3)
    assert np.array_equal(signatures(texts, num_perm=16, seed=3), want)
    assert np.array_equal(signatures((t for t in texts), num_perm=16, seed=3), want)
    assert signatures([], num_perm=16).shape == (0, 16)
    import pyarrow as pa

    from dedup.core.minhash import arrow_signatures

    for kind in (pa.string(), pa.large_string()):  # an Arrow array read in place, sliced: the same rows
        array = pa.array(["x"] + texts, type=kind).slice(1)
        assert np.array_equal(arrow_signatures(array, num_perm=16, seed=3), want)
    assert arrow_signatures(pa.array([], pa.string()), num_perm=16).shape == (0, 16)
    few = ["ab cd ef gh ij kl", "été à la plage ce soir là-bas", None]
    assert [list(s) for s in arrow_signatures(pa.array(few), num_perm=8, shingle_size=2)] == \
        [ref_signature(t or "", 2, 8) for t in few]


@given(st.text(alphabet=st.sampled_from("ab 1.\u00e9\u4e2d\u6587\u0e01\u3042"), max_size=30))
def test_unspaced_is_most_letters_of_unspaced_scripts(text: str) -> None:
    """`unspaced` (the planning's sample check) is its definition: more than half of the letters in the
    scripts written without spaces; an ASCII text, which it answers without counting, never is."""
    from dedup.core.text import UNSPACED, unspaced

    letters = sum(ch.isalpha() for ch in text)
    assert unspaced(text) == (letters > 0 and len(UNSPACED.findall(text)) > letters / 2)
    assert not unspaced(text.encode("ascii", "ignore").decode())
