"""Eval (protected) files as people keep them: every format gives the same hits, counted per file and record."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dedup import read_protected
from dedup.job.pipeline import run
from tests.conftest import write_shards

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
         "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]
QUESTIONS = [" ".join(WORDS[(i + j) % 20] + str(i) for j in range(16)) for i in range(14)]
RECORDS = [{"id": f"q{i}", "question": q, "answer": "yes", "tags": ["t"]} for i, q in enumerate(QUESTIONS)]


def _corpus(tmp_path: Path) -> Path:
    """One document quoting each question inside other text, plus clean documents."""
    texts = [f"Some preamble words here. {q.upper()}! and then more words follow" for q in QUESTIONS]
    texts += [f"clean document number {i} about nothing in particular at all today" for i in range(30)]
    return write_shards(pd.DataFrame({"id": [f"d{i:03d}" for i in range(len(texts))], "text": texts}), tmp_path / "in", 2)


def _write_formats(d: Path) -> dict[str, Path]:
    d.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r) + "\n" for r in RECORDS)
    paths = {
        "jsonl": d / "e.jsonl", "jsonl.gz": d / "e.jsonl.gz", "jsonl.bz2": d / "e2.jsonl.bz2",
        "json array": d / "arr.json", "json object": d / "obj.json", "parquet": d / "e.parquet",
        "bom jsonl": d / "bom.jsonl", "utf-16 jsonl": d / "u16.jsonl", "txt": d / "all.txt",
    }
    paths["jsonl"].write_text(lines)
    paths["jsonl.gz"].write_bytes(gzip.compress(lines.encode()))
    paths["jsonl.bz2"].write_bytes(bz2.compress(lines.encode()))
    paths["json array"].write_text(json.dumps(RECORDS))
    paths["json object"].write_text(json.dumps({r["id"]: r for r in RECORDS}))
    pq.write_table(pa.Table.from_pylist(RECORDS), paths["parquet"])
    paths["bom jsonl"].write_bytes(b"\xef\xbb\xbf" + lines.encode())
    paths["utf-16 jsonl"].write_bytes(lines.encode("utf-16"))
    paths["txt"].write_text("\n\n".join(QUESTIONS))
    return paths


FORMATS = ["jsonl", "jsonl.gz", "jsonl.bz2", "json array", "json object", "parquet", "bom jsonl", "utf-16 jsonl", "txt"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_protects_every_record(tmp_path: Path, fmt: str) -> None:
    path = _write_formats(tmp_path / "evals")[fmt]
    prot = read_protected([path])
    docs = [f"prefix {q} suffix" for q in QUESTIONS] + ["q0 yes t alpha0", None]
    assert prot.flags(docs).tolist() == [True] * 14 + [False, False]
    expected_records = 1 if fmt == "txt" else 14
    assert len(prot.record_labels) == expected_records
    # a record is named by its own id too (a json object's by its key)
    label = {"parquet": "row 0 (id q0)", "json array": "[0] (id q0)", "json object": "key q0",
             "txt": "file"}.get(fmt, "line 1 (id q0)")
    assert prot.record_labels[0] == label


def test_directory_of_evals_and_counts_per_file_and_record(client, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    paths = _write_formats(tmp_path / "evals")
    src = _corpus(tmp_path)
    with caplog.at_level(logging.WARNING, logger="dedup"):
        m = run(str(src), str(tmp_path / "out"), protected=[str(tmp_path / "evals")], near=False, max_contaminated=1)
    assert m["contaminated_dropped"] == 14
    assert m["contaminated_by_file"] == {str(p): 14 for p in sorted(paths.values())}  # every file gets full credit
    by_record = {(Path(e["file"]).name, e["record"]): e["documents"] for e in m["contaminated_by_record"]}
    assert by_record[("e.jsonl", "line 3 (id q2)")] == 1 and by_record[("all.txt", "file")] == 14
    assert all(e["ngram"] and len(e["ngram"].split()) == 13 for e in m["contaminated_by_record"])
    assert m["contaminated_records"] == 8 * 14 + 1
    # one record removes 14 of 44 documents (>1%): named, with an n-gram
    assert any("Protected record file of" in r.message and "all.txt" in r.message for r in caplog.records)


def test_an_eval_file_that_protects_nothing_is_a_warning_kept_with_the_others(client, tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    """A warning found while planning (an eval file with no 13-gram) is logged once and kept in the
    manifest's `warnings`, which the page shows, like the warnings of the stages."""
    import html

    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "short.txt").write_text("too short to hold a thirteen word n-gram\n")
    with caplog.at_level(logging.WARNING, logger="dedup"):
        m = run(str(_corpus(tmp_path)), str(tmp_path / "out"), protected=[str(tmp_path / "evals")], near=False)
    said = [r.getMessage() for r in caplog.records if "protects nothing" in r.getMessage()]
    assert len(said) == 1 and "short.txt holds no 13-gram" in said[0]
    assert m["warnings"] == said
    page = (tmp_path / "out" / m["report"]).read_text()
    assert f'<div class="warn">{html.escape(said[0])}</div>' in page


