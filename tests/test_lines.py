"""Exact line dedup (docs/contract.md §6b) against its plain-Python reading (`tests.reference.ref_lines`):
the lines' keys, the partition steps and the rewriting on their own, whole runs on a real cluster at
several partitionings, a line in every document, the order decontaminate -> near duplicates -> lines on
the survivors -> protected n-grams again, the guard, every text type, the list of removed lines, and
the CLI."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup import Params
from dedup.core.lines import split_lines, without_lines
from dedup.job.pipeline import run
from dedup.partition import lines as part_lines
from dedup.partition.keyspace import doc_keys
from dedup.storage.safety import UsageError
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
from tests.reference import DROPPED, ref_clusters, ref_lines, ref_removed_lines

NO_GUARD = {"max_lines_removed": 1.0}
"""Small generated corpora are mostly repeated lines: the guard would stop them."""

LINES = ["Home | About", "home about", "Copyright 2024 ACME", "copyright 2024 acme!", "", "  ", "---", "\r",
         "x\r", "X", "ünïcode Straße", "UNÏCODE strasse", "real words here", "more words", "İstanbul"]
"""Lines that repeat, some only by key (case, punctuation), some with no word, `\\r` and non-ASCII."""

texts_strategy = st.lists(st.one_of(st.none(), st.lists(st.sampled_from(LINES), max_size=5).map("\n".join)),
                          min_size=1, max_size=30)


def _key(line: str) -> str:
    return " ".join(re.findall(r"\w+", line.lower()))


@given(texts_strategy)
def test_each_line_and_its_key_are_those_of_the_rule(texts: list[str | None]) -> None:
    """A text's lines are `text.split("\\n")`; two lines with words share both hashes exactly when
    their keys are equal; removing lines keeps every other line byte for byte."""
    got = split_lines(pa.array(texts, pa.string()))
    want = [(d, j, line) for d, t in enumerate(texts) if t is not None for j, line in enumerate(t.split("\n"))]
    assert list(zip(got.doc.tolist(), got.line.tolist())) == [(d, j) for d, j, _ in want]
    assert got.keyed.tolist() == [bool(_key(line)) for _, _, line in want]
    keyed = [line for (_, _, line), k in zip(want, got.keyed) if k]
    for a in range(len(keyed)):
        for b in range(len(keyed)):
            same = (got.h1[a], got.h2[a]) == (got.h1[b], got.h2[b])
            assert same == (_key(keyed[a]) == _key(keyed[b]))
    rng = random.Random(len(want))
    gone = sorted(rng.sample(range(len(want)), len(want) // 2))
    new = without_lines(pa.array(texts, pa.string()), np.array([want[i][0] for i in gone], np.int64),
                        np.array([want[i][1] for i in gone], np.int64)).to_pylist()
    drop = {(want[i][0], want[i][1]) for i in gone}
    assert new == [None if t is None else "\n".join(x for j, x in enumerate(t.split("\n")) if (d, j) not in drop)
                   for d, t in enumerate(texts)]


def _texts(frame: pd.DataFrame) -> list[str | None]:
    return [t if isinstance(t, str) else None for t in frame["text"]]


@settings(max_examples=80, deadline=None)
@given(texts_strategy, st.integers(1, 3), st.integers(2, 3), st.integers(1, 3), st.randoms(use_true_random=False))
def test_the_partition_steps_remove_the_lines_the_reference_removes(texts: list[str | None], parts: int,
                                                                    min_copies: int, min_words: int,
                                                                    rnd: random.Random) -> None:
    """Without a cluster: each partition's keys (`partition_firsts`), settled over all of them
    (`settle_keys`), sent back: the lines removed (blank neighbours included), the first occurrence
    each points at, the new texts and the what-if cells are the reference's, at 1 to 3 partitions."""
    ids = [f"d{i:03d}" for i in range(len(texts))]
    rnd.shuffle(ids)
    frame = pd.DataFrame({"id": ids, "text": pd.Series(texts, dtype=object)})
    pieces, feats = zip(*clean_partitions(frame, parts))
    firsts = pd.concat([part_lines.partition_firsts(p, f, None, "id", "text", True, {"number": n})
                        for n, (p, f) in enumerate(zip(pieces, feats))], ignore_index=True)
    settled = part_lines.settle_keys(firsts, min_copies, min_words)
    got: dict[tuple, tuple] = {}
    new: dict[str, str | None] = {}
    for n, p in enumerate(pieces):
        mine = settled[settled["part"] == n].reset_index(drop=True)
        texts_here = pa.array(_texts(p), pa.string())
        keep = np.ones(len(p), bool)
        rows = part_lines.removed_line_rows(texts_here, p["id"].to_numpy(object), doc_keys(n, len(p)), mine, keep,
                                            pa.string())
        got.update({(r["id"], r["line"]): (r["first_id"], r["first_line"], r["text"]) for r in rows.to_pylist()})
        after = part_lines.without_removed_lines(texts_here, doc_keys(n, len(p)), mine, keep).to_pylist()
        new.update(zip(p["id"], after))
    want = ref_removed_lines(ids, texts, min_copies, min_words)
    assert set(got) == want
    text_of = dict(zip(ids, texts))
    where: dict[str, list[tuple]] = {}
    for i, t in zip(ids, texts):
        for j, line in enumerate(t.split("\n") if t is not None else []):
            where.setdefault(_key(line), []).append((i, j, line))
    for (i, j), (fi, fj, text) in got.items():
        line = text_of[i].split("\n")[j]
        assert text == line
        assert (fi, fj) == (min(where[_key(line)])[:2] if _key(line) else (None, None))
    ref = ref_lines(ids, texts, min_copies, min_words)
    assert {i: t for i, t in new.items() if ref[i] is not DROPPED} == {i: t for i, t in ref.items() if t is not DROPPED}
    cells = part_lines.what_if(firsts)["removed"][0]
    for a, copies in enumerate(part_lines.WHAT_IF_COPIES):
        for b, words in enumerate(part_lines.WHAT_IF_WORDS):
            gone = [sorted(w)[1:] for k, w in where.items() if k and len(w) >= copies and len(k.split(" ")) >= words]
            assert cells[a, b] == sum(len(line) + 1 for w in gone for _, _, line in w)


