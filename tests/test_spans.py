"""Exact substring (span) dedup (docs/contract.md §6c) against its plain-Python reading
(`tests.reference.ref_spans`) and, for keep "none", a suffix array over the token keys: the tokens,
the windows' keys, the cut, and the partition steps on generated corpora (CJK, emoji, combining
marks, `\\r\\n`, a passage in every document, a document repeating itself, k beyond a document)."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.core.spans import covered, cut, tokens, window_keys
from dedup.partition import lines as part_lines
from dedup.partition import spans as part_spans
from dedup.partition.keyspace import doc_keys
from tests.reference import DROPPED, _span_tokens, ref_span_removed, ref_spans

WORDS = ["the", "The", "cat", "sat", "on", "mat", "猫", "が", "座った", "naïve", "nai\u0308ve", "🙂", "x_1", "ÉTÉ",
         "été", "İstanbul", "42"]
SEPARATORS = [" ", "  ", ", ", ".\n", "\r\n", " — ", "!", " 🙂 ", "\n\n"]
PASSAGE = "a passage that every document quotes in full"

words_text = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=25).map(
    lambda pairs: "".join(w + s for w, s in pairs))
texts_strategy = st.lists(st.one_of(st.none(), words_text, words_text.map(lambda t: f"{t} {PASSAGE}. {t}"),
                                    words_text.map(lambda t: f"{t}{t}{t}")), min_size=1, max_size=12)


def _steps(texts: list[str | None], ids: list[str], parts: int, rule: part_spans.SpanRule) -> dict[str, str | None]:
    """The partition steps without a cluster: windows per partition, settled over all, sent back, cut."""
    frame = pd.DataFrame({"id": ids, "text": pd.Series(texts, dtype=object)})
    bounds = np.linspace(0, len(frame), parts + 1).astype(int)
    pieces = [frame.iloc[lo:hi].reset_index(drop=True) for lo, hi in zip(bounds[:-1], bounds[1:])]
    feats = [pd.DataFrame({"_id": p["id"].to_numpy(object), "doc": doc_keys(n, len(p)),
                           "source": np.full(len(p), -1, np.int32), "skipped": np.zeros(len(p), bool)})
             for n, p in enumerate(pieces)]
    rows = pd.concat([part_spans.partition_windows(p, f, None, None, None, "id", "text", True, rule, {"number": n})
                      for n, (p, f) in enumerate(zip(pieces, feats))], ignore_index=True)
    settled = part_lines.settle_keys(rows, 2, 1)
    out: dict[str, str | None] = {}
    for n, (p, f) in enumerate(zip(pieces, feats)):
        mine = settled[settled["part"] == n].reset_index(drop=True)
        new = part_spans.without_spans(pa.array(list(p["text"]), pa.large_string()), doc_keys(n, len(p)), mine,
                                       np.ones(len(p), bool), rule).to_pylist()
        changes = part_spans.span_changes(p, f, None, None, None, mine, "text", True, None, rule, {"number": n})
        emptied = set(p["id"].to_numpy()[np.isin(doc_keys(n, len(p)), changes["doc"][changes["fate"] == 1])])
        out.update({i: DROPPED if i in emptied else t for i, t in zip(p["id"], new)})
    return out


@settings(max_examples=200, deadline=None)
@given(texts_strategy, st.integers(1, 3), st.integers(1, 6), st.sampled_from(["first", "none"]),
       st.sampled_from(["word", "char"]), st.randoms(use_true_random=False))
def test_the_partition_steps_cut_what_the_reference_cuts(texts: list[str | None], parts: int, k: int, keep: str,
                                                         unit: str, rnd: random.Random) -> None:
    ids = [f"d{i:02d}" for i in range(len(texts))]
    rnd.shuffle(ids)
    rule = part_spans.SpanRule(size=k, unit=unit, keep=keep)
    assert _steps(texts, ids, parts, rule) == ref_spans(ids, texts, k, keep, unit)


@settings(max_examples=200, deadline=None)
@given(texts_strategy, st.integers(1, 8), st.sampled_from(["word", "char"]))
def test_keep_none_removes_what_a_suffix_array_finds_repeated(texts: list[str | None], k: int, unit: str) -> None:
    """Lee et al.'s rule, read off a suffix array over the token keys (documents apart by distinct
    sentinels): a token is removed exactly when a substring of at least k tokens covering it occurs
    twice or more in the corpus."""
    from pydivsufsort import divsufsort, kasai

    ids = [f"d{i:02d}" for i in range(len(texts))]
    vocab: dict[str, int] = {}
    seq: list[int] = []
    where: list[tuple[str, int]] = []
    for n, (i, t) in enumerate(zip(ids, texts)):
        for p, (_, key) in enumerate(_span_tokens(t, unit)):
            seq.append(vocab.setdefault(key, len(vocab)))
            where.append((i, p))
        seq.append(-1 - n)  # a sentinel of its own: no repeat spans two documents
        where.append(("", -1))
    s = np.asarray(seq, np.int64)
    s = (s - s.min()).astype(np.int32)
    sa = divsufsort(s)
    lcp = kasai(s, sa)
    longest = np.zeros(len(s), np.int64)  # the longest repeated substring starting at each position
    for r in range(len(s)):
        longest[sa[r]] = max(lcp[r], lcp[r - 1] if r else 0)
    want = {i: [False] * len(_span_tokens(t, unit)) for i, t in zip(ids, texts)}
    for q in range(len(s)):
        if longest[q] >= k:
            for j in range(q, q + longest[q]):
                i, p = where[j]
                want[i][p] = True
    assert ref_span_removed(ids, texts, k, "none", unit) == want
    rule = part_spans.SpanRule(size=k, unit=unit, keep="none")
    tok = tokens(texts, unit)
    h1, h2, first = window_keys(tok, k)
    frame = pd.DataFrame({"h1": h1, "h2": h2})
    repeated = frame.duplicated(keep=False).to_numpy()
    got = covered(len(tok.start), first[repeated], k)
    flat = [x for i in ids for x in want[i]]
    assert got.tolist() == flat
    assert _steps(texts, ids, 1, rule) == ref_spans(ids, texts, k, "none", unit)


def test_a_cut_runs_from_a_removed_token_to_the_next_kept_one() -> None:
    """§6c's cut on one text: each run of removed tokens from its first character to the next kept
    token's first character; a run at the end takes the text's tail."""
    text = "Keep this. Cut these three words! Keep. end tail!!"
    tok = tokens([text])
    removed = np.zeros(len(tok.start), bool)
    removed[[2, 3, 4]] = True  # "Cut these three"
    removed[[7, 8]] = True  # "end tail"
    assert cut([text], tok, removed) == ["Keep this. words! Keep. "]
