"""`--clusters centred|connected` and the similarity to the survivor, against the plain-Python
reference (`tests.reference.ref_clusters`): the same clusters whatever the partitioning, workers or
input order; in centred clusters every removed document reaches the threshold with its survivor."""

from __future__ import annotations

import json
import random
from pathlib import Path

import dask
import dask.dataframe as dd
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup import Params
from dedup.job.pipeline import near_dedup_frame, run
from tests.conftest import DEDUP, chromium, kill_after, parquet_digests, run_command, run_dedup
from tests.reference import ref_clusters, ref_shingles, ref_signature

VOCAB = [f"w{i}" for i in range(400)]


def _chain(rng: random.Random, tag: str, length: int, words: int = 150) -> list[str]:
    """Texts each one word away from the one before: near neighbours, far ends."""
    cur = [rng.choice(VOCAB) for _ in range(words)]
    out = []
    for _ in range(length):
        cur[rng.randrange(words)] = rng.choice(VOCAB)
        out.append(f"{tag} " + " ".join(cur))
    return out


@pytest.fixture(scope="module")
def chained() -> pd.DataFrame:
    """Chains of 3 to 25 texts, some with exact copies, and 60 unrelated texts, ids in shuffled order."""
    rng = random.Random(7)
    texts = []
    for c, length in enumerate([25, 12, 8, 3, 16]):
        texts += _chain(rng, f"chain{c}", length)
    texts += texts[3:6] + texts[40:42]  # copies
    texts += [" ".join(rng.choice(VOCAB) for _ in range(120)) for _ in range(60)]
    order = list(range(len(texts)))
    rng.shuffle(order)
    return pd.DataFrame({"id": [f"doc-{i:04d}" for i in order], "text": texts,
                         "score": [rng.randrange(5) for _ in texts]})


def _shards(frame: pd.DataFrame, directory: Path, shards: int) -> Path:
    directory.mkdir(parents=True)
    for i in range(shards):
        frame.iloc[i::shards].to_parquet(directory / f"part-{i}.parquet", index=False)
    return directory


def _want(frame: pd.DataFrame, mode: str, confirm: str, rank: dict | None = None) -> dict[str, tuple[str, float | None]]:
    return ref_clusters(list(frame["id"]), list(frame["text"]), mode=mode, threshold=0.8, confirm=confirm, rank=rank)


@pytest.mark.parametrize("confirm", ["estimate", "exact"])
def test_centred_and_connected_clusters_equal_the_reference(client, tmp_path: Path, chained: pd.DataFrame,
                                                            confirm: str) -> None:
    """Both modes, seven shards read as partitions of 20 rows with components on the cluster, and
    centred (estimate) also one shard with each round's components on the client (exact: centred,
    seven): the reference's survivors, and in removed.parquet its similarity of every removed
    document to its survivor."""
    for mode in ("connected", "centred") if confirm == "estimate" else ("centred",):
        want, connected = _want(chained, mode, confirm), _want(chained, "connected", confirm)
        assert mode == "connected" or {r for r, _ in want.values()} != {r for r, _ in connected.values()}
        for shards, rows in ((1, 10**6), (7, 20)) if (confirm, mode) == ("estimate", "centred") else ((7, 20),):
            out = tmp_path / f"{mode}-{shards}"
            m = run(str(_shards(chained, tmp_path / f"in-{mode}-{shards}", shards)), str(out), drop=False,
                    partition_rows=rows, params=Params(confirm=confirm), clusters=mode, cluster_size=True,
                    components="client" if shards == 1 else "distributed")
            got = pd.read_parquet(out)
            assert dict(zip(got["id"], got["minhash_cluster"])) == {i: r for i, (r, _) in want.items()}
            sizes = got.groupby("minhash_cluster")["id"].transform("size")
            assert (got["minhash_cluster_size"] == sizes).all()
            removed = pd.read_parquet(out / "_report" / "removed.parquet")
            near = removed[removed["reason"] == "near_duplicate"]
            assert len(near) == sum(r != i for i, (r, _) in want.items())
            for i, root, s in zip(near["id"], near["root"], near["survivor_similarity"]):
                assert root == want[i][0] and s == pytest.approx(want[i][1], abs=1e-6)
            below = sum(s is not None and s < 0.8 for _, s in connected.values())
            assert m["cluster_mode"] == mode and m["below_threshold_to_survivor"] == below > 0
            if mode == "centred":
                assert (near["survivor_similarity"] >= 0.8).all() and m["survivor_rounds"] > 2
                assert sum(m["survivor_histogram"][:40]) == 0  # 50 bins: none below 0.8
            else:
                assert sum(m["survivor_histogram"][:40]) == below