def _check(out: Path, frame: pd.DataFrame, want: dict, manifest: dict, min_copies: int = 2, min_words: int = 1) -> None:
    """OUTPUT holds every row the reference keeps, in input order, with its new text; removed.parquet
    lists the dropped ones, removed_lines.parquet every line removed; the manifest counts what the
    reference removed."""
    got = pd.read_parquet(out)
    kept = [i for i in frame["id"] if want[i] is not DROPPED]
    assert got["id"].tolist() == kept
    assert _texts(got) == [want[i] for i in kept]
    removed = pd.read_parquet(out / "_report" / "removed.parquet")
    assert sorted(removed["id"]) == sorted(i for i in frame["id"] if want[i] is DROPPED)
    assert set(removed["reason"]) <= {"empty_after_lines"}
    lost = ref_removed_lines(list(frame["id"]), _texts(frame), min_copies, min_words)
    listed = pd.read_parquet(out / "_report" / "removed_lines.parquet")
    assert set(zip(listed["id"], listed["line"])) == lost and len(listed) == len(lost)
    lines = manifest["lines"]
    assert lines["lines_removed"] == len(lost) and lines["documents_dropped"] == len(removed)
    assert manifest["output_rows"] == len(kept)
    before = sum(len(t) for t in _texts(frame) if t is not None)
    after = sum(len(want[i]) for i in kept if want[i] is not None)
    assert lines["surviving_characters"] == before and lines["characters_removed"] == before - after
    where: dict[str, list] = {}  # the most repeated lines: by count, then first occurrence, never by position
    for i, t in zip(frame["id"], _texts(frame)):
        for j, line in enumerate(t.split("\n") if t is not None else []):
            if _key(line):
                where.setdefault(_key(line), []).append((i, j, line))
    top = sorted((-len(w), *min(w)) for k, w in where.items()
                 if len(w) >= min_copies and len(k.split(" ")) >= min_words)[:20]
    assert [(t["count"], t["document"], t["line"], t["text"]) for t in lines["top_lines"]] == \
        [(-c, i, j, line) for c, i, j, line in top]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(texts_strategy, st.integers(1, 4), st.integers(2, 3), st.integers(1, 2), st.randoms(use_true_random=False))
