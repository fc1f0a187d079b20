"""`--keep-by COLUMN[:max|:min]`: the member of each cluster with the best value survives, ties and
nulls to the smallest id, an earlier output's document whatever; the same whatever the partitioning.
Checked against a plain-Python choice over the clusters of a run without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dedup.job.pipeline import run
from dedup.partition.features import KEEP
from dedup.partition.roots import roots_of_components
from dedup.storage.reads import keep_values
from tests.conftest import ASSIGNMENTS_ONLY, DEDUP, run_command

FIRST_INDEXED = 1_000


def _survivor(members: list[tuple[object, str, bool]], way: str) -> str:
    """The plain rule: (value, id, indexed) members; an indexed one first (smallest id), else the best
    non-null value (largest for max), then the smallest id."""
    indexed = [i for _, i, ix in members if ix]
    if indexed:
        return min(indexed)
    valued = [(v, i) for v, i, _ in members if v is not None]
    if not valued:
        return min(i for _, i, _ in members)
    best = max(v for v, _ in valued) if way == "max" else min(v for v, _ in valued)
    return min(i for v, i in valued if v == best)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(-3, 3)), st.booleans()),
                min_size=1, max_size=30),
       st.sampled_from(["max", "min"]), st.randoms())
def test_roots_follow_the_keep_rule(members: list[tuple[int, int | None, bool]], way: str, rnd: object) -> None:
    docs = [(FIRST_INDEXED + i if ix else i, lab, v, f"id-{i:03d}", ix) for i, (lab, v, ix) in enumerate(members)]
    rnd.shuffle(docs)  # type: ignore[attr-defined]
    rows = pd.DataFrame({"doc": np.array([d[0] for d in docs], np.int64), "label": np.array([d[1] for d in docs], np.int64),
                         "_id": [d[3] for d in docs],
                         KEEP: pd.array([d[2] for d in docs], dtype=pd.ArrowDtype(pa.int64()))})
    got = dict(zip(rows["doc"], roots_of_components(rows, FIRST_INDEXED, keep=way)["root"]))
    for label in {d[1] for d in docs}:
        group = [d for d in docs if d[1] == label]
        want = _survivor([(d[2], d[3], d[4]) for d in group], way)
        assert {got[d[0]] for d in group} == {want}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from([-0.0, 0.0, 1.5, None]), st.booleans()),
                min_size=1, max_size=12),
       st.sampled_from(["max", "min"]))
@example([(0, 0.0, False), (0, -0.0, False)], "max")
def test_zero_and_negative_zero_are_one_value(members: list[tuple[int, float | None, bool]], way: str) -> None:
    """-0.0 == 0.0: a tie between them goes to the smallest id, in either input order (a float column's
    values were ranked as distinct and the tie followed the order they came in). The values as a run
    reads them (`keep_values`), in each float width."""
    docs = [(FIRST_INDEXED + i if ix else i, lab, v, f"id-{i:03d}", ix) for i, (lab, v, ix) in enumerate(members)]
    for order in (docs, docs[::-1]):
        for t in (pa.float64(), pa.float32(), pa.float16()):
            read = keep_values(pa.chunked_array([pa.array([d[2] for d in order], pa.float64()).cast(t)]), t)
            rows = pd.DataFrame({"doc": np.array([d[0] for d in order], np.int64),
                                 "label": np.array([d[1] for d in order], np.int64), "_id": [d[3] for d in order],
                                 KEEP: pd.arrays.ArrowExtensionArray(read)})
            got = dict(zip(rows["doc"], roots_of_components(rows, FIRST_INDEXED, keep=way)["root"]))
            for label in {d[1] for d in docs}:
                group = [d for d in docs if d[1] == label]
                assert {got[d[0]] for d in group} == {_survivor([(d[2], d[3], d[4]) for d in group], way)}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, corpus_frame: pd.DataFrame) -> Path:
    """The corpus in 5 shards with a score (ties, nulls), a crawl time (nulls) and a source name."""
    rng = np.random.default_rng(5)
    n = len(corpus_frame)
    score = pd.array(rng.integers(0, 4, n), dtype="Int64")
    score[rng.random(n) < 0.2] = pd.NA
    crawled = pd.Series(pd.Timestamp("2024-01-01", tz="UTC") + pd.to_timedelta(rng.integers(0, 10**6, n), unit="s"))
    crawled[rng.random(n) < 0.1] = pd.NaT
    half = np.asarray(score.to_numpy(np.float32, na_value=np.nan)) / 4  # float16: Arrow cannot sort it as it is
    frame = corpus_frame.assign(score=score, half=half.astype(np.float16), crawled=crawled,
                                site=[f"site-{k}" for k in rng.integers(0, 5, n)], tags=[[f"t{k}"] for k in rng.integers(0, 3, n)])
    out = tmp_path_factory.mktemp("keep") / "in"
    out.mkdir()
    for i in range(5):
        frame.iloc[i::5].to_parquet(out / f"shard-{i}.parquet", index=False)
    return out


@pytest.fixture(scope="module")
def plain(cluster_client, shards: Path, tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """Every row of a run without --keep-by, tagged: its clusters are those of any --keep-by run."""
    out = tmp_path_factory.mktemp("plain") / "out"
    with cluster_client.as_current():
        run(str(shards), str(out), drop=False, partition_rows=100, **ASSIGNMENTS_ONLY)
    return pd.read_parquet(out)


@pytest.mark.parametrize("spec", ["score", "score:min", "crawled:max", "site:min", "half:min"])
def test_keep_by_chooses_the_survivor_the_rule_says(client, shards: Path, plain: pd.DataFrame, tmp_path: Path,
                                                    spec: str) -> None:
    column, _, way = spec.partition(":")
    way = way or "max"
    want = {}
    for _, group in plain.groupby("minhash_cluster"):
        values = [None if pd.isna(v) else float(v) if column == "half" else v for v in group[column]]
        survivor = _survivor(list(zip(values, group["id"], [False] * len(group))), way)
        want.update(dict.fromkeys(group["id"], survivor))
    run(str(shards), str(tmp_path / "kept"), drop=False, partition_rows=100, keep_by=spec, **ASSIGNMENTS_ONLY)
    kept = pd.read_parquet(tmp_path / "kept")
    assert dict(zip(kept["id"], kept["minhash_cluster"])) == want
    changed = sum(want[i] != c for i, c in zip(plain["id"], plain["minhash_cluster"]))
    assert changed > 0  # the rule chose other survivors than the smallest id
    if spec == "site:min":  # and at one partition
        run(str(shards), str(tmp_path / "whole"), drop=False, keep_by=spec, **ASSIGNMENTS_ONLY)
        whole = pd.read_parquet(tmp_path / "whole")
        assert dict(zip(whole["id"], whole["minhash_cluster"])) == want


def test_keep_by_a_missing_or_unordered_column_is_a_usage_error(shards: Path, tmp_path: Path) -> None:
    for spec, says in (("nope", "has no column 'nope'"), ("tags", "which has no order")):
        got = run_command([*DEDUP, "near", str(shards), str(tmp_path / spec), "--keep-by", spec, "--threads", "1"],
                          timeout=120)
        assert got.returncode == 2 and says in got.stderr, got.stderr
        assert not (tmp_path / spec).exists()


def test_an_earlier_outputs_document_survives_whatever_the_value(client, shards: Path, tmp_path: Path) -> None:
    """With --against, a new copy of an indexed document is removed even when its value is the best."""
    frame = pd.read_parquet(shards)
    first = tmp_path / "first"
    first.mkdir()
    frame.iloc[:300].to_parquet(first / "a.parquet", index=False)
    run(str(first), str(tmp_path / "release"), keep_by="score")
    released = set(pd.read_parquet(tmp_path / "release")["id"])
    later = tmp_path / "later"
    later.mkdir()
    copies = frame.iloc[:300][frame.iloc[:300]["id"].isin(released)].head(20)
    copies = copies.assign(id=[f"copy-{i}" for i in range(len(copies))], score=pd.array([99] * len(copies), "Int64"))
    pd.concat([copies, frame.iloc[300:400]]).to_parquet(later / "b.parquet", index=False)
    m = run(str(later), str(tmp_path / "next"), against=[str(tmp_path / "release")], keep_by="score",
            drop=False)
    out = pd.read_parquet(tmp_path / "next")
    tagged = dict(zip(out["id"], out["minhash_cluster"]))
    assert all(tagged[c] in released for c in copies["id"]), {c: tagged[c] for c in copies["id"]}
    assert m["near_duplicates_of_indexed"] >= len(copies)


def test_keep_by_a_hive_key_of_the_input_directories(client, corpus_frame: pd.DataFrame, tmp_path: Path) -> None:
    """A Hive key (`year=2024/lang=en/`) is a column for --keep-by, typed as pyarrow reads it (integers
    as integers, Hive's null as null); the shards written keep their files' columns and paths only,
    and --id-column refuses a key that every document of a directory shares."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    src = tmp_path / "in"
    frame = corpus_frame[["id", "text"]]
    years, langs = rng.choice([2023, 2024, 2025], len(frame)), rng.choice(["en", "fr", "__HIVE_DEFAULT_PARTITION__"], len(frame))
    for (year, lang), rows in frame.groupby([years, langs]):
        (src / f"year={year}" / f"lang={lang}").mkdir(parents=True)
        rows.to_parquet(src / f"year={year}" / f"lang={lang}" / "part-0.parquet", index=False)
    read = ds.dataset(src, format="parquet", partitioning="hive").to_table().to_pandas()  # pyarrow's own reading
    assert pd.api.types.is_integer_dtype(read["year"]) and read["lang"].isna().any()
    value = {col: dict(zip(read["id"], read[col])) for col in ("year", "lang")}
    for spec in ("year:max", "lang:min"):
        column, way = spec.split(":")
        run(str(src), str(tmp_path / column), drop=False, keep_by=spec, **ASSIGNMENTS_ONLY)
        kept = pd.read_parquet(tmp_path / column, columns=["id", "minhash_cluster"])  # no Hive keys: files only
        want, moved = {}, 0  # --keep-by changes which member stands for a cluster, never the clusters
        for _, group in kept.groupby("minhash_cluster"):
            members = [(None if pd.isna(value[column][i]) else value[column][i], i, False) for i in group["id"]]
            want.update(dict.fromkeys(group["id"], _survivor(members, way)))
            moved += _survivor(members, way) != min(group["id"])
        assert dict(zip(kept["id"], kept["minhash_cluster"])) == want
        assert moved > 0, spec  # the key chose other survivors than the smallest id
    written = sorted(p.relative_to(tmp_path / "year") for p in (tmp_path / "year").rglob("*.parquet")
                     if not p.relative_to(tmp_path / "year").parts[0].startswith("_"))
    assert written == sorted(p.relative_to(src) for p in src.rglob("*.parquet"))
    assert all(pq.read_schema(tmp_path / "year" / p).names == ["id", "text", "minhash_cluster"] for p in written)
    refused = run_command([*DEDUP, "near", str(src), str(tmp_path / "by-id"), "--id-column", "year", "--threads", "1"],
                          timeout=120)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "is a Hive key of the input's directories" in refused.stderr and not (tmp_path / "by-id").exists()


def test_a_hive_key_that_is_also_a_file_column_says_which_is_read(tmp_path: Path) -> None:
    """`lang=fr/` directories whose files hold a `lang` column too: --keep-by reads the files' column (as
    pyarrow does) and says so; the directories' values were ignored silently."""
    base = " ".join(f"word{i}" for i in range(40))
    src = tmp_path / "in"
    (src / "lang=fr").mkdir(parents=True)
    pd.DataFrame({"id": ["a", "b"], "text": [base, base + " more"], "lang": ["zz", "aa"]}).to_parquet(
        src / "lang=fr" / "part-0.parquet", index=False)
    got = run_command([*DEDUP, "near", str(src), str(tmp_path / "out"), "--keep-by", "lang:max", "--threads", "1"],
                      timeout=120)
    assert got.returncode == 0, got.stderr
    assert "--keep-by lang: the files' own column 'lang' is read; the directories' lang=... values" in got.stderr
    out = pd.read_parquet(tmp_path / "out" / "lang=fr" / "part-0.parquet")
    assert out["id"].tolist() == ["a"]  # "zz" beats "aa": the files' values decided
