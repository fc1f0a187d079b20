"""contract §6: the 13-gram rule. A table of texts, each with the reason it is or is not flagged."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dedup import Doc, ProtectedNgrams, contaminated, decontaminate, protected_ngrams, read_protected
from dedup.core.text import word_ngrams

PROTECTED = "Tom found a shiny red shell by the river and carried it home to show his sister."

CASES = [
    # (text, flagged, why)
    ("... and then TOM FOUND A SHINY, RED shell by the river and carried it home to show ...", True,
     "the worked example: shares 'tom found ... it home' despite case and punctuation"),
    ("found a shiny red shell by the river and carried it home to show his", True,
     "13 words from the middle of the protected text"),
    ("Tom found a shiny red shell by the river and carried it", False, "only 12 of those words"),
    ("x y z Tom found a shiny red shell by the river and carried it home", True,
     "the match is the document's last window (off-by-one pitfall)"),
    ("Tom found a shiny red shell by the river and carried it homeward to show his sister", False,
     "'homeward' is another word: no substring matching on raw text"),
    ("tom-found-a-shiny-red-shell-by-the-river-and-carried-it-home", True, "punctuation separates words"),
    ("", False, "no words"),
]


@pytest.fixture()
def protected_file(tmp_path: Path) -> Path:
    path = tmp_path / "eval.jsonl"
    rows = [
        {"id": "q1", "case_id": "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu",
         "tags": ["one two three four five six seven eight nine ten eleven twelve thirteen"],
         "scorer_args": {"ref": "uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece"},
         "prompt": PROTECTED},
        {"id": "q2", "choices": ["short answer",
                                 {"text": "a nested protected string of at least thirteen words is right here now"}]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


@pytest.mark.parametrize(("text", "flagged", "why"), CASES, ids=[c[2][:40] for c in CASES])
def test_rule_table(protected_file: Path, text: str, flagged: bool, why: str) -> None:
    grams = protected_ngrams([protected_file])
    assert contaminated(text, grams) is flagged, why
    assert bool(read_protected([protected_file]).flags([text])[0]) is flagged, why


def test_id_like_keys_are_not_protected(protected_file: Path) -> None:
    grams = protected_ngrams(protected_file)
    for label in ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu",
                  "one two three four five six seven eight nine ten eleven twelve thirteen",
                  "uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece"):
        assert not contaminated(label, grams)
    assert contaminated("a nested protected string of at least thirteen words is right here now", grams)


def test_short_protected_text_contributes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "short.txt"
    path.write_text("only twelve words here in this protected text a b c d")
    assert protected_ngrams(path) == set()


def test_plain_file_is_one_protected_text(tmp_path: Path) -> None:
    path = tmp_path / "eval.txt"
    path.write_text(PROTECTED)
    assert len(protected_ngrams(path)) == 17 - 13 + 1


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": oops}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 2 is not valid JSON"):
        protected_ngrams(path)


def test_missing_protected_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nope.jsonl' does not exist"):
        protected_ngrams(tmp_path / "nope.jsonl")


def test_decontaminate_streams_lazily(protected_file: Path) -> None:
    """Pitfall: materialising a whole stream. An endless input still yields."""

    def endless() -> Iterator[Doc]:
        for i in itertools.count():
            yield Doc(str(i), PROTECTED if i % 2 else f"clean document number {i}")

    out = list(itertools.islice(decontaminate(endless(), protected_file), 3))
    assert [d.id for d in out] == ["0", "2", "4"]


def test_hash_hits_are_confirmed_against_the_ngram_text(protected_file: Path) -> None:
    """A hash collision must never cost a document: the bytes are compared on every hit."""
    prot = read_protected([protected_file])
    fake = dataclasses.replace(prot, buf=np.full_like(prot.buf, ord("q")))  # same hashes, other bytes: all collisions
    assert prot.flags([PROTECTED])[0] and not fake.flags([PROTECTED])[0]


def test_first_hit_names_the_first_record(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("completely different words that make up a thirteen word window for file a here")
    b.write_text(PROTECTED)
    prot = read_protected([a, b])
    from dedup.core.text import encode_batch

    assert prot.first_hit(encode_batch([PROTECTED, "clean", None])).tolist() == [1, -1, -1]
    assert prot.gram_counts() == [2, 5]


VOCAB = ["tom", "found", "a", "shiny", "red", "shell", "by", "the", "river", "and", "Carried", "it", "home!"]


words = st.lists(st.sampled_from(VOCAB), max_size=20).map(" ".join)
QUOTE = st.sampled_from(["", "Tom FOUND a shiny, red shell by the river and carried it home",
                         "found a shiny red shell by the river and carried it home tom"])
text_with_maybe_a_quote = st.tuples(words, QUOTE, words).map(" ".join)


@given(st.lists(text_with_maybe_a_quote, max_size=6))
def test_batch_flags_equal_the_reference_rule(texts: list[str]) -> None:
    """Any text holding a protected 13-gram is flagged, whatever its case and punctuation, in any batch."""
    protected = "tom found a shiny red shell by the river and carried it home tom found a"
    grams = word_ngrams(protected, 13)
    prot = _protected_from_grams(protected)
    expected = [contaminated(t, grams) for t in texts]
    assert prot.flags(texts).tolist() == expected
    assert all(expected[i] for i, t in enumerate(texts) if "shiny, red shell" in t or "home tom" in t)


def _protected_from_grams(text: str) -> ProtectedNgrams:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.txt"
        path.write_text(text)
        return read_protected([path])


def test_the_page_and_removed_list_agree_per_record_named_by_its_id(tmp_path: Path) -> None:
    """Records that share passages (an eval file quoting the same licence): a document hitting several
    records is listed in removed.parquet under its first; each record's `listed` count is its rows
    there, every record hit has an example, and the example holds the n-gram shown beside it. The page
    named examples that did not hold the n-gram, left records without one, and counted 367 documents
    for a record with no row in removed.parquet. Records are named by their own ids."""
    import re
    from html import unescape

    import pandas as pd

    from dedup.job.pipeline import run
    from tests.conftest import write_shards

    licence = " ".join(f"l{i}" for i in range(20))  # a 13-gram of at most 80 characters: shown whole
    other = " ".join(f"z{i}" for i in range(20))
    records = [{"id": "q-1", "question": licence}, {"id": "q-2", "question": f"{other} and {licence}"},
               {"id": "q-3", "passage": f"see {licence} again"}]
    evals = tmp_path / "evals.jsonl"
    evals.write_text("".join(json.dumps(r) + "\n" for r in records))
    texts = [f"page {i} " + " ".join(f"w{i}x{j}" for j in range(30)) for i in range(12)]
    texts += [f"notice {licence} end {i}" for i in range(3)] + [f"quiz page {other} {i}" for i in range(2)]
    ids = [f"doc{i:02d}" for i in range(len(texts))]
    src = write_shards(pd.DataFrame({"id": ids, "text": texts}), tmp_path / "in", 2)
    m = run(str(src), str(tmp_path / "out"), protected=[str(evals)], max_contaminated=1, near=False)
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    rows = removed["record"].value_counts().to_dict()
    by_record = {r["record"]: r for r in m["contaminated_by_record"]}
    assert set(by_record) == {"line 1 (id q-1)", "line 2 (id q-2)", "line 3 (id q-3)"}
    assert {k: r["listed"] for k, r in by_record.items()} == {k: rows.get(k, 0) for k in by_record}
    assert by_record["line 3 (id q-3)"]["documents"] == 3 and by_record["line 3 (id q-3)"]["listed"] == 0
    assert by_record["line 2 (id q-2)"]["documents"] == 5
    page = (tmp_path / "out" / "_report" / "index.html").read_text()
    table = page[page.index('<table id="records">'):]
    table = table[:table.index("</table>")]
    shown = re.findall(r"<tr><td><code>[^<]*</code></td><td>([^<]*)</td>.*?<td><mark>([^<]*)</mark></td>\s*<td>(.*?)</td></tr>",
                       table, re.S)
    assert {unescape(r) for r, _, _ in shown} == set(by_record)
    for record, ngram, cell in shown:
        match = re.search(r'<div class="doc-id">([^<]*)</div><div class="doc">.*?<mark>([^<]*)</mark>', cell, re.S)
        assert match is not None, record  # every record hit has an example
        ident, marked = match.groups()
        gram = unescape(ngram)
        assert " ".join(unescape(marked).lower().split()) == gram
        holding = sorted(i for i, t in zip(ids, texts) if gram in " ".join(t.lower().split()))
        assert unescape(ident) == holding[0]