def test_a_run_removes_the_lines_the_reference_removes(client, tmp_path_factory: pytest.TempPathFactory,
                                                       texts: list[str | None], shards: int, min_copies: int,
                                                       min_words: int, rnd: random.Random) -> None:
    """`run(lines=True)` on the real cluster, at 1 to 4 shards read a few rows a partition, ids in
    shuffled order: the texts, drops, listed lines and counts of the reference, whatever the
    partitioning."""
    ids = [f"doc-{i:03d}" for i in range(len(texts))]
    rnd.shuffle(ids)
    frame = pd.DataFrame({"id": ids, "text": pd.Series(texts, dtype=pd.ArrowDtype(pa.string()))})
    tmp = tmp_path_factory.mktemp("lines")
    src = write_shards(frame, tmp / "in", min(shards, len(frame)))
    manifest = run(str(src), str(tmp / "out"), near=False, lines=True, min_copies=min_copies, min_line_words=min_words,
                   partition_rows=3, **NO_GUARD)
    order = pd.concat([pd.read_parquet(p) for p in sorted(src.glob("*.parquet"))], ignore_index=True)
    want = ref_lines(list(order["id"]), _texts(order), min_copies, min_words)
    _check(tmp / "out", order, want, manifest, min_copies, min_words)


def test_a_line_in_every_document_stays_only_in_the_first(client, tmp_path: Path) -> None:
    """One banner line in each of 3,000 documents over 12 partitions: only the document with the
    smallest id keeps it; the manifest names it as the most repeated line, with its count; the page
    shows the characters removed beside the rows and the what-if table of the manifest."""
    n = 3000
    ids = [f"p{i:05d}" for i in range(n)]
    frame = pd.DataFrame({"id": ids[::-1], "text": [f"We use cookies. Accept?\nbody of page {i}\nunique {i} words"
                                                    for i in range(n)]})
    src = write_shards(frame, tmp_path / "in", 4)
    m = run(str(src), str(tmp_path / "out"), near=False, lines=True, partition_rows=250)
    assert m["partitions"] >= 12
    order = pd.concat([pd.read_parquet(p) for p in sorted(src.glob("*.parquet"))], ignore_index=True)
    want = ref_lines(list(order["id"]), list(order["text"]))
    _check(tmp_path / "out", order, want, m)
    assert sum("We use cookies" in t for t in pd.read_parquet(tmp_path / "out")["text"]) == 1
    top = m["lines"]["top_lines"][0]
    assert top == {"count": n, "text": "We use cookies. Accept?", "characters": 23, "document": "p00000", "line": 0}
    assert m["lines"]["repeated_keys"] == 1 and m["lines"]["documents_changed"] == n - 1
    assert sum(m["lines"]["share_histogram"]) == n - 1
    what = {(w["min_copies"], w["min_line_words"]): w["share"] for w in m["lines"]["what_if"]}
    assert what[(2, 1)] >= m["lines"]["characters_removed_share"] > 0 and what[(100, 5)] == 0
    from selenium.webdriver.common.by import By

    d = chromium()
    try:
        d.get((tmp_path / "out" / m["report"]).as_uri())
        top = table_cells(d, "#top-lines tr")
        shares = share_counts(d, "#line-shares tr")
        counts = {e.get_attribute("data-key"): (e.text, e.find_element(By.XPATH, "following-sibling::td").text)
                  for e in d.find_elements(By.CSS_SELECTOR, "#counts td[data-key]")}
        grid = [[c.text for c in r.find_elements(By.CSS_SELECTOR, "th, td")]
                for r in d.find_elements(By.CSS_SELECTOR, "#line-what-if tr")]
        run_rows = {r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td").text
                    for r in d.find_elements(By.CSS_SELECTOR, "#run tr")}
    finally:
        d.quit()
    assert top[1] == [f"{n:,}", "We use cookies. Accept?", "p00000", "0"]
    assert shares == m["lines"]["share_histogram"] and counts["left without a word by line dedup, dropped"][0] == "0"
    chars = counts["characters removed by line dedup (of the survivors')"]
    assert chars == (f"{m['lines']['characters_removed']:,}", f"{100 * m['lines']['characters_removed_share']:.1f}%")
    assert counts["output rows"] == (f"{n:,}", "100.0%")
    assert grid[0] == ["--min-copies", "1 word", "3 words", "5 words"]
    assert [row[0] for row in grid[1:]] == ["2", "3", "10", "100"]
    assert grid[1][1] == f"{100 * what[(2, 1)]:.1f}%"
    assert run_rows["line dedup"].startswith("yes, on the survivors: a line of 1 words or more")


