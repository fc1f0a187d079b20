"""The `dedup` command as users run it: real subprocesses, a real `dask scheduler` and `dask worker`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd

from tests.conftest import run_dedup, write_shards

_run = run_dedup


def test_help_describes_every_option() -> None:
    out = _run("run", "--help").stdout
    for opt in ("--id-column", "--text-column", "--threshold", "--num-perm", "--num-bands", "--rows-per-band",
                "--shingle-size", "--ngram-size", "--seed", "--confirm", "--keep-duplicates", "--scheduler",
                "--scheduler-file", "--n-workers", "--threads", "--partition-rows", "--overwrite", "--verbose",
                "--protected"):
        assert opt in out
    top = _run("--help").stdout
    for cmd in ("run", "near", "decontaminate", "lines", "tune", "demo"):
        assert cmd in top
    assert "Remove near-duplicate documents" in top and "arguments" not in top.split("positional")[0]


def test_tune_prints_choice_and_s_curve() -> None:
    res = _run("tune", "--threshold", "0.7")
    assert res.returncode == 0
    assert "recommended: --num-bands 21 --rows-per-band 6" in res.stdout  # the most rows with p(0.7) >= 0.9
    assert "| 0.50 |" in res.stdout and "| 0.90 |" in res.stdout
    assert "Jaccard of the sets of 5-word shingles" in res.stdout
    chars = _run("tune", "--threshold", "0.7", "--shingle-unit", "char", "--shingle-size", "7")
    assert "Jaccard of the sets of 7-char shingles (--shingle-unit char --shingle-size 7)" in chars.stdout


def test_tune_compares_your_banding_with_the_recommended_one() -> None:
    res = _run("tune", "--threshold", "0.8", "--num-bands", "16", "--rows-per-band", "8")
    assert res.returncode == 0, res.stderr
    assert "recommended: --num-bands 16 --rows-per-band 8" in res.stdout  # what the README argues for
    assert "yours: --num-bands 16 --rows-per-band 8" in res.stdout
    weighed = _run("tune", "--threshold", "0.8", "--fp-weight", "0.5", "--fn-weight", "0.5")
    assert "recommended: --num-bands 9 --rows-per-band 13" in weighed.stdout  # datasketch's criterion, on request
    assert "far less often than the default" in weighed.stdout
    assert "is a candidate 94.7% of the time" in res.stdout  # p(0.8) for 16 x 8, as the contract says
    row = next(line for line in res.stdout.splitlines() if line.startswith("| 0.80 |"))
    assert row.endswith("| 0.9470 |")
    bad = _run("tune", "--threshold", "0.8", "--num-bands", "20", "--rows-per-band", "8")
    assert bad.returncode == 2 and "num_bands * rows_per_band must be <= num_perm" in bad.stderr


def test_usage_errors_exit_2_in_one_line(tmp_path: Path) -> None:
    assert _run("run").returncode == 2
    write_shards(pd.DataFrame({"id": ["a"], "text": ["x"]}), tmp_path / "in", 1)
    res = _run("run", str(tmp_path / "in"), str(tmp_path / "out"), "--threshold", "1.5", "--n-workers", "1")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        "dedup: error: The 'threshold' parameter must be a float in [0, 1]. Got 1.5 instead.")
    assert "Traceback" not in res.stderr
    missing = _run("near", str(tmp_path / "nope"), str(tmp_path / "out"), "--n-workers", "1")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    rows = _run("run", str(tmp_path / "in"), str(tmp_path / "out"), "--partition-rows", "0")
    assert rows.returncode == 2
    assert rows.stderr.strip().splitlines()[-1] == "dedup: error: --partition-rows must be an integer >= 1. Got 0 instead."


def test_partition_rows_groups_small_shards_and_the_shards_written_are_the_same(tmp_path: Path,
                                                                                corpus_frame: pd.DataFrame) -> None:
    """`--partition-rows` decides how many consecutive small shards a partition reads; neither the
    shards written nor `removed.parquet` (reasons, roots, matched documents and their similarities)
    depend on it (a real `dedup run` subprocess each, on 2 local workers)."""
    src = write_shards(corpus_frame, tmp_path / "in", 12)
    per_shard = -(-len(corpus_frame) // 12)
    runs = {}
    for name, rows in (("one", per_shard), ("three", 3 * per_shard)):
        res = _run("run", str(src), str(tmp_path / name), "--partition-rows", str(rows), "--n-workers", "2")
        assert res.returncode == 0, res.stderr
        runs[name] = json.loads((tmp_path / name / "_dedup.json").read_text())
    assert runs["one"]["partitions"] == 12 and runs["three"]["partitions"] == 4
    for shard in sorted(src.iterdir()):
        assert (tmp_path / "one" / shard.name).read_bytes() == (tmp_path / "three" / shard.name).read_bytes()
    assert runs["one"]["near_duplicates_dropped"] == runs["three"]["near_duplicates_dropped"] > 0
    listed = [tmp_path / name / "_report" / "removed.parquet" for name in ("one", "three")]
    assert len(pd.read_parquet(listed[0])) == runs["one"]["near_duplicates_dropped"]
    for shard in sorted(src.iterdir()):
        assert (listed[0] / shard.name).read_bytes() == (listed[1] / shard.name).read_bytes()


def test_run_against_real_scheduler_and_workers(dask_processes: Path, tmp_path: Path, corpus_frame: pd.DataFrame,
                                                protected_file: Path) -> None:
    src = write_shards(corpus_frame, tmp_path / "in", 3)
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    address = json.loads(dask_processes.read_text())["address"]
    res = _run("run", str(src), str(tmp_path / "out"), "--scheduler", address, "--protected", str(protected_file))
    assert res.returncode == 0, res.stderr
    assert "output rows" in res.stdout
    for stage in ("features:", "every id occurs once", "contamination:", "buckets:", "confirm:", "(estimate)", "components:",
                  "joined on the client", "roots:", "write:", "wrote"):
        assert stage in res.stderr
    m = json.loads((tmp_path / "out" / "_dedup.json").read_text())
    assert m["input_rows"] == len(corpus_frame) == m["output_rows"] + m["near_duplicates_dropped"] + m["contaminated_dropped"]
    assert m["contaminated_dropped"] >= 3 and m["near_duplicates_dropped"] > 50
    assert set(m["seconds"]) >= {"features", "buckets", "confirm", "write", "total"}
    assert m["parameters"]["threshold"] == 0.8 and m["versions"]["dask"]
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before  # inputs never modified
    again = _run("run", str(src), str(tmp_path / "out"), "--scheduler-file", str(dask_processes))
    assert again.returncode == 2 and "--overwrite" in again.stderr


def _digests(root: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_threads_write_the_clusters_output_byte_for_byte(dask_processes: Path, tmp_path: Path,
                                                         corpus_frame: pd.DataFrame, protected_file: Path) -> None:
    """`--threads 2` (no cluster) and a real scheduler with two worker processes: every file of OUTPUT
    the same bytes (shards, index, removed list), the manifest the same but for its timings."""
    src = write_shards(corpus_frame, tmp_path / "in", 3)
    address = json.loads(dask_processes.read_text())["address"]
    common = ("run", str(src))
    cluster = _run(*common, str(tmp_path / "cluster"), "--scheduler", address, "--protected", str(protected_file))
    threads = _run(*common, str(tmp_path / "threads"), "--threads", "2", "--protected", str(protected_file))
    assert cluster.returncode == 0 and threads.returncode == 0, cluster.stderr + threads.stderr
    assert "2 threads, no cluster" in threads.stderr and "no cluster" not in cluster.stderr
    a, b = _digests(tmp_path / "cluster"), _digests(tmp_path / "threads")
    varying = {"_dedup.json", "_index/index.json", "_report/index.html"}  # timings, the index's uid, the page
    assert set(a) == set(b) and {p.name for p in src.iterdir()} <= set(a) and any(k.startswith("_index/bands") for k in a)
    assert {k for k in a if a[k] != b[k]} <= varying
    ma, mb = (json.loads((tmp_path / d / "_dedup.json").read_text()) for d in ("cluster", "threads"))
    for m in (ma, mb):
        del m["seconds"], m["output"]
    assert ma == mb and ma["near_duplicates_dropped"] > 50 and ma["contaminated_dropped"] >= 3


def test_threads_never_import_distributed(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    """`--threads` starts no cluster, so it does not pay for importing distributed (about 0.2 s)."""
    import sys

    src = write_shards(corpus_frame.head(300), tmp_path / "in", 2)
    code = ("import sys, dedup.cli\n"
            "try:\n    dedup.cli.main(['run', sys.argv[1], sys.argv[2], '--threads', '2'])\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print('distributed imported:', 'distributed' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code, str(src), str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=240)
    assert res.returncode == 0, res.stderr
    assert "distributed imported: False" in res.stdout and (tmp_path / "out" / "_dedup.json").is_file()


def test_demo_runs_on_a_local_cluster(tmp_path: Path) -> None:
    res = _run("demo", str(tmp_path / "demo"), "--originals", "120")
    assert res.returncode == 0, res.stderr
    assert "near duplicates dropped" in res.stdout
    m = json.loads((tmp_path / "demo" / "output" / "_dedup.json").read_text())
    assert m["near_duplicates_dropped"] > 0 and m["contaminated_dropped"] > 0
    # the planted copies it kept are below the threshold with their article's kept copies, or told as misses
    import re

    from tests.reference import ref_shingles

    def jaccard(a: str, b: str) -> float:
        x, y = ref_shingles(a, 5), ref_shingles(b, 5)
        return len(x & y) / len(x | y) if x and y else 0.0

    said = {m_.group(1): int(m_.group(2).replace(",", "")) for m_ in
            re.finditer(r"^\s*(planted copies|edited below 0\.8|missed)\s+([\d,]+)", res.stdout, re.M)}
    kept = pd.read_parquet(tmp_path / "demo" / "output")
    below = sum(all(jaccard(a, b) < 0.8 for b in g["text"].iloc[:i])
                for _, g in kept.groupby("family") for i, a in enumerate(g["text"]) if i)
    copies = int(kept["family"].duplicated().sum())
    assert said["edited below 0.8"] == below and said.get("missed", 0) == copies - below and said["planted copies"] >= copies


def test_dry_run_says_what_output_holds(tmp_path: Path, corpus_frame: pd.DataFrame) -> None:
    """A dry run's last line does not claim rows were written: OUTPUT holds the manifest and report."""
    src = write_shards(corpus_frame, tmp_path / "in", 2)
    res = _run("run", str(src), str(tmp_path / "out"), "--dry-run", "--threads", "2")
    assert res.returncode == 0, res.stderr
    assert "would be kept" in res.stderr and "holds only the manifest and the report" in res.stderr
    assert "wrote " not in res.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["_dedup.json", "_report"]


