"""The contamination stage on Dask: contaminated documents counted per protected file and record."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.core.decontam import ProtectedNgrams
from dedup.core.text import encode_batch, texts_of
from dedup.job.compute import compute, shared
from dedup.job.features import without_signatures
from dedup.job.manifest import contamination_guard, record_warning
from dedup.job.notices import warn
from dedup.job.stage import Settings, Step, View
from dedup.partition.features import first_examples, record_examples
from dedup.storage.safety import TooContaminated

log = logging.getLogger("dedup")


@dataclass(frozen=True)
class ContaminationCounts:
    """Contaminated documents per protected file and record (the first `MAX_RECORDS_IN_MANIFEST`),
    the records hit, and (source, doc, _id) of an example document per record for the page."""

    by_file: dict[str, int]
    by_record: list[dict[str, Any]]
    records: int
    examples: pd.DataFrame | None

MAX_RECORDS_IN_MANIFEST = 1000


def _hit_counts(part: pd.DataFrame, feat: pd.DataFrame, protected: ProtectedNgrams, text_column: str) -> pd.DataFrame:
    rows = np.flatnonzero(feat["source"].to_numpy() >= 0)
    texts = texts_of(part[text_column].iloc[rows]) if len(rows) else []
    return protected.hit_counts(encode_batch(texts))


def contamination(ddf: dd.DataFrame, feat: dd.DataFrame, protected: ProtectedNgrams, text_column: str,
                  contaminated_rows: int, examples: bool = False) -> ContaminationCounts:
    """Documents removed per protected file and per record (re-reading only contaminated texts). With `examples`, also
    each record's example for the page: the document with the smallest id among those holding the
    record's smallest n-gram found (`record_examples`), so that the n-gram shown is in the example.
    Each record also counts the documents `removed.parquet` lists under it (`listed`: those whose
    first record it is), as a document sharing n-grams with several records counts under each."""
    if contaminated_rows == 0:
        return ContaminationCounts(dict.fromkeys(protected.files, 0), [], 0, None)
    meta = protected.hit_counts(encode_batch([]))
    lazy = [dd.map_partitions(_hit_counts, ddf, feat[["source"]], shared(protected), text_column, meta=meta,
                              align_dataframes=False),
            feat[["source"]].map_partitions(_listed, meta={"source": np.int32, "listed": np.int64})]
    if examples:
        example_meta = pd.DataFrame({"source": pd.Series(dtype=np.int32), "gram": pd.Series(dtype=np.int64),
                                     "doc": pd.Series(dtype=np.int64), "_id": feat._meta["_id"]})
        lazy.append(dd.map_partitions(record_examples, ddf, without_signatures(feat)[["source", "doc", "_id"]],
                                      shared(protected), text_column, meta=example_meta, align_dataframes=False))
    hc, listed_parts, *first = compute(*lazy)
    listed = listed_parts.groupby("source")["listed"].sum()
    agg = hc.groupby(["kind", "index"]).agg(documents=("documents", "sum"), gram=("gram", "min")).reset_index()
    files = agg[agg["kind"] == 1]
    by_file = dict(zip(files["index"], files["documents"]))
    per_file = {name: int(by_file.get(i, 0)) for i, name in enumerate(protected.files)}
    recs = agg[agg["kind"] == 0].sort_values(["documents", "index"], ascending=[False, True])
    entries: list[dict[str, Any]] = []
    for rec, docs, gram in zip(recs["index"], recs["documents"], recs["gram"]):
        entry = {"file": protected.files[protected.record_file[rec]], "record": protected.record_labels[rec],
                 "documents": int(docs), "listed": int(listed.get(rec, 0)), "ngram": protected.ngram_text(int(gram))}
        if len(entries) < MAX_RECORDS_IN_MANIFEST:
            entries.append(entry)
    return ContaminationCounts(per_file, entries, len(recs), first_examples(first[0]) if first else None)


def _listed(feat: pd.DataFrame) -> pd.DataFrame:
    """Per protected record, the documents of one partition whose first record it is (`removed.parquet`'s)."""
    counts = feat.loc[feat["source"] >= 0, "source"].value_counts()
    return pd.DataFrame({"source": counts.index.to_numpy(np.int32), "listed": counts.to_numpy(np.int64)})


class Contamination(Step):
    """With protected files: the contaminated documents per protected file and record (and an example
    of each for the page); then the guard: a run that would remove more than `max_contaminated` of its
    input stops here."""

    name = "contamination"
    reads = ("source", "feat")
    gives = ("examples",)
    tables = ("examples",)

    def wanted(self, s: Settings) -> bool:
        return s.protected is not None

    def run(self, job: View) -> str:
        s, report = job.settings, job.report
        assert s.protected is not None
        got = contamination(job.source, job.feat, s.protected, s.text_column, report.contaminated,
                            examples=s.details)
        job.examples = got.examples
        report.contaminated_by_file = got.by_file
        report.contaminated_by_record = got.by_record
        report.contaminated_records = got.records
        for entry in got.by_record:  # the records are in order of documents: those warned of come first
            warn(report, record_warning(entry, report.input_rows))
        return f"{report.contaminated} documents hit {got.records} protected record(s)"

    def after(self, job: View) -> None:
        s = job.settings
        if s.max_contaminated is not None and (stop := contamination_guard(job.report, s.max_contaminated)):
            if not s.dry_run:
                raise TooContaminated(stop)
            if stop not in job.report.warnings:  # said once, however often the stage is read back
                warn(job.report, stop)  # a dry run says what the run would do