def test_the_contracts_worked_example(tmp_path: Path) -> None:
    """docs/contract.md §6b's table and list of removed lines, run as written (the local scheduler)."""
    texts = {"a": "Home | About\n\nStory one is here\nNAME\n\n© 2024 ACME",
             "b": "home about\n\nStory two\nNAME\n\n© 2024 ACME\n",
             "c": "HOME - ABOUT!\n\n---",
             "d": "home about\n\n\n© 2024 ACME\n(c) 2024 acme"}
    write_shards(pd.DataFrame({"id": list(texts), "text": list(texts.values())}), tmp_path / "in", 1)
    m = run(str(tmp_path / "in"), str(tmp_path / "out"), near=False, lines=True, min_line_words=2)
    got = pd.read_parquet(tmp_path / "out")
    assert dict(zip(got["id"], got["text"])) == {"a": texts["a"], "b": "\nStory two\nNAME\n",
                                                 "d": "(c) 2024 acme"}
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    assert removed[["id", "reason"]].values.tolist() == [["c", "empty_after_lines"]]
    listed = pd.read_parquet(tmp_path / "out" / "_report" / "removed_lines.parquet")
    assert listed[["id", "line"]].values.tolist() == [["b", 0], ["b", 5], ["b", 6], ["c", 0], ["c", 1], ["c", 2],
                                                      ["d", 0], ["d", 1], ["d", 2], ["d", 3]]
    first = {(i, j): (f, fl) for i, j, f, fl in listed[["id", "line", "first_id", "first_line"]].itertuples(index=False)}
    assert first[("b", 0)] == ("a", 0) and first[("b", 5)] == first[("d", 3)] == ("a", 5)
    assert pd.isna(first[("b", 6)][0]) and pd.isna(first[("b", 6)][1])
    assert (m["lines"]["characters_removed"], m["lines"]["surviving_characters"]) == (67, 145)
    assert m["lines"]["top_lines"][0] == {"count": 4, "text": "Home | About", "characters": 12, "document": "a",
                                          "line": 0}


def test_a_long_repeated_line_is_kept_in_the_manifest_as_its_start_and_length(tmp_path: Path) -> None:
    banner = " ".join(f"b{i}" for i in range(30_000))  # a line of about 200,000 characters on every page
    texts = [f"{banner}\npage {i} own words here" for i in range(3)]
    write_shards(pd.DataFrame({"id": ["a", "b", "c"], "text": texts}), tmp_path / "in", 1)
    m = run(str(tmp_path / "in"), str(tmp_path / "out"), near=False, lines=True, **NO_GUARD)
    (top,) = m["lines"]["top_lines"]
    assert top["count"] == 3 and top["characters"] == len(banner)
    assert top["text"] == f"{banner[:80]}… ({len(banner):,} characters)"
    assert len((tmp_path / "out" / "_dedup.json").read_text()) < 20_000
    listed = pd.read_parquet(tmp_path / "out" / "_report" / "removed_lines.parquet")
    assert listed["text"].tolist() == [banner[:part_lines.REMOVED_LINE_CHARS] + "…"] * 2


def _holds_ngram(text: str, grams: set[tuple[str, ...]], n: int = 13) -> bool:
    words = re.findall(r"\w+", text.lower())
    return any(tuple(words[i:i + n]) in grams for i in range(len(words) - n + 1))


