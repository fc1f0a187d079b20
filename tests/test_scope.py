"""Dedup scope (docs/contract.md §6d): `--within COLUMN` gives each value's documents exactly what a
run over them alone gives, on a real cluster: cluster ids, sizes, survivors and the removed list,
whether the value is a column of the files or a Hive key of their directories, with the options that
choose survivors and confirm pairs; the combinations that would read across values are refused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest

from dedup.config import Params
from dedup.corpus import generate
from dedup.job.pipeline import run
from dedup.storage.safety import UsageError
from tests.conftest import DEDUP, chromium, kill_after, parquet_digests, run_command, table_cells, write_shards
from tests.reference import DROPPED, ref_clusters, ref_lines

CRAWLS = ["CC-2023-06", "CC-2024-10", "CC-2025-18", None]
REMOVED = ["id", "reason", "root", "matched", "estimate", "jaccard", "survivor_similarity"]


def _corpus(originals: int = 260, spread: bool = True) -> pd.DataFrame:
    """§7 documents (families of near copies) spread over three crawls and no crawl at all, so most
    families have copies in several: a global run joins them, a scoped one must not (without
    `spread`, each family's documents are in one crawl, so clusters of three and four stay whole)."""
    rng = random.Random(4)
    docs = generate(originals, seed=8)
    crawl_of = {d.family: rng.choice(CRAWLS) for d in docs}
    return pd.DataFrame({"id": [d.id for d in docs], "text": [d.text for d in docs],
                         "crawl": [rng.choice(CRAWLS) if spread else crawl_of[d.family] for d in docs],
                         "fetched": [rng.randrange(10**6) for _ in docs]})


def _shards(out: Path) -> pd.DataFrame:
    """Every output shard's rows, each file read alone (Arrow cannot yet read a Hive key whose
    directories include the null one as a dataset's column)."""
    files = sorted(p for p in out.rglob("*.parquet") if not any(q.startswith("_") for q in p.relative_to(out).parts))
    return pd.concat([pd.read_parquet(f) for f in files])


def _alone(frame: pd.DataFrame, root: Path, **options: object) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each crawl's documents (nulls together) in a run of their own: the rows written and removed, by id."""
    kept, removed = [], []
    for i, crawl in enumerate(CRAWLS):
        part = frame[frame["crawl"].isna()] if crawl is None else frame[frame["crawl"] == crawl]
        src = write_shards(part.reset_index(drop=True), root / f"alone-in-{i}", 2)
        out = root / f"alone-out-{i}"
        run(str(src), str(out), write_index=False, **options)
        kept.append(pd.read_parquet(out))
        removed.append(pd.read_parquet(out / "_report" / "removed.parquet"))
    return (pd.concat(kept).set_index("id").sort_index(), pd.concat(removed).set_index("id").sort_index())


@pytest.mark.parametrize("how", ["column", "hive key, keep-by, centred, exact"])
def test_within_gives_each_value_what_a_run_over_it_alone_gives(client, tmp_path: Path, how: str) -> None:
    frame = _corpus()
    options: dict[str, object] = {"cluster_size": True}
    if how != "column":
        options.update(keep_by="fetched:max", clusters="centred", params=Params(confirm="exact"))
    kept_alone, removed_alone = _alone(frame, tmp_path, **options)
    if how == "column":
        src = write_shards(frame, tmp_path / "in", 3)
        within = "crawl"
    else:  # a Hive key of the directories: dump=<crawl>/ (null: the directory dump=__HIVE_DEFAULT_PARTITION__)
        src = tmp_path / "hive"
        for crawl in CRAWLS:
            part = frame[frame["crawl"].isna()] if crawl is None else frame[frame["crawl"] == crawl]
            name = crawl if crawl is not None else "__HIVE_DEFAULT_PARTITION__"
            write_shards(part.drop(columns=["crawl"]).reset_index(drop=True), src / f"dump={name}", 2)
        within = "dump"
    out = tmp_path / "out"
    m = run(str(src), str(out), within=within, partition_rows=70, **options)
    kept = _shards(out).set_index("id").sort_index()
    columns = ["text", "minhash_cluster", "minhash_cluster_size"]
    pd.testing.assert_frame_equal(kept[columns], kept_alone[columns])
    removed = _shards(out / "_report" / "removed.parquet").set_index("id").sort_index()
    pd.testing.assert_frame_equal(removed[REMOVED[1:]], removed_alone[REMOVED[1:]])
    glob = run(str(src), str(tmp_path / "global"), write_index=False, **options)
    assert glob["near_duplicates_found"] > m["near_duplicates_found"]  # the crawls share families
    values = {v["value"]: (v["documents"], v["near_duplicates"]) for v in m["within"]["values"]}
    want = {}
    for crawl in CRAWLS:
        part = frame[frame["crawl"].isna()] if crawl is None else frame[frame["crawl"] == crawl]
        gone = removed_alone.index.isin(part["id"]) & (removed_alone["reason"] == "near_duplicate")
        want[crawl] = (len(part), int(gone.sum()))
    if how != "column":
        want = {k if k is not None else None: v for k, v in want.items()}
    assert values == want
    assert m["index"] is None
    if how == "column":
        d = chromium()
        try:
            d.get((out / m["report"]).as_uri())
            shown = table_cells(d, "#within tr")[1:]
        finally:
            d.quit()
        assert [(r[0], int(r[1].replace(",", ""))) for r in shown] == \
            [("(null)" if v["value"] is None else v["value"], v["documents"]) for v in m["within"]["values"]]


def test_within_refuses_what_reads_across_values(tmp_path: Path) -> None:
    """One line before any work: options that read across values, a column the input lacks, a type
    without a text form."""
    frame = _corpus()
    src = write_shards(frame.assign(tags=[["a"]] * len(frame)), tmp_path / "in", 2)
    for flag, more in (("--against", {"against": [str(tmp_path)]}), ("--lines", {"lines": True}),
                       ("--spans", {"spans": True})):
        with pytest.raises(UsageError, match=f"--within with {flag} is not supported yet"):
            run(str(src), str(tmp_path / "out"), within="crawl", **more)
    with pytest.raises(UsageError, match="--within scopes near dedup"):
        run(str(src), str(tmp_path / "out"), within="crawl", near=False, protected=[tmp_path])
    with pytest.raises(UsageError, match="an integer of at least 2"):
        run(str(src), str(tmp_path / "out"), min_cluster_size=1)
    with pytest.raises(UsageError, match="the input has no column 'lang'"):
        run(str(src), str(tmp_path / "out"), within="lang")
    with pytest.raises(UsageError, match="column 'tags' has type list<element: string>"):
        run(str(src), str(tmp_path / "out"), within="tags")


def test_a_minimum_cluster_size_keeps_smaller_clusters_whole_within_each_value(client, tmp_path: Path) -> None:
    """`--min-cluster-size 3 --within crawl`: each crawl's clusters as the reference finds them on its
    documents alone; the members of clusters of two kept (tagged with their root), those of larger
    ones removed; the what-if's counts at 2, 3, 5, 10 and 100 from the same clusters."""
    frame = _corpus(120, spread=False)
    root, size = {}, {}
    for crawl in CRAWLS:
        part = frame[frame["crawl"].isna()] if crawl is None else frame[frame["crawl"] == crawl]
        got = ref_clusters(part["id"].tolist(), part["text"].tolist(), mode="connected", threshold=0.8,
                           confirm="estimate")
        root.update({i: r for i, (r, _) in got.items()})
    for r in root.values():
        size[r] = size.get(r, 0) + 1
    src = write_shards(frame, tmp_path / "in", 3)
    m = run(str(src), str(tmp_path / "out"), within="crawl", min_cluster_size=3, cluster_size=True, partition_rows=60)
    kept = pd.read_parquet(tmp_path / "out").set_index("id")
    want = {i: (r, size[r]) for i, r in root.items() if r == i or size[r] < 3}
    assert dict(zip(kept.index, zip(kept["minhash_cluster"], kept["minhash_cluster_size"]))) == want
    removed = pd.read_parquet(tmp_path / "out" / "_report" / "removed.parquet")
    assert set(removed["id"]) == set(root) - set(want) and set(removed["reason"]) == {"near_duplicate"}
    dups = [i for i, r in root.items() if r != i]
    assert m["min_cluster_size_what_if"] == [{"min_cluster_size": k, "near_duplicates": sum(size[root[i]] >= k for i in dups)}
                                             for k in (2, 3, 5, 10, 100)]
    assert m["near_duplicates_kept_whole"] == sum(size[root[i]] < 3 for i in dups) > 0
    assert m["near_duplicates_dropped"] == len(removed) and m["output_rows"] == len(want) and m["index"] is None


def test_a_scoped_run_killed_after_its_roots_resumes_to_the_same_bytes(dask_processes: Path, tmp_path: Path) -> None:
    """`dedup near --within crawl --min-cluster-size 3 --cluster-size` on a running cluster, its client
    killed once the roots stage is done: the same command reuses the stages and writes, byte for byte,
    what an uninterrupted run writes."""
    src = write_shards(_corpus(120, spread=False), tmp_path / "in", 3)

    def command(out: Path) -> list[str]:
        return [*DEDUP, "near", str(src), str(out), "--scheduler-file", str(dask_processes), "--within", "crawl",
                "--min-cluster-size", "3", "--cluster-size", "--partition-rows", "60"]

    got = run_command(command(tmp_path / "ref"), timeout=240)
    assert got.returncode == 0, got.stderr
    kill_after(command(tmp_path / "out"), "roots:")
    again = run_command(command(tmp_path / "out"), timeout=240)
    assert again.returncode == 0, again.stderr
    assert "resuming: reusing features, buckets, confirm, components, survivors, roots from the interrupted run" \
        in again.stderr
    assert parquet_digests(tmp_path / "out") == parquet_digests(tmp_path / "ref")
    assert json.loads((tmp_path / "out" / "_dedup.json").read_text())["within"] == \
        json.loads((tmp_path / "ref" / "_dedup.json").read_text())["within"]


def test_line_dedup_reads_the_clusters_kept_whole(client, tmp_path: Path) -> None:
    """`--min-cluster-size 3 --lines`: line dedup runs on every document written, the members of the
    clusters kept whole among them (§6b on the survivors)."""
    frame = _corpus(60, spread=False)
    frame["text"] = "Home | Products | About us\n" + frame["text"]
    src = write_shards(frame, tmp_path / "in", 2)
    run(str(src), str(tmp_path / "base"), drop=False, cluster_size=True, write_index=False, write_report=False)
    tagged = pd.read_parquet(tmp_path / "base")
    kept = tagged[(tagged["minhash_cluster"] == tagged["id"]) | (tagged["minhash_cluster_size"] < 3)]
    assert (kept["minhash_cluster"] != kept["id"]).any()  # some near duplicates kept, whole clusters
    run(str(src), str(tmp_path / "out"), min_cluster_size=3, lines=True, max_lines_removed=1.0, write_report=False)
    got = pd.read_parquet(tmp_path / "out")
    want = ref_lines(kept["id"].tolist(), kept["text"].tolist())
    assert dict(zip(got["id"], got["text"])) == {i: t for i, t in want.items() if t is not DROPPED}
