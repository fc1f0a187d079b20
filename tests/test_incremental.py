"""Incremental runs: OUTPUT/_index/, --against, --skip-existing, on a real cluster and real Parquet.

The reference is computed in memory, independently of the index: LSH candidates and confirmation
over (the documents the earlier runs kept, and the near duplicates they removed) + (the new
documents), pairs between two earlier documents ignored. An earlier near duplicate stands for its
cluster's root, so each component's root is the smallest root id of its earlier documents if it
has one, else its smallest id. With exact Jaccard only the earlier documents whose text is in
their output take part (a dropped duplicate's text is gone).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dedup import Params
from dedup.core.lsh import band_keys, bucket_pairs
from dedup.core.minhash import signatures
from dedup.core.near import confirm_pairs
from dedup.core.unionfind import components
from dedup.job.pipeline import run
from dedup.storage.index import INDEX_DIR, INDEX_META
from dedup.storage.safety import UsageError
from tests.conftest import ASSIGNMENTS_ONLY, DEDUP, run_command, write_shards
from tests.reference import ref_band_keys, ref_signature


def indexed(inputs: list[pd.DataFrame], outputs: list[Path], params: Params) -> pd.DataFrame:
    """(id, text, root) of what earlier runs indexed: the documents each kept (root: its own id) and
    the near duplicates each found (root: its cluster's); of those it dropped, texts from the
    inputs, and none with exact Jaccard."""
    written = pd.concat([pd.read_parquet(o)[["id", "text", "minhash_cluster"]] for o in outputs], ignore_index=True)
    found = written.rename(columns={"minhash_cluster": "root"})
    if params.confirm == "exact":
        return found.reset_index(drop=True)
    text = pd.concat(inputs, ignore_index=True).set_index("id")["text"]
    removed = pd.concat([pd.read_parquet(o / "_report" / "removed.parquet") for o in outputs], ignore_index=True)
    removed = removed[(removed["reason"] == "near_duplicate") & ~removed["id"].isin(found["id"])]
    dropped = pd.DataFrame({"id": removed["id"], "text": text.reindex(removed["id"]).to_numpy(), "root": removed["root"]})
    return pd.concat([found, dropped], ignore_index=True)


def reference(kept: pd.DataFrame, new: pd.DataFrame, params: Params) -> dict[str, str]:
    """minhash_cluster of every new document under the indexed-documents-win rule; `kept` (id,
    text, root) is what earlier runs indexed (a root of its own when it has no root column)."""
    roots = list(kept["root"]) if "root" in kept else list(kept["id"])
    ids = list(kept["id"]) + list(new["id"])
    texts = list(kept["text"]) + list(new["text"])
    sigs = signatures(texts, num_perm=params.num_perm, seed=params.seed, shingle_size=params.shingle_size,
                      shingle_unit=params.shingle_unit)
    left, right = bucket_pairs(band_keys(sigs, num_bands=params.num_bands, rows_per_band=params.rows_per_band))
    n_old = len(kept)
    mixed = (left >= n_old) | (right >= n_old)
    left, right = left[mixed], right[mixed]
    ok = confirm_pairs(left, right, params, sigs=sigs, texts=texts)
    members, labels = components(left[ok], right[ok])
    comp: dict[int, list[int]] = {}
    for m, lab in zip(members.tolist(), labels.tolist()):
        comp.setdefault(lab, []).append(m)
    root = {i: ids[i] for i in range(len(ids))}
    for group in comp.values():
        old = [roots[i] for i in group if i < n_old]
        r = min(old) if old else min(ids[i] for i in group)
        for i in group:
            root[i] = r
    return {ids[i]: root[i] for i in range(n_old, len(ids))}


@pytest.fixture(scope="module")
def split(corpus_frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """70% of the corpus as the first crawl, then two later crawls of 15% each."""
    f = corpus_frame[["id", "text"]].sample(frac=1.0, random_state=5).reset_index(drop=True)
    a, b = int(0.7 * len(f)), int(0.85 * len(f))
    return f.iloc[:a], f.iloc[a:b], f.iloc[b:]


def _clusters(out: Path) -> dict[str, str]:
    f = pd.read_parquet(out)
    return dict(zip(f["id"], f["minhash_cluster"]))


@pytest.mark.parametrize("confirm", ["estimate", "exact"])
def test_second_run_equals_reference_and_indexed_documents_survive(client, tmp_path: Path, split, confirm: str) -> None:
    first, second, _ = split
    params = Params(confirm=confirm)
    m1 = run(str(write_shards(first, tmp_path / "crawl1", 3)), str(tmp_path / "out1"), params=params)
    kept = indexed([first], [tmp_path / "out1"], params)
    assert m1["index"]["documents"] == (kept["id"] == kept["root"]).sum() == m1["output_rows"]
    # the duplicates found are indexed too (all but same-text copies inside a partition)
    assert 0 < m1["index"]["near_duplicates"] <= m1["near_duplicates_found"]
    m2 = run(str(write_shards(second, tmp_path / "crawl2", 2)), str(tmp_path / "out2"), params=params, drop=False,
             against=[str(tmp_path / "out1")])
    got = _clusters(tmp_path / "out2")
    want = reference(kept, second, params)
    assert got == want
    of_old = sum(1 for r in want.values() if r in set(kept["root"]))
    assert of_old > 10  # the split leaves many new documents near a kept one
    assert m2["near_duplicates_of_indexed"] == of_old
    assert m2["near_duplicates_found"] == sum(1 for i, r in want.items() if i != r)
    assert m2["against"] == [str((tmp_path / "out1").resolve())]
    # the first output is untouched and not read again: its shards have the same bytes
    assert sorted(p.name for p in (tmp_path / "out1").glob("*.parquet")) == ["shard-00.parquet", "shard-01.parquet",
                                                                             "shard-02.parquet"]
    # removed.parquet names the indexed root
    removed = pd.read_parquet(tmp_path / "out2" / "_report" / "removed.parquet")
    assert dict(zip(removed["id"], removed["root"])) == {i: r for i, r in want.items() if i != r}


def test_index_round_trip_through_a_third_run(client, tmp_path: Path, split) -> None:
    first, second, third = split
    params = Params()
    run(str(write_shards(first, tmp_path / "c1", 2)), str(tmp_path / "out1"), params=params)
    m2 = run(str(write_shards(second, tmp_path / "c2", 2)), str(tmp_path / "out2"), params=params,
             against=[str(tmp_path / "out1")])
    meta2 = json.loads((tmp_path / "out2" / INDEX_DIR / INDEX_META).read_text())
    assert [s["url"] for s in meta2["sources"]] == [str((tmp_path / "out1" / INDEX_DIR).resolve())]
    assert meta2["documents"] == m2["output_rows"]
    # out2's index references out1's: giving out2 alone compares with both
    m3 = run(str(write_shards(third, tmp_path / "c3", 2)), str(tmp_path / "out3"), params=params, drop=False,
             against=[str(tmp_path / "out2")], **ASSIGNMENTS_ONLY)
    kept = indexed([first, second], [tmp_path / "out1", tmp_path / "out2"], params)
    assert _clusters(tmp_path / "out3") == reference(kept, third, params)
    assert m3["indexed_documents"] == (kept["id"] == kept["root"]).sum()
    # naming both (the chain and its start) is the same index, read once
    m3b = run(str(tmp_path / "c3"), str(tmp_path / "out3b"), params=params, drop=False,
              against=[str(tmp_path / "out1"), str(tmp_path / "out2")], **ASSIGNMENTS_ONLY)
    assert m3b["indexed_documents"] == m3["indexed_documents"]
    assert _clusters(tmp_path / "out3b") == _clusters(tmp_path / "out3")
    # the near duplicates of each earlier output: new documents whose cluster is named by a document it kept
    owner = {i: k for k, frame in enumerate((first, second)) for i in frame["id"]}
    tagged = pd.read_parquet(tmp_path / "out3b")
    joined = [owner[c] for i, c in zip(tagged["id"], tagged["minhash_cluster"]) if c in owner]
    by_output = {e["output"]: e["near_duplicates"] for e in m3b["earlier_outputs"]}
    assert [by_output[str(tmp_path / f"out{k}")] for k in (1, 2)] == [joined.count(0), joined.count(1)]
    assert sum(by_output.values()) == m3b["near_duplicates_of_indexed"] and min(by_output.values()) > 0


def test_mismatched_parameters_ids_and_paths_are_refused_before_any_work(client, tmp_path: Path, split) -> None:
    first, second, _ = split
    run(str(write_shards(first, tmp_path / "c1", 1)), str(tmp_path / "out1"))
    src = str(write_shards(second, tmp_path / "c2", 1))
    with pytest.raises(UsageError, match=r"num_perm=128.*this run has num_perm=64"):
        run(src, str(tmp_path / "o"), params=Params(num_perm=64, num_bands=8), against=[str(tmp_path / "out1")])
    with pytest.raises(UsageError, match=r"shingle_unit='word'.*shingle_unit='char'"):
        run(src, str(tmp_path / "o"), params=Params(shingle_unit="char"), against=[str(tmp_path / "out1")])
    with pytest.raises(UsageError, match="not a dedup output"):
        run(src, str(tmp_path / "o"), against=[str(tmp_path / "c1")])
    with pytest.raises(UsageError, match="inside"):
        run(src, str(tmp_path / "out1" / "more"), against=[str(tmp_path / "out1")])
    run(src, str(tmp_path / "noindex"), write_index=False)
    with pytest.raises(UsageError, match="has no _index"):
        run(src, str(tmp_path / "o"), against=[str(tmp_path / "noindex")])
    ints = pd.DataFrame({"id": np.arange(3, dtype=np.int64), "text": ["a b c"] * 3})
    with pytest.raises(UsageError, match=r"ids are strings \(.*\), this input's are integers \(int64\)"):
        run(str(write_shards(ints, tmp_path / "ints", 1)), str(tmp_path / "o"), against=[str(tmp_path / "out1")])
    assert not (tmp_path / "o").exists()


def test_existing_ids_are_refused_or_skipped(client, tmp_path: Path, split, caplog: pytest.LogCaptureFixture) -> None:
    """Ids an earlier run read are refused, or skipped with --skip-existing; and a crawl of copies of
    published documents keeps none: its index holds no kept document, and neither the log, the
    manifest nor the summary divides its bytes by zero documents."""
    import logging

    from dedup.cli import _summary

    first, second, _ = split
    run(str(write_shards(first, tmp_path / "c1", 1)), str(tmp_path / "out1"))
    kept = pd.read_parquet(tmp_path / "out1")
    dropped = first[~first["id"].isin(kept["id"])]
    assert len(dropped) >= 2
    seen = pd.concat([kept.iloc[:2][["id", "text"]], dropped.iloc[:2]], ignore_index=True)  # read before, kept or not
    again = pd.concat([second, seen], ignore_index=True)
    src = str(write_shards(again, tmp_path / "c2", 2))
    with pytest.raises(ValueError, match=r"4 document id\(s\) in column 'id' were already read by an earlier run.*"
                                         r"--skip-existing"):
        run(src, str(tmp_path / "o"), against=[str(tmp_path / "out1")])
    assert not (tmp_path / "o").exists()
    m = run(src, str(tmp_path / "o"), against=[str(tmp_path / "out1")], skip_existing=True)
    assert m["skipped_existing"] == 4
    out = pd.read_parquet(tmp_path / "o")
    assert not set(out["id"]) & set(seen["id"])
    assert m["input_rows"] == m["output_rows"] + m["near_duplicates_dropped"] + m["skipped_existing"]
    removed = pd.read_parquet(tmp_path / "o" / "_report" / "removed.parquet")
    assert set(removed[removed["reason"] == "already_indexed"]["id"]) == set(seen["id"])
    copies = first.iloc[:20].assign(id=[f"copy-{i}" for i in range(20)])
    with caplog.at_level(logging.INFO, logger="dedup"):
        m = run(str(write_shards(copies, tmp_path / "c3", 1)), str(tmp_path / "copies"), against=[str(tmp_path / "out1")])
    assert m["output_rows"] == 0 and m["near_duplicates_of_indexed"] == 20
    assert {r["removed"] for r in m["what_if"]} == {20}  # copies of published documents go at any threshold
    assert m["index"]["documents"] == 0 and m["index"]["bytes_per_document"] is None and m["index"]["bytes"] > 0
    assert any("index of no kept document (20 near duplicates)" in r.getMessage() for r in caplog.records)
    line = next(x for x in _summary(m).splitlines() if x.startswith("index"))
    assert "(0 kept documents" in line and "bytes each" not in line


def test_cli_against_and_index_size(tmp_path: Path, split) -> None:
    first, second, _ = split
    env_cmd = [sys.executable, "-m", "dedup", "near"]
    r1 = run_command([*env_cmd, str(write_shards(first, tmp_path / "c1", 2)), str(tmp_path / "out1"),
                         "--n-workers", "1", "--no-report"], timeout=300)
    assert r1.returncode == 0, r1.stderr
    assert "index " in r1.stdout and "bytes each" in r1.stdout
    r2 = run_command([*env_cmd, str(write_shards(second, tmp_path / "c2", 1)), str(tmp_path / "out2"),
                         "--n-workers", "1", "--against", str(tmp_path / "out1"), "--no-report"],
                     timeout=300)
    assert r2.returncode == 0, r2.stderr
    assert "of earlier outputs" in r2.stdout
    m = json.loads((tmp_path / "out2" / "_dedup.json").read_text())
    assert m["near_duplicates_of_indexed"] > 0
    bad = run_command([*env_cmd, str(tmp_path / "c2"), str(tmp_path / "out3"), "--against", str(tmp_path / "out1"),
                          "--num-perm", "64"], timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "num_perm=128" in bad.stderr and "num_perm=64" in bad.stderr


def test_docs_read_by_row_group_give_the_same_answer(tmp_path: Path, split, monkeypatch) -> None:
    """Small row groups (in-process scheduler, so the setting reaches the writer): only the groups
    holding needed documents are read, and the answer is the reference's."""
    import dask
    import pyarrow.parquet as pq

    from dedup.storage import index_files

    monkeypatch.setattr(index_files, "DOCS_ROW_GROUP", 8)
    first, second, _ = split
    with dask.config.set({"scheduler": "sync", "dataframe.shuffle.method": "tasks"}):
        run(str(write_shards(first, tmp_path / "c1", 2)), str(tmp_path / "out1"))
        docs = pq.ParquetFile(tmp_path / "out1" / INDEX_DIR / "docs" / "part-000000.parquet")
        assert docs.metadata.num_row_groups > 10
        kept = indexed([first], [tmp_path / "out1"], Params())
        run(str(write_shards(second, tmp_path / "c2", 1)), str(tmp_path / "out2"), drop=False,
            against=[str(tmp_path / "out1")])
    assert _clusters(tmp_path / "out2") == reference(kept, second, Params())


def test_a_new_document_near_only_a_dropped_duplicate_joins_its_cluster(client, tmp_path: Path) -> None:
    """r <- d (dropped by the first run) <- n: n is near d (estimate 0.87) but not r (0.73), and shares
    no bucket with r. One run over all three puts n in r's cluster; so does a run over n against the
    first output, whose index keeps d as a stand-in for r (or d itself, tagged, when the first run
    keeps its duplicates), and n's similarity to its survivor is to r, read from the earlier output
    beside d. With exact Jaccard a dropped d's text is gone with it, and n stays."""
    rng = np.random.default_rng(8)
    words = [f"w{x}" for x in rng.integers(0, 10**6, 200)]

    def edit(ws: list[str], lo: int, tag: str) -> list[str]:
        return ws[:lo] + [f"{tag}{i}" for i in range(8)] + ws[lo + 8:]

    r, d = words, edit(words, 10, "x")
    n = edit(d, 180, "y")
    filler = [" ".join(f"f{j}v{i}" for i in range(40)) for j in range(6)]
    first = pd.DataFrame({"id": ["a-root", "b-dup", *[f"c{j}" for j in range(6)]],
                          "text": [" ".join(r), " ".join(d), *filler]})
    second = pd.DataFrame({"id": ["z-new", "z-other"], "text": [" ".join(n), "an unrelated new page of other words"]})
    sig_r, sig_n = ref_signature(" ".join(r)), ref_signature(" ".join(n))
    assert not set(enumerate(ref_band_keys(sig_r))) & set(enumerate(ref_band_keys(sig_n)))
    for confirm, kept_dups, want in (("estimate", False, "a-root"), ("estimate", True, "a-root"),
                                     ("exact", False, "z-new")):
        params = Params(confirm=confirm)
        out1, out2 = tmp_path / f"{confirm}-{kept_dups}-1", tmp_path / f"{confirm}-{kept_dups}-2"
        # r and d in index partitions of their own, gathered apart (the new input has two partitions too):
        # r is read at a partition no matched band row names
        m1 = run(str(write_shards(first, tmp_path / f"{confirm}-{kept_dups}-c1", 2)), str(out1), params=params,
                 drop=not kept_dups, partition_rows=4, write_report=False)
        assert m1["partitions"] == 2
        assert set(pd.read_parquet(out1)["id"]) == set(first["id"]) - (set() if kept_dups else {"b-dup"})
        run(str(write_shards(second, tmp_path / f"{confirm}-{kept_dups}-c2", 2)), str(out2), params=params,
            drop=False, against=[str(out1)], partition_rows=1, write_index=False)
        assert _clusters(out2) == {"z-new": want, "z-other": "z-other"}
        if want == "a-root":  # scored against r itself, not d
            near = pd.read_parquet(out2 / "_report" / "removed.parquet")
            assert near["root"].tolist() == ["a-root"]
            assert near["survivor_similarity"].tolist() == [pytest.approx(np.mean(np.equal(sig_r, sig_n)), abs=1e-6)]
        if not kept_dups:  # one run over all: d and n join r either way
            every = run(str(write_shards(pd.concat([first, second]), tmp_path / f"{confirm}-all", 2)),
                        str(tmp_path / f"{confirm}-all-out"), params=params, drop=False, **ASSIGNMENTS_ONLY)
            assert every["near_duplicates_found"] == 2


@given(st.lists(st.integers(0, 40), max_size=60), st.lists(st.integers(0, 40), max_size=12), st.booleans())
def test_band_rows_are_found_by_binary_search_or_scan(column: list[int], keys: list[int], shuffled: bool) -> None:
    """The rows of an index band file holding wanted keys: a sorted file is searched, any other scanned."""
    from dedup.storage.index_lookup import _positions_of

    col = np.sort(np.array(column, dtype=np.uint64))
    if shuffled:
        col = np.random.default_rng(len(column)).permutation(col)
    want = np.unique(np.array(keys, dtype=np.uint64))
    assert _positions_of(col, want).tolist() == np.flatnonzero(np.isin(col, want)).tolist()


@given(st.integers(1, 40), st.integers(1, 40), st.data())
def test_a_range_reads_the_index_files_that_hold_its_keys(index_parts: int, parts: int, data) -> None:
    """Range m of this run's `parts` reads every index file holding one of its keys, and skips the
    key filter only for files whose every key is in the range."""
    from dedup.storage.index import BANDS, IndexPart, key_range_of

    part = IndexPart(url="idx", uid="u", partitions=1, bucket_parts=index_parts, id_parts=index_parts, documents=0,
                     output="out", text_column="text")
    keys = np.array(data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50))
                    + [0, 2**64 - 1], dtype=np.uint64)
    m = data.draw(st.integers(0, parts - 1))
    listed = {int(f.rsplit("-", 1)[1].split(".")[0]): (lo, hi, whole) for f, lo, hi, whole in part.files_for(BANDS, m, parts)}
    in_range, in_file = key_range_of(keys, parts) == m, key_range_of(keys, index_parts)
    assert set(in_file[in_range].tolist()) <= set(listed)
    for j, (lo, hi, whole) in listed.items():
        mine = keys[in_file == j]
        kept = (mine >= np.uint64(lo)) & ((mine < np.uint64(hi)) if hi < 2**64 else True)
        assert kept.tolist() == in_range[in_file == j].tolist()  # the filter keeps exactly the range's keys
        if whole:
            assert in_range[in_file == j].all()