@pytest.mark.parametrize("drop", [True, False], ids=["drop", "keep-duplicates"])
def test_run_lines_runs_on_the_survivors_of_near_dedup(client, tmp_path: Path, drop: bool) -> None:
    """`run --lines`: decontamination and near dedup on the texts as read (the same clusters as a run
    without lines), then lines on the survivors only (a dropped copy's lines do not count), then the
    new texts checked for protected 13-grams (the line between two halves went): each as the
    reference computes it; no index is written."""
    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(3000)]
    bodies = [" ".join(rng.choice(vocab) for _ in range(60)) for _ in range(40)]
    nav, foot = "Home | Products | About us | Contact", "Copyright 2024 Example Corp all rights reserved"
    secret = "the quick brown fox jumps over the lazy dog while the eval record says hello to everyone here"
    halves = secret.split(" ")
    texts = [f"{nav}\n{b}\n\n{foot}" for b in bodies]
    texts += [f"{nav}\n{b}\n\n{foot}\nonly in a copy" for b in bodies[:10]]  # near copies
    texts += [f"{secret}\n{nav}", " ".join(halves[:6]) + f"\n{nav}\n" + " ".join(halves[6:13]) + " and more",
              "only in a copy\nand a line of its own"]
    ids = [f"d{i:03d}" for i in range(len(texts))]
    (tmp_path / "eval.txt").write_text(secret)
    src = write_shards(pd.DataFrame({"id": ids, "text": texts}), tmp_path / "in", 3)
    options = {"protected": [tmp_path / "eval.txt"], "drop": drop, "partition_rows": 20}
    m = run(str(src), str(tmp_path / "out"), lines=True, **options)
    plain = run(str(src), str(tmp_path / "plain"), **options)
    words = re.findall(r"\w+", secret.lower())
    grams = {tuple(words[i:i + 13]) for i in range(len(words) - 12)}
    clean = [i for i, t in zip(ids, texts) if not _holds_ngram(t, grams)]
    text_of = dict(zip(ids, texts))
    clusters = ref_clusters(clean, [text_of[i] for i in clean], mode="connected", threshold=0.8, confirm="estimate")
    survivors = [i for i in clean if not drop or clusters[i][0] == i]
    want = ref_lines(survivors, [text_of[i] for i in survivors])
    # with drop, the copies went, and their line with them: it is not repeated
    assert ("only in a copy" in want["d052"]) == drop
    after_lines = {i for i in survivors if want[i] is not DROPPED and _holds_ngram(want[i], grams)}
    assert after_lines == {"d051"}
    got = pd.read_parquet(tmp_path / "out")
    kept = [i for i in survivors if want[i] is not DROPPED and i not in after_lines]
    assert dict(zip(got["id"], got["text"])) == {i: want[i] for i in kept}
    assert dict(zip(got["id"], got["minhash_cluster"])) == {i: clusters[i][0] for i in kept}
    same = pd.read_parquet(tmp_path / "plain")
    assert dict(zip(got["id"], got["minhash_cluster"])) == \
        {i: r for i, r in zip(same["id"], same["minhash_cluster"]) if i in set(kept)}
    assert m["near_duplicates_found"] == plain["near_duplicates_found"] >= 10
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    reasons = dict(zip(removed["id"], removed["reason"]))
    assert reasons["d050"] == "contaminated" and reasons["d051"] == "contaminated_after_lines"
    copies = {i for i in clean if clusters[i][0] != i}  # listed, whether dropped or (keeping duplicates) kept
    assert {i for i, r in reasons.items() if r == "near_duplicate"} == {i for i in copies if drop or want[i] is not DROPPED}
    assert {i for i, r in reasons.items() if r == "empty_after_lines"} == {i for i in survivors if want[i] is DROPPED}
    listed = pd.read_parquet(tmp_path / "out" / "_report" / "removed_lines.parquet")
    assert set(zip(listed["id"], listed["line"])) == ref_removed_lines(survivors, [text_of[i] for i in survivors])
    assert m["lines"]["documents_contaminated"] == 1 and m["output_rows"] == len(kept)
    assert m["index"] is None and not (tmp_path / "out" / "_index").exists()


def test_every_text_type_is_rewritten_in_its_own_type(tmp_path: Path) -> None:
    """Dictionary-encoded and string_view texts come out of line dedup in their own type; an input that
    already has `minhash_cluster` (an earlier near-dedup output) keeps it as it is; columns named like
    the job's internal ones (`_original_text`, `_after_lines`) are the user's own."""
    texts = ["nav bar here\nstory one", "nav bar here\nstory two", "nav bar here", "story three\nnav bar here"]
    for kind, text_type in (("dictionary", pa.dictionary(pa.int32(), pa.string())), ("view", pa.string_view())):
        table = pa.table({"_original_text": pa.array(["a", "b", "c", "d"]),
                          "_after_lines": pa.array(texts).cast(text_type),
                          "minhash_cluster": pa.array(["a", "a", "c", "d"])})
        (tmp_path / kind).mkdir()
        pq.write_table(table, tmp_path / kind / "part.parquet")
        m = run(str(tmp_path / kind), str(tmp_path / f"{kind}-out"), near=False, lines=True, id_column="_original_text",
                text_column="_after_lines", **NO_GUARD)
        out = pq.read_table(tmp_path / f"{kind}-out" / "part.parquet")
        assert out.schema.field("_after_lines").type == text_type
        assert out["_after_lines"].cast(pa.string()).to_pylist() == ["nav bar here\nstory one", "story two", "story three"]
        assert out["_original_text"].to_pylist() == ["a", "b", "d"] and out["minhash_cluster"].to_pylist() == ["a", "a", "d"]
        assert m["lines"]["documents_dropped"] == 1
    refused = run_command([*DEDUP, "near", str(tmp_path / "view"), str(tmp_path / "near-out")])
    assert refused.returncode == 2 and "minhash_cluster" in refused.stderr


