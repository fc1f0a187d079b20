"""The smaller promises: dry runs never delete, counts that add up with --skip-existing, ids that
cannot be compared refused up front, long values shortened, every path form a user gives, OUTPUT
on a file system with directories. Real Parquet, the CLI as a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import run_dedup, write_shards

_run = run_dedup


def _errors(res: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in res.stderr.splitlines() if " INFO " not in line and " WARNING " not in line]


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


def test_a_dry_run_never_replaces_a_release(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 2)
    out = tmp_path / "release"
    assert _run("run", str(src), str(out), "--threads", "1").returncode == 0
    before = _tree(out)
    res = _run("run", str(src), str(out), "--dry-run", "--overwrite", "--threads", "1")
    assert res.returncode == 2 and len(_errors(res)) == 1, res.stderr
    assert "holds the shards of an earlier run" in res.stderr and "give the dry run a new OUTPUT" in res.stderr
    assert _tree(out) == before
    dry = tmp_path / "dry"
    assert _run("run", str(src), str(dry), "--dry-run", "--threads", "1").returncode == 0
    again = _run("run", str(src), str(dry), "--dry-run", "--overwrite", "--threads", "1")  # a dry run over a dry run
    assert again.returncode == 0, again.stderr


def test_the_page_counts_documents_skipped_with_skip_existing(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    f = corpus_frame[["id", "text"]]
    first = write_shards(f.iloc[:300], tmp_path / "c1", 1)
    second = write_shards(f.iloc[250:], tmp_path / "c2", 1)  # 50 ids the first run read
    assert _run("near", str(first), str(tmp_path / "r1"), "--threads", "1").returncode == 0
    res = _run("near", str(second), str(tmp_path / "r2"), "--threads", "1", "--against", str(tmp_path / "r1"),
               "--skip-existing")
    assert res.returncode == 0, res.stderr
    m = json.loads((tmp_path / "r2" / "_dedup.json").read_text())
    assert m["skipped_existing"] == 50
    assert m["input_rows"] == m["output_rows"] + m["near_duplicates_dropped"] + m["contaminated_dropped"] + 50
    page = (tmp_path / "r2" / "_report" / "index.html").read_text()
    assert (f"{m['input_rows']:,} = {m['output_rows']:,} + {m['near_duplicates_dropped']:,} + "
            f"{m['contaminated_dropped']:,} + 50 (output + near duplicates dropped + contaminated + skipped)") in page
    assert "skipped, id already indexed" in page
    assert _readme_equation(m)


def _readme_equation(m: dict) -> bool:
    """The accounting equation as README.md states it, evaluated on a manifest (dotted names read nested
    counts; a count the run has not is 0)."""
    import re

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    stated = " ".join(re.search(r"holds every count \(`([^`]*)`", readme).group(1).split())
    left, right = stated.split(" = ")

    def value(name: str) -> int:
        got: object = m
        for part in name.split("."):
            got = got.get(part) if isinstance(got, dict) else None
        return int(got or 0)

    return value(left) == sum(value(n) for n in right.split(" + "))


def test_the_readmes_accounting_holds_with_line_dedup(tmp_path: Path) -> None:
    texts = ["shared banner line\nfirst body words here", "shared banner line", "shared banner line\nother words"]
    src = write_shards(pd.DataFrame({"id": ["a", "b", "c"], "text": texts}), tmp_path / "in", 1)
    res = _run("lines", str(src), str(tmp_path / "out"), "--threads", "1")
    assert res.returncode == 0, res.stderr
    m = json.loads((tmp_path / "out" / "_dedup.json").read_text())
    assert m["lines"]["documents_dropped"] == 1 and m["output_rows"] == 2
    assert _readme_equation(m)


@pytest.mark.parametrize(("largest", "statistics"), [(2**63, True), (2**64 - 1, False)])
def test_uint64_ids_from_2_to_the_63_are_refused_naming_the_file(tmp_path: Path, corpus_frame: pd.DataFrame,
                                                                 largest: int, statistics: bool) -> None:
    n = 40
    ids = pa.array([*range(n - 1), largest], pa.uint64())
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": ids, "text": corpus_frame["text"].iloc[:n].tolist()}), tmp_path / "in" / "u.parquet",
                   write_statistics=statistics)
    res = _run("run", str(tmp_path / "in"), str(tmp_path / "out"), "--threads", "1")
    assert res.returncode == 2, res.stderr
    errors = _errors(res)
    assert len(errors) == 1 and "u.parquet" in errors[0] and str(largest) in errors[0] and "2^63" in errors[0], errors
    if statistics:  # found in the footer: before any work
        assert "features" not in res.stderr
    else:
        assert f"row {n - 1}" in errors[0]
    if statistics:  # the largest uint64 id that can be compared works
        below = pa.array([*range(n - 1), 2**63 - 1], pa.uint64())
        pq.write_table(pa.table({"id": below, "text": corpus_frame["text"].iloc[:n].tolist()}),
                       tmp_path / "in" / "u.parquet")
        ok = _run("run", str(tmp_path / "in"), str(tmp_path / "out"), "--threads", "1")
        assert ok.returncode == 0, ok.stderr
        assert pq.read_table(tmp_path / "out" / "u.parquet").column("id").type == pa.uint64()


def test_ten_kilobyte_ids_make_short_messages_and_a_page_that_keeps_its_layout(tmp_path: Path,
                                                                               corpus_frame: pd.DataFrame) -> None:
    f = corpus_frame[["id", "text"]].iloc[:60].copy()
    f["id"] = [f"{'x' * 10_000}{i:04d}" for i in range(len(f))]
    twice = pd.concat([f, f.iloc[:3]], ignore_index=True)
    res = _run("run", str(write_shards(twice, tmp_path / "dup", 1)), str(tmp_path / "o1"), "--threads", "1")
    assert res.returncode == 1  # found while the job reads the ids
    assert max(len(line) for line in _errors(res)) < 2000 and "10,004 characters" in res.stderr
    copies = pd.concat([f, f.iloc[:5].assign(id=[f"{'y' * 10_000}{i}" for i in range(5)])], ignore_index=True)
    ok = _run("run", str(write_shards(copies, tmp_path / "near", 1)), str(tmp_path / "o2"), "--threads", "1")
    assert ok.returncode == 0, ok.stderr
    page = (tmp_path / "o2" / "_report" / "index.html").read_text()
    assert "x" * 10_000 not in page and "characters)" in page


def test_every_form_of_input_path(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    f = corpus_frame[["id", "text"]]
    bracketed = write_shards(f, tmp_path / "corpus[2024]", 2)
    for given in (f"file://{bracketed}", str(bracketed / "shard-00.parquet")):
        res = _run("near", given, str(tmp_path / "out"), "--threads", "1", "--overwrite")
        assert res.returncode == 0, (given, res.stderr)
    odd = tmp_path / "odd"
    odd.mkdir()
    f.to_parquet(odd / "a::b.parquet", index=False)
    res = _run("near", str(odd / "a::b.parquet"), str(tmp_path / "out2"), "--threads", "1")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out2" / "a::b.parquet").exists()


def test_a_glob_of_directories_reads_each_as_a_tree(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    """`data/lang=[jz]*` matches directories: each is read as a directory is (it was refused, "no input
    files"), with its Hive key in the output's names; `lang=en/` is left out."""
    f = corpus_frame[["id", "text"]]
    for i, lang in enumerate(("ja", "zh", "en")):
        (tmp_path / "data" / f"lang={lang}" / "_meta").mkdir(parents=True)
        f.iloc[100 * i:100 * (i + 1)].to_parquet(tmp_path / "data" / f"lang={lang}" / "part-0.parquet", index=False)
        (tmp_path / "data" / f"lang={lang}" / "_meta" / "skip.parquet").write_bytes(b"not read")
    res = _run("near", str(tmp_path / "data" / "lang=[jz]*"), str(tmp_path / "out"), "--threads", "1")
    assert res.returncode == 0, res.stderr
    m = json.loads((tmp_path / "out" / "_dedup.json").read_text())
    assert m["input_rows"] == 200
    shards = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*.parquet")
                    if not str(p.relative_to(tmp_path / "out")).startswith("_"))
    assert shards == ["lang=ja/part-0.parquet", "lang=zh/part-0.parquet"]


