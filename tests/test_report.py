"""See what was removed and why: removed.parquet, the HTML report in a real browser, dry runs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup import Params, estimate, jaccard, shingles, signatures
from dedup.core.text import word_ngrams
from dedup.job.pipeline import run
from tests.conftest import DEDUP, chromium, run_command, write_shards


@pytest.mark.parametrize(("confirm", "drop"), [("estimate", True), ("exact", False)])
def test_removed_lists_exactly_what_left_with_reasons_and_similarities(
        client, tmp_path: Path, corpus_frame: pd.DataFrame, protected_file: Path, confirm: str, drop: bool) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 3)
    params = Params(confirm=confirm)
    m = run(str(src), str(tmp_path / "out"), protected=[str(protected_file)], params=params, drop=drop,
            partition_rows=150)
    out = pd.read_parquet(tmp_path / "out")
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    assert sorted(p.name for p in (tmp_path / "out" / "_report" / "removed.parquet").iterdir()) == \
        sorted(p.name for p in src.iterdir())
    if drop:  # exactly the set difference of input and output ids
        assert set(removed["id"]) == set(corpus_frame["id"]) - set(out["id"])
    else:  # kept, but tagged: the rows that would have been removed
        assert set(removed["id"]) == set(out.loc[out["id"] != out["minhash_cluster"], "id"]) | (
            set(corpus_frame["id"]) - set(out["id"]))
    assert not removed["id"].duplicated().any()
    assert (removed["reason"] == "contaminated").sum() == m["contaminated_dropped"] > 0
    near = removed[removed["reason"] == "near_duplicate"]
    assert len(near) == m["near_duplicates_found"] > 50
    text = dict(zip(corpus_frame["id"], corpus_frame["text"]))
    cluster_of = dict(zip(out["id"], out["minhash_cluster"])) if not drop else None
    for row in near.itertuples():
        assert row.root < row.id and row.matched != row.id
        if cluster_of is not None:  # the matched document is in the same cluster
            assert cluster_of[row.matched] == cluster_of[row.id] == row.root
        sigs = signatures([text[row.id], text[row.matched]], num_perm=params.num_perm)
        assert row.estimate == pytest.approx(estimate(sigs[0], sigs[1]), abs=1e-6)
        if confirm == "exact":
            assert row.jaccard == pytest.approx(jaccard(shingles(text[row.id]), shingles(text[row.matched])), abs=1e-6)
            assert row.jaccard >= params.threshold
        else:
            assert np.isnan(row.jaccard) and row.estimate >= params.threshold
    bad = removed[removed["reason"] == "contaminated"]
    assert (bad["protected_file"] == str(protected_file)).all() and bad["record"].str.startswith("line ").all()
    assert all(g in word_ngrams(text[i], 13) for i, g in zip(bad["id"], bad["ngram"]))  # it is in the document


def test_dry_run_writes_no_shard_and_the_same_counts(client, tmp_path: Path, corpus_frame: pd.DataFrame,
                                                      protected_file: Path) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 2)
    real = run(str(src), str(tmp_path / "real"), protected=[str(protected_file)])
    dry = run(str(src), str(tmp_path / "dry"), protected=[str(protected_file)], dry_run=True)
    assert dry["dry_run"] and not real["dry_run"]
    for k in ("input_rows", "output_rows", "near_duplicates_dropped", "contaminated_dropped", "clusters"):
        assert dry[k] == real[k]
    shards = [p for p in (tmp_path / "dry").rglob("*.parquet")
              if not any(part.startswith("_") for part in p.relative_to(tmp_path / "dry").parts)]
    assert shards == [] and (tmp_path / "dry" / "_report" / "index.html").exists()
    assert len(pd.read_parquet(tmp_path / "dry" / "_report" / "removed.parquet")) == \
        real["near_duplicates_dropped"] + real["contaminated_dropped"]
    none = run(str(src), str(tmp_path / "bare"), write_report=False)
    assert not (tmp_path / "bare" / "_report").exists() and none["report"] is None


def _page_above_stages(path: Path, output: Path) -> str:
    """The page from its counts to its stage timings, without plots (their SVG ids and dates differ
    between runs) and without the record of the run (a dry run says it is one)."""
    import re

    page = path.read_text(encoding="utf-8").replace(str(output), "OUTPUT")
    page = re.sub(r'<table id="run">.*?</table>', "", page, flags=re.S)
    return re.sub(r"<svg.*?</svg>", "", page[page.index("<h2>Counts"):page.index("<h2>Stages")], flags=re.S)


def test_the_page_shows_the_largest_clusters_texts_as_the_input_holds_them(client, tmp_path: Path,
                                                                          corpus_frame: pd.DataFrame,
                                                                          protected_file: Path) -> None:
    """The write tasks hand the page its example texts; a dry run, which writes nothing, reads them
    itself: both pages are the same, and every cluster's root text is that of its id in the input."""
    import html
    import re

    src = write_shards(corpus_frame, tmp_path / "in", 2)
    run(str(src), str(tmp_path / "real"), protected=[str(protected_file)])
    run(str(src), str(tmp_path / "dry"), protected=[str(protected_file)], dry_run=True)
    real = _page_above_stages(tmp_path / "real" / "_report" / "index.html", tmp_path / "real")
    dry = _page_above_stages(tmp_path / "dry" / "_report" / "index.html", tmp_path / "dry")
    assert real == dry
    roots = re.findall(r"<h4>kept (\S+): (\d+) documents</h4>.*?<div class=\"doc\">(.*?)</div>", real, flags=re.S)
    assert roots, "the page shows no cluster"
    text_of = dict(zip(corpus_frame["id"].astype(str), corpus_frame["text"]))
    for ident, _, shown in roots:  # a run of the root's own words, cut where the page says so
        words = html.unescape(re.sub(r"</?mark>", "", shown)).removeprefix("… ").removesuffix(" …").split()
        whole = text_of[html.unescape(ident)].split()
        assert len(words) > 20 and any(whole[i:i + len(words)] == words for i in range(len(whole)))


