"""Bad input: each case gets a clear error naming the file, column or row, or is handled per docs/contract.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dedup import Params, clusters, signatures
from dedup.job.pipeline import run
from tests.conftest import run_command, write_shards
from tests.reference import ref_signature

BODY = "the quick brown fox jumps over the lazy dog near the quiet river bank at dawn again"


def _manifest(out: Path) -> dict:
    m = json.loads((out / "_dedup.json").read_text())
    assert m["input_rows"] == m["output_rows"] + m["near_duplicates_dropped"] + m["contaminated_dropped"]
    return m


@pytest.mark.parametrize(("values", "type_name"), [([1, 2], "int64"), ([b"x", b"y"], "binary")])
def test_text_column_of_wrong_type(client, tmp_path: Path, values: list, type_name: str) -> None:
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": ["a", "b"], "text": values}), tmp_path / "in" / "bad.parquet")
    with pytest.raises(ValueError, match=rf"bad.parquet: the text column 'text' has type {type_name}"):
        run(str(tmp_path / "in"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_named_id_column_that_is_missing_names_file_and_columns(client, tmp_path: Path) -> None:
    """Named, a missing id column is an error (unnamed, the documents' positions are their ids)."""
    write_shards(pd.DataFrame({"doc": ["a"], "text": ["x"]}), tmp_path / "in", 1)
    with pytest.raises(ValueError, match=r"shard-00.parquet: the id column 'id' is missing; columns found: \['doc', 'text'\]"):
        run(str(tmp_path / "in"), str(tmp_path / "out"), id_column="id")


WORDLESS = [None, "", "   \n\t ", "!!! ... ???", "😀🎉😀", "\u200b\u200d"]


def test_wordless_and_null_texts_are_kept_and_never_duplicates(client, tmp_path: Path, protected_file: Path) -> None:
    frame = pd.DataFrame({"id": [f"w{i}" for i in range(len(WORDLESS))] + ["x1", "x2"],
                          "text": WORDLESS + [BODY, BODY.upper()]})
    write_shards(frame, tmp_path / "in", 2)
    run(str(tmp_path / "in"), str(tmp_path / "out"), protected=[str(protected_file)])
    out = pd.read_parquet(tmp_path / "out")
    assert sorted(out["id"]) == sorted([f"w{i}" for i in range(len(WORDLESS))] + ["x1"])
    assert (out.loc[out["id"].str.startswith("w"), "minhash_cluster"] == out.loc[out["id"].str.startswith("w"), "id"]).all()
    assert _manifest(tmp_path / "out")["contaminated_dropped"] == 0


SCRIPTS = [
    "Привет мир, это тестовый текст о погоде и природе в большом городе летом",
    "مرحبا بالعالم هذا نص تجريبي عن الطقس والطبيعة في المدينة الكبيرة صيفا",
    "नमस्ते दुनिया यह मौसम और प्रकृति के बारे में एक परीक्षण पाठ है",
    "你好世界 这是 一个 关于 天气 和 自然 的 测试 文本 在 大 城市",
    "café naïve résumé",
    "cafe\u0301 nai\u0308ve re\u0301sume\u0301",  # NFD: combining marks split words, as Python's \\w does
    "zero\u200bwidth join\u200der",
    "line one\r\nline two\r\nline three\x00with nul",
]


def test_non_ascii_scripts_follow_the_reference_definition(client, tmp_path: Path) -> None:
    sigs = signatures(SCRIPTS)
    for text, sig in zip(SCRIPTS, sigs):
        assert sig.tolist() == ref_signature(text)
    texts = SCRIPTS + [t.upper() + " !" for t in SCRIPTS[:4]]
    frame = pd.DataFrame({"id": [f"s{i:02d}" for i in range(len(texts))], "text": texts})
    write_shards(frame, tmp_path / "in", 3)
    run(str(tmp_path / "in"), str(tmp_path / "out"), drop=False)
    out = pd.read_parquet(tmp_path / "out")
    got = sorted(sorted(g) for g in out.groupby("minhash_cluster")["id"].apply(list) if len(g) > 1)
    expected = sorted(sorted(g) for g in clusters(dict(zip(frame["id"], frame["text"]))))
    assert got == expected and len(expected) == 4


def test_huge_document_memory_is_a_small_multiple_of_its_size() -> None:
    code = """
import resource, sys
import numpy as np
from dedup import signatures
rng = np.random.default_rng(0)
words = [f"w{i}" for i in rng.integers(0, 50000, 4_000_000)]
text = " ".join(words)
huge_word = "x" * 1_000_000
del words
signatures(["warm up the compiled kernels"])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
sig = signatures([text, huge_word, "small"])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(len(text), before, after, int((sig[1] != 2**31 - 1).all()))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    size, before, after, ok = (int(x) for x in res.stdout.split())
    assert ok == 1
    assert size > 20_000_000
    assert after - before < 12 * size, f"peak grew by {(after - before) / size:.1f}x the document size"


def test_duplicate_ids_within_one_shard(client, tmp_path: Path) -> None:
    write_shards(pd.DataFrame({"id": ["a", "b", "a"], "text": ["x", "y", "z"]}), tmp_path / "in", 1)
    with pytest.raises(ValueError, match=r"1 document id\(s\) in column 'id' occur more than once, e.g. \['a'\] "
                                         r"\('a' in .*row 0, 'a' in .*row 2\)"):
        run(str(tmp_path / "in"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_null_ids_name_file_and_row(client, tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": ["a", None, "c"], "text": ["x", "y", "z"]}), tmp_path / "in" / "ids.parquet")
    with pytest.raises(ValueError, match=r"ids.parquet: row 1 has a null id in column 'id'"):
        run(str(tmp_path / "in"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_stray_and_truncated_files_are_named(client, tmp_path: Path) -> None:
    src = write_shards(pd.DataFrame({"id": ["a"], "text": ["x"]}), tmp_path / "in", 1)
    (src / "notes.txt").write_text("not parquet")
    with pytest.raises(ValueError, match=r"notes.txt' is not a readable Parquet file"):
        run(str(src), str(tmp_path / "out"))
    (src / "notes.txt").unlink()
    data = (src / "shard-00.parquet").read_bytes()
    (src / "shard-01.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"shard-01.parquet' is not a readable Parquet file"):
        run(str(src), str(tmp_path / "out"))


def test_empty_input_gives_empty_output(client, tmp_path: Path) -> None:
    (tmp_path / "none").mkdir()
    m = run(str(tmp_path / "none"), str(tmp_path / "out0"))
    assert m["input_rows"] == m["output_rows"] == 0
    assert sorted(p.name for p in (tmp_path / "out0").iterdir()) == ["_dedup.json", "_report"]  # no input, no shard
    write_shards(pd.DataFrame({"id": pd.Series([], dtype="string"), "text": pd.Series([], dtype="string"),
                               "lang": pd.Series([], dtype="string")}), tmp_path / "rows0", 2)
    m = run(str(tmp_path / "rows0"), str(tmp_path / "out1"))
    assert m["input_rows"] == m["output_rows"] == m["clusters"] == 0
    out = pd.read_parquet(tmp_path / "out1")
    assert list(out.columns) == ["id", "text", "lang", "minhash_cluster"] and len(out) == 0
    _manifest(tmp_path / "out1")


def test_protected_file_errors(client, tmp_path: Path) -> None:
    src = write_shards(pd.DataFrame({"id": ["a"], "text": [BODY]}), tmp_path / "in", 1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"q": "fine"}\n\n{"q": broken}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl: line 3 is not valid JSON"):
        run(str(src), str(tmp_path / "out"), protected=[str(bad)])
    with pytest.raises(ValueError, match="missing.jsonl' does not exist"):
        run(str(src), str(tmp_path / "out"), protected=[str(tmp_path / "missing.jsonl")])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    m = run(str(src), str(tmp_path / "out"), protected=[str(empty)])
    assert m["contaminated_by_file"] == {str(empty): 0} and m["output_rows"] == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--threshold", "-0.1"], "The 'threshold' parameter must be a float in [0, 1]. Got -0.1 instead."),
    (["--num-bands", "20", "--rows-per-band", "8"], "num_bands * rows_per_band must be <= num_perm. Got 20 * 8 = 160 > 128"),
    (["--shingle-size", "0"], "The 'shingle_size' parameter must be an integer >= 1. Got 0 instead."),
])
def test_parameters_out_of_range_through_the_cli(tmp_path: Path, args: list[str], message: str) -> None:
    src = write_shards(pd.DataFrame({"id": ["a"], "text": ["x"]}), tmp_path / "in", 1)
    res = run_command([sys.executable, "-m", "dedup", "run", str(src), str(tmp_path / "out"), *args], timeout=120)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_params_object_validates() -> None:
    with pytest.raises(ValueError, match="'num_perm' parameter"):
        Params(num_perm=0)
    assert np.isclose(Params().threshold, 0.8)