def test_the_banding_follows_the_threshold_and_a_weak_one_is_a_warning_everywhere(tmp_path: Path,
                                                                                   corpus_frame: pd.DataFrame) -> None:
    """`--threshold` alone takes the banding `dedup tune` recommends for it, says so in the log and
    records it; a banding given that finds a pair at the threshold less than 90% of the time is one
    warning, the same in the log, the manifest and the page (in Chromium); half a banding is refused."""
    from selenium.webdriver.common.by import By

    from tests.conftest import chromium

    src = str(write_shards(corpus_frame.iloc[:300], tmp_path / "in", 1))
    follows = _run("run", src, str(tmp_path / "follows"), "--threshold", "0.7", "--threads", "1", "--no-index")
    assert follows.returncode == 0, follows.stderr
    tune = _run("tune", "--threshold", "0.7").stdout
    m = json.loads((tmp_path / "follows" / "_dedup.json").read_text())
    bands, rows = m["parameters"]["num_bands"], m["parameters"]["rows_per_band"]
    assert f"recommended: --num-bands {bands} --rows-per-band {rows}" in tune
    p = 1 - (1 - 0.7 ** rows) ** bands  # the S-curve at the threshold, computed here
    assert m["banding"]["candidate_at_threshold"] == round(p, 4) >= 0.9
    assert m["banding"]["recommended"] == {"num_bands": bands, "rows_per_band": rows, "candidate_at_threshold": round(p, 4)}
    assert f"banding {bands} x {rows}: a pair at the threshold 0.7 is a candidate {100 * p:.1f}% of the time" in follows.stderr
    assert not any("banding" in w for w in m["warnings"])

    weak = _run("run", src, str(tmp_path / "weak"), "--threshold", "0.7", "--num-bands", "16", "--rows-per-band", "8",
                "--threads", "1", "--no-index")
    assert weak.returncode == 0, weak.stderr
    w = json.loads((tmp_path / "weak" / "_dedup.json").read_text())
    said = [line.split(" WARNING ", 1)[1] for line in weak.stderr.splitlines() if "The banding 16 x 8" in line]
    weak_p = 1 - (1 - 0.7 ** 8) ** 16
    assert len(said) == 1 and f"only {weak_p:.0%} of the time" in said[0] and f"{bands} x {rows}" in said[0]
    assert [x for x in w["warnings"] if "banding" in x] == said
    d = chromium()
    try:
        d.get((tmp_path / "weak" / w["report"]).as_uri())
        shown = [e.text for e in d.find_elements(By.CSS_SELECTOR, "div.warn")]
    finally:
        d.quit()
    assert shown == w["warnings"] and said[0] in shown

    half = _run("run", src, str(tmp_path / "half"), "--num-bands", "16", "--threads", "1")
    assert half.returncode == 2 and len(half.stderr.strip().splitlines()) == 1
    assert "Give --num-bands and --rows-per-band together" in half.stderr and not (tmp_path / "half").exists()
