"""What a new user meets in the first hour, through the CLI: corpora without ids, Hive trees, CSV
eval files and dataset cards, text in scripts written without spaces."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pytest

from dedup.corpus import generate
from tests.conftest import run_dedup


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [d.text for d in generate(300, seed=11)]


def test_a_corpus_without_ids_gets_positions_as_ids(dask_processes: Path, tmp_path: Path, texts: list[str]) -> None:
    """No `id` column: each document's id is FILE#ROW, the same whatever the partitioning; removed.parquet
    names them; a named --id-column that is missing stays an error; a second run --against the first
    whose files keep their names is refused, saying why."""
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    frame = pd.DataFrame({"text": texts, "url": [f"https://x/{i % 150}" for i in range(len(texts))]})
    frame.iloc[:200].to_parquet(src / "a.parquet", index=False)
    frame.iloc[200:].to_parquet(src / "sub" / "b.parquet", index=False)
    outs = {}
    for rows in ("1000000", "40"):
        out = tmp_path / f"out-{rows}"
        got = run_dedup("run", str(src), str(out), "--scheduler-file", str(dask_processes), "--keep-duplicates",
                        "--partition-rows", rows)
        assert got.returncode == 0, got.stderr
        assert "the input has no 'id' column: each document's id is its position, FILE#ROW (e.g. a.parquet#0)" \
            in got.stderr
        outs[rows] = out
    a = pd.read_parquet(outs["1000000"] / "a.parquet")
    b = pd.read_parquet(outs["1000000"] / "sub" / "b.parquet")
    assert list(a.columns) == ["text", "url", "minhash_cluster"]
    own_b = [f"sub/b.parquet#{r}" for r in range(len(b))]
    assert set(a["minhash_cluster"]) <= {f"a.parquet#{r}" for r in range(200)} | set(own_b)
    assert (b["minhash_cluster"] != own_b).sum() > 0  # some are near duplicates
    for name in ("a.parquet", "sub/b.parquet"):
        assert pd.read_parquet(outs["1000000"] / name).equals(pd.read_parquet(outs["40"] / name))
    removed = pd.read_parquet(outs["1000000"] / "_report" / "removed.parquet")
    position = dict(zip(a["minhash_cluster"].index.map(lambda r: f"a.parquet#{r}"), a["minhash_cluster"]))
    position.update(zip(b.index.map(lambda r: f"sub/b.parquet#{r}"), b["minhash_cluster"]))
    assert len(removed) and all(position[i] == r for i, r in zip(removed["id"], removed["root"]))
    missing = run_dedup("run", str(src), str(tmp_path / "o"), "--id-column", "doc_id")
    assert missing.returncode == 2 and "the id column 'doc_id' is missing" in missing.stderr
    # refused before any work (the scheduler file names no scheduler: no cluster is reached), exit 2
    nowhere = tmp_path / "no-scheduler.json"
    nowhere.write_text(json.dumps({"address": "tcp://127.0.0.1:9"}))
    again = run_dedup("run", str(src), str(tmp_path / "o2"), "--scheduler-file", str(nowhere),
                      "--against", str(outs["1000000"]))
    assert again.returncode == 2, again.stderr
    assert "2 of its file name(s) are those of that output (a.parquet, sub/b.parquet): their ids would repeat" \
        in again.stderr and "--id-column" in again.stderr
    assert not (tmp_path / "o2").exists()


def test_a_single_hive_level_is_kept(tmp_path: Path, texts: list[str]) -> None:
    """`crawl/lang=en/x.parquet` is written as `OUTPUT/lang=en/x.parquet`: a Hive reader still sees `lang`."""
    src = tmp_path / "crawl"
    (src / "lang=en").mkdir(parents=True)
    pd.DataFrame({"id": range(len(texts)), "text": texts}).to_parquet(src / "lang=en" / "x.parquet", index=False)
    got = run_dedup("run", str(src), str(tmp_path / "out"), "--threads", "2")
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "out" / "lang=en" / "x.parquet").exists()
    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    assert set(table.column("lang").to_pylist()) == {"en"}
    m = json.loads((tmp_path / "out" / "_dedup.json").read_text())
    assert table.num_rows == m["output_rows"] > 0
    share = f"{100 * m['index']['bytes'] / m['output_bytes']:.0f}% of the shards' size"  # where users decide
    assert share in got.stdout and "--no-index leaves it out" in got.stdout
    assert m["output_bytes"] == (tmp_path / "out" / "lang=en" / "x.parquet").stat().st_size


def test_csv_evals_in_a_directory_and_the_dataset_card_skipped(tmp_path: Path, texts: list[str]) -> None:
    """MMLU-like CSVs (no header) and a TSV with a header are protected; the directory's README.md,
    a dataset card, is skipped and said so; a CSV named by itself is read as CSV too."""
    corpus = pd.DataFrame({"id": range(len(texts)), "text": texts})
    src = tmp_path / "in"
    src.mkdir()
    corpus.to_parquet(src / "c.parquet", index=False)
    evals = tmp_path / "evals"
    evals.mkdir()
    pd.DataFrame([[texts[3], "A", "B", "C", "D", "A"], [texts[5], "x", "y", "z", "w", "B"]]).to_csv(
        evals / "mmlu_test.csv", header=False, index=False)
    pd.DataFrame({"id": ["q1"], "question": [texts[7]], "answer": ["yes"]}).to_csv(evals / "qa.tsv", sep="\t",
                                                                                 index=False)
    (evals / "README.md").write_text("# The card\n\n" + texts[9] + "\n")
    got = run_dedup("decontaminate", str(src), str(tmp_path / "out"), "--protected", str(evals), "--threads", "2")
    assert got.returncode == 0, got.stderr
    assert "skipped 1 dataset card(s) (README.md)" in got.stderr
    m = json.loads((tmp_path / "out" / "_dedup.json").read_text())
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    hit = dict(zip(removed["id"], removed["record"]))
    assert {3, 5, 7} <= set(hit) and 9 not in hit
    # the TSV's header is not a record, and names its id column: a record is named by its id too
    assert hit[3] == "row 0" and hit[5] == "row 1" and hit[7] == "row 0 (id q1)"
    assert set(m["contaminated_by_file"]) == {str(evals / "mmlu_test.csv"), str(evals / "qa.tsv")}
    named = run_dedup("decontaminate", str(src), str(tmp_path / "out2"), "--protected", str(evals / "mmlu_test.csv"),
                      "--protected", str(evals / "README.md"), "--threads", "2")
    assert named.returncode == 0, named.stderr
    records = {r["record"] for r in json.loads((tmp_path / "out2" / "_dedup.json").read_text())["contaminated_by_record"]}
    assert {"row 0", "row 1", "file"} <= records  # a card named by itself is protected


def test_unspaced_scripts_under_word_shingles_are_warned_of(tmp_path: Path, texts: list[str]) -> None:
    """A corpus that is 91% Chinese, in one big file beside a small English one, gets one warning line
    naming the share and --shingle-unit char, in the log, the manifest's warnings and on the page; with
    char shingles, none; nor does an English corpus with a few Chinese texts (5%)."""
    src = tmp_path / "in"
    src.mkdir()
    zh = ["这是一个关于数据清洗的测试文档，用来检查近似重复的检测是否正确。" * 3 + str(i) for i in range(455)]
    pd.DataFrame({"id": range(455), "text": zh}).to_parquet(src / "zh.parquet", index=False, row_group_size=100)
    pd.DataFrame({"id": range(1000, 1045), "text": texts[:45]}).to_parquet(src / "en.parquet", index=False)
    word = run_dedup("near", str(src), str(tmp_path / "o1"), "--threads", "2")
    assert word.returncode == 0, word.stderr
    lines = [line for line in word.stderr.splitlines() if "written without spaces" in line]
    assert len(lines) == 1 and "455 of 500 sampled texts (91%)" in lines[0] and "--shingle-unit char" in lines[0]
    warnings = json.loads((tmp_path / "o1" / "_dedup.json").read_text())["warnings"]
    assert [w for w in warnings if "written without spaces" in w] == [lines[0].split("WARNING ", 1)[1]]
    assert "455 of 500 sampled texts (91%)" in (tmp_path / "o1" / "_report" / "index.html").read_text()
    char = run_dedup("near", str(src), str(tmp_path / "o2"), "--threads", "2", "--shingle-unit", "char")
    assert char.returncode == 0 and "written without spaces" not in char.stderr
    en = tmp_path / "en"
    en.mkdir()
    few = [*texts[:285], *zh[:15]]  # 5%
    pd.DataFrame({"id": range(len(few)), "text": few}).to_parquet(en / "en.parquet", index=False)
    english = run_dedup("near", str(en), str(tmp_path / "o3"), "--threads", "2")
    assert english.returncode == 0 and "written without spaces" not in english.stderr


def test_the_sample_reads_every_file_in_proportion_to_its_rows(tmp_path: Path, texts: list[str]) -> None:
    """The texts sampled before any work: each file's share of them is its share of the rows, and a
    corpus 43% of whose texts are Chinese, interleaved with English, is warned of."""
    from dedup.core.text import unspaced
    from dedup.job.notices import unspaced_warning
    from dedup.storage.reads import sample_texts
    from dedup.storage.shards import discover, read_footers

    zh = ["这是一个关于数据清洗的测试文档，用来检查近似重复的检测是否正确。" + str(i) for i in range(300)]
    mixed = [zh[i] if i % 100 < 43 else texts[i] for i in range(300)]
    pd.DataFrame({"text": mixed * 4}).to_parquet(tmp_path / "a.parquet", index=False, row_group_size=64)
    pd.DataFrame({"text": texts[:100]}).to_parquet(tmp_path / "b.parquet", index=False)
    shards = read_footers(discover(str(tmp_path)))
    sample = sample_texts(shards, "text", rows=260)
    assert len(sample) == 260
    from_b = sum(t in set(texts[:100]) and t not in set(mixed) for t in sample)
    assert from_b == 20  # 100 of the 1,300 rows
    hits = sum(map(unspaced, sample))
    assert 0.35 * 260 < hits < 0.45 * 260
    assert unspaced_warning(hits, len(sample)) is not None and unspaced_warning(25, 260) is None
