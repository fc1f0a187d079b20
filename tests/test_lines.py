"""Exact line dedup (docs/contract.md §6b) against its plain-Python reading (`tests.reference.ref_lines`):
the lines' keys and the rewriting on their own, whole runs on a real cluster at several partitionings,
a line in every document, the order decontaminate -> lines -> near duplicates, and the CLI."""

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
from dedup.storage.safety import UsageError
from tests.conftest import DEDUP, chromium, kill_after, parquet_digests, run_command, write_shards
from tests.reference import DROPPED, ref_clusters, ref_lines, ref_removed_lines

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


def _check(out: Path, frame: pd.DataFrame, want: dict, manifest: dict, min_copies: int = 2) -> None:
    """OUTPUT holds every row the reference keeps, in input order, with its new text; removed.parquet
    lists the dropped ones; the manifest counts what the reference removed."""
    got = pd.read_parquet(out)
    kept = [i for i in frame["id"] if want[i] is not DROPPED]
    assert got["id"].tolist() == kept
    assert _texts(got) == [want[i] for i in kept]
    removed = pd.read_parquet(out / "_report" / "removed.parquet")
    assert sorted(removed["id"]) == sorted(i for i in frame["id"] if want[i] is DROPPED)
    assert set(removed["reason"]) <= {"empty_after_lines"}
    lost = len(ref_removed_lines(list(frame["id"]), _texts(frame), min_copies))
    lines = manifest["lines"]
    assert lines["lines_removed"] == lost and lines["documents_dropped"] == len(removed)
    assert manifest["output_rows"] == len(kept)
    where: dict[str, list] = {}  # the most repeated lines: by count, then first occurrence, never by position
    for i, t in zip(frame["id"], _texts(frame)):
        for j, line in enumerate(t.split("\n") if t is not None else []):
            if _key(line):
                where.setdefault(_key(line), []).append((i, j, line))
    top = sorted((-len(w), *min(w)) for w in where.values() if len(w) >= min_copies)[:20]
    assert [(t["count"], t["document"], t["line"], t["text"]) for t in lines["top_lines"]] == \
        [(-c, i, j, line) for c, i, j, line in top]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(texts_strategy, st.integers(1, 4), st.integers(2, 3), st.randoms(use_true_random=False))
def test_a_run_removes_the_lines_the_reference_removes(client, tmp_path_factory: pytest.TempPathFactory,
                                                       texts: list[str | None], shards: int, min_copies: int,
                                                       rnd: random.Random) -> None:
    """`run(lines=True)` on the real cluster, at 1 to 4 shards read a few rows a partition, ids in
    shuffled order: the texts, drops and counts of the reference, whatever the partitioning."""
    ids = [f"doc-{i:03d}" for i in range(len(texts))]
    rnd.shuffle(ids)
    frame = pd.DataFrame({"id": ids, "text": pd.Series(texts, dtype=pd.ArrowDtype(pa.string()))})
    tmp = tmp_path_factory.mktemp("lines")
    src = write_shards(frame, tmp / "in", min(shards, len(frame)))
    manifest = run(str(src), str(tmp / "out"), near=False, lines=True, min_copies=min_copies, partition_rows=3)
    order = pd.concat([pd.read_parquet(p) for p in sorted(src.glob("*.parquet"))], ignore_index=True)
    _check(tmp / "out", order, ref_lines(list(order["id"]), _texts(order), min_copies), manifest, min_copies)


def test_a_line_in_every_document_stays_only_in_the_first(client, tmp_path: Path) -> None:
    """One banner line in each of 3,000 documents over 12 partitions: only the document with the
    smallest id keeps it; the manifest names it as the most repeated line, with its count."""
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
    from selenium.webdriver.common.by import By

    d = chromium()
    try:
        d.get((tmp_path / "out" / m["report"]).as_uri())
        top = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in d.find_elements(By.CSS_SELECTOR, "#top-lines tr")]
        shares = [int(r.find_elements(By.TAG_NAME, "td")[1].text.replace(",", ""))
                  for r in d.find_elements(By.CSS_SELECTOR, "#line-shares tr") if r.find_elements(By.TAG_NAME, "td")]
        counts = {e.get_attribute("data-key"): e.text for e in d.find_elements(By.CSS_SELECTOR, "#counts td[data-key]")}
        run_rows = {r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td").text
                    for r in d.find_elements(By.CSS_SELECTOR, "#run tr")}
    finally:
        d.quit()
    assert top == [[], [f"{n:,}", "We use cookies. Accept?", "p00000", "0"]]
    assert shares == m["lines"]["share_histogram"] and counts["left without a word by line dedup, dropped"] == "0"
    assert run_rows["line dedup"].startswith("yes: a line repeated 2 times or more")


def test_the_contracts_worked_example(tmp_path: Path) -> None:
    """docs/contract.md §6b's table, run as written (the local scheduler)."""
    texts = {"a": "Home | About\nStory one\n© 2024 ACME", "b": "home about\nStory two\n(c) 2024 acme",
             "c": "HOME - ABOUT!\n---"}
    write_shards(pd.DataFrame({"id": list(texts), "text": list(texts.values())}), tmp_path / "in", 1)
    m = run(str(tmp_path / "in"), str(tmp_path / "out"), near=False, lines=True)
    got = pd.read_parquet(tmp_path / "out")
    assert dict(zip(got["id"], got["text"])) == {"a": texts["a"], "b": "Story two\n(c) 2024 acme"}
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    assert removed[["id", "reason"]].values.tolist() == [["c", "empty_after_lines"]]
    assert m["lines"]["top_lines"] == [{"count": 3, "text": "Home | About", "characters": 12, "document": "a", "line": 0}]


