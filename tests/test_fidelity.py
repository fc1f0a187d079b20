"""Any real corpus in, the same corpus out: a table of Parquet cases run through the CLI.

Each case builds real Parquet files (the column types real corpora have), runs `dedup near
--keep-duplicates` as a subprocess against a real `dask scheduler` and workers, and expects
either the same data back (schema, values bit for bit, metadata, file names, plus
`minhash_cluster` typed like the id column) or a one-line error naming file/column/row with
the right exit code.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tests.conftest import DEDUP, run_command

BODY = "the quick brown fox jumps over the lazy dog near the quiet river bank at dawn again and again"
TEXTS = [BODY, BODY + " today", "an entirely different document about tea and biscuits in the afternoon", None]
UTC = dt.UTC


def _typical(n0: int = 0) -> pa.Table:
    """The columns of a typical public dataset."""
    return pa.table({
        "id": [f"doc-{n0 + i}" for i in range(4)],
        "text": TEXTS,
        "url": ["https://a.example/1", None, "https://b.example/2", "https://c.example/3"],
        "crawled": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC), None, dt.datetime(2024, 5, 1, 12, tzinfo=UTC),
                             dt.datetime(2025, 2, 3, tzinfo=UTC)], pa.timestamp("us", "UTC")),
        "score": pa.array([0.5, None, float("nan"), 1.25], pa.float64()),
        "tags": pa.array([["a", "b"], [], None, ["c"]], pa.list_(pa.string())),
        "metadata": pa.array([{"source": "cc", "lang": {"code": "en", "p": 0.9}}, None,
                              {"source": "wiki", "lang": {"code": "de", "p": None}}, {"source": None, "lang": None}]),
    })


def _exotic() -> pa.Table:
    return pa.table({
        "id": pa.array([2**60 + 1, 2**53 + 1, 3, 4], pa.int64()),
        "text": pa.array(TEXTS, pa.large_string()),
        "big": pa.array([2**63 - 1, None, 2**53 + 1, -(2**62) - 3], pa.int64()),
        "blob": pa.array([b"\x00\x01", None, b"", b"\xff"], pa.binary()),
        "fixed": pa.array([b"abcd", b"efgh", None, b"ijkl"], pa.binary(4)),
        "t": pa.array([1, None, 3, 86_399_000_000], pa.time64("us")),
        "day": pa.array([dt.date(2020, 2, 29), None, dt.date(1970, 1, 1), dt.date(2038, 1, 19)], pa.date32()),
        "dur": pa.array([1, 2, None, 4], pa.duration("ms")),
        "price": pa.array([decimal.Decimal("1.10"), None, decimal.Decimal("-3.25"), decimal.Decimal("0.00")],
                          pa.decimal128(10, 2)),
        "cat": pa.array(["x", "y", None, "x"]).dictionary_encode(),
        "nothing": pa.nulls(4),
        "attrs": pa.array([[("k", 1)], None, [], [("a", 2), ("b", None)]], pa.map_(pa.string(), pa.int32())),
        "naive": pa.array([dt.datetime(2020, 1, 1), None, dt.datetime(2021, 6, 1), dt.datetime(1999, 12, 31)],
                          pa.timestamp("ns")),
        "f32": pa.array([1.5, float("nan"), None, -0.0], pa.float32()),
    })


def _strict() -> pa.Table:
    schema = pa.schema([pa.field("id", pa.string(), nullable=False, metadata={"role": "key"}),
                        pa.field("text", pa.string(), nullable=False),
                        pa.field("lang", pa.string(), metadata={"iso": "639-1"})],
                       metadata={"producer": "crawler v3", "license": "cc-by"})
    return pa.table({"id": ["a", "b", "c", "d"], "text": [t or "" for t in TEXTS], "lang": ["en", "en", None, "de"]},
                    schema=schema)


def _pandas_table(frame: pd.DataFrame, index: bool) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=index)


def _multiindex_columns() -> pa.Table:
    frame = pd.DataFrame({("id", ""): ["a", "b", "c", "d"], ("text", ""): TEXTS, ("stats", "len"): [1, 2, 3, 4]})
    return _pandas_table(frame, index=False)


@dataclass
class Case:
    name: str
    files: Callable[[], dict[str, pa.Table]]
    args: tuple[str, ...] = ()
    error: str | None = None
    """A regex the last stderr line must match; None: the data must come back unchanged."""
    code: int = 0


CASES = [
    Case("typical public dataset", lambda: {"shard-00.parquet": _typical(), "shard-01.parquet": _typical(10)}),
    Case("every Arrow type, int64 beyond 2^53 with nulls, NaN apart from null", lambda: {"x.parquet": _exotic()}),
    Case("not-null flags, field and schema metadata", lambda: {"strict.parquet": _strict()}),
    Case("zero-row shard with nested columns", lambda: {"a.parquet": _typical(), "b.parquet": _typical().slice(0, 0)}),
    Case("all-null text column", lambda: {"a.parquet": pa.table({"id": [1, 2], "text": pa.array([None, None], pa.string())})}),
    Case("text column of null type", lambda: {"a.parquet": pa.table({"id": [1, 2], "text": pa.nulls(2)})}),
    Case("column only in a later shard", lambda: {
        "a.parquet": _typical().drop_columns(["score"]), "b.parquet": _typical(10)}),
    Case("column missing from a later shard", lambda: {
        "a.parquet": _typical(), "b.parquet": _typical(10).drop_columns(["tags", "metadata"])}),
    Case("int32 in one shard, int64 in another", lambda: {
        "a.parquet": pa.table({"id": pa.array([1, 2], pa.int32()), "text": TEXTS[:2], "n": pa.array([1, 2], pa.int32())}),
        "b.parquet": pa.table({"id": pa.array([3, 4], pa.int64()), "text": TEXTS[2:], "n": pa.array([2**40, 4], pa.int64())})}),
    Case("string in one shard, large_string in another", lambda: {
        "a.parquet": pa.table({"id": ["a", "b"], "text": pa.array(TEXTS[:2], pa.string())}),
        "b.parquet": pa.table({"id": ["c", "d"], "text": pa.array(TEXTS[2:], pa.large_string())})}),
    Case("pandas MultiIndex columns", lambda: {"m.parquet": _multiindex_columns()},
         args=("--id-column", "('id', '')", "--text-column", "('text', '')")),
    Case("a __null_dask_index__ column", lambda: {
        "n.parquet": pa.table({"id": ["x", "y"], "text": TEXTS[:2], "__null_dask_index__": [0, 1]})}),
    Case("pandas file with a named index", lambda: {
        "p.parquet": _pandas_table(pd.DataFrame({"id": ["a", "b", "c", "d"], "text": TEXTS},
                                                index=pd.Index([10, 20, 30, 40], name="row_no")), index=True)}),
    Case("hive partition directories", lambda: {
        "lang=en/part-0.parquet": _typical(), "lang=de/part-0.parquet": _typical(10)}),
    Case("int ids in one shard, string ids in another", lambda: {
        "a.parquet": pa.table({"id": [1, 2], "text": TEXTS[:2]}), "b.parquet": pa.table({"id": ["c", "d"], "text": TEXTS[2:]})},
        error=r"Column 'id' is int64 in .*a\.parquet but string in .*b\.parquet", code=2),
    Case("naive timestamps next to UTC ones", lambda: {
        "a.parquet": pa.table({"id": ["a"], "text": ["x"], "ts": pa.array([dt.datetime(2020, 1, 1)], pa.timestamp("us"))}),
        "b.parquet": pa.table({"id": ["b"], "text": ["y"], "ts": pa.array([dt.datetime(2020, 1, 1, tzinfo=UTC)],
                                                                            pa.timestamp("us", "UTC"))})},
        error=r"Column 'ts' is timestamp\[us\] in .*a\.parquet but timestamp\[us, tz=UTC\] in .*b\.parquet", code=2),
    Case("int64 in one shard, double in another (lossy)", lambda: {
        "a.parquet": pa.table({"id": ["a"], "text": ["x"], "n": pa.array([2**60 + 1])}),
        "b.parquet": pa.table({"id": ["b"], "text": ["y"], "n": pa.array([0.5])})},
        error=r"Column 'n' is int64 in .*a\.parquet but double in .*b\.parquet", code=2),
    Case("invalid UTF-8 in the text column", lambda: {"u.parquet": _bad_utf8()},
         error=r"u\.parquet: row 1 of the text column 'text' is not valid UTF-8 \(byte offset 4\)", code=1),
    Case("existing minhash_cluster column", lambda: {"a.parquet": pa.table({"id": ["a"], "text": ["x"], "minhash_cluster": ["a"]})},
         error=r"already has a 'minhash_cluster' column", code=2),
]


def _bad_utf8() -> pa.Table:
    good = pa.array([b"fine text", b"bad \xff\xfe text", b"ok"], pa.binary())
    text = pa.Array.from_buffers(pa.string(), len(good), good.buffers())
    return pa.table({"id": ["a", "b", "c"], "text": text})


def _plain(value: Any) -> Any:
    """Values for comparison: NaN as a marker (NaN != NaN), containers recursively."""
    if isinstance(value, float) and math.isnan(value):
        return ("NaN", math.copysign(1.0, value))
    if isinstance(value, float) and value == 0.0:
        return (value, math.copysign(1.0, value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _write(files: dict[str, pa.Table], root: Path) -> None:
    for rel, table in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / rel)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_parquet_case(case: Case, dask_processes: Path, tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    _write(case.files(), src)
    res = run_command([*DEDUP, "near", str(src), str(out), "--keep-duplicates", "--scheduler-file", str(dask_processes),
                          *case.args], timeout=240)
    if case.error is not None:
        last = res.stderr.strip().splitlines()[-1]
        assert res.returncode == case.code, res.stderr
        assert __import__("re").search(case.error, last), last
        assert "Traceback" not in res.stderr and not out.exists()
        return
    assert res.returncode == 0, res.stderr
    inputs = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.parquet"))
    outputs = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet")
                     if not any(part.startswith("_") for part in p.relative_to(out).parts))  # _report/, _index/
    assert outputs == inputs  # same names, same tree
    schemas = [pq.read_schema(src / rel) for rel in inputs]
    unified = pa.unify_schemas(schemas, promote_options="permissive")
    id_column = case.args[1] if case.args else "id"
    for rel, schema in zip(inputs, schemas):
        got = pq.ParquetFile(out / rel).read()
        want = pq.ParquetFile(src / rel).read()
        cluster = got.schema.field("minhash_cluster")
        assert cluster.type == unified.field(id_column).type
        body = got.drop_columns(["minhash_cluster"])
        assert body.schema.metadata == want.schema.metadata  # nothing added (no pandas blob), nothing lost
        for f in body.schema:
            if f.name in schema.names:  # same type (or the unified one), same flags and field metadata
                assert f.type == unified.field(f.name).type
                assert f.metadata == schema.field(f.name).metadata
                if len(schemas) == 1 or all(s.field(f.name).type == schema.field(f.name).type
                                            for s in schemas if f.name in s.names):
                    assert f.equals(schema.field(f.name), check_metadata=True)
                assert _plain(body.column(f.name).to_pylist()) == _plain(
                    want.column(f.name).cast(f.type).to_pylist()), f.name
            else:  # a column other shards have: nulls here
                assert body.column(f.name).null_count == len(body)
        assert body.column_names == unified.names
    m = json.loads((out / "_dedup.json").read_text())
    assert m["output_rows"] == m["input_rows"] == sum(pq.read_metadata(src / r).num_rows for r in inputs)


def test_typical_corpus_clusters_and_reads_back_with_pandas_and_hive(dask_processes: Path, tmp_path: Path) -> None:
    """The 'done when' corpus, dropping duplicates; pandas and hive-partitioned readers read it back."""
    src, out = tmp_path / "in", tmp_path / "out"
    _write({"lang=en/a.parquet": _typical(), "lang=de/b.parquet": _typical(10)}, src)
    res = run_command([*DEDUP, "run", str(src), str(out), "--scheduler-file", str(dask_processes)],
                      timeout=240)
    assert res.returncode == 0, res.stderr
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert set(table.column("lang").to_pylist()) == {"en", "de"}
    assert table.schema.field("minhash_cluster").type == pa.string()
    kept = sorted(table.column("id").to_pylist())
    # the two shards hold the same texts: doc-0 ~ doc-1 ~ doc-10 ~ doc-11, doc-2 ~ doc-12 (string order: doc-12 first);
    # the null texts doc-3 and doc-13 are nobody's duplicate
    assert kept == ["doc-0", "doc-12", "doc-13", "doc-3"]
    frame = pd.read_parquet(out / "lang=en" / "a.parquet")
    assert frame["minhash_cluster"].tolist() == frame["id"].tolist() == ["doc-0", "doc-3"]
    schema = pq.read_schema(out / "lang=en" / "a.parquet")
    assert schema.remove(schema.get_field_index("minhash_cluster")).equals(pq.read_schema(src / "lang=en" / "a.parquet"))


def test_many_small_shards_share_partitions_and_keep_their_names(dask_processes: Path, tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    for i in range(300):
        _write({f"s{i:04d}.parquet": pa.table({"id": [f"{i}-{j}" for j in range(10)],
                                                "text": [f"document {i} line {j} " + BODY for j in range(10)]})}, src)
    res = run_command([*DEDUP, "near", str(src), str(out), "--scheduler-file", str(dask_processes), "--keep-duplicates"],
                      timeout=240)
    assert res.returncode == 0, res.stderr
    m = json.loads((out / "_dedup.json").read_text())
    assert m["input_files"] == 300 and m["partitions"] == 1 and m["output_rows"] == 3000
    assert sorted(p.name for p in out.glob("*.parquet")) == sorted(p.name for p in src.glob("*.parquet"))
    assert sorted(p.name for p in (out / "_report" / "removed.parquet").glob("*.parquet")) == \
        sorted(p.name for p in src.glob("*.parquet"))