def test_report_page_in_a_real_browser(dask_processes: Path, tmp_path: Path, corpus_frame: pd.DataFrame,
                                       protected_file: Path) -> None:
    """The page loads from a file with no console error and no network request, shows the manifest's
    counts, and renders (the screenshot is not blank)."""
    from PIL import Image
    from selenium.webdriver.common.by import By

    src = write_shards(corpus_frame, tmp_path / "in", 2)
    res = run_command([*DEDUP, "run", str(src), str(tmp_path / "out"), "--protected", str(protected_file),
                          "--scheduler-file", str(dask_processes)], timeout=240)
    assert res.returncode == 0, res.stderr
    m = json.loads((tmp_path / "out" / "_dedup.json").read_text())
    page = tmp_path / "out" / m["report"]
    d = chromium()
    try:
        d.get(page.as_uri())
        assert d.title.startswith("dedup report")
        shown = {e.get_attribute("data-key"): int(e.text.replace(",", ""))
                 for e in d.find_elements(By.CSS_SELECTOR, "#counts td[data-key]")}
        assert shown == {"input rows": m["input_rows"], "contaminated, dropped": m["contaminated_dropped"],
                         "near duplicates found": m["near_duplicates_found"],
                         "near duplicates dropped": m["near_duplicates_dropped"], "output rows": m["output_rows"]}
        assert len(d.find_elements(By.TAG_NAME, "svg")) >= 2  # the plots
        errors = [entry for entry in d.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
        assert errors == []
        requests = [json.loads(e["message"])["message"] for e in d.get_log("performance")]
        urls = {r["params"]["request"]["url"] for r in requests if r["method"] == "Network.requestWillBeSent"}
        assert urls and all(u.startswith(("file:", "data:", "about:")) for u in urls), urls
        png = d.get_screenshot_as_png()
    finally:
        d.quit()
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)
    assert pixels.std() > 10 and (pixels < 128).mean() > 0.005  # text and plots, not a blank page
    assert pq.read_metadata(tmp_path / "out" / "_report" / "removed.parquet" / "shard-00.parquet").num_rows > 0


