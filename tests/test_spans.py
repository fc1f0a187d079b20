"""Exact substring (span) dedup (docs/contract.md §6c) against its plain-Python reading
(`tests.reference.ref_spans`) and, for keep "none", a suffix array over the token keys: the tokens,
the windows' keys, the cut, and the partition steps on generated corpora (CJK, emoji, combining
marks, `\\r\\n`, a passage in every document, a document repeating itself, k beyond a document)."""

from __future__ import annotations

import datetime as dt
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.core.spans import covered, cut, tokens, window_keys
from dedup.job.pipeline import run
from dedup.partition import lines as part_lines
from dedup.partition import span_keys
from dedup.partition import spans as part_spans
from dedup.partition.keyspace import doc_keys
from tests.conftest import (
    DEDUP,
    chromium,
    clean_partitions,
    kill_after,
    parquet_digests,
    run_command,
    share_counts,
    table_cells,
    write_shards,
)
from tests.reference import DROPPED, _span_tokens, ref_clusters, ref_lines, ref_span_removed, ref_spans

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
    pieces, feats = zip(*clean_partitions(frame, parts))
    counts = pd.concat([part_spans.window_counts(p, f, None, None, None, "text", True, rule, parts, {"number": n})
                        for n, (p, f) in enumerate(zip(pieces, feats))], ignore_index=True)
    repeated = span_keys.repeated_keys(counts, parts)
    to = span_keys.part_of(repeated, parts)
    rows = pd.concat([part_spans.partition_windows(p, f, None, None, None, repeated[to == n], "id", "text",
                                                   True, rule, parts, {"number": n})
                      for n, (p, f) in enumerate(zip(pieces, feats))], ignore_index=True)
    settled = span_keys.settle_windows(rows)
    out: dict[str, str | None] = {}
    for n, (p, f) in enumerate(zip(pieces, feats)):
        mine = settled[settled["part"] == n].reset_index(drop=True)
        changes = part_spans.span_changes(p, f, None, None, None, mine, "text", True, None, rule, {"number": n})
        new = part_spans.without_spans(pa.array(list(p["text"]), pa.large_string()), doc_keys(n, len(p)),
                                       changes).to_pylist()
        emptied = set(p["id"].to_numpy()[np.isin(doc_keys(n, len(p)), changes["doc"][changes["fate"] == 1])])
        out.update({i: DROPPED if i in emptied else t for i, t in zip(p["id"], new)})
    return out


@settings(max_examples=60, deadline=None)
@given(texts_strategy, st.integers(1, 3), st.integers(1, 6), st.sampled_from(["first", "none"]),
       st.sampled_from(["word", "char"]), st.sampled_from([1, 3, part_spans.TOKEN_CHUNK]),
       st.randoms(use_true_random=False))
def test_the_partition_steps_cut_what_the_reference_cuts(texts: list[str | None], parts: int, k: int, keep: str,
                                                         unit: str, chunk: int, rnd: random.Random) -> None:
    """At 1 to 3 partitions, their documents tokenised 1, 3 or thousands at a time."""
    ids = [f"d{i:02d}" for i in range(len(texts))]
    rnd.shuffle(ids)
    rule = part_spans.SpanRule(size=k, unit=unit, keep=keep)
    default, part_spans.TOKEN_CHUNK = part_spans.TOKEN_CHUNK, chunk
    try:
        got = _steps(texts, ids, parts, rule)
    finally:
        part_spans.TOKEN_CHUNK = default
    assert got == ref_spans(ids, texts, k, keep, unit)


@settings(max_examples=60, deadline=None)
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


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(1, 3), st.integers(0, 9),
                          st.integers(0, 2)), min_size=1, max_size=40), st.integers(1, 6))