def test_counts_do_not_depend_on_file_order(client, tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[:8]))
    b.write_text("".join(json.dumps(r) + "\n" for r in RECORDS[4:]))  # shares records 4..7 with a
    src = _corpus(tmp_path)
    m1 = run(str(src), str(tmp_path / "o1"), protected=[str(a), str(b)], near=False, max_contaminated=1)
    m2 = run(str(src), str(tmp_path / "o2"), protected=[str(b), str(a)], near=False, max_contaminated=1)
    assert m1["contaminated_by_file"] == m2["contaminated_by_file"] == {str(a): 8, str(b): 10}
    assert m1["contaminated_dropped"] == m2["contaminated_dropped"] == 14


def test_unreadable_eval_files_are_named(tmp_path: Path) -> None:
    d = tmp_path / "evals"
    d.mkdir()
    (d / "ok.jsonl").write_text(json.dumps(RECORDS[0]) + "\n")
    (d / "figure.png").write_bytes(b"\x89PNG\r\n")
    with pytest.raises(ValueError, match=r"holds files of no protected kind, e.g. \[.*figure.png"):
        read_protected([d])
    latin = tmp_path / "latin.txt"
    latin.write_bytes("café au lait".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin.txt is not UTF-8 \(byte 3\)"):
        read_protected([latin])
    bad = tmp_path / "bad.json"
    bad.write_text('[{"q": "x"},')
    with pytest.raises(ValueError, match=r"bad.json: not valid JSON at line 1"):
        read_protected([bad])


def test_a_huge_protected_line_is_held_compactly(tmp_path: Path) -> None:
    """A 20 MB line once took the client to 2.5 GB (a Python string per n-gram); now about 50 bytes a word."""
    code = f"""
import resource, random
from pathlib import Path
from dedup import read_protected
random.seed(0)
vocab = ["w%d" % i for i in range(50000)]
Path({str(tmp_path / 'big.txt')!r}).write_text(" ".join(random.choice(vocab) for _ in range(3_000_000)))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
prot = read_protected([{str(tmp_path / 'big.txt')!r}])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(prot), (peak - base) // 1024)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    grams, mib = map(int, res.stdout.split())
    assert grams > 2_900_000
    assert mib < 600, f"{mib} MiB for a 20 MB line"


def test_every_csv_cell_is_protected_whatever_the_width_or_length(tmp_path: Path) -> None:
    """Cells past the header's width (a passage with unquoted commas) and a cell longer than Python's
    csv field limit (131,072 characters: a long-context eval) are protected like any other cell."""
    long_passage = " ".join(f"filler{i}" for i in range(30_000)) + " " + QUESTIONS[5]
    assert len(long_passage) > 131_072
    rows = ["id,question,answer", f"q0,{QUESTIONS[0]},yes",
            f"q1,intro words,{QUESTIONS[1]}, and then,{QUESTIONS[2]}",  # 5 cells under a 3-cell header
            f'q2,"{long_passage}",no', f"{QUESTIONS[3]},short,no"]  # an id column's text stays a label
    path = tmp_path / "wide.csv"
    path.write_text("\n".join(rows) + "\n")
    prot = read_protected([path])
    docs = [f"prefix {q} suffix" for q in QUESTIONS[:6]]
    assert prot.flags(docs).tolist() == [True, True, True, False, False, True]
    assert list(prot.record_labels)[:3] == ["row 0 (id q0)", "row 1 (id q1)", "row 2 (id q2)"]
    assert prot.record_labels[3].startswith("row 3 (id ") and prot.record_labels[3].endswith("…)")  # at most 80
    assert len(prot.record_labels[3]) == len("row 3 (id )") + 80
    tsv = tmp_path / "wide.tsv"
    tsv.write_text("\n".join(r.replace(",", "\t") for r in rows[:3]) + "\n")
    assert read_protected([tsv]).flags(docs[:3]).tolist() == [True, True, True]
