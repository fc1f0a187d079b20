"""Character shingles (contract §1): the reference definition, the compiled batch path, and
planted near copies in scripts written without spaces."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dedup import Params, clusters, fnv1a64, jaccard, shingles, signatures
from dedup.partition.confirm import shingle_sets
from tests.reference import ref_char_shingles, ref_signature

unicode_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\u0301", "\u200b", "日", "本", "ภ", "า", "😀", "é", "İ", "ß", " ", "\n", "_", "a"]),
    ),
    max_size=40,
)


def test_contract_vectors() -> None:
    assert shingles("Hello, 世界", 5, "char") == {"hello", "ello ", "llo 世", "lo 世界"}
    assert fnv1a64("lo 世界".encode()) == 0x6ED7F7F6126DED8E
    a, b = "東京は日本の首都です", "東京は日本の首都でした"
    assert jaccard(shingles(a, 3, "char"), shingles(b, 3, "char")) == pytest.approx(0.7)
    assert jaccard(shingles(a, 3), shingles(b, 3)) == 0.0
    assert shingles("Hi!", 5, "char") == {"hi"}
    assert shingles("!!! 😀", 5, "char") == set()


def test_unknown_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="shingle_unit"):
        Params(shingle_unit="byte")
    with pytest.raises(ValueError, match="shingle unit"):
        shingles("abc", 5, "syllable")


@given(st.lists(st.one_of(st.none(), unicode_text), max_size=6), st.integers(1, 6))
def test_char_signatures_equal_plain_python_reference(texts: list[str | None], k: int) -> None:
    sigs = signatures(texts, num_perm=16, seed=3, shingle_size=k, shingle_unit="char")
    for text, sig in zip(texts, sigs):
        assert shingles(text or "", k, "char") == ref_char_shingles(text or "", k)
        assert sig.tolist() == ref_signature(text or "", k=k, num_perm=16, seed=3, unit="char")


@given(st.lists(unicode_text, min_size=1, max_size=5), st.integers(1, 6))
def test_char_shingle_hash_sets_equal_reference(texts: list[str], k: int) -> None:
    """The sorted hashes that --confirm exact compares are the reference set's hashes."""
    values, offsets = shingle_sets(list(texts), k, "char")
    for i, text in enumerate(texts):
        want = sorted({fnv1a64(s.encode()) for s in ref_char_shingles(text, k)})
        assert values[offsets[i]:offsets[i + 1]].tolist() == want


def _edit(text: str, rng: random.Random, n: int) -> str:
    chars = list(text)
    for _ in range(n):
        i = rng.randrange(len(chars))
        chars[i] = rng.choice("的了是在有我他这中大")
    return "".join(chars)


SENTENCES = {
    "zh": "数据工程师在准备训练数据时需要删除近似重复的文档，否则模型会反复看到同样的内容并且记住它们。"
          "这个工具按照字符切分文本，因为中文句子之间没有空格。每一份文件都被完整地读取，然后写回原样。",
    "ja": "データエンジニアは学習データを準備するとき、ほぼ重複した文書を取り除く必要がある。"
          "日本語の文には単語の間に空白がないので、この道具は文字単位で文章を切り分けて比較する。",
    "th": "วิศวกรข้อมูลต้องลบเอกสารที่ซ้ำกันเกือบทั้งหมดก่อนฝึกโมเดลภาษา เพราะภาษาไทยไม่มีช่องว่างระหว่างคำ"
          "เครื่องมือนี้จึงตัดข้อความเป็นตัวอักษรแล้วเปรียบเทียบกันทีละห้าตัวอักษรอย่างแม่นยำ",
    "mixed": "The model card says 训练数据 came from 東京 and Bangkok (กรุงเทพ) crawls; "
             "我们删除了重复的网页 before training, and kept one copy of each page 以便复现结果。",
}


def _planted(copies: int = 6, seed: int = 7) -> dict[str, str]:
    """Per script an original of two to four hundred characters and copies with 2 characters replaced."""
    rng = random.Random(seed)
    docs: dict[str, str] = {}
    for lang, sentence in SENTENCES.items():
        text = sentence + sentence[::-1]
        for c in range(copies):
            docs[f"{lang}-{c}"] = text if c == 0 else _edit(text, rng, 2)
    return docs


def test_planted_cjk_thai_and_mixed_copies_are_found_with_char_shingles() -> None:
    docs = _planted()
    for key, text in docs.items():  # every copy is well above the threshold in characters
        assert jaccard(shingles(text, 5, "char"), shingles(docs[key.split("-")[0] + "-0"], 5, "char")) >= 0.85
    groups = clusters(docs, shingle_unit="char", confirm="exact")
    assert sorted(sorted(g) for g in groups) == [sorted(k for k in docs if k.startswith(lang + "-"))
                                                 for lang in sorted(SENTENCES)]
    # with word shingles a whole unspaced clause is one word: edited copies are missed
    unspaced = {i for i in docs if i.startswith(("zh-", "ja-", "th-"))}
    word_found = {i for g in clusters(docs, confirm="exact") for i in g}
    assert len(word_found & unspaced) < len(unspaced)


def test_char_shingles_in_the_job(client, tmp_path: Path) -> None:
    docs = _planted()
    frame = pd.DataFrame({"id": list(docs), "text": list(docs.values())})
    src = tmp_path / "in"
    src.mkdir()
    frame.iloc[::2].to_parquet(src / "a.parquet", index=False)
    frame.iloc[1::2].to_parquet(src / "b.parquet", index=False)
    from dedup.job.pipeline import run

    params = Params(shingle_unit="char", confirm="exact")
    m = run(str(src), str(tmp_path / "out"), params=params, drop=False)
    assert m["parameters"]["shingle_unit"] == "char"
    out = pd.read_parquet(tmp_path / "out")
    want = {i: min(k for k in docs if k.split("-")[0] == i.split("-")[0]) for i in docs}
    assert dict(zip(out["id"], out["minhash_cluster"])) == want