def test_settled_windows_and_their_top_are_what_sorting_by_id_gives(rows: list[tuple[int, ...]], n: int) -> None:
    """`settle_windows` and `top_windows` (numbers, an id's rank in the task) against a plain reading:
    each key's rows summed, the first occurrence the smallest (id, token), the top by count, first
    occurrence, key, as the lines' `top_keys` orders with the ids themselves."""
    frame = pd.DataFrame(rows, columns=["key", "doc", "count", "line", "other"]).drop(columns="other")
    frame = frame.assign(part=frame["doc"] % 3).drop_duplicates(["key", "part"])  # a document's partition
    frame = frame.assign(h1=(frame["key"] % 3).astype(np.uint64), h2=frame["key"].astype(np.uint64),
                         _id=[f"id{d}" for d in frame["doc"]], line=frame["line"].astype(np.int32),
                         count=frame["count"].astype(np.int32),
                         doc=(frame["part"].to_numpy(np.int64) << 32) | frame["doc"].to_numpy(np.int64))
    got = span_keys.settle_windows(frame.drop(columns=["key", "part"]))
    expect = []
    for (h1, h2), g in frame.groupby(["h1", "h2"]):
        if g["count"].sum() < 2:
            continue
        first = g.sort_values(["_id", "line"]).iloc[0]
        expect += [(h1, h2, int(g["count"].sum()), first["_id"], int(first["line"]), int(p)) for p in g["part"]]
    assert sorted(got[["h1", "h2", "count", "_id", "line", "part"]].itertuples(index=False, name=None)) == sorted(expect)
    top = span_keys.top_windows(got, n)
    assert top["keys"].sum() == len({(e[0], e[1]) for e in expect})
    lines_top = part_lines.top_keys(got.drop(columns=["lead", "first"]), n)
    assert top[["h1", "h2", "count", "_id", "line"]].values.tolist() == \
        lines_top[["h1", "h2", "count", "_id", "line"]].values.tolist()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(WORDS + ["The", "CAT", "x_1", "42"]), max_size=30), st.sampled_from(SEPARATORS))
def test_an_ascii_text_is_read_in_place_as_re_reads_it(words: list[str], sep: str) -> None:
    """The compiled ASCII reading (`_span_kernels.ascii_token_keys`) and `re` on a text with one
    character beyond ASCII give each token the same position and keys."""
    text = sep.join(words)
    fast, slow = tokens([text, text + " é"]), tokens([text + " é"])
    n = int(fast.offsets[1])
    assert fast.start[:n].tolist() == slow.start[:n].tolist() == [m.start() for m in re.finditer(r"\w+", text)]
    assert fast.h1[:n].tolist() == slow.h1[:n].tolist() and fast.h2[:n].tolist() == slow.h2[:n].tolist()


def test_a_cut_runs_from_a_removed_token_to_the_next_kept_one() -> None:
    """§6c's cut on one text: each run of removed tokens from its first character to the next kept
    token's first character; a run at the end takes the text's tail."""
    text = "Keep this. Cut these three words! Keep. end tail!!"
    tok = tokens([text])
    removed = np.zeros(len(tok.start), bool)
    removed[[2, 3, 4]] = True  # "Cut these three"
    removed[[7, 8]] = True  # "end tail"
    assert cut([text], tok, removed) == {0: "Keep this. words! Keep. "}


def _holds_ngram(text: str, grams: set[tuple[str, ...]], n: int = 13) -> bool:
    words = re.findall(r"\w+", text.lower())
    return any(tuple(words[i:i + n]) in grams for i in range(len(words) - n + 1))