def test_centred_exact_members_reach_the_threshold_by_exact_jaccard(client, tmp_path: Path,
                                                                    chained: pd.DataFrame) -> None:
    """Whatever the code computed, recomputed here from the texts: every removed document's shingles
    share at least the threshold with its survivor's."""
    out = tmp_path / "out"
    run(str(_shards(chained, tmp_path / "in", 3)), str(out), params=Params(confirm="exact"), clusters="centred")
    removed = pd.read_parquet(out / "_report" / "removed.parquet")
    text = dict(zip(chained["id"], chained["text"]))
    assert len(removed) > 20
    for i, root in zip(removed["id"], removed["root"]):
        a, b = ref_shingles(text[i], 5), ref_shingles(text[root], 5)
        assert len(a & b) / len(a | b) >= 0.8


def test_centred_follows_keep_by_and_the_cli(dask_processes: Path, tmp_path: Path, chained: pd.DataFrame) -> None:
    """Through the CLI on a `dask scheduler` with two workers: --keep-by score:min chooses each
    cluster's survivor, round after round, as the reference does."""
    src = _shards(chained, tmp_path / "in", 4)
    out = tmp_path / "out"
    got = run_dedup("run", str(src), str(out), "--scheduler-file", str(dask_processes), "--clusters", "centred",
                    "--keep-by", "score:min", "--keep-duplicates")
    assert got.returncode == 0, got.stderr
    assert "survivors:" in got.stderr and "more round(s)" in got.stderr
    rank = {i: (s, i) for i, s in zip(chained["id"], chained["score"])}
    want = _want(chained, "centred", "estimate", rank)
    frame = pd.read_parquet(out)
    assert dict(zip(frame["id"], frame["minhash_cluster"])) == {i: r for i, (r, _) in want.items()}
    assert json.loads((out / "_dedup.json").read_text())["keep_by"] == "score:min"


def test_clusters_is_checked_before_any_cluster_starts(tmp_path: Path, chained: pd.DataFrame) -> None:
    src = _shards(chained, tmp_path / "in", 1)
    got = run_dedup("run", str(src), str(tmp_path / "out"), "--clusters", "central")
    assert got.returncode == 2 and "invalid choice: 'central'" in got.stderr
    got = run_dedup("decontaminate", str(src), str(tmp_path / "out"), "--clusters", "centred")
    assert got.returncode == 2
    assert not (tmp_path / "out").exists()


def _chains(rnd: random.Random) -> list[str]:
    """One or two chains of texts of 12 words from 20, each one or two words away from the one before."""
    texts = []
    for _ in range(rnd.randrange(1, 3)):
        cur = [rnd.randrange(20) for _ in range(12)]
        for _ in range(rnd.randrange(2, 8)):
            for _ in range(rnd.randrange(1, 3)):
                cur[rnd.randrange(12)] = rnd.randrange(20)
            texts.append(" ".join(f"v{w}" for w in cur))
    return texts


SMALL = {"k": 2, "num_perm": 64, "num_bands": 32, "rows_per_band": 2}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(1, 4))
def test_random_chains_cluster_as_the_reference_does(rnd: random.Random, npartitions: int) -> None:
    """Shingles of 2, threshold 0.5: graphs of many shapes (the reference's centred clusters differ from
    its connected ones for most draws). The frame API on the synchronous scheduler, any partitioning
    and input order, gives the reference's clusters."""
    texts = _chains(rnd)
    ids = [f"t{i:02d}" for i in range(len(texts))]
    params = Params(shingle_size=2, threshold=0.5, num_perm=64, num_bands=32, rows_per_band=2)
    want = ref_clusters(ids, texts, mode="centred", threshold=0.5, confirm="estimate", **SMALL)
    order = list(range(len(texts)))
    rnd.shuffle(order)
    frame = pd.DataFrame({"id": [ids[i] for i in order], "text": [texts[i] for i in order]})
    with dask.config.set(scheduler="sync"):
        got = near_dedup_frame(dd.from_pandas(frame, npartitions=min(npartitions, len(frame))), params=params,
                               drop=False, clusters="centred").compute()
    assert dict(zip(got["id"], got["minhash_cluster"])) == {i: r for i, (r, _) in want.items()}


