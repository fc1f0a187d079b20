"""What exact line dedup removes, on real hard-wrapped text and on web-like pages, against an earlier build.

    python benchmarks/lines.py                                   # this build only
    python benchmarks/lines.py --baseline ../dedup-before        # and a checkout of an earlier build

Two corpora, one document a file or page:
- **hard-wrapped**: this machine's own text: the English manual pages (`/usr/share/man/man*/`, their
  troff source, gunzipped), the license and copyright files installed software ships
  (`licenses.license_files`), and the docstrings of the Python standard library's modules;
- **web-like**: the §7 corpus (`corpus.corpus_frame`, `--web-docs` documents), one sentence a line,
  between a navigation or cookie line (one of 30, in a few spellings that share a key) and a footer
  (one of 10), one page in five with a line of its own.

Each build, on each corpus, in a process of its own on a local cluster (`--workers`): `dedup lines`,
`dedup run --lines` and `dedup run` (all `--no-report` but for the list of removed lines; the guard
raised to 1 so that what it would stop is measured, and whether it would have stopped said). Per
run: the share of characters removed from the documents line dedup read, documents kept, kept
documents with a run of five or more blank lines their input did not have, near duplicates found,
and wall seconds; and a sample of `--sample` removed lines (this build: from
`_report/removed_lines.parquet`; an earlier build, which lists none: the lines of its input missing
from its output, document by document).
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import os
import pkgutil
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd  # noqa: E402
from corpus import corpus_frame, write_corpus  # noqa: E402
from licenses import license_files  # noqa: E402

NAV = [f"Home | News | Section {i} | Contact" for i in range(20)] + \
      [f"We use cookies to improve site {i}. Accept all?" for i in range(10)]
FOOTERS = [f"Copyright 20{10 + i} Example Media Group. All rights reserved." for i in range(10)]
BLANK_RUN = re.compile(r"(?:^|\n)(?:[ \t\r]*\n){5,}")
"""Five or more blank lines in a row."""


def with_boilerplate(frame: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """The corpus with each text one sentence a line, between a navigation line (in one of three
    spellings) and a footer; one document in five with a line of its own before the footer."""
    rng = random.Random(seed)
    texts = []
    for i, text in enumerate(frame["text"]):
        nav = rng.choice(NAV)
        nav = rng.choice([nav, nav.upper(), nav.replace(" | ", " / ")])
        body = text.replace(". ", ".\n")
        own = [f"Posted by reader {i} on day {rng.randrange(365)}"] if rng.random() < 0.2 else []
        texts.append("\n".join([nav, body, *own, rng.choice(FOOTERS)]))
    return frame[["id"]].assign(text=texts)


def man_pages() -> list[tuple[str, str]]:
    """(path, troff source) of every English manual page of this machine."""
    out = []
    for path in sorted(Path("/usr/share/man").glob("man*/*")):
        if not path.is_file():
            continue
        raw = path.read_bytes()
        raw = gzip.decompress(raw) if path.suffix == ".gz" else raw
        out.append((str(path), raw.decode("utf-8", errors="replace")))
    return out


def docstrings() -> list[tuple[str, str]]:
    """(name, docstring) of the standard library's modules and their public classes and functions."""
    out = []
    for info in sorted(pkgutil.iter_modules(), key=lambda m: m.name):
        if info.name.startswith("_") or not getattr(info.module_finder, "path", "").startswith(sys.prefix):
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - a module that does not import here is left out
            continue
        for name, value in [(info.name, module), *((f"{info.name}.{k}", v) for k, v in vars(module).items()
                                                     if not k.startswith("_"))]:
            doc = getattr(value, "__doc__", None)
            if isinstance(doc, str) and doc.count("\n") >= 3 and (name == info.name or
                                                                 getattr(value, "__module__", None) == info.name):
                out.append((name, doc))
    return out


def hard_wrapped() -> pd.DataFrame:
    rows = man_pages() + [(f, Path(f).read_text(encoding="utf-8", errors="replace")) for f in license_files()]
    rows += docstrings()
    frame = pd.DataFrame(rows, columns=["id", "text"]).drop_duplicates("id")
    return frame.reset_index(drop=True)


def run_one(build: Path | None, command: list[str], src: Path, out: Path, workers: int, new: bool) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    lines = command[0] == "lines" or "--lines" in command
    flags = (["--max-lines-removed", "1"] if new and lines else []) + (["--no-index"] if command[0] == "run" else [])
    env = {**os.environ, **({"PYTHONPATH": str(build)} if build is not None else {})}
    start = time.perf_counter()
    got = subprocess.run([sys.executable, "-m", "dedup", *command, str(src), str(out), "--n-workers", str(workers),
                          *flags], capture_output=True, text=True, cwd=out.parent, env=env)
    wall = time.perf_counter() - start
    if got.returncode != 0:
        raise SystemExit(f"{command} failed: {got.stderr[-2000:]}")
    m = json.loads((out / "_dedup.json").read_text())
    return {"wall": wall, "manifest": m}


