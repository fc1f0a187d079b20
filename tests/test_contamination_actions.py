"""Decontamination you can audit (docs/contract.md §6e): `--contaminated drop|tag|cut`, the eval side
and the frequency cap, held to a plain-Python reading of the section (`tests/reference.py`): per
partition on generated texts (Hypothesis), and as whole runs on a real cluster with eval files in
the three formats people keep them in (JSON lines, CSV, Parquet)."""

from __future__ import annotations

import json
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

from dedup.config import Params
from dedup.core.cut import cut_text, cut_texts, word_spans
from dedup.core.decontam import ProtectedNgrams
from dedup.job.contamination import eval_table
from dedup.job.pipeline import run
from dedup.partition import contamination as part_cont
from dedup.partition.features import document_features
from dedup.storage.safety import UsageError
from tests.conftest import chromium, run_dedup, table_cells, write_shards
from tests.reference import (
    DROPPED,
    ref_clusters,
    ref_cut,
    ref_eval_side,
    ref_lines,
    ref_matches,
    ref_record_grams,
)

VOCAB = ["alpha", "beta", "gamma", "delta"]
SEPARATORS = [" ", "\n", ", ", "  ", ". "]


@st.composite
def corpora(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Protected records of a four-word vocabulary (so 13-grams recur by chance too), and documents
    made of pieces of them (some upper-cased), random words and filler long enough to make pieces
    of more than 200 characters."""
    records = [" ".join(draw(st.lists(st.sampled_from(VOCAB), min_size=10, max_size=24))) for _ in range(draw(st.integers(1, 3)))]
    docs = []
    for _ in range(draw(st.integers(1, 8))):
        pieces = []
        for _ in range(draw(st.integers(0, 8))):
            kind = draw(st.integers(0, 2))
            if kind == 0:
                words = draw(st.sampled_from(records)).split()
                lo = draw(st.integers(0, len(words) - 1))
                piece = " ".join(words[lo:lo + draw(st.integers(1, 24))])
            elif kind == 1:
                piece = " ".join(draw(st.lists(st.sampled_from(VOCAB), max_size=6)))
            else:
                piece = "zz " * draw(st.integers(1, 90))
            pieces.append(piece.upper() if draw(st.booleans()) else piece)
        docs.append("".join(p + draw(st.sampled_from(SEPARATORS)) for p in pieces))
    return records, docs


def _protected(records: list[str]) -> ProtectedNgrams:
    return ProtectedNgrams.from_records(["eval.jsonl"], [(0, f"line {i + 1}", [r]) for i, r in enumerate(records)])


@settings(max_examples=60, deadline=None)
@given(corpora())
def test_the_cut_is_the_references(corpus: tuple[list[str], list[str]]) -> None:
    """Every text cut as §6e reads, character by character: margins, merged overlaps, short pieces
    dropped, more than ten windows or no word left dropping the document."""
    records, docs = corpus
    grams = set().union(*ref_record_grams(records))
    assert cut_texts(docs, _protected(records)) == [ref_cut(t, grams) for t in docs]


@settings(max_examples=60, deadline=None)
@given(corpora(), st.sampled_from(["drop", "tag", "cut"]), st.integers(1, 3))
def test_the_actions_the_tags_and_the_eval_side_are_the_references(corpus: tuple[list[str], list[str]], action: str,
                                                                   cap: int) -> None:
    """One partition's features under each action (who is removed, who is hit), the tags, the eval
    side's tallies, and the cap's n-grams, each as the plain reading computes it."""
    records, docs = corpus
    full = _protected(records)
    part = pd.DataFrame({"id": [f"d{i}" for i in range(len(docs))], "text": docs})
    rec_grams = ref_record_grams(records)
    # the cap: documents per n-gram, summed from chunks of three documents
    per_gram = part_cont.gram_documents(part, full, "text", 3)
    common = per_gram.loc[per_gram["documents"] > cap, "gram"].to_numpy(np.int64)
    ref = ref_eval_side(docs, records, max_docs=cap)
    assert {full.ngram_text(int(g)): int(d) for g, d in zip(per_gram["gram"], per_gram["documents"]) if d > cap} == \
        ref["ignored"]
    rule = full.without(common) if len(common) else full
    feat = document_features(part, "id", "text", Params(), rule, near=False, action=action)
    hit = [bool(ref_matches(t, ref["force"])) for t in docs]
    assert (feat["hit"].to_numpy() >= 0).tolist() == hit
    removed = {"drop": hit, "tag": [False] * len(docs),
               "cut": [h and ref_cut(t, ref["force"]) is None for h, t in zip(hit, docs)]}[action]
    assert (feat["source"].to_numpy() >= 0).tolist() == removed
    assert feat["windows"].tolist() == [len(ref_matches(t, ref["force"])) for t in docs]
    labels = [[f"eval.jsonl#line {r + 1}" for r in range(len(records)) if ref_matches(t, rec_grams[r] & ref["force"])]
              for t in docs]
    assert part_cont.tag_lists(docs, rule) == labels
    hits = part_cont.partition_hits(part, feat, rule, "text")
    table = eval_table(full, rule, part_cont.record_tallies(hits, rule), part_cont.hit_grams(hits))
    got = table.drop(columns=["file", "record"]).to_dict("records")
    assert [{**g, "found_share": pytest.approx(g["found_share"])} for g in got] == ref["records"]


def test_a_word_whose_lower_case_is_longer_is_cut_where_it_stands() -> None:
    """"İ" lower-cases to two characters ("i" and a combining dot, which is no word character: §1
    reads "İstanbul" as the words "i" and "stanbul"): the words' spans are still the text's own, so
    the cut removes the characters the matched words came from and keeps the rest byte for byte."""
    text = "x" * 250 + " İstanbul " + " ".join(f"w{i}" for i in range(13)) + " " + "y" * 450
    spans = word_spans(text)
    assert [text[a:b] for a, b in spans[1:4]] == ["İ", "stanbul", "w0"]
    cut = cut_text(text, [3], 13)
    end = spans[15][1] + 200
    assert cut == text[end:]  # the piece before the match is 200 characters or fewer once widened: dropped


def _hold(text: str, grams: set[str]) -> bool:
    return bool(ref_matches(text, grams))


def _eval_files(root: Path, records: list[str]) -> tuple[list[Path], list[str]]:
    """Two records in each of a JSON-lines, a CSV (with a header) and a Parquet file; their labels."""
    jl = root / "mmlu.jsonl"
    jl.write_text("".join(json.dumps({"id": f"q-{i}", "question": records[i]}) + "\n" for i in range(2)))
    csv = root / "arc.csv"
    csv.write_text("id,question\n" + "".join(f"q-{i},\"{records[i]}\"\n" for i in range(2, 4)))
    pqf = root / "hellaswag.parquet"
    pq.write_table(pa.table({"id": [f"q-{i}" for i in range(4, 6)], "ctx": records[4:6]}), pqf)
    labels = [f"{jl}#line {i + 1} (id q-{i})" for i in range(2)] + \
        [f"{csv}#row {i - 2} (id q-{i})" for i in range(2, 4)] + [f"{pqf}#row {i - 4} (id q-{i})" for i in range(4, 6)]
    return [jl, csv, pqf], labels


def _corpus(rng: random.Random) -> tuple[list[str], list[str], list[str]]:
    """Long documents of their own words, with eval records planted: 20 words verbatim in a long document
    (cut out, the rest kept), a whole record alone (nothing left), eleven times (too often), upper-cased with punctuation,
    a license line quoted by one record and found in many documents (common), near copies of some."""
    vocab = [f"w{i}" for i in range(3000)]
    body = [" ".join(rng.choice(vocab) for _ in range(160)) for _ in range(24)]
    records = [" ".join(f"q{r}x{j}" for j in range(30)) for r in range(6)]
    license_words = "permission is hereby granted free of charge to any person obtaining a copy of this software"
    records[5] = f"{records[5]} {license_words}"
    nav = "Home | Products | About us | Contact"
    texts = [f"{nav}\n{b}" for b in body]
    quoted = [" ".join(r.split()[:20]) for r in records]  # eight windows: cut, not too often
    texts[0] = f"{nav}\n{body[0][:700]} {quoted[0]} {body[0][700:]}"
    texts[1] = records[1]
    texts[2] = f"{nav}\n" + " ".join(f"{body[2][i * 60:(i + 1) * 60]} {' '.join(records[2].split()[:13])}"
                                     for i in range(11))
    texts[3] = f"{nav}\n{body[3][:500]} " + re.sub(r"(\w+) (\w+)", r"\1, \2.", quoted[3].upper()) + f" {body[3][500:]}"
    for i in range(8, 16):
        texts[i] = f"{nav}\n{body[i][:400]} {license_words} {body[i][400:]}"
    texts[4] = f"{nav}\n{body[4][:300]} {records[4]}"
    texts += [t.replace(t.split()[-1], "changed", 1) for t in texts[:6]]  # near copies, hit as their originals are
    return [f"d{i:03d}" for i in range(len(texts))], texts, records


@pytest.mark.parametrize("action", ["drop", "tag", "cut"])
def test_each_action_on_a_real_cluster_is_the_references(client, tmp_path: Path, action: str) -> None:
    """A run of each action on the cluster, at several partitions, with eval files of three formats:
    the texts written, the tags, who is removed and why, and the eval side, as the reference reads
    §6e (near dedup on the original texts; with tag and cut, line dedup after it: on the cut texts, and
    the tags read from the texts written; with cut, a cap of 5 documents)."""
    rng = random.Random(5)
    ids, texts, records = _corpus(rng)
    files, labels = _eval_files(tmp_path, records)
    cap = 5 if action == "cut" else None
    lines = action != "drop"
    src = write_shards(pd.DataFrame({"id": ids, "text": texts}), tmp_path / "in", 3)
    out = tmp_path / "out"
    m = run(str(src), str(out), protected=files, contaminated=action, max_ngram_docs=cap, lines=lines,
            partition_rows=9, max_contaminated=1, max_lines_removed=1.0, write_index=False)
    side = ref_eval_side(texts, records, max_docs=cap)
    force = side["force"]
    text_of = dict(zip(ids, texts))
    hit = {i for i in ids if _hold(text_of[i], force)}
    cut = {i: ref_cut(text_of[i], force) for i in hit}
    gone = {"drop": hit, "tag": set(), "cut": {i for i in hit if cut[i] is None}}[action]
    active = [i for i in ids if i not in gone]
    clusters = ref_clusters(active, [text_of[i] for i in active], mode="connected", threshold=0.8, confirm="estimate")
    survivors = [i for i in active if clusters[i][0] == i]
    new = {i: cut.get(i, text_of[i]) if action == "cut" else text_of[i] for i in survivors}
    after_lines = ref_lines(survivors, [new[i] for i in survivors]) if lines else new
    emptied = {i for i in survivors if after_lines[i] is DROPPED}
    anew = set() if action == "tag" else {i for i in survivors if i not in emptied and i not in hit
                                          and _hold(after_lines[i], force)}
    kept = [i for i in survivors if i not in emptied | anew]
    got = pd.read_parquet(out)
    assert dict(zip(got["id"], got["text"])) == {i: after_lines[i] for i in kept}
    removed = pd.read_parquet(out / "_report" / "removed.parquet")
    reasons = dict(zip(removed["id"], removed["reason"]))
    want = {i: "near_duplicate" for i in active if clusters[i][0] != i}
    for i in gone:
        want[i] = ("contaminated_too_often" if len(ref_matches(text_of[i], force)) > 10
                   else "contaminated_cut_to_nothing") if action == "cut" else "contaminated"
    want.update(dict.fromkeys(emptied, "empty_after_lines"))
    want.update(dict.fromkeys(anew, "contaminated_after_lines"))
    assert reasons == want
    rec_grams = [g & force for g in ref_record_grams(records)]
    if action == "tag":
        tags = dict(zip(got["id"], got["contaminated_by"].map(list)))
        assert tags == {i: [lab for lab, g in zip(labels, rec_grams) if _hold(after_lines[i], g)] for i in kept}
        assert sum(bool(t) for t in tags.values()) > 3
    else:
        assert "contaminated_by" not in got.columns
    table = pd.read_parquet(out / "_report" / "eval_records.parquet")
    assert (table["file"] + "#" + table["record"]).tolist() == labels
    assert [{**r, "found_share": pytest.approx(r["found_share"])}
            for r in table.drop(columns=["file", "record"]).to_dict("records")] == side["records"]
    c = m["contamination"]
    assert (c["action"], c["documents_hit"], c["removed"]) == (action, len(hit), len(gone))
    assert {e["ngram"]: e["documents"] for e in c["common_ngrams_listed"]} == side["ignored"]
    if action == "cut":  # the cases the corpus plants: cut out, nothing left, too often, common text ignored
        assert {"d000", "d003"} <= set(kept) and {"d001", "d002"} <= gone and side["ignored"]
        assert "d008" not in hit and m["index"] is None
        assert " ".join(records[0].split()[:13]) not in dict(zip(got["id"], got["text"]))["d000"]
    if action == "tag":
        d = chromium()
        try:
            d.get((out / m["report"]).as_uri())
            per_file = table_cells(d, "#eval-files tr")[1:]
            what_if = table_cells(d, "#cap-what-if tr")[1:]
        finally:
            d.quit()
        assert [row[0] for row in per_file] == [str(f) for f in files]
        assert [int(row[2]) for row in per_file] == [int((table["file"] == str(f)).mul(table["documents"] > 0).sum())
                                                     for f in files]
        assert [int(row[1].replace(",", "")) for row in what_if] == [w["documents"] for w in c["what_if"]]


def test_the_actions_are_refused_without_protected_files(tmp_path: Path) -> None:
    """`--contaminated` and `--max-ngram-docs` say how protected n-grams are handled: without
    --protected, or with a value outside their range, one line names the option, before any work."""
    with pytest.raises(UsageError, match="give --protected FILE too"):
        run(str(tmp_path), str(tmp_path / "out"), contaminated="tag")
    with pytest.raises(UsageError, match="--contaminated must be one of drop, tag, cut"):
        run(str(tmp_path), str(tmp_path / "out"), contaminated="mask", protected=[tmp_path])
    with pytest.raises(UsageError, match="--max-ngram-docs is how many documents"):
        run(str(tmp_path), str(tmp_path / "out"), max_ngram_docs=0, protected=[tmp_path])


def test_the_contracts_worked_example_of_the_cut() -> None:
    """docs/contract.md §6e: the 13-gram at characters 400 to 463 of a 1,000-character document takes
    characters 200 to 663 with it; the 200 characters before are dropped, the 336 after are the text."""
    gram = " ".join(f"g{i:03d}" for i in range(13))
    text = "a " * 199 + "b " + gram + " " + "c " * 267 + "c"
    assert len(text) == 1000 and text.index(gram) == 400 and len(gram) == 64
    prot = ProtectedNgrams.from_records(["eval.txt"], [(0, "file", [gram])])
    assert cut_texts([text], prot) == [text[664:]] == [ref_cut(text, {gram})]


def test_a_dry_run_says_what_tag_and_cut_would_do(tmp_path: Path) -> None:
    """`dedup run --dry-run` with each action, as a user runs it: the summary says how many documents
    would be tagged or cut, OUTPUT holds no shard, and the eval side is written beside the page."""
    ids, texts, records = _corpus(random.Random(3))
    files, _ = _eval_files(tmp_path, records)
    src = write_shards(pd.DataFrame({"id": ids, "text": texts}), tmp_path / "in", 2)
    protected = [a for f in files for a in ("--protected", str(f))]
    said = {}
    for action in ("tag", "cut"):
        out = tmp_path / action
        got = run_dedup("run", str(src), str(out), *protected, "--contaminated", action, "--dry-run", "--threads", "2",
                        "--max-contaminated", "1", "--max-ngram-docs", "5")
        assert got.returncode == 0, got.stderr
        said[action] = got.stdout
        assert not list(out.glob("*.parquet")) and (out / "_report" / "eval_records.parquet").exists()
        m = json.loads((out / "_dedup.json").read_text())["contamination"]
        assert m["common_ngrams"] > 0 and "common n-grams ignored" in got.stdout
    assert re.search(r"contaminated tagged +\d+ +kept", said["tag"]) and "contaminated cut" not in said["tag"]
    assert re.search(r"contaminated cut +\d+ +kept with the matched passages cut out", said["cut"])
    assert "dry run: no shards written" in said["cut"]


def test_the_guard_suggests_a_cap_when_common_text_does_most_of_the_removing() -> None:
    """The guard's line names the largest `--max-ngram-docs` of the what-if that would let the run
    through, when that cap leaves fewer than half the documents hit; else it suggests none."""
    from dedup.job.counts import Report
    from dedup.job.manifest import contamination_guard

    what_if = [{"max_ngram_docs": 1, "documents": 5}, {"max_ngram_docs": 10, "documents": 20},
               {"max_ngram_docs": 100, "documents": 290}]
    report = Report(input_rows=1000, contaminated=300, contamination_hit=300, eval_what_if=what_if,
                    contaminated_by_record=[{"file": "e.jsonl", "record": "line 1", "documents": 300}])
    line = contamination_guard(report, 0.1)
    assert line is not None and "most of it is common text: --max-ngram-docs 10 (ignore a protected n-gram " \
        "found in more documents) would leave 20 documents hit" in line
    report.eval_what_if = [{"max_ngram_docs": k, "documents": 300} for k in (1, 10, 100)]
    line = contamination_guard(report, 0.1)
    assert line is not None and "--max-ngram-docs" not in line