@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(1, 8), st.data())
def test_gathered_index_partitions_hold_each_indexed_key_once(sizes: list[int], first: int, data) -> None:
    """A run gathers the index partitions a few at a time: each is gathered by exactly one of the
    run's partitions after its own, the one its keys are placed in; the run's own keys stay put."""
    from dedup.partition.keyspace import ROW_BITS
    from dedup.storage.index import IndexPart
    from dedup.storage.index_layout import Layout

    parts = [IndexPart(url=f"idx{i}", uid=str(i), partitions=n, bucket_parts=1, id_parts=1, documents=0,
                       output="out", text_column="text") for i, n in enumerate(sizes)]
    layout = Layout.gathering(parts, first)
    held = sum(sizes)
    assert layout.total - first == -(-held // layout.group) <= max(first, 1)
    owner = {q: g for g in range(first, layout.total) for q in layout.gathered(g)}
    assert sorted(owner) == list(range(first, first + held))
    assert sum(len(layout.gathered(g)) for g in range(first, layout.total)) == held
    rows = data.draw(st.lists(st.integers(0, 1000), min_size=1, max_size=20))
    for q in list(range(first + held)):
        keys = (np.int64(q) << ROW_BITS) | np.array(rows, dtype=np.int64)
        assert set(layout.placement(keys).tolist()) == {owner.get(q, q)}


def _as_older_format(out: Path, older: Path, fmt: int) -> int:
    """`out`'s index rewritten in `older` (a copy of `out`) as index format `fmt` held it, from what
    the plain-Python reference computes: before format 8, no cluster counts; before format 7, band
    files of (band, whole key, doc, text hashes), each key from the signature of its document; before format 6, a signature in every
    docs-file row (format 6 on, those of the documents whose text OUTPUT holds are left to it); before
    format 3, no text hashes in the band files; before format 4, no stamps (else the rewritten files
    stamped again). The number of signatures the docs files held (the dropped documents')."""
    import shutil
    import struct

    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dedup.storage import stamps
    from dedup.storage.index import key_step
    from tests.reference import ref_band_keys, ref_signature

    shutil.copytree(out, older)
    index = older / INDEX_DIR
    meta = json.loads((index / INDEX_META).read_text())
    assert meta["format"] == 8
    shutil.rmtree(index / "sizes")  # cluster counts: format 8 on
    meta["files"] = {f: v for f, v in meta["files"].items() if not f.startswith(f"{INDEX_DIR}/sizes/")}
    texts = {f.name: pq.read_table(f, columns=["text"]).column(0).to_pylist() for f in older.glob("*.parquet")}
    held, sig_of, tkeys_of = 0, {}, {}
    for docs in sorted((index / "docs").glob("*.parquet")):
        table = pq.read_table(docs)
        files, rows = table.column("file").to_pylist(), table.column("row").to_pylist()
        sig = table.column("signature")
        has = sig.is_valid().to_pylist()
        assert has == [f is None for f in files]  # a signature only where OUTPUT does not hold the text
        held += sum(has)
        every = [s if ok else struct.pack("<128I", *ref_signature(texts[f][r]))
                 for s, ok, f, r in zip(sig.to_pylist(), has, files, rows)]
        for d, s, t, t2 in zip(table.column("doc").to_pylist(), every, table.column("tkey").to_pylist(),
                               table.column("tkey2").to_pylist()):
            sig_of[d], tkeys_of[d] = list(struct.unpack("<128I", s)), (t, t2)
        if fmt < 6:
            at = table.schema.get_field_index("signature")
            pq.write_table(table.set_column(at, "signature", pa.array(every, sig.type)), docs)
    step = key_step(meta["bucket_partitions"])
    for bands in (index / "bands").glob("*.parquet"):
        m = int(bands.stem.rsplit("-", 1)[1])
        table = pq.read_table(bands)
        assert table.column_names == ["key", "doc"] and table.schema.field("key").type == pa.uint32()
        rows = sorted({(k, b, d) for p, d in zip(table.column("key").to_pylist(), table.column("doc").to_pylist())
                       if d in sig_of  # a row of no docs-file document is never matched
                       for b, k in enumerate(ref_band_keys(sig_of[d])) if k >> 32 == p and k // step == m})
        whole = {"band": pa.array([b for _, b, _ in rows], pa.uint8()), "key": pa.array([k for k, _, _ in rows], pa.uint64()),
                 "doc": pa.array([d for _, _, d in rows], pa.int64())}
        if fmt >= 3:
            whole["tkey"] = pa.array([tkeys_of[d][0] for _, _, d in rows], pa.uint64())
            whole["tkey2"] = pa.array([tkeys_of[d][1] for _, _, d in rows], pa.uint64())
        pq.write_table(pa.table(whole), bands)
    body = {k: v for k, v in meta.items() if k not in ("files", "checksum")}
    if fmt >= 4:
        body["files"] = stamps.stamps(fsspec.filesystem("file"), str(older), sorted(meta["files"]))
        body = stamps.seal({**body, "format": fmt})
    (index / INDEX_META).write_text(json.dumps({**body, "format": fmt}))
    return held


def test_an_index_of_an_older_format_gives_the_same_decisions(client, tmp_path: Path, split) -> None:
    """Format 7 band files hold key prefixes, and its docs files the signatures of the near duplicates
    a run dropped only; a later run confirms every prefix match by the document's signature, and
    computes the missing signatures from OUTPUT's texts. The same index as format 6 held it (whole
    keys and text hashes in the band files: the matched rows join the buckets as read) and as format
    2 (every signature stored, as up to format 5; whole keys, no text hashes: a detour through the
    index partitions) reaches the same decisions."""
    first, second, _ = split
    run(str(write_shards(first, tmp_path / "c1", 2)), str(tmp_path / "out1"), write_report=False)
    src = str(write_shards(second, tmp_path / "c2", 2))
    m7 = run(src, str(tmp_path / "new7"), drop=False, against=[str(tmp_path / "out1")], **ASSIGNMENTS_ONLY)
    for fmt in (6, 2):
        assert _as_older_format(tmp_path / "out1", tmp_path / f"old{fmt}", fmt) > 0
        m = run(src, str(tmp_path / f"new{fmt}"), drop=False, against=[str(tmp_path / f"old{fmt}")], **ASSIGNMENTS_ONLY)
        assert _clusters(tmp_path / f"new{fmt}") == _clusters(tmp_path / "new7"), fmt
        assert m["near_duplicates_of_indexed"] == m7["near_duplicates_of_indexed"] > 10
        for count in ("candidate_pairs", "confirmed_pairs", "same_text_pairs"):
            assert m[count] == m7[count], (fmt, count)
        unverified = [w for w in m["warnings"] if "records no checksums" in w]  # format 3 and older: a warning kept
        assert len(unverified) == (fmt < 4) and all(f"format {fmt}" in w for w in unverified), m["warnings"]


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)), max_size=60))
def test_index_files_sort_like_a_lexsort_of_every_row(rows: list[tuple[int, int]]) -> None:
    """Index files are sorted by their columns in order (band files by key prefix, then doc; ties
    re-sorted only where the first column repeats): the same order as numpy's lexsort, so their
    bytes never depend on the order rows arrived in."""
    from dedup.core.order import lex_order as _sort_order

    key = np.array([r[0] for r in rows], dtype=np.uint64)
    band = np.array([r[1] for r in rows], dtype=np.uint8)
    doc = np.arange(len(rows), dtype=np.int64)[::-1].copy()
    assert _sort_order([key, band, doc]).tolist() == np.lexsort((doc, band, key)).tolist()
    assert _sort_order([doc]).tolist() == np.argsort(doc, kind="stable").tolist()  # one unique column
    perm = np.random.default_rng(len(rows)).permutation(len(rows))  # the rows arriving in another order
    assert doc[_sort_order([key, band, doc])].tolist() == doc[perm][_sort_order([key[perm], band[perm], doc[perm]])].tolist()
    # id files: two ids sharing a 64-bit hash are ordered by the id itself
    h = key.copy()
    ids = np.array([f"id{d}" for d in doc], dtype=object)
    assert ids[_sort_order([h, ids])].tolist() == ids[perm][_sort_order([h[perm], ids[perm]])].tolist()



