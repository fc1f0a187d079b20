"""The spans stage on Dask, with `dedup spans` or `run --spans`: exact substring dedup (docs/contract.md,
section 6c) on the survivors, their texts as line dedup leaves them, in the three moves
`dedup.partition.spans` describes. Each step reads the input for itself (`read_for`), and only each
partition's changed documents with their new texts (`span_changes`) are held after it: the write
writes those."""

from __future__ import annotations

from functools import partial
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.job.compute import compute, shared
from dedup.job.contamination import after_check, cut_input
from dedup.job.features import without_signatures
from dedup.job.graphs import persist_counting, read_for
from dedup.job.routing import route_by
from dedup.job.stage import Settings, Step, View, rule_needed
from dedup.partition import lines as part_lines
from dedup.partition import span_keys
from dedup.partition import spans as part_spans
from dedup.report.shown import shorten


class Spans(Step):
    """Which spans each surviving document loses and its new text (`span_changes`), with their counts
    and the most repeated spans."""

    name = "spans"
    reads = ("source", "feat", "roots", "line_keys", "line_changes", "rule")
    gives = ("span_changes", "span_counts", "top_spans")
    values = ("span_counts",)
    frames = ("span_changes",)
    tables = ("top_spans",)

    def wanted(self, s: Settings) -> bool:
        return s.spans is not None

    def needs(self, s: Settings) -> tuple[str, ...]:
        return ("source", "feat", *(("roots",) if s.near else ()), *(("line_keys", "line_changes") if s.lines else ()),
                *rule_needed(s))

    def run(self, job: View) -> str:
        s, ddf = job.settings, job.source
        assert s.spans is not None
        n = ddf.npartitions
        roots = job.roots if s.near else None
        line_keys, line_changes = (job.line_keys, job.line_changes) if s.lines else (None, None)
        drop = s.drop and s.near
        prot = after_check(s, job.protected)
        id_dtype = ddf._meta[s.id_column].dtype

        def read(use: str) -> tuple[dd.DataFrame, dd.DataFrame]:
            """The input and its features, read for one step alone (`read_for`): a read shared by
            steps on either side of a move would be held, every partition of it, until both ran."""
            feat = without_signatures(read_for(job.feat, use))
            return cut_input(read_for(ddf, use), feat, s, job.protected), feat

        # the first move: every first hash once, 8 bytes a row (`span_keys.packed`); those seen twice come back
        counted = dd.map_partitions(part_spans.window_counts, *read("span_counts"), roots, line_keys, line_changes,
                                    s.text_column, drop, s.spans, n, meta=span_keys.COUNTS_META, align_dataframes=False)
        repeated = route_by(route_by(counted, partial(span_keys.key_range, npartitions=n), n).map_partitions(
            span_keys.repeated_keys, n, meta=span_keys.COUNTS_META), partial(span_keys.part_of, npartitions=n), n)
        # the second: the repeated keys with their first occurrence here, settled over the corpus
        windows = dd.map_partitions(part_spans.partition_windows, *read("span_windows"), roots, line_keys, line_changes,
                                    repeated, s.id_column, s.text_column, drop, s.spans, n,
                                    meta=part_spans.windows_meta(id_dtype), align_dataframes=False)
        settled = route_by(windows, partial(part_lines.key_part, npartitions=n), n).map_partitions(
            span_keys.settle_windows, meta=span_keys.settled_meta(id_dtype))
        # the third: each repeated key to the partitions holding it, which cut what it covers
        top = settled.map_partitions(span_keys.top_windows, TOP_CANDIDATES,
                                     meta=span_keys.top_meta(id_dtype))
        back = route_by(dd.map_partitions(span_keys.to_holders, settled, top, meta=span_keys.HOLDERS_META,
                                          align_dataframes=False), span_keys.holder_of, n)
        changes = dd.map_partitions(part_spans.span_changes, *read("span_changes"), roots, line_keys, line_changes, back,
                                    s.text_column, drop, prot, s.spans, meta=part_spans.SPAN_CHANGES_META,
                                    align_dataframes=False)
        counts = changes.map_partitions(part_spans.span_counts, meta=part_spans.SPAN_COUNTS_META)
        # only the changes are held: the repeated keys go to them straight from the shuffle
        (span_changes,), (c, t) = persist_counting([changes], [counts, top])
        job.span_changes = span_changes
        top_rows = distinct_windows(span_keys.top_of(t, TOP_CANDIDATES), s.spans.size)
        if len(top_rows):  # the spans' texts, read at their first occurrence by the partitions holding them
            slim = without_signatures(job.feat)
            texts = dd.map_partitions(part_spans.window_texts, cut_input(ddf, slim, s, job.protected), slim, roots,
                                      line_keys, line_changes,
                                      s.text_column, drop, s.spans, shared(top_rows),
                                      meta={"doc": "int64", "line": "int64", "text": object}, align_dataframes=False)
            (found,) = compute(texts)
            top_rows = top_rows.merge(found, on=["doc", "line"], how="left")
        job.top_spans = top_rows
        job.span_counts = span_counts(c, int(t["keys"].sum()), s.spans)
        sc = job.span_counts
        return (f"{sc['spans_cut']} repeated spans ({sc['tokens_removed']} tokens, {sc['characters_removed']} "
                f"characters) cut from {sc['documents_changed']} documents; {sc['documents_dropped']} left without a "
                f"word, {sc['documents_contaminated']} contaminated by their new text")

    def after(self, job: View) -> None:
        report = job.report
        sc = dict(job.span_counts or {})
        report.spans = {**sc, "top_spans": top_spans_table(job.top_spans)}
        report.emptied_by_spans = int(sc.get("documents_dropped", 0))
        report.contaminated_after_spans = int(sc.get("documents_contaminated", 0))