def test_report_examples_read_only_their_rows_across_row_groups(tmp_path: Path) -> None:
    """The page's example texts come from `read_rows`: the right values at any rows, in the order
    asked, across row groups, with nulls and a dictionary-encoded column, as pandas reads them."""
    import pyarrow as pa

    from dedup.storage.reads import read_rows

    texts = [None if i % 11 == 3 else f"text number {i} " + "é" * (i % 4) for i in range(50)]
    table = pa.table({"id": list(range(50)), "text": pa.array(texts, pa.string()),
                      "cat": pa.array([f"c{i % 3}" for i in range(50)]).dictionary_encode()})
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=7)
    assert pq.ParquetFile(path).metadata.num_row_groups == 8
    rows = [49, 0, 3, 14, 13, 6, 7, 48, 14]  # unordered, repeated, first and last of row groups, a null
    assert read_rows(str(path), rows, "text") == [texts[r] for r in rows]
    assert read_rows(str(path), rows, "cat") == [f"c{r % 3}" for r in rows]
    assert read_rows(str(path), [], "text") == []


def test_the_page_helps_tune_in_chromium(dask_processes: Path, tmp_path: Path) -> None:
    """On a corpus of templated texts (clusters of hundreds, chains, pairs on both sides of the
    threshold) and an eval file: the pairs nearest the threshold on each side with their differences
    marked, the largest clusters' farthest members, a contamination example around its n-gram with
    its id, a size chart labelled with the largest cluster, and legends below the data."""
    import random

    from selenium.webdriver.common.by import By

    rng = random.Random(5)
    texts, ids = [], []
    for t in range(4):
        words = [f"clause{rng.randrange(5000)}" for _ in range(200)]
        for c in range(60 * (t + 1)):
            w = list(words)
            for i in range(len(w)):
                if rng.random() < rng.uniform(0.0, 0.05):
                    w[i] = f"var{t}x{c}x{i}"
            texts.append(" ".join(w))
            ids.append(f"lic{t}-{c:03d}")
    src = tmp_path / "in"
    src.mkdir()
    pd.DataFrame({"id": ids, "text": texts}).to_parquet(src / "licenses.parquet", index=False)
    gram = " ".join(texts[7].split()[50:63])
    (tmp_path / "eval.jsonl").write_text(json.dumps({"question": f"Which clause says: {gram}?"}) + "\n")
    out = tmp_path / "out"
    got = run_command([*DEDUP, "run", str(src), str(out), "--protected", str(tmp_path / "eval.jsonl"),
                          "--scheduler-file", str(dask_processes)], timeout=240)
    assert got.returncode == 0, got.stderr
    m = json.loads((out / "_dedup.json").read_text())
    d = chromium(1200, 3000)
    try:
        d.get((out / "_report" / "index.html").as_uri())
        titles = [e.text for e in d.find_elements(By.CSS_SELECTOR, "h4.pair-title")]
        assert sum(t.startswith("merged:") for t in titles) == 3 and sum(t.startswith("not merged:") for t in titles) == 3
        estimates = [float(t.rsplit("estimate ", 1)[1].split(",")[0]) for t in titles]
        assert all(e >= 0.8 for e in estimates[:3]) and all(e < 0.8 for e in estimates[3:])
        pairs = d.find_elements(By.XPATH, "//h4[@class='pair-title']/following-sibling::div[@class='pair'][1]")
        assert len(pairs) == 6 and all(p.find_elements(By.TAG_NAME, "mark") for p in pairs)
        kept = [e.text for e in d.find_elements(By.XPATH, "//h4[starts-with(., 'kept ')]")]
        assert kept and kept[0].endswith(f": {m['largest_cluster']} documents")
        example = d.find_element(By.CSS_SELECTOR, "#records .doc")
        assert " ".join(example.find_element(By.TAG_NAME, "mark").text.lower().split()) == gram
        assert d.find_element(By.CSS_SELECTOR, "#records .doc-id").text in ids
        svg_texts = [e.text for e in d.find_elements(By.CSS_SELECTOR, "svg text")]
        top = 1 << (m["largest_cluster"] - 1).bit_length()  # sizes in doubling bins: (top / 2, top]
        assert f"largest: {m['largest_cluster']:,}" in svg_texts and f"{top // 2 + 1}-{top}" in svg_texts
        legend = d.find_element(By.XPATH, "//*[name()='text'][.='P(candidate), 16 x 8']").rect
        xlabel = d.find_element(By.XPATH, "//*[name()='text'][starts-with(., 'similarity (MinHash')]").rect
        assert legend["y"] >= xlabel["y"] + xlabel["height"]  # the legend is below the plot, off the data
        assert [e for e in d.get_log("browser") if e["level"] in ("SEVERE", "WARNING")] == []
    finally:
        d.quit()