def test_the_guard_stops_a_run_that_would_remove_most_of_the_text(tmp_path: Path) -> None:
    """`dedup lines` removing more than --max-lines-removed of the characters: exit 3, one line naming
    the share and the most repeated line, OUTPUT as it was; --dry-run writes the page and warns;
    --min-line-words spares the short line, and the run goes through."""
    texts = [f"this long navigation line is on every page of the site\n{i}" for i in range(20)]
    src = write_shards(pd.DataFrame({"id": [f"x{i:02d}" for i in range(20)], "text": texts}), tmp_path / "in", 1)
    stopped = run_command([*DEDUP, "lines", str(src), str(tmp_path / "out"), "--threads", "1"])
    assert stopped.returncode == 3, stopped.stderr
    (line,) = [x for x in stopped.stderr.splitlines() if "dedup: stopped" in x]
    assert "would remove 92.5%" in line and "this long navigation line" in line and "--min-line-words" in line
    assert not (tmp_path / "out").exists()
    dry = run_command([*DEDUP, "lines", str(src), str(tmp_path / "dry"), "--threads", "1", "--dry-run"])
    assert dry.returncode == 0, dry.stderr
    m = json.loads((tmp_path / "dry" / "_dedup.json").read_text())
    assert any("--max-lines-removed" in w for w in m["warnings"]) and (tmp_path / "dry" / m["report"]).exists()
    spared = run_command([*DEDUP, "lines", str(src), str(tmp_path / "ok"), "--threads", "1", "--min-line-words", "12"])
    assert spared.returncode == 0, spared.stderr
    assert pd.read_parquet(tmp_path / "ok")["text"].tolist() == texts


def test_dedup_lines_keeps_every_column_type_and_the_row_order(tmp_path: Path) -> None:
    """`dedup lines` in a subprocess: the other columns (timestamps, nested lists and structs, nulls)
    and the row order as read; only the texts change; a document left without a word is dropped; the
    same bytes on one thread as on two workers;
    --against is refused in one line, before any work; --min-copies and --min-line-words are checked."""
    n = 40
    table = pa.table({
        "id": pa.array([f"r{i:02d}" for i in range(n)]),
        "text": pa.array([None if i == 5 else ("" if i == 6 else f"Menu Home\r\nstory {i}\nFooter (c)" if i % 7
                          else "menu home\nfooter c") for i in range(n)], pa.large_string()),
        "when": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=i) for i in range(n)],
                         pa.timestamp("us", tz="UTC")),
        "tags": pa.array([[f"t{i}", None] if i % 3 else None for i in range(n)], pa.list_(pa.string())),
        "meta": pa.array([{"lang": "en", "score": float(i)} for i in range(n)]),
    })
    (tmp_path / "in").mkdir()
    pq.write_table(table, tmp_path / "in" / "part.parquet")
    got = run_command([*DEDUP, "lines", str(tmp_path / "in"), str(tmp_path / "out"), "--n-workers", "2",
                       "--max-lines-removed", "1"])
    assert got.returncode == 0, got.stderr
    assert "repeated lines removed" in got.stdout
    out = pq.read_table(tmp_path / "out" / "part.parquet")
    want = ref_lines(table["id"].to_pylist(), table["text"].to_pylist())
    keep = [i for i, k in enumerate(table["id"].to_pylist()) if want[k] is not DROPPED]
    assert out.schema.remove_metadata() == table.schema.remove_metadata()
    assert out.drop_columns(["text"]).equals(table.take(keep).drop_columns(["text"]))
    assert out["text"].to_pylist() == [want[table["id"][i].as_py()] for i in keep]
    assert out["text"][1].as_py() == "story 1" and out["text"][0].as_py() == "menu home\nfooter c"
    manifest = json.loads((tmp_path / "out" / "_dedup.json").read_text())
    assert manifest["lines"]["documents_dropped"] == n - len(keep) > 0
    threads = run_command([*DEDUP, "lines", str(tmp_path / "in"), str(tmp_path / "one"), "--threads", "1",
                           "--max-lines-removed", "1"])
    assert threads.returncode == 0, threads.stderr
    assert parquet_digests(tmp_path / "one") == parquet_digests(tmp_path / "out")  # whatever the workers
    refused = run_command([*DEDUP, "run", str(tmp_path / "in"), str(tmp_path / "o2"), "--lines", "--against",
                           str(tmp_path / "out")])
    assert refused.returncode == 2 and "--against with line dedup" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "o2").exists()
    for flag, value in (("--min-copies", "1"), ("--min-line-words", "0"), ("--max-lines-removed", "2")):
        bad = run_command([*DEDUP, "lines", str(tmp_path / "in"), str(tmp_path / "o3"), flag, value])
        assert bad.returncode == 2 and flag in bad.stderr and not (tmp_path / "o3").exists()