TOP_CANDIDATES = 200
"""The most repeated windows looked at for the page's table (`distinct_windows` keeps 20 of them)."""


def distinct_windows(top: pd.DataFrame, size: int, n: int = part_lines.SHOWN_LINES) -> pd.DataFrame:
    """Of the most repeated windows (in order), the first `n` whose first occurrence overlaps none
    before it: a repeated passage is shown once, not as each of its windows, one token apart."""
    taken: dict[int, list[int]] = {}
    keep = []
    for i, (doc, line) in enumerate(zip(top["doc"].tolist(), top["line"].tolist())):
        if any(abs(line - other) < size for other in taken.get(doc, [])):
            continue
        taken.setdefault(doc, []).append(line)
        keep.append(i)
        if len(keep) == n:
            break
    return top.iloc[keep].reset_index(drop=True)


def span_counts(c: pd.DataFrame, repeated_keys: int, rule: part_spans.SpanRule) -> dict[str, Any]:
    """The stage's counts (the manifest's `spans`), from the partitions' `span_counts`."""
    hist = np.sum(np.stack(c["hist"].to_list()), axis=0) if len(c) else np.zeros(part_lines.SHARE_BINS, np.int64)
    return {"span_tokens": rule.size, "keep": rule.keep, "unit": rule.unit, "repeated_windows": repeated_keys,
            "spans_cut": int(c["spans"].sum()), "tokens_removed": int(c["tokens"].sum()),
            "characters_removed": int(c["chars"].sum()), "documents_changed": int(c["documents"].sum()),
            "documents_dropped": int(c["emptied"].sum()), "documents_contaminated": int(c["contaminated"].sum()),
            "share_histogram": [int(x) for x in hist]}


def top_spans_table(top: pd.DataFrame | None) -> list[dict[str, Any]]:
    """The most repeated spans: each one's copies, its text at its first occurrence (a long one's start
    and its length), that document's id and the span's first token's position there."""
    if top is None or top.empty:
        return []
    out = []
    for r in top.to_dict("records"):
        text = r.get("text") if isinstance(r.get("text"), str) else ""
        out.append({"copies": int(r["count"]), "text": shorten(text), "characters": len(text),
                    "document": r["_id"] if isinstance(r["_id"], str) else int(r["_id"]), "token": int(r["line"])})
    return out
