"""Cluster sizes across releases (docs/contract.md §6d): with `--against`, `minhash_cluster_size` counts the
documents of every release in the chain that carry the cluster id, and each release's `_index/sizes/`
holds that count for every cluster of its chain; checked on a real cluster against a plain count of what
every release wrote and removed, through a fork (two releases made against one, then given together),
with `--keep-duplicates`, `--min-cluster-size` and a resumed run."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from dedup.config import Params
from dedup.corpus import generate
from dedup.job.pipeline import run
from tests.conftest import DEDUP, kill_after, parquet_digests, run_command, write_shards

RELEASES = ("a", "b1", "b2", "c", "d")
CHAINS = {"a": (), "b1": ("a",), "b2": ("a",), "c": ("b1", "b2"), "d": ("c",)}
"""Each release's --against: b1 and b2 both build on a (a fork), c is given both, d builds on c."""


def _corpus() -> pd.DataFrame:
    """§7 documents (families of an original and up to three near copies) dealt at random to the releases,
    so a family's copies land in releases on both sides of the fork."""
    rng = random.Random(11)
    docs = generate(300, seed=5)
    return pd.DataFrame({"id": [d.id for d in docs], "text": [d.text for d in docs],
                         "release": [rng.choice(RELEASES) for _ in docs],
                         "fetched": [rng.randrange(10**6) for _ in docs]})


def _carried(out: Path) -> dict[str, str]:
    """Each document a release read and clustered or kept: its cluster id (`minhash_cluster` of the rows
    written, `root` of the near duplicates removed)."""
    kept = pd.read_parquet(out)
    removed = pd.read_parquet(out / "_report" / "removed.parquet")
    near = removed[removed["reason"] == "near_duplicate"]
    return {**dict(zip(near["id"], near["root"])), **dict(zip(kept["id"], kept["minhash_cluster"]))}


def _chain(name: str) -> list[str]:
    """`name` and every release its chain holds."""
    seen = [name]
    for up in CHAINS[name]:
        seen += [r for r in _chain(up) if r not in seen]
    return seen


def _sizes_file(out: Path) -> dict[str, tuple[int, int, bool]]:
    got = pd.read_parquet(out / "_index" / "sizes")
    assert list(got.columns) == ["h", "id", "size", "added", "read_here"]
    return {i: (int(s), int(a), bool(h)) for i, s, a, h in zip(got["id"], got["size"], got["added"], got["read_here"])}


def test_counts_over_a_chain_with_a_fork_equal_a_count_of_every_release(client, tmp_path: Path) -> None:
    """Five releases (b1 and b2 made against a, c against both, d against c; b1 and c keep their
    duplicates, b2 keeps the latest fetched in centred clusters confirmed by exact Jaccard, d removes
    near duplicates only from clusters of 3 or more over the chain): every row's
    `minhash_cluster_size` and every release's `_index/sizes/` equal a count, over the releases of its
    chain, of the documents carrying each cluster id."""
    frame = _corpus()
    carried: dict[str, dict[str, str]] = {}
    options = {"b1": {"drop": False}, "c": {"drop": False}, "d": {"min_cluster_size": 3},
               "b2": {"keep_by": "fetched:max", "clusters": "centred", "params": Params(confirm="exact")}}
    for name in RELEASES:
        src = write_shards(frame[frame["release"] == name].drop(columns="release").reset_index(drop=True),
                           tmp_path / f"in-{name}", 2)
        out = tmp_path / name
        run(str(src), str(out), cluster_size=True, partition_rows=50,
            against=[str(tmp_path / up) for up in CHAINS[name]], **options.get(name, {}))
        carried[name] = _carried(out)
        count = Counter(c for r in _chain(name) for c in carried[r].values())
        kept = pd.read_parquet(out)
        assert (kept["minhash_cluster_size"] == kept["minhash_cluster"].map(count)).all(), name
        if name == "d":  # a cluster kept whole is below 3 over the chain; a removed one at least 3
            whole = kept[kept["id"] != kept["minhash_cluster"]]
            assert len(whole) and (whole["minhash_cluster_size"] < 3).all()
            removed = pd.read_parquet(out / "_report" / "removed.parquet")
            assert len(removed) and (removed["root"].map(count) >= 3).all()
            assert not (out / "_index").exists()
            continue
        table = _sizes_file(out)
        assert {i: s for i, (s, _, _) in table.items()} == {c: n for c, n in count.items() if n >= 2}, name
        own = Counter(carried[name].values())
        assert {i: a for i, (_, a, _) in table.items() if a} == {c: own[c] for c in own if c in table}, name
        assert {i for i, (_, _, h) in table.items() if h} == {c for c in own if c in table and c in carried[name]}
    # the fork mattered: clusters of a that both b1 and b2 added to, counted once each in c
    both = set(carried["b1"].values()) & set(carried["b2"].values()) & set(carried["a"])
    assert both


