"""`--against` verifies the earlier output before any work: each file its index points at is the
version it recorded (`dedup.storage.stamps`), and index.json is unedited. Real Parquet, the CLI as a subprocess."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from dedup.storage import stamps
from tests.conftest import DEDUP, run_command, write_shards


def _near(*args: str) -> subprocess.CompletedProcess[str]:
    return run_command([*DEDUP, "near", *args, "--threads", "1", "--no-report"], timeout=240)


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory, corpus_frame: pd.DataFrame) -> Path:
    """r1 (the first crawl, --keep-duplicates, exact), r2 (built on r1) and a later crawl c3, side by side."""
    root = tmp_path_factory.mktemp("releases")
    f = corpus_frame[["id", "text"]].sample(frac=1.0, random_state=3).reset_index(drop=True)
    first, second, third = f.iloc[:300], f.iloc[300:420], f.iloc[420:]
    write_shards(first, root / "c1", 2)
    write_shards(second.assign(id=second["id"] + "-b"), root / "c2", 1)
    write_shards(third.assign(id=third["id"] + "-c"), root / "c3", 1)
    ok = _near(str(root / "c1"), str(root / "tree" / "r1"), "--confirm", "exact", "--keep-duplicates")
    assert ok.returncode == 0, ok.stderr
    ok = _near(str(root / "c2"), str(root / "tree" / "r2"), "--confirm", "exact", "--against", str(root / "tree" / "r1"))
    assert ok.returncode == 0, ok.stderr
    return root


def _rewrite(path: Path, change: Callable[[object], object]) -> None:
    pq.write_table(change(pq.read_table(path)), path)  # type: ignore[arg-type]


DAMAGE: dict[str, tuple[Callable[[Path, Path], None], str, str]] = {
    # name: (damage r1 (a copy) given the releases root, file named, what the message says)
    "shard rows reversed": (lambda r, root: _rewrite(r / "shard-00.parquet", lambda t: t.take(list(range(t.num_rows))[::-1])),
                            "shard-00.parquet", "bytes"),
    "band files emptied": (lambda r, root: _rewrite(r / "_index/bands/part-000000.parquet", lambda t: t.slice(0, 0)),
                           "_index/bands/part-000000.parquet", "0 rows"),
    "band file of another run": (lambda r, root: shutil.copy(root / "tree/r2/_index/bands/part-000000.parquet",
                                                             r / "_index/bands/part-000000.parquet"),
                                 "_index/bands/part-000000.parquet", "rows"),
    "partitions edited": (lambda r, root: (r / "_index/index.json").write_text(re.sub(
        r'"partitions": (\d+)', lambda m: f'"partitions": {int(m.group(1)) + 1}', (r / "_index/index.json").read_text())),
                          "index.json", "edited"),
    "docs file truncated": (lambda r, root: _truncate(r / "_index/docs/part-000000.parquet", 1000),
                            "_index/docs/part-000000.parquet", "not a Parquet file"),
    "docs file emptied": (lambda r, root: _truncate(r / "_index/docs/part-000000.parquet", 0),
                          "_index/docs/part-000000.parquet", "not a Parquet file"),
    "shard filtered": (lambda r, root: _rewrite(r / "shard-01.parquet", lambda t: t.slice(0, 10)),
                       "shard-01.parquet", "holds 10 rows"),
    "text column renamed": (lambda r, root: _rewrite(r / "shard-01.parquet", lambda t: t.rename_columns(
        ["body" if c == "text" else c for c in t.column_names])), "shard-01.parquet", "when indexed"),
    "shard deleted": (lambda r, root: (r / "shard-00.parquet").unlink(), "shard-00.parquet", "missing"),
    "index.json not JSON": (lambda r, root: (r / "_index/index.json").write_text("{not json"), "index.json",
                            "not valid JSON"),
}


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(size)


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_earlier_output_is_refused_naming_the_file(releases: Path, tmp_path: Path, case: str) -> None:
    damage, named, says = DAMAGE[case]
    r1 = tmp_path / "r1"
    shutil.copytree(releases / "tree" / "r1", r1)  # undamaged, r2 was built against it (`releases`)
    damage(r1, releases)
    got = _near(str(releases / "c2"), str(tmp_path / "out"), "--confirm", "exact", "--against", str(r1))
    assert got.returncode == 2, got.stderr
    errors = [line for line in got.stderr.splitlines() if " INFO " not in line]
    assert len(errors) == 1 and errors[0].startswith("dedup: error: --against"), got.stderr
    assert named in errors[0] and says in errors[0], errors[0]
    assert "Traceback" not in got.stderr and not (tmp_path / "out").exists()


def test_a_tree_of_releases_moves_and_a_moved_source_can_be_given(releases: Path, tmp_path: Path) -> None:
    moved = tmp_path / "mounted"
    shutil.copytree(releases / "tree", moved)
    # r2's index records r1 at its old absolute place; the copy is found at the same relative path
    (releases / "tree").rename(releases / "tree-away")
    try:
        first = _near(str(releases / "c3"), str(tmp_path / "out"), "--against", str(moved / "r2"))
        assert first.returncode == 0, first.stderr
        alone = tmp_path / "elsewhere" / "r1"
        shutil.move(str(moved / "r1"), alone)
        refused = _near(str(releases / "c3"), str(tmp_path / "out2"), "--against", str(moved / "r2"))
        assert refused.returncode == 2 and "give its new place with --against too" in refused.stderr, refused.stderr
        advised = _near(str(releases / "c3"), str(tmp_path / "out2"), "--against", str(moved / "r2"),
                        "--against", str(alone))
        assert advised.returncode == 0, advised.stderr
        a, b = pd.read_parquet(tmp_path / "out"), pd.read_parquet(tmp_path / "out2")
        assert a.equals(b)
    finally:
        (releases / "tree-away").rename(releases / "tree")


def test_the_index_records_a_stamp_of_every_file_it_points_at(releases: Path) -> None:
    r1 = releases / "tree" / "r1"
    meta = json.loads((r1 / "_index" / "index.json").read_text())
    assert stamps.sealed(meta)
    shards = {p.name for p in r1.glob("*.parquet")}
    own = {str(p.relative_to(r1)) for p in (r1 / "_index").rglob("*.parquet")}
    assert set(meta["files"]) == shards | own
    for name, recorded in meta["files"].items():
        assert stamps.stamp(_local(), str(r1 / name)) == recorded
        assert recorded["rows"] == pq.ParquetFile(r1 / name).metadata.num_rows


def _local() -> object:
    import fsspec

    return fsspec.filesystem("file")
