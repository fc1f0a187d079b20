"""The lines stage on Dask, with `dedup lines` or `run --lines`: exact line dedup (docs/contract.md,
section 6b) on the documents near dedup and decontamination keep. Each partition's keyed lines of
its survivors counted and their first occurrence found (`partition_firsts`), routed by key to
ranges where each key is settled over the corpus (`settle_keys`, and the what-if counts of other
settings, `what_if`), the settled keys routed back to the partitions holding them (`line_keys`), and
each partition's changed documents found from them (`line_changes`: lines lost, characters before
and after, dropped or not). Both are persisted; the write rewrites the texts from them. Then the
guard: a run that would remove more than `max_lines_removed` of its survivors' characters stops."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.job.contamination import after_check, cut_input
from dedup.job.features import without_signatures
from dedup.job.graphs import persist_counting, read_for
from dedup.job.notices import warn
from dedup.job.routing import route_by
from dedup.job.stage import Settings, Step, View, rule_needed
from dedup.partition import lines as part_lines
from dedup.report.shown import shorten
from dedup.storage.safety import TooManyLinesRemoved


class Lines(Step):
    """Which lines each surviving document loses (`line_keys`, `line_changes`), with their counts, the
    most repeated lines and what other settings would remove; then the guard."""

    name = "lines"
    reads = ("source", "feat", "roots", "rule")
    gives = ("line_keys", "line_changes", "line_counts", "top_lines")
    values = ("line_counts",)
    frames = ("line_keys", "line_changes")
    tables = ("top_lines",)

    def wanted(self, s: Settings) -> bool:
        return s.lines

    def needs(self, s: Settings) -> tuple[str, ...]:
        return ("source", "feat", *(("roots",) if s.near else ()), *rule_needed(s))

    def run(self, job: View) -> str:
        s, ddf = job.settings, job.source
        n = ddf.npartitions

        def read(use: str) -> tuple[dd.DataFrame, dd.DataFrame]:
            """The input and its features, read for one step alone (`read_for`): a read shared by
            steps on either side of a move would be held, every partition of it, until both ran."""
            feat = without_signatures(read_for(job.feat, use))
            return cut_input(read_for(ddf, use), feat, s, job.protected), feat

        roots = job.roots if s.near else None
        drop = s.drop and s.near
        prot = after_check(s, job.protected)
        meta = part_lines.firsts_meta(ddf._meta[s.id_column].dtype)
        firsts = dd.map_partitions(part_lines.partition_firsts, *read("line_keys"), roots, s.id_column, s.text_column, drop,
                                   meta=meta, align_dataframes=False)
        ranged = route_by(firsts, partial(part_lines.key_part, npartitions=n), n)
        settled = ranged.map_partitions(part_lines.settle_keys, s.min_copies, s.min_line_words, meta=meta)
        what = ranged.map_partitions(part_lines.what_if, meta=part_lines.WHAT_IF_META)
        back = route_by(settled, part_lines.to_partition, n)
        changes = dd.map_partitions(part_lines.line_changes, *read("line_changes"), roots, back, s.text_column, drop, prot,
                                    meta=part_lines.CHANGES_META, align_dataframes=False)
        counts = changes.map_partitions(part_lines.change_counts, meta=part_lines.COUNTS_META)
        whole = dd.map_partitions(part_lines.surviving_chars, *read("line_keys"), roots, s.text_column, drop,
                                  meta={"chars": "int64", "documents": "int64"}, align_dataframes=False)
        top = settled.map_partitions(part_lines.top_keys, meta=meta)
        keys = settled.map_partitions(part_lines.key_count, meta={"n": "int64"})
        (line_keys, line_changes), (c, t, k, w, a) = persist_counting([back, changes], [counts, top, keys, what, whole])
        job.line_keys, job.line_changes = line_keys, line_changes
        job.top_lines = part_lines.top_keys(t).reset_index(drop=True)
        job.line_counts = line_counts(c, int(k["n"].sum()), w, int(a["chars"].sum()), int(a["documents"].sum()),
                                      s.min_copies, s.min_line_words)
        lc = job.line_counts
        return (f"{lc['lines_removed']} repeated lines ({lc['characters_removed']} characters, "
                f"{lc['characters_removed_share']:.1%} of the survivors') removed from {lc['documents_changed']} "
                f"documents; {lc['documents_dropped']} left without a word, {lc['documents_contaminated']} "
                "contaminated by their new text")

    def after(self, job: View) -> None:
        s, report = job.settings, job.report
        lc = dict(job.line_counts or {})
        report.lines = lc
        report.emptied_by_lines = int(lc.get("documents_dropped", 0))
        report.contaminated_after_lines = int(lc.get("documents_contaminated", 0))
        top = top_lines_table(job.top_lines)
        report.top_lines = with_texts(top, s.locate, s.text_column) if s.locate is not None else top
        if (stop := lines_guard(lc, report.top_lines, s.max_lines_removed)) is not None:
            if not s.dry_run:
                raise TooManyLinesRemoved(stop)
            if stop not in report.warnings:  # said once, however often the stage is read back
                warn(report, stop)


def line_counts(c: pd.DataFrame, repeated_keys: int, what: pd.DataFrame, surviving: int, documents: int,
                min_copies: int, min_words: int) -> dict[str, Any]:
    """The stage's counts (the manifest's `lines`), from the partitions' `change_counts`, the key
    ranges' `what_if` cells and the survivors' characters."""
    hist = np.sum(np.stack(c["hist"].to_list()), axis=0) if len(c) else np.zeros(part_lines.SHARE_BINS, np.int64)
    cells = np.sum(np.stack(what["removed"].to_list()), axis=0) if len(what) else \
        np.zeros((len(part_lines.WHAT_IF_COPIES), len(part_lines.WHAT_IF_WORDS)), np.int64)
    removed = int(c["chars"].sum())
    return {"min_copies": min_copies, "min_line_words": min_words, "repeated_keys": repeated_keys,
            "lines_removed": int(c["lines"].sum()), "characters_removed": removed,
            "surviving_documents": documents, "surviving_characters": surviving,
            "characters_removed_share": removed / surviving if surviving else 0.0,
            "documents_changed": int(c["documents"].sum()), "documents_dropped": int(c["emptied"].sum()),
            "documents_contaminated": int(c["contaminated"].sum()),
            "share_histogram": [int(x) for x in hist],
            "what_if": [{"min_copies": mc, "min_line_words": mw, "characters_removed": int(cells[i, j]),
                         "share": int(cells[i, j]) / surviving if surviving else 0.0}
                        for i, mc in enumerate(part_lines.WHAT_IF_COPIES)
                        for j, mw in enumerate(part_lines.WHAT_IF_WORDS)]}


def lines_guard(counts: dict[str, Any], top: list[dict[str, Any]], limit: float) -> str | None:
    """The guard's one line when line dedup would remove more than `limit` of the survivors'
    characters, else None: the share, the most repeated lines, and what to try."""
    share = counts.get("characters_removed_share", 0.0)
    if share <= limit:
        return None
    named = "; ".join(f"{t['text']!r} x{t['count']:,}" for t in top[:3] if "text" in t)
    return (f"line dedup would remove {share:.1%} of the surviving documents' characters "
            f"({counts['characters_removed']:,} of {counts['surviving_characters']:,}; --max-lines-removed is "
            f"{limit:g})" + (f", most repeated: {named}" if named else "") +
            ". Look first with --dry-run (the page's what-if table), then raise --min-copies or --min-line-words "
            "(or --max-lines-removed).")


def with_texts(top: list[dict[str, Any]], locate: Callable[[int], tuple[str, int]], text_column: str
               ) -> list[dict[str, Any]]:
    """The most repeated lines (`top_lines_table`) with their text as it appears at its first
    occurrence (a few rows of the input), without the internal document key: a long line's start
    and its length (`shorten`; a 141,700-character line was kept whole in the manifest)."""
    from dedup.job.page_data import read_texts

    if not top:
        return top
    texts = read_texts(np.unique(np.asarray([t["doc"] for t in top], np.int64)), locate, text_column)
    lines = [texts[t["doc"]].split("\n")[t["line"]] for t in top]
    return [{"count": t["count"], "text": shorten(line), "characters": len(line), "document": t["document"],
             "line": t["line"]} for t, line in zip(top, lines)]


def top_lines_table(top: pd.DataFrame | None) -> list[dict[str, Any]]:
    """The most repeated lines: each one's count, and its first occurrence (document key and id, and
    line), whose text `with_texts` reads."""
    if top is None or top.empty:
        return []
    return [{"count": int(r["count"]), "document": r["_id"] if isinstance(r["_id"], str) else int(r["_id"]),
             "line": int(r["line"]), "doc": int(r["doc"])} for r in top.to_dict("records")]