def test_long_words_are_shortened_on_the_page(client, tmp_path: Path) -> None:
    """A 200,000-character word in near duplicates and in a protected passage is shown as its start and
    its length, as ids are, not whole (it once made a 1.4 MB page)."""
    long = "x" * 200_000
    base = [f"w{i}" for i in range(60)]
    texts = [" ".join(base[:30] + [long] + base[30:]), " ".join(base[:30] + [long] + base[30:59]),
             " ".join(base[:30] + [long, "y" * 150_000] + base[30:])]
    quoted = " ".join([f"q{i}" for i in range(6)] + [long] + [f"q{i}" for i in range(6, 12)])
    texts.append(f"intro {quoted} outro")
    src = write_shards(pd.DataFrame({"id": [f"d{i}" for i in range(len(texts))], "text": texts}), tmp_path / "in", 1)
    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"question": quoted}) + "\n")
    m = run(str(src), str(tmp_path / "out"), protected=[str(evals)], max_contaminated=1)
    assert m["near_duplicates_dropped"] == 2 and m["contaminated_dropped"] == 1
    page = (tmp_path / "out" / "_report" / "index.html").read_text()
    assert len(page) < 400_000, len(page)
    assert "x" * 81 not in page and "y" * 81 not in page
    assert "(200,000 characters)" in page and "(150,000 characters)" in page


def test_the_page_records_the_run_in_chromium(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    """The page's "The run" table: every option that shaped the result as given on the command line,
    each earlier output with the documents its index holds, the near duplicates of them and the
    documents skipped as already indexed."""
    from selenium.webdriver.common.by import By

    first = corpus_frame.iloc[:200]
    second = pd.concat([corpus_frame.iloc[200:400], first.iloc[:30]], ignore_index=True)  # 30 ids published already
    old = run_command([*DEDUP, "run", str(write_shards(first, tmp_path / "c1", 1)), str(tmp_path / "out1"),
                       "--threads", "1"], timeout=240)
    assert old.returncode == 0, old.stderr
    indexed = json.loads((tmp_path / "out1" / "_index" / "index.json").read_text())["documents"]
    got = run_command([*DEDUP, "run", str(write_shards(second, tmp_path / "c2", 1)), str(tmp_path / "out2"),
                       "--threads", "1", "--against", str(tmp_path / "out1"), "--skip-existing", "--keep-duplicates",
                       "--keep-by", "family:min", "--clusters", "centred", "--no-index"], timeout=240)
    assert got.returncode == 0, got.stderr
    m = json.loads((tmp_path / "out2" / "_dedup.json").read_text())
    d = chromium()
    try:
        d.get((tmp_path / "out2" / m["report"]).as_uri())
        rows = {r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td").text
                for r in d.find_elements(By.CSS_SELECTOR, "#run tr")}
    finally:
        d.quit()
    assert rows["near duplicates"] == "kept and tagged (--keep-duplicates)"
    assert rows["survivor (--keep-by)"] == "family:min" and rows["clusters (--clusters)"] == "centred"
    assert rows["index (_index/)"] == "not written" and rows["protected files"] == "none: no decontamination"
    assert rows["--against"] == (f"{tmp_path / 'out1'}: {indexed:,} indexed documents, "
                                 f"{m['near_duplicates_of_indexed']:,} near duplicates of them")
    assert rows["skipped, id already indexed (--skip-existing)"] == "30"
    assert rows["near duplicates of earlier outputs"] == f"{m['near_duplicates_of_indexed']:,}" != "0"
    assert rows["banding"].startswith("16 x 8: a pair at the threshold is a candidate 94.7% of the time")


def test_the_what_if_table_says_what_a_run_at_each_threshold_removes(client, tmp_path: Path,
                                                                     corpus_frame: pd.DataFrame) -> None:
    """A dry run's what-if table: at each threshold, the documents a run at that threshold with the
    same banding removes (such runs made here), the run's own count at its own, and the banding's
    S-curve at each; the page shows it (in Chromium)."""
    from selenium.webdriver.common.by import By

    src = str(write_shards(corpus_frame, tmp_path / "in", 2))
    m = run(src, str(tmp_path / "dry"), dry_run=True)
    rows = {r["threshold"]: r for r in m["what_if"]}
    assert sorted(rows) == [0.7, 0.75, 0.8, 0.85, 0.9]
    assert rows[0.8]["removed"] == m["near_duplicates_found"]
    for t in (0.75, 0.9):
        at = run(src, str(tmp_path / f"at{t}"), params=Params(threshold=t), dry_run=True, write_report=False)
        assert at["near_duplicates_found"] == rows[t]["removed"], t
    assert all(r["candidate_at"] == round(1 - (1 - t ** 8) ** 16, 4) for t, r in rows.items())
    assert rows[0.7]["removed"] >= rows[0.75]["removed"] >= rows[0.8]["removed"] > rows[0.9]["removed"]
    d = chromium()
    try:
        d.get((tmp_path / "dry" / m["report"]).as_uri())
        shown = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                 for r in d.find_elements(By.CSS_SELECTOR, "#what-if-table tr")[1:]]
    finally:
        d.quit()
    assert shown == [[f"{t}" + (" (this run)" if t == 0.8 else ""), f"{rows[t]['removed']:,}",
                      f"{100 * rows[t]['candidate_at']:.1f}%"] for t in sorted(rows)]
    # the CLI's banding follows the threshold: the page says a real run there may count a little otherwise
    page = " ".join((tmp_path / "dry" / m["report"]).read_text().split())
    assert "found with its banding (16 x 8)" in page and "a real run's count can differ by a few documents" in page


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "d", "E", "f,", "g!"]), max_size=30),
       st.lists(st.sampled_from(["a", "b", "c", "d", "e", "x"]), max_size=30), st.sampled_from(["word", "char"]))