def test_the_python_api_checks_min_copies(tmp_path: Path) -> None:
    write_shards(pd.DataFrame({"id": ["a"], "text": ["x"]}), tmp_path / "in", 1)
    with pytest.raises(UsageError, match="--min-copies"):
        run(str(tmp_path / "in"), str(tmp_path / "out"), lines=True, min_copies=0, params=Params())


def test_run_lines_killed_after_its_lines_resumes_to_the_same_bytes(tmp_path: Path) -> None:
    """`dedup run --lines` killed once the lines stage has ended, then run again: it reuses the repeated
    lines and changes it kept (the write rewrites the texts from them) and writes the same bytes as a
    run never interrupted, removed lines listed included."""
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(500)]
    bodies = [" ".join(rng.choice(vocab) for _ in range(40)) for _ in range(300)]
    texts = [f"nav {i % 7}\n{b}\nfooter {i % 3}" for i, b in enumerate(bodies)]
    texts += [f"nav {i % 7}\n{b} extra\nfooter {i % 3}" for i, b in enumerate(bodies[:30])]  # near copies
    write_shards(pd.DataFrame({"id": [f"x{i:04d}" for i in range(len(texts))], "text": texts}), tmp_path / "in", 3)
    cmd = [*DEDUP, "run", str(tmp_path / "in"), str(tmp_path / "out"), "--lines", "--threads", "2",
           "--partition-rows", "50"]
    kill_after(cmd, "lines:")
    again = run_command(cmd)
    assert again.returncode == 0, again.stderr
    assert re.search(r"resuming: reusing [a-z, ]*\blines\b", again.stderr)
    whole = run_command([*cmd[:5], str(tmp_path / "whole"), *cmd[6:]])
    assert whole.returncode == 0, whole.stderr
    assert parquet_digests(tmp_path / "out") == parquet_digests(tmp_path / "whole")
    assert parquet_digests(tmp_path / "out" / "_report" / "removed_lines.parquet") == \
        parquet_digests(tmp_path / "whole" / "_report" / "removed_lines.parquet")
    m = json.loads((tmp_path / "out" / "_dedup.json").read_text())
    assert m["lines"]["lines_removed"] > 0 and m["near_duplicates_found"] >= 30


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), unique=True, max_size=20),
       st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=40))
def test_a_settled_key_is_found_by_both_hashes_even_when_one_is_shared(settled: list, wanted: list) -> None:
    """The lookup of the settled keys a partition holds: a key is found exactly when both of its
    hashes are a settled key's, also when settled keys share their first hash (small hashes here)."""
    from dedup.partition.lines import _settled_row

    line_keys = pd.DataFrame({"h1": np.array([a for a, _ in settled], np.uint64),
                            "h2": np.array([b for _, b in settled], np.uint64)})
    got = _settled_row(np.array([a for a, _ in wanted], np.uint64), np.array([b for _, b in wanted], np.uint64), line_keys)
    where = {key: i for i, key in enumerate(settled)}
    assert got.tolist() == [where.get(key, -1) for key in wanted]