def test_run_with_lines_and_spans_cuts_the_survivors_texts(client, tmp_path: Path) -> None:
    """`run --lines --spans` on the real cluster: decontamination and near dedup on the texts as read,
    lines then spans on the survivors, the new texts checked for protected 13-grams after each: every
    text, drop and reason as the reference computes them, at several partitions; no index."""
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(2000)]
    bodies = [" ".join(rng.choice(vocab) for _ in range(80)) for _ in range(30)]
    quote = " ".join(rng.choice(vocab) for _ in range(12))
    nav = "Home | Products | About us | Contact"
    secret = "the quick brown fox jumps over the lazy dog while the eval record says hello to everyone here"
    halves = secret.split(" ")
    texts = [f"{nav}\n{b} {quote} {b[:40]}" for b in bodies]
    texts += [f"{nav}\n{b}" for b in bodies[:6]]  # near copies of the first six
    texts += [f"{quote} {quote}", " ".join(halves[:6]) + f" {quote} " + " ".join(halves[6:13]) + " more",
              f"{secret}\nnothing else"]
    ids = [f"d{i:03d}" for i in range(len(texts))]
    (tmp_path / "eval.txt").write_text(secret)
    src = write_shards(pd.DataFrame({"id": ids, "text": texts}), tmp_path / "in", 3)
    m = run(str(src), str(tmp_path / "out"), protected=[tmp_path / "eval.txt"], lines=True, spans=True, span_tokens=8,
            partition_rows=11, max_lines_removed=1.0)
    words = re.findall(r"\w+", secret.lower())
    grams = {tuple(words[i:i + 13]) for i in range(len(words) - 12)}
    text_of = dict(zip(ids, texts))
    clean = [i for i in ids if not _holds_ngram(text_of[i], grams)]
    clusters = ref_clusters(clean, [text_of[i] for i in clean], mode="connected", threshold=0.8, confirm="estimate")
    survivors = [i for i in clean if clusters[i][0] == i]
    after_lines = ref_lines(survivors, [text_of[i] for i in survivors])
    line_dropped = {i for i in survivors if after_lines[i] is DROPPED or _holds_ngram(after_lines[i], grams)}
    left = [i for i in survivors if i not in line_dropped]
    after_spans = ref_spans(left, [after_lines[i] for i in left], 8)
    emptied = {i for i in left if after_spans[i] is DROPPED}
    cut_contaminated = {i for i in left if i not in emptied and _holds_ngram(after_spans[i], grams)}
    assert "d037" in cut_contaminated  # the quote between the halves went
    kept = [i for i in left if i not in emptied | cut_contaminated]
    got = pd.read_parquet(tmp_path / "out")
    assert dict(zip(got["id"], got["text"])) == {i: after_spans[i] for i in kept}
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    reasons = dict(zip(removed["id"], removed["reason"]))
    assert {i for i, r in reasons.items() if r == "empty_after_spans"} == emptied
    assert {i for i, r in reasons.items() if r == "contaminated_after_spans"} == cut_contaminated
    assert {i for i, r in reasons.items() if r == "near_duplicate"} == {i for i in clean if clusters[i][0] != i}
    assert m["output_rows"] == len(kept) and m["index"] is None
    assert m["spans"]["documents_contaminated"] == len(cut_contaminated)
    top = m["spans"]["top_spans"][0]
    assert top["copies"] >= 30 and top["text"] in texts[0]
    from selenium.webdriver.common.by import By

    d = chromium()
    try:
        d.get((tmp_path / "out" / m["report"]).as_uri())
        shown = table_cells(d, "#top-spans tr")
        shares = share_counts(d, "#span-shares tr")
        counts = {e.get_attribute("data-key"): e.text for e in d.find_elements(By.CSS_SELECTOR, "#counts td[data-key]")}
    finally:
        d.quit()
    assert shown[1][:3] == [f"{top['copies']:,}", top["text"], top["document"]]
    assert shares == m["spans"]["share_histogram"] and sum(shares) == m["spans"]["documents_changed"]
    assert counts["contaminated after span dedup, dropped"] == f"{len(cut_contaminated):,}"