def test_the_pages_member_scores_are_the_contracts(a: list[str], b: list[str], unit: str) -> None:
    """The page's (estimate, exact Jaccard) of a member and its root: the Jaccard of the shingle strings."""
    from dedup.job.page_data import member_scores

    x, y = " ".join(a), " ".join(b)
    params = Params(shingle_unit=unit, shingle_size=3)
    ((est, jac),) = member_scores([(x, y)], params)
    assert jac == pytest.approx(jaccard(shingles(x, 3, unit), shingles(y, 3, unit)), abs=1e-12)
    assert 0.0 <= est <= 1.0


def test_scoring_a_long_member_for_the_page_takes_memory_in_proportion_to_its_text() -> None:
    """A 5 MB document and its near copy scored for the page: Python sets of shingle strings took about
    50 times the texts (a 40 MB document killed 2 GiB workers); the hashes take about 10 times."""
    import random
    import tracemalloc

    from dedup.job.page_data import member_scores

    rng = random.Random(1)
    words = [f"w{rng.randrange(100_000)}" for _ in range(700_000)]
    a, b = " ".join(words), " ".join(words[:-1000] + ["x"] * 1000)
    member_scores([("warm the kernels up", "warm the kernels")], Params())
    tracemalloc.start()
    try:
        ((est, jac),) = member_scores([(a, b)], Params())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0.99 < jac < 1.0 and est > 0.9  # the last 1,000 of 700,000 words differ
    assert peak < 15 * (len(a) + len(b)), peak


def test_a_worker_killed_scoring_the_page_is_explained_by_its_document() -> None:
    """Should a worker still die scoring the page's members, the message names the longest document and
    what to do, never a Dask key."""
    from distributed.scheduler import KilledWorker

    from dedup.job.page_data import _explain_scoring
    from dedup.report.page import ClusterView

    view = ClusterView("root-1", 3, "short root text")
    listed = [(view, "member-a", "x" * 40), (view, "member-b", "y " * 2_000_000)]
    with pytest.raises(RuntimeError) as got:
        _explain_scoring(KilledWorker(("member_scores-4f1b", 0), "tcp://127.0.0.1:1", 3), listed)
    said = str(got.value)
    assert "member-b (4,000,000 characters)" in said and "--no-report" in said and "member_scores" not in said
    _explain_scoring(ValueError("not a dead worker"), listed)  # anything else goes on as it was