def _near_copies() -> dict[str, str]:
    """The contract's worked example: a, its near copies b to e (one word each changed), f alone."""
    rng = random.Random(3)
    words = [f"w{rng.randrange(10**6)}" for _ in range(80)]
    texts = {"a": " ".join(words)}
    for i, name in enumerate("bcde"):
        copy = list(words)
        copy[10 + 15 * i] = f"changed{i}"
        texts[name] = " ".join(copy)
    texts["f"] = " ".join(f"x{rng.randrange(10**6)}" for _ in range(80))
    return texts


def test_the_contracts_worked_example(client, tmp_path: Path) -> None:
    texts = _near_copies()
    releases = [("r1", "ab", {}), ("r2", "cd", {}), ("r3", "ef", {"drop": False, "cluster_size": True})]
    before: list[str] = []
    for name, ids, more in releases:
        src = tmp_path / f"in-{name}"
        src.mkdir()
        pd.DataFrame({"id": list(ids), "text": [texts[i] for i in ids]}).to_parquet(src / "p.parquet", index=False)
        run(str(src), str(tmp_path / name), against=before, write_report=True, **more)
        before = [str(tmp_path / name)]
    assert _sizes_file(tmp_path / "r1") == {"a": (2, 2, True)}
    assert _sizes_file(tmp_path / "r2") == {"a": (4, 2, False)}
    assert _sizes_file(tmp_path / "r3") == {"a": (5, 1, False)}
    got = pd.read_parquet(tmp_path / "r3").set_index("id")
    assert got.loc["e", "minhash_cluster"] == "a" and got.loc["e", "minhash_cluster_size"] == 5
    assert got.loc["f", "minhash_cluster"] == "f" and got.loc["f", "minhash_cluster_size"] == 1


def test_an_older_index_counts_its_root_alone_and_says_so(client, tmp_path: Path) -> None:
    """An index of format 7 holds no counts: a cluster whose root it kept counts that root as one
    document, with a warning naming the output."""
    from dedup.storage import stamps

    texts = _near_copies()
    for name, ids in (("in1", "ab"), ("in2", "c")):
        (tmp_path / name).mkdir()
        pd.DataFrame({"id": list(ids), "text": [texts[i] for i in ids]}).to_parquet(tmp_path / name / "p.parquet")
    run(str(tmp_path / "in1"), str(tmp_path / "r1"))
    meta_path = tmp_path / "r1" / "_index" / "index.json"
    meta = json.loads(meta_path.read_text())
    files = {f: v for f, v in meta["files"].items() if not f.startswith("_index/sizes/")}
    for f in set(meta["files"]) - set(files):
        (tmp_path / "r1" / f).unlink()
    body = {k: v for k, v in meta.items() if k != "checksum"}
    meta_path.write_text(json.dumps(stamps.seal({**body, "files": files, "format": 7})))
    m = run(str(tmp_path / "in2"), str(tmp_path / "r2"), against=[str(tmp_path / "r1")], drop=False, cluster_size=True)
    got = pd.read_parquet(tmp_path / "r2").set_index("id")
    assert got.loc["c", "minhash_cluster"] == "a" and got.loc["c", "minhash_cluster_size"] == 2  # a and c, not b
    assert any("holds no cluster counts" in w and "r1" in w for w in m["warnings"]), m["warnings"]
    assert _sizes_file(tmp_path / "r2") == {"a": (2, 1, False)}


@pytest.mark.timeout(400)
def test_a_run_against_a_release_killed_after_its_roots_resumes_to_the_same_bytes(dask_processes: Path,
                                                                                  tmp_path: Path) -> None:
    """`dedup near --against R1 --cluster-size` on a running cluster, killed once the roots stage (which
    writes `_index/sizes/`) is done: the same command writes what an uninterrupted run writes, byte for byte."""
    frame = _corpus()
    first = write_shards(frame[frame["release"].isin(["a", "b1"])].drop(columns="release"), tmp_path / "in1", 2)
    run(str(first), str(tmp_path / "r1"), partition_rows=60)
    src = write_shards(frame[~frame["release"].isin(["a", "b1"])].drop(columns="release"), tmp_path / "in2", 3)

    def command(out: Path) -> list[str]:
        return [*DEDUP, "near", str(src), str(out), "--scheduler-file", str(dask_processes), "--against",
                str(tmp_path / "r1"), "--cluster-size", "--partition-rows", "60"]

    got = run_command(command(tmp_path / "ref"), timeout=240)
    assert got.returncode == 0, got.stderr
    kill_after(command(tmp_path / "out"), "roots:")
    again = run_command(command(tmp_path / "out"), timeout=240)
    assert again.returncode == 0, again.stderr
    assert "roots from the interrupted run" in again.stderr, again.stderr
    digests = parquet_digests(tmp_path / "out")
    assert any(name.startswith("_index/sizes/") for name in digests), sorted(digests)
    assert digests == parquet_digests(tmp_path / "ref")
