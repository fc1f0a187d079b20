"""Decontamination you can audit, measured: recall of planted eval records in four forms, false
positives with and without a frequency cap, and what tag and cut cost beside drop, on the §7 corpus.

    python benchmarks/contamination.py                  # 1,000,000 documents
    python benchmarks/contamination.py --docs 200000

The corpus (`corpus.corpus_frame`) in 16 files, with 1,000 eval records (20 words each, from the
corpus's own vocabulary) planted in 1,000 documents, 250 in each form: verbatim, re-wrapped at 8
words a line, inside 10 times their length of filler, and upper-cased with punctuation between the
words. 50 of the records end with a license sentence that 2% of the corpus's documents carry as a
footer: boilerplate shared with the eval files. Each run is `dedup run` in a process of its own on a
local cluster of `--workers` workers (its start included), `--no-index`, the page on (the removed
list is where recall is read): drop, tag, cut, then drop with `--max-ngram-docs 10`. Where lm-eval
installs (the bench extra), each planted document the cut keeps is also cut by its Janitor
(`lm_eval.decontamination.janitor.Janitor`, GPT-3's parameters, which are its defaults) and the texts compared.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import corpus_frame, write_corpus  # noqa: E402
from speed import PeakRSS, quiet  # noqa: E402

FORMS = ("verbatim", "wrapped at 8 words", "inside 10x filler", "case and punctuation")
LICENSE = ("permission is hereby granted free of charge to any person obtaining a copy of this software and "
           "associated documentation files to deal in the software without restriction")
RECORDS, RECORD_WORDS, WITH_LICENSE, LICENSED_SHARE = 1000, 20, 50, 0.02
"""20 words: eight windows, so the cut keeps a document quoting one record (more than ten drops it)."""


def plant(frame: pd.DataFrame, seed: int = 1) -> tuple[pd.DataFrame, list[str], dict[str, str]]:
    """The corpus with the records planted and the license footer added; the records; planted id -> form."""
    rng = random.Random(seed)
    vocab = sorted({w for t in frame["text"].iloc[:2000] for w in re.findall(r"\w+", t.lower())})
    records = [" ".join(rng.choice(vocab) for _ in range(RECORD_WORDS)) for _ in range(RECORDS)]
    for i in range(WITH_LICENSE):
        records[i] = f"{records[i]} {LICENSE}"
    texts = frame["text"].tolist()
    rows = rng.sample(range(len(texts)), RECORDS + int(LICENSED_SHARE * len(texts)))
    planted = {}
    for r, row in enumerate(rows[:RECORDS]):
        form, words, text = FORMS[r % 4], records[r].split(), texts[row]
        half = len(text) // 2
        if form == "verbatim":
            new = f"{text[:half]} {records[r]} {text[half:]}"
        elif form == "wrapped at 8 words":
            new = f"{text[:half]}\n" + "\n".join(" ".join(words[i:i + 8]) for i in range(0, len(words), 8)) + \
                f"\n{text[half:]}"
        elif form == "inside 10x filler":
            filler = (text + " " + texts[(row + 1) % len(texts)] + " " + texts[(row + 2) % len(texts)])
            filler = filler[:10 * len(records[r])]
            new = f"{filler[:len(filler) // 2]} {records[r]} {filler[len(filler) // 2:]}"
        else:
            new = f"{text[:half]} " + " ".join(w.upper() + rng.choice([",", ";", "!", " -", ""]) for w in words) + \
                f" {text[half:]}"
        texts[row] = new
        planted[frame["id"].iloc[row]] = form
    for row in rows[RECORDS:]:
        texts[row] = f"{texts[row]}\n{LICENSE.capitalize()}."
    return frame.assign(text=texts), records, planted


def run_one(src: Path, out: Path, evals: Path, workers: int, *extra: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    quiet()
    with PeakRSS(children_only=True) as peak:
        start = time.perf_counter()
        got = subprocess.run([sys.executable, "-m", "dedup", "run", str(src), str(out), "--n-workers", str(workers),
                              "--no-index", "--protected", str(evals), "--max-contaminated", "1", *extra],
                             capture_output=True, text=True, cwd=out.parent)
        wall = time.perf_counter() - start
    if got.returncode:
        raise SystemExit(f"{extra} failed: {got.stderr[-2000:]}")
    m = json.loads((out / "_dedup.json").read_text())
    removed = pd.read_parquet(out / "_report" / "removed.parquet", columns=["id", "reason"])
    hit = set(removed.loc[removed["reason"].str.startswith("contaminated"), "id"])
    return {"wall": wall, "cpu": peak.cpu_total, "worker": peak.child_peak, "manifest": m, "removed": hit}


def janitor_texts(texts: list[str], records: list[str]) -> list[str | None] | None:
    """Each text as lm-eval's Janitor cuts it (its chunks joined by a line break; None when it drops
    the text), or None when lm-eval is not installed."""
    try:
        from lm_eval.decontamination.janitor import Janitor
    except ImportError:
        return None
    import contextlib
    import io

    out: list[str | None] = []
    with contextlib.redirect_stdout(io.StringIO()):  # it says "running in python mode" at every call
        janitor = Janitor()  # ngram_n 13, window_to_remove 200, too_dirty_cutoff 10, minimum_slice_length 200
        for r in records:
            janitor.register_contaminant(r)
        for t in texts:
            chunks = janitor.clean_python(t)
            out.append("\n".join(chunks) if chunks else None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dedup-contamination-") as tmp:
        work = Path(tmp)
        frame, records, planted = plant(corpus_frame(args.docs))
        src = write_corpus(frame[["id", "text"]], work / "in", 16)
        evals = work / "evals.jsonl"
        evals.write_text("".join(json.dumps({"id": f"q-{i}", "question": r}) + "\n" for i, r in enumerate(records)))
        runs = {name: run_one(src, work / "out", evals, args.workers, *extra) for name, extra in (
            ("drop", ()), ("tag", ("--contaminated", "tag")), ("cut", ("--contaminated", "cut")),
            ("drop, --max-ngram-docs 10", ("--max-ngram-docs", "10")))}
        run_one(src, work / "cut", evals, args.workers, "--contaminated", "cut", "--keep-duplicates")  # every cut text kept
        gb = frame["text"].str.len().sum() / 1e9
        print(f"\n{len(frame):,} documents ({gb:.2f} GB of text), {RECORDS:,} eval records planted, "
              f"{args.workers} local workers\n")
        print("| run | wall s | CPU s | peak RSS of one worker (MiB) | documents hit | removed | cut | tagged "
              "| wall against drop | CPU against drop |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        base = runs["drop"]
        for name, r in runs.items():
            c = r["manifest"]["contamination"]
            print(f"| `{name}` | {r['wall']:.1f} | {r['cpu']:.1f} | {r['worker'] / 2**20:,.0f} | {c['documents_hit']:,} "
                  f"| {c['removed']:,} | {c['cut']:,} | {c['tagged']:,} | {r['wall'] / base['wall']:.2f} "
                  f"| {r['cpu'] / base['cpu']:.2f} |")
        print("\n| form | planted | found (drop) | recall | found (`--max-ngram-docs 10`) | recall |")
        print("|---|---:|---:|---:|---:|---:|")
        capped = runs["drop, --max-ngram-docs 10"]["removed"]
        for form in FORMS:
            ids = {i for i, f in planted.items() if f == form}
            a, b = len(ids & base["removed"]), len(ids & capped)
            print(f"| {form} | {len(ids)} | {a} | {100 * a / len(ids):.1f}% | {b} | {100 * b / len(ids):.1f}% |")
        fp, fp_cap = len(base["removed"] - set(planted)), len(capped - set(planted))
        licensed = int(LICENSED_SHARE * len(frame))
        m = runs["drop, --max-ngram-docs 10"]["manifest"]["contamination"]
        print(f"\nFalse-positive documents (hit, not planted): {fp:,} without a cap ({licensed:,} carry the license "
              f"footer), {fp_cap:,} with --max-ngram-docs 10 ({m['common_ngrams']:,} common n-grams ignored).")
        kept = pd.read_parquet(work / "cut", columns=["id", "text"])
        ours = dict(zip(kept["id"], kept["text"]))
        ids = [i for i in planted if i in ours]
        original = dict(zip(frame["id"], frame["text"]))
        theirs = janitor_texts([original[i] for i in ids], records)
        if theirs is None:
            print("lm-eval is not installed here: no Janitor comparison.")
        else:
            same = sum(ours[i] == t for i, t in zip(ids, theirs))
            dropped = sum(t is None for t in theirs)
            print(f"lm-eval's Janitor: of the {len(ids):,} planted documents the cut kept, {same:,} "
                  f"({100 * same / max(1, len(ids)):.1f}%) have the same text as its Janitor gives; it drops {dropped:,}.")
            for form in FORMS:
                pairs = [(ours[i], t) for i, t in zip(ids, theirs) if planted[i] == form]
                alike = sum(a == b for a, b in pairs)
                print(f"  {form}: {alike:,} of {len(pairs):,} the same")


if __name__ == "__main__":
    main()