def test_local_url_output_with_an_index_and_hive_directories(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    f = corpus_frame[["id", "text"]]
    for lang, part in (("en", f.iloc[:300]), ("fr", f.iloc[300:450])):
        write_shards(part, tmp_path / "hive" / f"lang={lang}" / "year=2024", 1)
    out = f"local://{tmp_path}/published/out"
    res = _run("run", str(tmp_path / "hive"), out, "--threads", "1")
    assert res.returncode == 0, res.stderr
    published = tmp_path / "published" / "out"
    assert (published / "lang=en" / "year=2024" / "shard-00.parquet").exists()
    assert (published / "_index" / "index.json").exists() and (published / "_dedup.json").exists()
    assert [p.name for p in (tmp_path / "published").iterdir()] == ["out"]
    later = write_shards(f.iloc[450:].assign(id=f["id"].iloc[450:] + "-later"), tmp_path / "later", 1)
    again = _run("run", str(later), f"local://{tmp_path}/published/out2", "--threads", "1", "--against", out)
    assert again.returncode == 0, again.stderr
    replaced = _run("run", str(tmp_path / "hive"), out, "--threads", "1", "--overwrite")
    assert replaced.returncode == 0, replaced.stderr


def test_a_scheduler_file_that_is_not_one_is_refused_in_one_line(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 1)
    for content, says in (("garbage{", "is not a scheduler file"), ('{"id": 1}', "names no scheduler address")):
        (tmp_path / "s.json").write_text(content)
        res = _run("run", str(src), str(tmp_path / "out"), "--scheduler-file", str(tmp_path / "s.json"))
        assert res.returncode == 2 and len(_errors(res)) == 1 and says in res.stderr, res.stderr


def test_a_bind_mount_as_output_is_refused_before_any_work(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root")
    src = write_shards(corpus_frame, tmp_path / "in", 1)
    (tmp_path / "real").mkdir()
    (tmp_path / "bound").mkdir()
    subprocess.run(["mount", "--bind", str(tmp_path / "real"), str(tmp_path / "bound")], check=True)
    try:
        res = _run("run", str(src), str(tmp_path / "bound"), "--threads", "1")
    finally:
        subprocess.run(["umount", str(tmp_path / "bound")], check=False)
    assert res.returncode == 2 and "is a mount point" in res.stderr and "features" not in res.stderr, res.stderr


def test_a_run_left_by_other_code_is_not_resumed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The package version stays 0.1.0 whatever the code: the fingerprint holds a digest of the sources,
    so a resumed run never reuses stages that another code computed."""
    import shutil

    from dedup.job.versions import PACKAGE, code_digest
    from dedup.storage.staging import Staging

    pkg = tmp_path / "dedup"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    before = code_digest(pkg)
    assert before == code_digest.__wrapped__(PACKAGE)  # the same sources, the same digest
    changed = pkg / "core" / "text.py"
    changed.write_text(changed.read_text() + "\n# one line more\n")
    after = code_digest.__wrapped__(pkg)
    assert after != before
    out = str(tmp_path / "out")
    left = Staging(out, {"version": {"dedup": "0.1.0"}, "code": before})
    left.resumable = True
    left.hold()
    left.close()
    same = Staging(out, {"version": {"dedup": "0.1.0"}, "code": before})
    assert same.resumed_from is not None and same.tmp == left.tmp
    same.hold()
    same.close()
    with caplog.at_level("INFO", logger="dedup"):
        upgraded = Staging(out, {"version": {"dedup": "0.1.0"}, "code": after})
    assert upgraded.resumed_from is None and "dedup's code (an upgrade) changed; starting over" in caplog.text
    upgraded.discard()
    upgraded.close()


def test_tune_then_publish_reuses_the_dry_runs_stages(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    """`--dry-run`, then the same command without it: no --overwrite needed (OUTPUT holds only the dry
    run's report), every stage the dry run finished is reused, and the bytes are a direct run's. The
    stages wait in a hidden sibling of OUTPUT, never in the dry run's OUTPUT; any other run removes them."""
    from tests.conftest import parquet_digests

    src = write_shards(corpus_frame, tmp_path / "in", 2)
    out = tmp_path / "out"
    dry = _run("run", str(src), str(out), "--threads", "2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert not (out / "_index").exists() and not list(out.glob("*.parquet"))
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(".out.dedup-tmp-")]) == 1
    real = _run("run", str(src), str(out), "--threads", "2")
    assert real.returncode == 0, real.stderr
    assert "resuming: reusing features, buckets, confirm, components, survivors, roots from the dry run of" in real.stderr
    assert "s of the dry run's stages, reused)" in real.stdout
    assert "<td>from write, reusing features, buckets, confirm, components, survivors, roots of a dry run (" in (
        out / "_report" / "index.html").read_text()
    direct = _run("run", str(src), str(tmp_path / "direct"), "--threads", "2")
    assert direct.returncode == 0, direct.stderr
    assert parquet_digests(out) == parquet_digests(tmp_path / "direct") and len(parquet_digests(out)) > 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    # a dry run followed by another command: nothing reused, nothing left behind
    assert _run("run", str(src), str(tmp_path / "o2"), "--threads", "2", "--dry-run").returncode == 0
    other = _run("run", str(src), str(tmp_path / "o2"), "--threads", "2", "--threshold", "0.9")
    assert other.returncode == 0 and "reusing" not in other.stderr, other.stderr
    assert "not resuming the dry run of" in other.stderr and "the parameters changed" in other.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".o2.")]