def test_the_random_chains_make_centred_and_connected_differ() -> None:
    """What keeps the test above from passing on connected clusters: most draws' clusters differ."""
    differ = 0
    for seed in range(20):
        texts = _chains(random.Random(seed))
        ids = [f"t{i:02d}" for i in range(len(texts))]
        a, b = (ref_clusters(ids, texts, mode=m, threshold=0.5, confirm="estimate", **SMALL)
                for m in ("centred", "connected"))
        differ += {i: r for i, (r, _) in a.items()} != {i: r for i, (r, _) in b.items()}
    assert differ >= 10


def test_the_page_shows_how_far_near_duplicates_are_from_their_survivor(dask_processes: Path, tmp_path: Path,
                                                                        chained: pd.DataFrame) -> None:
    """In Chromium: connected clusters' page counts the near duplicates below the threshold with their
    survivor (as the manifest does), suggests --clusters centred, and plots the histogram; the CLI
    logs the same suggestion. A centred run's page says every one reaches the threshold."""
    from selenium.webdriver.common.by import By

    src = _shards(chained, tmp_path / "in", 2)
    said = {}
    for mode in ("connected", "centred"):
        got = run_dedup("run", str(src), str(tmp_path / mode), "--scheduler-file", str(dask_processes),
                        "--clusters", mode)
        assert got.returncode == 0, got.stderr
        said[mode] = got.stderr
        d = chromium()
        try:
            d.get((tmp_path / mode / "_report" / "index.html").as_uri())
            para = d.find_element(By.ID, "to-survivor")
            words = para.text
            plot = d.find_element(By.XPATH, "//p[@id='to-survivor']/following-sibling::*[1]")
            assert plot.tag_name == "svg" and plot.size["height"] > 100
            errors = [e for e in d.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
            assert errors == []
            if mode == "connected":
                d.execute_script("arguments[0].scrollIntoView()", para)
                (tmp_path / "to-survivor.png").write_bytes(d.get_screenshot_as_png())
        finally:
            d.quit()
        m = json.loads((tmp_path / mode / "_dedup.json").read_text())
        if mode == "connected":
            below, found = m["below_threshold_to_survivor"], m["near_duplicates_found"]
            assert f"{below:,} of {found:,} near duplicates" in words and "--clusters centred" in words
            assert any(f"{below:,} of {found:,} near duplicates" in w for w in m["warnings"])
        else:
            assert "every near duplicate reaches the threshold 0.8 with its survivor" in words
            assert f"{m['below_threshold_to_survivor']:,} documents were below it" in words and not m["warnings"]
    assert "--clusters centred keeps every removed document" in said["connected"]
    assert "--clusters centred keeps" not in said["centred"]


def test_centred_against_an_earlier_output(tmp_path: Path, chained: pd.DataFrame) -> None:
    """A new half of the corpus run --against the old half's output, centred, exact: every removed
    document reaches the threshold, by exact Jaccard recomputed here, with its root, an earlier
    output's document included."""
    old, new = chained.iloc[::2], chained.iloc[1::2]
    first = run_dedup("near", str(_shards(old, tmp_path / "old", 1)), str(tmp_path / "r1"), "--threads", "2",
                      "--clusters", "centred", "--confirm", "exact")
    assert first.returncode == 0, first.stderr
    second = run_dedup("near", str(_shards(new, tmp_path / "new", 1)), str(tmp_path / "r2"), "--threads", "2",
                       "--clusters", "centred", "--confirm", "exact", "--against", str(tmp_path / "r1"))
    assert second.returncode == 0, second.stderr
    removed = pd.read_parquet(tmp_path / "r2" / "_report" / "removed.parquet")
    text = dict(zip(chained["id"], chained["text"]))
    assert removed["root"].isin(old["id"]).sum() > 5
    for i, root, s in zip(removed["id"], removed["root"], removed["survivor_similarity"]):
        a, b = ref_shingles(text[i], 5), ref_shingles(text[root], 5)
        assert len(a & b) / len(a | b) >= 0.8 and s >= 0.8


def _similarity(a: str, b: str, confirm: str) -> float:
    """The confirm rule in force, recomputed from the texts: exact Jaccard of word 5-shingles, or the
    share of equal MinHash values (the reference's own signatures)."""
    if confirm == "exact":
        x, y = ref_shingles(a, 5), ref_shingles(b, 5)
        return len(x & y) / len(x | y)
    sa, sb = ref_signature(a), ref_signature(b)
    return sum(u == v for u, v in zip(sa, sb)) / len(sa)


@pytest.mark.parametrize(("confirm", "keep"), [("estimate", False), ("exact", True)])
def test_centred_holds_across_three_releases(tmp_path: Path, chained: pd.DataFrame, confirm: str, keep: bool) -> None:
    """Three releases, each run centred --against the one before (which builds on the first), with
    --keep-by; the removed documents dropped (estimate) or kept, tagged (exact: so that an earlier
    release's near duplicates keep their texts). Every document a release removes reaches the
    threshold, by the confirm rule recomputed here, with the document kept in its place (in this
    release or an earlier one), and survivor_similarity is that similarity. The third release is
    killed once its buckets are done and run again: the same bytes as an uninterrupted run."""
    text = dict(zip(chained["id"], chained["text"]))
    parts = [chained.iloc[i::3] for i in range(3)]
    survivors: set[str] = set()  # every id any release kept as its own cluster's root
    checked = from_earlier = 0
    for r, part in enumerate(parts):
        out = tmp_path / f"r{r}"
        against = ["--against", str(tmp_path / f"r{r - 1}")] if r else []
        cmd = [*DEDUP, "near", str(_shards(part, tmp_path / f"in{r}", 2)), str(out), "--threads", "2", "--clusters",
               "centred", "--confirm", confirm, "--keep-by", "score", *(["--keep-duplicates"] if keep else []), *against]
        if r == 2:
            kill_after(cmd, "buckets:")
        got = run_command(cmd)
        assert got.returncode == 0, got.stderr
        frame = pd.read_parquet(out)
        survivors |= set(frame["id"][frame["id"] == frame["minhash_cluster"]])
        removed = pd.read_parquet(out / "_report" / "removed.parquet")
        near = removed[removed["reason"] == "near_duplicate"]
        for i, root, s in zip(near["id"], near["root"], near["survivor_similarity"]):
            assert root in survivors, (i, root)  # the document actually kept in its place
            want = _similarity(text[i], text[root], confirm)
            assert want >= 0.8 and s == pytest.approx(want, abs=1e-6), (i, root, want, s)
            checked += 1
            from_earlier += root not in set(part["id"])
        if r == 2:
            assert "resuming: reusing features, buckets" in got.stderr, got.stderr
            whole = run_command([*cmd[:5], str(tmp_path / "r2-whole"), *cmd[6:]])
            assert whole.returncode == 0, whole.stderr
            assert parquet_digests(out) == parquet_digests(tmp_path / "r2-whole")
    assert checked > 20 and from_earlier > 5


def test_centred_against_an_index_that_does_not_locate_roots_is_refused(tmp_path: Path, chained: pd.DataFrame) -> None:
    """An index of format 4 (before near duplicates named their root's key): refused before any work,
    saying what to do; connected clusters still read it."""
    from dedup.storage import stamps

    first = run_dedup("near", str(_shards(chained.iloc[::2], tmp_path / "old", 1)), str(tmp_path / "r1"), "--threads", "1")
    assert first.returncode == 0, first.stderr
    meta_path = tmp_path / "r1" / "_index" / "index.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(stamps.seal({**meta, "format": 4})))
    new = _shards(chained.iloc[1::2], tmp_path / "new", 1)
    got = run_dedup("near", str(new), str(tmp_path / "r2"), "--threads", "1", "--clusters", "centred",
                    "--against", str(tmp_path / "r1"))
    assert got.returncode == 2 and "(format 4, an older dedup) does not record where its near duplicates' roots" \
        in got.stderr, got.stderr
    assert not (tmp_path / "r2").exists()
    connected = run_dedup("near", str(new), str(tmp_path / "r3"), "--threads", "1", "--against", str(tmp_path / "r1"))
    assert connected.returncode == 0, connected.stderr