def effect(src_frame: pd.DataFrame, out: Path, m: dict, sample: int, rng: random.Random) -> dict:
    """What one run did to the texts: characters removed (of those line dedup read), documents kept,
    kept documents with a new run of blank lines, and a sample of removed lines."""
    got = pd.read_parquet(out, columns=["id", "text"])
    before = dict(zip(src_frame["id"], src_frame["text"]))
    lines = m.get("lines") or {}
    read = lines.get("surviving_characters") or sum(len(t) for t in src_frame["text"] if isinstance(t, str))
    removed = lines.get("characters_removed")
    holes = sum(1 for i, t in zip(got["id"], got["text"]) if isinstance(t, str) and BLANK_RUN.search(t)
                and not BLANK_RUN.search(before[i] or ""))
    listed = out / "_report" / "removed_lines.parquet"
    if listed.exists():
        rows = pd.read_parquet(listed, columns=["text"])["text"].tolist()
    else:  # an earlier build: the lines each changed document lost
        rows = []
        for i, t in zip(got["id"], got["text"]):
            if isinstance(t, str) and t != before[i]:
                rows += list((Counter(before[i].split("\n")) - Counter(t.split("\n"))).elements())
        gone = set(src_frame["id"]) - set(got["id"])
        rows += [line for i in sorted(gone) for line in (before[i] or "").split("\n")]
    if removed is None:
        removed = read - sum(len(t) for t in got["text"] if isinstance(t, str))
    with_words = [r for r in rows if re.search(r"\w", r)]
    return {"share": removed / read if read else 0.0, "kept": len(got), "holes": holes,
            "sample": rng.sample(with_words, min(sample, len(with_words)))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="a checkout of an earlier build, run beside this one")
    ap.add_argument("--web-docs", type=int, default=50_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sample", type=int, default=20)
    args = ap.parse_args()
    builds: dict[str, Path | None] = {"this build": None}
    if args.baseline:
        builds = {"earlier build": args.baseline.resolve(), **builds}
    corpora = {"hard-wrapped (man pages, licenses, docstrings)": hard_wrapped(),
               f"web-like (§7, {args.web_docs:,} pages)": with_boilerplate(corpus_frame(args.web_docs))}
    runs = {"dedup lines": ["lines"], "dedup run --lines": ["run", "--lines"], "dedup run": ["run"]}
    table, samples = [], []
    with tempfile.TemporaryDirectory(prefix="dedup-lines-") as tmp:
        work = Path(tmp)
        for cname, frame in corpora.items():
            src = write_corpus(frame, work / "in", 8)
            for bname, build in builds.items():
                for rname, command in runs.items():
                    r = run_one(build, command, src, work / "out", args.workers, build is None)
                    m = r["manifest"]
                    e = effect(frame, work / "out", m, args.sample, random.Random(0))
                    lines = m.get("lines") or {}
                    stop = "" if not lines else ("stops (exit 3)" if build is None and lines["characters_removed_share"]
                                                 > 0.5 else "goes through" if build is None else "no guard")
                    table.append((cname, bname, rname, len(frame), e["kept"], e["share"] if lines else None,
                                  e["holes"], m["near_duplicates_found"], stop, r["wall"]))
                    print(f"  {table[-1]}", file=sys.stderr)
                    if rname == "dedup lines":
                        samples.append((cname, bname, e["sample"]))
            shutil.rmtree(work / "in")
    print(f"{args.workers} local workers; `--no-index`; this build's guard raised to 1 to measure what it would stop\n")
    print("| corpus | build | run | documents | kept | characters removed by lines | kept with a new run of 5+ blank "
          "lines | near duplicates found | guard at 0.5 | wall s |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|---:|")
    for c, b, r, n, kept, share, holes, near, stop, wall in table:
        shown = f"{100 * share:.1f}%" if share is not None else "-"
        print(f"| {c} | {b} | `{r}` | {n:,} | {kept:,} | {shown} | {holes:,} | {near:,} | {stop or '-'} | {wall:.1f} |")
    for c, b, rows in samples:
        print(f"\n{len(rows)} removed lines with words, sampled (seed 0), {c}, {b}, `dedup lines`:")
        for line in rows:
            print(f"- `{line[:100]}`")


if __name__ == "__main__":
    main()
