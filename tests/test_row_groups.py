"""A file above the partition bound is read as several partitions, by row groups (or row ranges of
a row group above the bound), and written back as one file with its rows in order: the kept rows,
their clusters, the removed list and the index are those of the same rows written as many files."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup import Params
from dedup.config import MIN_PARTITIONS
from dedup.job.pipeline import run
from dedup.storage import grouping, reads, shards

PARAMS = Params(max_bucket=4)


def _shard(group_rows: list[int], group_bytes: list[int] | None = None) -> shards.Shard:
    sizes = group_bytes or [10 * r for r in group_rows]
    return shards.Shard("f.parquet", "f.parquet", sum(group_rows), sum(sizes), pa.schema([]), tuple(group_rows),
                        tuple(sizes))


@given(st.lists(st.integers(0, 400), min_size=1, max_size=12), st.integers(1, 300), st.integers(100, 5000))
def test_pieces_cover_the_file_in_order_within_the_bounds(group_rows: list[int], rows: int, nbytes: int) -> None:
    shard = _shard(group_rows)
    pieces = grouping.pieces_of(shard, rows=rows, nbytes=nbytes)
    assert pieces[0].start == 0 and pieces[-1].stop == shard.rows
    assert all(a.stop == b.start for a, b in zip(pieces, pieces[1:]))
    if shard.rows <= rows and shard.nbytes <= nbytes:
        assert len(pieces) == 1 and pieces[0].whole
        return
    bounds = set(np.cumsum([0, *group_rows]).tolist())
    for p in pieces:
        assert p.rows <= rows and 10 * p.rows <= nbytes + 10  # a row range's rows are rounded up
        inside = [b for b in bounds if p.start < b < p.stop]
        assert not inside or p.start in bounds  # a run of whole groups, or a range inside one group
    small = _shard([5])
    groups = grouping.partitions([shard, small], rows=rows, nbytes=nbytes)
    assert [p for g in groups for p in g] == [*pieces, *grouping.pieces_of(small, rows=rows, nbytes=nbytes)]
    assert all(sum(p.rows for p in g) <= rows or len(g) == 1 for g in groups)


def _filled(pieces: list[shards.Piece], rows: int, nbytes: int) -> list[list[shards.Piece]]:
    """The plain reading: consecutive pieces, each partition filled up to the bounds."""
    groups: list[list[shards.Piece]] = []
    for p in pieces:
        size = p.shard.nbytes * p.rows // max(p.shard.rows, 1)
        g = groups[-1] if groups else None
        if g is None or (sum(q.rows for q in g) + p.rows > rows or
                         sum(q.shard.nbytes * q.rows // max(q.shard.rows, 1) for q in g) + size > nbytes):
            groups.append([p])
        else:
            g.append(p)
    return groups


@given(st.lists(st.tuples(st.integers(1, 300), st.integers(1, 3)), min_size=1, max_size=25), st.integers(1, 400),
       st.integers(50, 8000))
def test_partitions_are_the_fewest_and_even(files: list[tuple[int, int]], rows: int, nbytes: int) -> None:
    """As many partitions as filling each up to the bounds makes (more, up to `MIN_PARTITIONS`, for an
    input above the bounds that makes fewer), every one within the bounds, the pieces in order, and
    none larger than the largest of the filled ones."""
    found = [_shard([r] * g) for r, g in files]
    pieces = [p for s in found for p in grouping.pieces_of(s, rows=rows, nbytes=nbytes)]
    groups = grouping.partitions(found, rows=rows, nbytes=nbytes)
    filled = _filled(pieces, rows, nbytes)
    assert [p for g in groups for p in g] == pieces or len(groups) > len(filled)  # made under a smaller bound
    assert len(groups) >= len(filled)
    assert len(groups) == len(filled) or (len(filled) < MIN_PARTITIONS and sum(s.rows for s in found) > rows)
    assert all(len(g) == 1 or (sum(p.rows for p in g) <= rows and 10 * sum(p.rows for p in g) <= nbytes)
               for g in groups)
    assert max(sum(p.rows for p in g) for g in groups) <= max(sum(p.rows for p in g) for g in filled)


def test_shards_of_a_quarter_of_the_bound_make_even_partitions() -> None:
    """16 shards of 12,750 rows (the whole-job benchmark's 204,000 documents) make four partitions
    of four shards for two workers, not three of five and one of one."""
    found = [_shard([12_750]) for _ in range(16)]
    assert [len(g) for g in grouping.partitions(found)] == [4, 4, 4, 4]
    assert [len(g) for g in _filled([p for s in found for p in grouping.pieces_of(s)], 65_536, 128 * 2**20)] == \
        [5, 5, 5, 1]


def test_a_small_input_is_at_least_four_partitions() -> None:
    """Under the default bound, 16 shards of 12,750 rows would fit in three partitions, two workers then
    waiting on the third; they are four (`MIN_PARTITIONS`). Fewer pieces than that: a partition each.
    Within one partition's bound: one. Enough rows for more: as few as the bound allows."""
    found = [_shard([12_750]) for _ in range(16)]
    assert len(_filled([p for s in found for p in grouping.pieces_of(s)], grouping.PARTITION_ROWS, 128 * 2**20)) == 3
    assert [len(g) for g in grouping.partitions(found)] == [4, 4, 4, 4]
    assert [len(g) for g in grouping.partitions(found[:3])] == [3]
    assert [len(g) for g in grouping.partitions(found[:3], rows=20_000)] == [1, 1, 1]
    many = [_shard([50_000]) for _ in range(20)]
    assert [len(g) for g in grouping.partitions(many)] == [2] * 10


def test_the_default_bound_reads_common_shard_shapes_whole() -> None:
    """By default a shard of 50,000 documents in two row groups, of one row group of 62,500 (of short
    texts, or of 1,200-byte ones: 75 MB), or of one 128 MiB row group (parquet-mr's) of long texts is
    read whole (no row ranges decoded from the group's start, no parts to join), two of the first
    in one partition; one
    of 150,000 short texts, or of 200 MiB, in one row group is two row ranges."""
    for groups, nbytes in (([25_000, 25_000], 20 * 2**20), ([62_500], 20 * 2**20), ([62_500], 75_000_000),
                           ([13_000], 128 * 2**20)):
        shard = _shard(groups, [nbytes] * len(groups))
        assert grouping.pieces_of(shard) == [shards.Piece(shard, 0, shard.rows)]
        whole = shards.Piece(shard, 0, shard.rows)
        together = 2 * shard.rows <= grouping.PARTITION_ROWS and 2 * shard.nbytes <= grouping.PARTITION_BYTES
        assert grouping.partitions([shard, shard]) == ([[whole, whole]] if together else [[whole]] * 2)
    for groups, nbytes in (([150_000], 40 * 2**20), ([20_000], 200 * 2**20)):
        big = _shard(groups, [nbytes])
        half = groups[0] // 2
        assert [(p.start, p.stop) for p in grouping.pieces_of(big)] == [(0, half), (half, groups[0])]


def _corpus(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame[["id", "text"]].copy()
    out["when"] = pd.to_datetime("2024-01-01") + pd.to_timedelta(np.arange(len(out)), unit="min")
    out["tags"] = [[f"t{i % 3}"] * (i % 4) for i in range(len(out))]
    out["meta"] = [{"n": i, "src": None if i % 5 == 0 else f"s{i % 7}"} for i in range(len(out))]
    return out.reset_index(drop=True)


def _rows(out: Path) -> pa.Table:
    files = sorted(f for f in glob.glob(str(out / "**" / "*.parquet"), recursive=True)
                   if "/_" not in f[len(str(out)):])
    return pa.concat_tables([pq.read_table(f) for f in files]).sort_by("id")


def _removed(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "_report" / "removed.parquet").sort_values("id").reset_index(drop=True)


def _index_points_at_its_rows(out: Path) -> None:
    """Each indexed document's (file, row) in OUTPUT holds that document."""
    docs = pd.concat([pd.read_parquet(f) for f in sorted((out / "_index" / "docs").glob("*.parquet"))])
    docs = docs[docs["file"].notna()]
    assert len(docs)
    for name, rows in docs.groupby("file", observed=True):
        ids = pq.read_table(out / str(name), columns=["id"]).column("id").to_pylist()
        assert [ids[int(r)] for r in rows["row"]] == rows["id"].tolist()


@pytest.fixture(scope="module")
def many_files_output(skewed_frame: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus written as files of 100 rows, and the output of a run on them (the same for every
    example of the test below: run once)."""
    tmp = tmp_path_factory.mktemp("many")
    frame = _corpus(skewed_frame)
    (tmp / "many").mkdir()
    for i, lo in enumerate(range(0, len(frame), 100)):
        frame.iloc[lo:lo + 100].to_parquet(tmp / "many" / f"part-{i:02d}.parquet", index=False)
    run(str(tmp / "many"), str(tmp / "out-many"), params=PARAMS)
    return tmp / "out-many"


@settings(max_examples=4, deadline=None)
@given(st.integers(20, 200), st.integers(60, 400))
def test_one_file_split_by_row_groups_gives_what_many_files_give(skewed_frame: pd.DataFrame, tmp_path_factory,
                                                                 many_files_output: Path, group: int,
                                                                 bound: int) -> None:
    tmp = tmp_path_factory.mktemp("split")
    frame = _corpus(skewed_frame)
    (tmp / "one").mkdir()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp / "one" / "all.parquet", row_group_size=group)
    one = run(str(tmp / "one"), str(tmp / "out-one"), params=PARAMS, partition_rows=bound)
    assert one["partitions"] >= -(-len(frame) // max(bound, group)) and one["input_files"] == 1
    assert _rows(tmp / "out-one").equals(_rows(many_files_output))
    pd.testing.assert_frame_equal(_removed(tmp / "out-one"), _removed(many_files_output))
    # one output file, its rows in the input's order
    written = pq.read_table(tmp / "out-one" / "all.parquet")
    order = {i: n for n, i in enumerate(frame["id"])}
    assert [order[i] for i in written.column("id").to_pylist()] == sorted(order[i] for i in written.column("id").to_pylist())
    assert not (tmp / "out-one" / "_pieces").exists()
    _index_points_at_its_rows(tmp / "out-one")


def test_a_row_group_above_the_bound_is_read_in_row_ranges(skewed_frame: pd.DataFrame, tmp_path: Path) -> None:
    frame = _corpus(skewed_frame)
    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "in" / "all.parquet")  # one row group
    whole = run(str(tmp_path / "in"), str(tmp_path / "whole"), params=PARAMS)
    split = run(str(tmp_path / "in"), str(tmp_path / "split"), params=PARAMS, partition_rows=100)
    assert whole["partitions"] == 1 and split["partitions"] == -(-len(frame) // 100)
    assert _rows(tmp_path / "split").equals(_rows(tmp_path / "whole"))
    pd.testing.assert_frame_equal(_removed(tmp_path / "split"), _removed(tmp_path / "whole"))
    assert split["output_rows"] == whole["output_rows"] < len(frame)
    _index_points_at_its_rows(tmp_path / "split")


def test_a_later_run_against_a_split_file_output_finds_its_documents(skewed_frame: pd.DataFrame, tmp_path: Path) -> None:
    frame = _corpus(skewed_frame)
    (tmp_path / "old").mkdir()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp_path / "old" / "all.parquet", row_group_size=50)
    run(str(tmp_path / "old"), str(tmp_path / "r1"), params=PARAMS, partition_rows=120)
    new = frame.iloc[:40].assign(id=[f"new-{i}" for i in range(40)])
    (tmp_path / "new").mkdir()
    new.to_parquet(tmp_path / "new" / "crawl.parquet", index=False)
    got = run(str(tmp_path / "new"), str(tmp_path / "r2"), params=PARAMS, against=[str(tmp_path / "r1")])
    assert got["output_rows"] == 0  # every new document is a copy of one the earlier output holds
    removed = _removed(tmp_path / "r2")
    kept = set(pq.read_table(tmp_path / "r1" / "all.parquet", columns=["id"]).column("id").to_pylist())
    assert set(removed["root"]) <= kept


@pytest.mark.parametrize("start,stop", [(0, 7), (5, 60), (49, 51), (100, 562)])
def test_reading_rows_of_a_file_gives_those_rows(tmp_path: Path, start: int, stop: int) -> None:
    table = pa.table({"id": pa.array(range(562)), "text": pa.array([f"t{i}" for i in range(562)])})
    pq.write_table(table, tmp_path / "f.parquet", row_group_size=50)
    got = reads.read_table(str(tmp_path / "f.parquet"), ["text"], start, stop)
    assert got.column("text").to_pylist() == [f"t{i}" for i in range(start, stop)]
    assert reads.read_table(str(tmp_path / "f.parquet"), None, start, stop).equals(table.slice(start, stop - start))


@pytest.mark.parametrize("with_dictionary", [False, True])
def test_parts_written_plain_join_to_the_same_bytes(tmp_path: Path, with_dictionary: bool) -> None:
    """The parts of a split file are written plain when they can be (no dictionary column): the file
    joined from them has the bytes of the file joined from parts written as whole files are, with the
    column types corpora have."""
    import fsspec

    n = 300
    columns = {
        "id": pa.array([f"doc-{i}" if i % 17 else None for i in range(n)], pa.large_string()),
        "text": pa.array([" ".join(f"w{(i * j) % 97}" for j in range(i % 40)) for i in range(n)], pa.large_string()),
        "when": pa.array(pd.date_range("2024-01-01", periods=n, freq="h", tz="UTC")),
        "tags": pa.array([[f"t{i % 5}"] * (i % 3) if i % 11 else None for i in range(n)], pa.list_(pa.string())),
        "meta": pa.array([{"url": f"https://x/{i}", "score": i / 7} for i in range(n)],
                         pa.struct([("url", pa.string()), ("score", pa.float64())])),
    }
    if with_dictionary:
        columns["lang"] = pa.array([["en", "de", "fr"][i % 3] for i in range(n)]).dictionary_encode()
    table = pa.table(columns)
    fs = fsspec.filesystem("file")
    joined = {}
    for piece in (False, True):
        parts = [str(tmp_path / f"part-{piece}-{k}.parquet") for k in range(3)]
        for k, (lo, hi) in enumerate(((0, 100), (100, 230), (230, n))):
            shards.write_shard(table.slice(lo, hi - lo), fs, parts[k], piece=piece)
        compression = pq.ParquetFile(parts[0]).metadata.row_group(0).column(1).compression
        assert (compression == "UNCOMPRESSED") == (piece and not with_dictionary)
        assert shards.write_joined(fs, parts, str(tmp_path / f"joined-{piece}.parquet")) == n
        joined[piece] = (tmp_path / f"joined-{piece}.parquet").read_bytes()
    assert joined[True] == joined[False]
    assert pq.read_table(tmp_path / "joined-True.parquet").equals(table)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=30)), min_size=130, max_size=300), st.integers(1, 120),
       st.integers(1, 400), st.data())
def test_texts_of_an_earlier_output_are_taken_batch_by_batch(texts: list[str | None], group: int, batch_bytes: int,
                                                             data) -> None:
    """An --against run reads the texts of an earlier output's matched rows in batches, from the row
    groups holding them, stopping after the last: whatever the row groups and batches, the rows asked
    for (in any order, repeated) are those pyarrow reads whole."""
    import tempfile

    from dedup.storage import output_texts

    want = np.array(data.draw(st.lists(st.integers(0, len(texts) - 1), min_size=1, max_size=40)), np.int64)
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/shard.parquet"
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": pa.array(texts, pa.string())}), path,
                       row_group_size=group)
        whole = pq.read_table(path).column("text").to_pylist()
        before = output_texts.TEXT_BATCH_BYTES
        output_texts.TEXT_BATCH_BYTES = batch_bytes  # a batch of 64 rows or more
        try:
            got = output_texts.file_texts(path, "text", want)
        finally:
            output_texts.TEXT_BATCH_BYTES = before
    assert got.type == pa.large_string() and got.to_pylist() == [whole[i] for i in want]