def test_releases_kept_with_their_duplicates_chain_exactly(client, tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    """`--confirm exact --against` a chain of releases each kept with `--keep-duplicates`: an earlier near
    duplicate (its text in its output) stands for its root, which is read beside it. Its root was not read,
    and its key resolved to another document: a new document joined a cluster of another family (exact
    Jaccard 0 with its root) and `survivor_similarity` read 0.0. Checked against the texts themselves:
    every member's root is of its family, and each removed row's similarity is its exact Jaccard to it."""
    from tests.reference import ref_shingles

    frame = corpus_frame.sample(frac=1, random_state=3).reset_index(drop=True)
    n, releases = len(frame), 4
    params, against = Params(confirm="exact"), []
    for i in range(releases):
        part = frame.iloc[i * n // releases:(i + 1) * n // releases]
        out = tmp_path / f"release{i}"
        run(str(write_shards(part, tmp_path / f"crawl{i}", 2)), str(out), params=params, drop=False,
            against=against, write_report=i == releases - 1)
        against = [str(out)]
    family, shingles = dict(zip(frame["id"], frame["family"])), dict(zip(frame["id"], frame["text"].map(
        lambda t: ref_shingles(t, 5))))
    last = pd.read_parquet(out)
    assert (last["minhash_cluster"] != last["id"]).sum() > 20
    assert [i for i, r in zip(last["id"], last["minhash_cluster"]) if family[i] != family[r]] == []
    removed = pd.read_parquet(out / "_report" / "removed.parquet")
    jaccard = [len(shingles[i] & shingles[r]) / len(shingles[i] | shingles[r]) for i, r in zip(removed["id"], removed["root"])]
    assert removed["survivor_similarity"].to_numpy() == pytest.approx(np.asarray(jaccard), abs=1e-6)


def test_an_earlier_output_patched_in_place_is_refused_naming_the_row(tmp_path: Path) -> None:
    """A byte of one text changed in an earlier OUTPUT's shard, its size and footer as they were (bit rot,
    a byte-patching tool): the stamps cannot see it, but the text read to compare a new document with is
    checked against the text hashes the index recorded. Refused (exit 2), naming the file and the row."""
    marker = "qxjzvwkt"
    base = " ".join(f"word{i % 37} tok{i}" for i in range(60))
    first = pd.DataFrame({"id": [f"a{i}" for i in range(6)],
                          "text": [f"{base} {marker} end" if i == 3 else f"{'z' * (i % 2)}page {i} " +
                                   " ".join(f"w{i}x{j}" for j in range(50)) for i in range(6)]})
    second = pd.DataFrame({"id": ["b0", "b1"], "text": [f"{base} {marker} end again", "a new page of other words"]})
    write_shards(first, tmp_path / "crawl1", 1)
    write_shards(second, tmp_path / "crawl2", 1)
    ok = run_command([*DEDUP, "run", str(tmp_path / "crawl1"), str(tmp_path / "r1"), "--threads", "1"], timeout=120)
    assert ok.returncode == 0, ok.stderr
    (shard,) = [p for p in (tmp_path / "r1").glob("*.parquet")]
    data = shard.read_bytes()
    assert data.count(marker.encode()) == 1  # in the data page only (neither the smallest text nor the largest)
    footer = pq.ParquetFile(shard).metadata.to_dict()
    shard.write_bytes(data.replace(marker.encode(), b"qxjzvwkX"))
    assert pq.ParquetFile(shard).metadata.to_dict() == footer and shard.stat().st_size == len(data)
    assert marker not in " ".join(pd.read_parquet(shard)["text"])  # the text itself changed, silently
    got = run_command([*DEDUP, "run", str(tmp_path / "crawl2"), str(tmp_path / "r2"), "--threads", "1",
                       "--against", str(tmp_path / "r1")], timeout=120)
    assert got.returncode == 2, got.stderr
    assert f"row 3 of {shard.name} no longer holds the text its index describes" in got.stderr, got.stderr
    assert not (tmp_path / "r2").exists()


def test_a_release_given_twice_or_with_its_copy_counts_once_and_is_shown_as_given(tmp_path: Path) -> None:
    """`--against r1 --against r1-copy` (a copy: the same index) read the release twice and counted its
    documents twice; now once, with a warning. The page and the manifest name an earlier output as the
    user gave it (a relative path), not as an absolute one."""
    import shutil

    base = " ".join(f"word{i}" for i in range(40))
    first = pd.DataFrame({"id": ["a0", "a1", "a2"], "text": [base, "other words entirely here now", "a third page"]})
    second = pd.DataFrame({"id": ["b0", "b1"], "text": [base + " again", "a brand new page of words"]})
    write_shards(first, tmp_path / "crawl1", 1)
    write_shards(second, tmp_path / "crawl2", 1)

    def dedup(*args: str) -> subprocess.CompletedProcess[str]:
        got = run_command([*DEDUP, "run", *args, "--threads", "1"], timeout=120, cwd=tmp_path)
        assert got.returncode == 0, got.stderr
        return got

    dedup("crawl1", "r1")
    shutil.copytree(tmp_path / "r1", tmp_path / "r1-copy")
    got = dedup("crawl2", "r2", "--against", "r1", "--against", "r1-copy", "--against", "r1")
    assert "--against r1-copy is a copy of r1 (the same release): read once" in got.stderr
    m = json.loads((tmp_path / "r2" / "_dedup.json").read_text())
    assert m["indexed_documents"] == 3 and m["against"] == ["r1"]
    assert [e["output"] for e in m["earlier_outputs"]] == ["r1"] and m["near_duplicates_of_indexed"] == 1
    page = (tmp_path / "r2" / "_report" / "index.html").read_text()
    assert "<td>r1: 3 indexed documents" in page and str(tmp_path) not in page


def test_a_release_at_another_threshold_is_refused_with_the_banding_that_works(tmp_path: Path) -> None:
    """A release made at 0.8 (16 x 8), compared at 0.7, whose banding follows the threshold (21 x 6): the
    message named a banding the user never gave. It now says why, and the flags it suggests work."""
    base = " ".join(f"word{i}" for i in range(40))
    write_shards(pd.DataFrame({"id": ["a0", "a1"], "text": [base, "other words"]}), tmp_path / "crawl1", 1)
    write_shards(pd.DataFrame({"id": ["b0"], "text": [base + " again"]}), tmp_path / "crawl2", 1)
    first = run_command([*DEDUP, "run", "crawl1", "r1", "--threads", "1"], timeout=120, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    cmd = [*DEDUP, "run", "crawl2", "r2", "--threads", "1", "--threshold", "0.7", "--against", "r1"]
    refused = run_command(cmd, timeout=120, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "the banding follows --threshold (0.7 here" in refused.stderr
    flags = refused.stderr.rsplit("give its banding: ", 1)[1].strip().rstrip(".").split()
    assert flags == ["--num-bands", "16", "--rows-per-band", "8"]
    assert run_command([*cmd, *flags], timeout=120, cwd=tmp_path).returncode == 0


@pytest.mark.parametrize(("made_by", "reason"), [
    (("run", "--dry-run"), "it is a --dry-run's output"),
    (("lines",), "it was made by `dedup lines`, which finds no near duplicates"),
    (("decontaminate", "--protected", "eval.txt", "--max-contaminated", "1"), "it was made by `dedup decontaminate`"),
    (("run", "--no-index"), "it was made with --no-index")])
def test_an_earlier_output_without_an_index_is_refused_with_its_own_reason(tmp_path: Path, made_by: tuple[str, ...],
                                                                             reason: str) -> None:
    write_shards(pd.DataFrame({"id": ["a0", "a1"], "text": ["some words here", "other words"]}), tmp_path / "c1", 1)
    write_shards(pd.DataFrame({"id": ["b0"], "text": ["new words"]}), tmp_path / "c2", 1)
    (tmp_path / "eval.txt").write_text("an eval question")
    first = run_command([*DEDUP, made_by[0], "c1", "r1", "--threads", "1", *made_by[1:]], timeout=120, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    got = run_command([*DEDUP, "run", "c2", "r2", "--threads", "1", "--against", "r1"], timeout=120, cwd=tmp_path)
    assert got.returncode == 2 and f"--against r1: it has no _index/index.json: {reason}" in got.stderr, got.stderr
