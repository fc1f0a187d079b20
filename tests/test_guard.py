"""`--max-contaminated`: a run whose decontamination would remove more than that share of its input
stops before publishing (exit 3, one line naming the share and the records, OUTPUT as it was); a dry
run only warns, on the page and in the manifest; the same command with the guard raised resumes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from tests.conftest import run_dedup, write_shards

BOILERPLATE = "By using this site you agree to our terms of service and privacy policy and the use of cookies today"


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_gutting_decontamination_stops_before_publishing(tmp_path: Path) -> None:
    texts = [f"article {i} says {' '.join(f'w{i}x{j}' for j in range(20))}. {BOILERPLATE}" for i in range(70)]
    texts += [f"clean article {i} {' '.join(f'c{i}y{j}' for j in range(20))}" for i in range(30)]
    src = write_shards(pd.DataFrame({"id": [f"d{i:03d}" for i in range(100)], "text": texts}), tmp_path / "in", 2)
    evals = tmp_path / "evals.jsonl"
    evals.write_text(json.dumps({"q": "What does the footer say? " + BOILERPLATE}) + "\n"
                     + json.dumps({"q": "an unrelated question about rivers and shells and other things"}) + "\n")
    out = tmp_path / "out"
    first = run_dedup("decontaminate", str(src), str(tmp_path / "dec"), "--protected", str(evals), "--threads", "1")
    assert first.returncode == 3, first.stderr
    assert not (tmp_path / "dec").exists()
    # an earlier output in OUTPUT's place stays byte for byte what it was
    base = run_dedup("run", str(src), str(out), "--protected", str(evals), "--threads", "1",
                     "--max-contaminated", "1")
    assert base.returncode == 0, base.stderr
    before = _tree_digest(out)
    got = run_dedup("run", str(src), str(out), "--protected", str(evals), "--threads", "1", "--overwrite")
    assert got.returncode == 3, got.stderr
    line = [x for x in got.stderr.splitlines() if x.startswith("dedup: stopped:")]
    assert len(line) == 1 and "Traceback" not in got.stderr
    assert "would remove 70 of 100 documents (70.0%), above --max-contaminated 0.1" in line[0]
    assert f"line 1 of {evals} (70)" in line[0] and "--dry-run" in line[0] and "OUTPUT was left as it was" in line[0]
    assert _tree_digest(out) == before
    # a dry run is never stopped: the page and the manifest carry the warning
    dry = run_dedup("run", str(src), str(tmp_path / "dry"), "--protected", str(evals), "--threads", "1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    manifest = json.loads((tmp_path / "dry" / "_dedup.json").read_text())
    assert any("above --max-contaminated 0.1" in w for w in manifest["warnings"])
    assert "above --max-contaminated 0.1" in (tmp_path / "dry" / "_report" / "index.html").read_text()
    # the same command with the guard raised resumes from the stages the stopped run finished
    again = run_dedup("run", str(src), str(out), "--protected", str(evals), "--threads", "1", "--overwrite",
                      "--max-contaminated", "0.75")
    assert again.returncode == 0, again.stderr
    assert "resuming: reusing features, contamination" in again.stderr
    assert json.loads((out / "_dedup.json").read_text())["contaminated_dropped"] == 70
    zero = run_dedup("run", str(src), str(tmp_path / "o0"), "--protected", str(evals), "--threads", "1",
                     "--max-contaminated", "-0")  # -0 is 0, and says so
    assert zero.returncode == 3 and "above --max-contaminated 0;" in zero.stderr, zero.stderr
    bad = run_dedup("run", str(src), str(tmp_path / "o3"), "--protected", str(evals), "--max-contaminated", "7")
    assert bad.returncode == 2 and "--max-contaminated is a share of the input, from 0 to 1" in bad.stderr