def test_a_long_repeated_line_is_kept_in_the_manifest_as_its_start_and_length(tmp_path: Path) -> None:
    banner = " ".join(f"b{i}" for i in range(30_000))  # a line of about 200,000 characters on every page
    texts = [f"{banner}\npage {i} own words here" for i in range(3)]
    write_shards(pd.DataFrame({"id": ["a", "b", "c"], "text": texts}), tmp_path / "in", 1)
    m = run(str(tmp_path / "in"), str(tmp_path / "out"), near=False, lines=True)
    (top,) = m["lines"]["top_lines"]
    assert top["count"] == 3 and top["characters"] == len(banner)
    assert top["text"] == f"{banner[:80]}… ({len(banner):,} characters)"
    assert len((tmp_path / "out" / "_dedup.json").read_text()) < 20_000


def test_run_lines_decontaminates_first_and_finds_near_duplicates_in_the_new_texts(client, tmp_path: Path) -> None:
    """`run --lines`: a contaminated document's lines do not count (its copy of a line is not a first
    occurrence); a document whose new text joins the halves of a protected 13-gram (the line between
    them went) is dropped as contaminated; near duplicates are found among the rewritten texts, as
    the reference clusters the reference's new texts."""
    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(3000)]
    body = [" ".join(rng.choice(vocab) for _ in range(60)) for _ in range(40)]
    shared = "this header line is everywhere in the crawl"
    secret = "the quick brown fox jumps over the lazy dog while the eval record says hello to everyone here"
    halves = secret.split(" ")
    texts = [f"{secret}\nlonely line only here and in b", f"lonely line only here and in b\n{body[0]}\nzzz boiler",
             " ".join(halves[:6]) + "\nzzz boiler\n" + " ".join(halves[6:13]) + " and more"]
    texts += [f"{shared}\n{b}" for b in body]
    texts += [f"{shared}\n{b} tail" for b in body[:10]]  # near copies once the header is gone
    ids = [f"d{i:03d}" for i in range(len(texts))]
    (tmp_path / "eval.txt").write_text(secret)
    src = write_shards(pd.DataFrame({"id": ids, "text": texts}), tmp_path / "in", 3)
    m = run(str(src), str(tmp_path / "out"), protected=[tmp_path / "eval.txt"], lines=True, drop=False,
            partition_rows=20)
    counted = [(i, t) for i, t in zip(ids, texts) if i != "d000"]  # decontamination of the texts as read
    want = ref_lines([i for i, _ in counted], [t for _, t in counted])
    assert want["d001"].startswith("lonely line")  # d000's copy, contaminated, did not count
    assert want["d002"].split("\n") == [" ".join(halves[:6]), " ".join(halves[6:13]) + " and more"]
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    assert set(removed["id"][removed["reason"] == "contaminated"]) == {"d000", "d002"}
    assert m["contaminated_dropped"] == 2
    kept = [i for i, _ in counted if i != "d002"]
    got = pd.read_parquet(tmp_path / "out")
    assert dict(zip(got["id"], got["text"])) == {i: want[i] for i in kept}
    clusters = ref_clusters(kept, [want[i] for i in kept], mode="connected", threshold=0.8, confirm="estimate")
    assert dict(zip(got["id"], got["minhash_cluster"])) == {i: r for i, (r, _) in clusters.items()}
    assert m["near_duplicates_found"] == sum(i != r for i, (r, _) in clusters.items()) >= 5


def test_dedup_lines_keeps_every_column_type_and_the_row_order(tmp_path: Path) -> None:
    """`dedup lines` in a subprocess: the other columns (timestamps, nested lists and structs, nulls)
    and the row order as read; only the texts change; a document left without a word is dropped; the
    same bytes on one thread as on two workers;
    --against is refused in one line, before any work; --min-copies is checked."""
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
    got = run_command([*DEDUP, "lines", str(tmp_path / "in"), str(tmp_path / "out"), "--n-workers", "2"])
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
    threads = run_command([*DEDUP, "lines", str(tmp_path / "in"), str(tmp_path / "one"), "--threads", "1"])
    assert threads.returncode == 0, threads.stderr
    assert parquet_digests(tmp_path / "one") == parquet_digests(tmp_path / "out")  # whatever the workers
    refused = run_command([*DEDUP, "run", str(tmp_path / "in"), str(tmp_path / "o2"), "--lines", "--against",
                           str(tmp_path / "out")])
    assert refused.returncode == 2 and "--against with line dedup" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "o2").exists()
    bad = run_command([*DEDUP, "lines", str(tmp_path / "in"), str(tmp_path / "o3"), "--min-copies", "1"])
    assert bad.returncode == 2 and "--min-copies" in bad.stderr


def test_the_python_api_checks_min_copies(tmp_path: Path) -> None:
    write_shards(pd.DataFrame({"id": ["a"], "text": ["x"]}), tmp_path / "in", 1)
    with pytest.raises(UsageError, match="--min-copies"):
        run(str(tmp_path / "in"), str(tmp_path / "out"), lines=True, min_copies=0, params=Params())


def test_run_lines_killed_after_its_lines_resumes_to_the_same_bytes(tmp_path: Path) -> None:
    """`dedup run --lines` killed once the lines stage has ended, then run again: it reuses the repeated
    lines it kept (the features and the write rewrite the texts from them) and writes the same bytes
    as a run never interrupted."""
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
    assert "resuming: reusing lines" in again.stderr
    whole = run_command([*cmd[:5], str(tmp_path / "whole"), *cmd[6:]])
    assert whole.returncode == 0, whole.stderr
    assert parquet_digests(tmp_path / "out") == parquet_digests(tmp_path / "whole")
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