def test_dedup_spans_keeps_every_column_and_the_same_bytes_however_it_runs(tmp_path: Path) -> None:
    """`dedup spans` in a subprocess: every other column (timestamps, nested lists and structs, nulls)
    and the row order as read, dictionary texts in their type; keep none; the same bytes on one
    thread, killed once the spans stage has ended and run again, as on two (the cluster's bytes are the
    reference's, `test_run_with_lines_and_spans_cuts_the_survivors_texts`); bad values refused."""
    rng = random.Random(2)
    vocab = [f"v{i}" for i in range(300)]
    shared = " ".join(rng.choice(vocab) for _ in range(20))
    n = 60
    table = pa.table({
        "id": pa.array([f"r{i:02d}" for i in range(n)]),
        "text": pa.array([None if i == 3 else (shared if i == 4 else
                          f"{' '.join(rng.choice(vocab) for _ in range(30))} {shared if i % 2 else ''} é🙂 end")
                          for i in range(n)]).dictionary_encode(),
        "when": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=i) for i in range(n)],
                         pa.timestamp("us", tz="UTC")),
        "tags": pa.array([[f"t{i}", None] if i % 3 else None for i in range(n)], pa.list_(pa.string())),
        "meta": pa.array([{"lang": "en", "score": float(i)} for i in range(n)]),
    })
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "part.parquet", row_group_size=16)
    cmd = [*DEDUP, "spans", str(tmp_path / "in"), str(tmp_path / "out"), "--span-tokens", "10", "--spans-keep", "none",
           "--threads", "2", "--partition-rows", "16"]
    got = run_command(cmd)
    assert got.returncode == 0, got.stderr
    assert "repeated spans cut" in got.stdout
    out = pq.read_table(tmp_path / "out" / "part.parquet")
    texts = [t if t is None else str(t) for t in table["text"].to_pylist()]
    want = ref_spans(table["id"].to_pylist(), texts, 10, "none")
    keep = [i for i, k in enumerate(table["id"].to_pylist()) if want[k] is not DROPPED]
    assert out.schema.remove_metadata() == table.schema.remove_metadata()
    assert out.drop_columns(["text"]).equals(table.take(keep).drop_columns(["text"]))
    assert out["text"].to_pylist() == [want[table["id"][i].as_py()] for i in keep]
    assert len(keep) == n - 1  # r04, all of it repeated, is dropped
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    assert removed[["id", "reason"]].values.tolist() == [["r04", "empty_after_spans"]]
    killed = [*cmd[:5], str(tmp_path / "again"), *cmd[6:-4], "--threads", "1", *cmd[-2:]]  # and another thread count
    kill_after(killed, "spans:")
    again = run_command(killed)
    assert again.returncode == 0, again.stderr
    assert re.search(r"resuming: reusing [a-z, ]*\bspans\b", again.stderr)
    assert parquet_digests(tmp_path / "again") == parquet_digests(tmp_path / "out")
    for flag, value in (("--span-tokens", "0"), ("--spans-keep", "all")):
        bad = run_command([*DEDUP, "spans", str(tmp_path / "in"), str(tmp_path / "o3"), flag, value])
        assert bad.returncode == 2 and flag in bad.stderr and not (tmp_path / "o3").exists()


@pytest.mark.parametrize("keep", ["first", "none"])
def test_the_contracts_worked_example(tmp_path: Path, keep: str) -> None:
    """docs/contract.md §6c's table, run as written (the local scheduler)."""
    texts = {"a": "The cat sat on the mat. A dog!", "b": "Yes, the CAT sat on the mat today.", "c": "the cat sat"}
    write_shards(pd.DataFrame({"id": list(texts), "text": list(texts.values())}), tmp_path / "in", 1)
    m = run(str(tmp_path / "in"), str(tmp_path / "out"), near=False, spans=True, span_tokens=3, spans_keep=keep)
    got = pd.read_parquet(tmp_path / "out")
    assert dict(zip(got["id"], got["text"])) == {"a": texts["a"] if keep == "first" else "A dog!", "b": "Yes, today."}
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    assert removed[["id", "reason"]].values.tolist() == [["c", "empty_after_spans"]]
    assert m["spans"]["repeated_windows"] == 4 and m["spans"]["documents_dropped"] == 1
