"""The lines stage on Dask, with `dedup lines` or `run --lines`: exact line dedup (docs/contract.md,
section 6b). Each partition's keyed lines counted and their first occurrence found
(`partition_firsts`), routed by key to ranges where each key is settled over the corpus
(`settle_keys`), and the settled keys routed back to the partitions holding them (`line_keys`,
persisted): the features stage (`documents`) and the write rewrite a partition's texts from them
(`rewritten`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.job.compute import shared
from dedup.job.graphs import persist_counting
from dedup.job.routing import route_by
from dedup.job.stage import Settings, Step, View
from dedup.partition import lines as part_lines
from dedup.partition.features import ORIGINAL_TEXT
from dedup.report.shown import shorten

LINE_ROW_BYTES = 96
"""The estimate of a routed key row (two hashes, count, document, line, partition and an id)."""


class Lines(Step):
    """Which lines each document loses (`line_keys`), with their counts and the most repeated lines."""

    name = "lines"
    reads = ("source",)
    gives = ("line_keys", "line_counts", "top_lines")
    values = ("line_counts",)
    frames = ("line_keys",)
    tables = ("top_lines",)

    def wanted(self, s: Settings) -> bool:
        return s.lines

    def run(self, job: View) -> str:
        s, ddf = job.settings, job.source
        n = ddf.npartitions
        prot = shared(s.protected) if s.protected is not None else None
        id_dtype = ddf._meta[s.id_column].dtype
        meta = part_lines.firsts_meta(id_dtype)
        firsts = ddf.map_partitions(part_lines.partition_firsts, s.id_column, s.text_column, prot, meta=meta)
        ranged = route_by(firsts, partial(part_lines.key_part, npartitions=n), n)
        settled = ranged.map_partitions(part_lines.settle_keys, s.min_copies, meta=meta)
        back = route_by(settled, part_lines.to_partition, n)
        counts = dd.map_partitions(part_lines.removal_counts, ddf, back, s.text_column, prot, align_dataframes=False,
                                   meta={"lines": "int64", "chars": "int64", "documents": "int64", "emptied": "int64",
                                         "hist": object})
        top = settled.map_partitions(part_lines.top_keys, meta=meta)
        keys = settled.map_partitions(part_lines.key_count, meta={"n": "int64"})
        (line_keys,), (c, t, k) = persist_counting([back], [counts, top, keys])
        job.line_keys = line_keys
        job.top_lines = part_lines.top_keys(t).reset_index(drop=True)
        hist = np.sum(np.stack(c["hist"].to_list()), axis=0) if len(c) else np.zeros(part_lines.SHARE_BINS, np.int64)
        job.line_counts = {"min_copies": s.min_copies, "repeated_keys": int(k["n"].sum()),
                           "lines_removed": int(c["lines"].sum()), "characters_removed": int(c["chars"].sum()),
                           "documents_changed": int(c["documents"].sum()), "documents_dropped": int(c["emptied"].sum()),
                           "share_histogram": [int(x) for x in hist]}
        lc = job.line_counts
        return (f"{lc['lines_removed']} repeated lines ({lc['characters_removed']} characters) removed from "
                f"{lc['documents_changed']} documents, {lc['documents_dropped']} left without a word")

    def after(self, job: View) -> None:
        s = job.settings
        job.report.lines = dict(job.line_counts or {})
        top = top_lines_table(job.top_lines)
        job.report.top_lines = with_texts(top, s.locate, s.text_column) if s.locate is not None else top


def rewritten(source: dd.DataFrame, line_keys: dd.DataFrame, text_column: str) -> dd.DataFrame:
    """`source` with each partition's texts rewritten without the lines it loses (`line_keys`), the
    texts as they were beside them (`ORIGINAL_TEXT`): what every later stage reads."""
    meta = source._meta.assign(**{ORIGINAL_TEXT: source._meta[text_column]})
    return dd.map_partitions(part_lines.rewritten_frame, source, line_keys, text_column, ORIGINAL_TEXT,
                             meta=meta, align_dataframes=False)


def with_texts(top: list[dict[str, Any]], locate: Callable[[int], tuple[str, int]], text_column: str
               ) -> list[dict[str, Any]]:
    """The most repeated lines (`top_lines_table`) with their text, read from their first occurrence
    (a few rows of the input), without the internal document key: a long line's start and its length
    (`shorten`; a 141,700-character line was kept whole in the manifest)."""
    from dedup.job.page_data import read_texts

    if not top:
        return top
    texts = read_texts(np.unique(np.asarray([t["doc"] for t in top], np.int64)), locate, text_column)
    lines = [texts[t["doc"]].split("\n")[t["line"]] for t in top]
    return [{"count": t["count"], "text": shorten(line), "characters": len(line), "document": t["document"],
             "line": t["line"]} for t, line in zip(top, lines)]


def top_lines_table(top: pd.DataFrame | None) -> list[dict[str, Any]]:
    """The most repeated lines: each one's count, and its first occurrence (document key and id, and
    line), whose text `line_texts` reads."""
    if top is None or top.empty:
        return []
    return [{"count": int(r["count"]), "document": r["_id"] if isinstance(r["_id"], str) else int(r["_id"]),
             "line": int(r["line"]), "doc": int(r["doc"])} for r in top.to_dict("records")]
