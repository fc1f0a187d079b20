"""The contamination stage on Dask: the documents hit counted per protected file and record, the eval
side (`_report/eval_records.parquet`: a row per protected record, docs/contract.md §6e) and what each
`--max-ngram-docs` cap would leave hit; then the guard. Only the texts of documents hit are read
again; every tally is summed by Dask's group-by, bounded by the protected set."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.config import WHAT_IF_NGRAM_DOCS
from dedup.core.decontam import ProtectedNgrams
from dedup.job.compute import compute, shared
from dedup.job.features import without_signatures
from dedup.job.graphs import persist, read_for
from dedup.job.manifest import contamination_guard, record_warning
from dedup.job.notices import warn
from dedup.job.stage import Settings, Step, View, rule_needed
from dedup.partition import contamination as part_cont
from dedup.partition.features import HIT, first_examples
from dedup.storage.safety import TooContaminated

log = logging.getLogger("dedup")


@dataclass(frozen=True)
class ContaminationCounts:
    """Documents hit per protected file and record (the first `MAX_RECORDS_IN_MANIFEST`), the records
    hit, (source, doc, _id) of an example document per record for the page, the eval side (a row per
    record, `eval_records`) and the documents each `--max-ngram-docs` cap would leave hit."""

    by_file: dict[str, int]
    by_record: list[dict[str, Any]]
    records: int
    examples: pd.DataFrame | None
    eval_records: pd.DataFrame
    what_if: list[dict[str, int]]

MAX_RECORDS_IN_MANIFEST = 1000


def eval_table(full: ProtectedNgrams, rule: ProtectedNgrams, by_record: pd.DataFrame, grams: pd.DataFrame) -> pd.DataFrame:
    """The eval side: a row per protected record, in file order (docs/contract.md §6e). `by_record`:
    (record, documents, longest_run) summed over the corpus; `grams`: the n-grams of `rule` found."""
    n = len(full.record_labels)
    ngrams = full.record_ngrams()
    _, rec = rule.records_of(grams["gram"].to_numpy(np.int64))
    found = np.bincount(rec, minlength=n)
    documents, longest = np.zeros(n, np.int64), np.zeros(n, np.int64)
    r = by_record["record"].to_numpy(np.int64)
    documents[r], longest[r] = by_record["documents"].to_numpy(np.int64), by_record["longest_run"].to_numpy(np.int64)
    return pd.DataFrame({
        "file": [full.files[f] for f in full.record_file.tolist()], "record": list(full.record_labels),
        "ngrams": ngrams, "ignored": ngrams - rule.record_ngrams(), "documents": documents,
        "found_share": np.divide(found, ngrams, out=np.zeros(n), where=ngrams > 0),
        "longest_run": longest})


def contamination(ddf: dd.DataFrame, feat: dd.DataFrame, full: ProtectedNgrams, rule: ProtectedNgrams,
                  text_column: str, hit_rows: int, examples: bool = False) -> ContaminationCounts:
    """The documents hit per protected file and record (re-reading only their texts), the eval side
    and the cap's what-if. With `examples`, also each record's example for the page: the document
    with the smallest id among those holding the record's smallest n-gram found (`hit_examples`),
    so that the n-gram shown is in the example. Each record also counts the documents
    `removed.parquet` lists under it (`listed`: those removed whose first record it is), as a
    document sharing n-grams with several records counts under each. `full`: the eval files' n-grams;
    `rule`: those in force (without the common ones)."""
    if hit_rows == 0:
        return ContaminationCounts(dict.fromkeys(full.files, 0), [], 0, None,
                                   eval_table(full, rule, part_cont.RECORDS_META, part_cont.GRAMS_META),
                                   [{"max_ngram_docs": k, "documents": 0} for k in WHAT_IF_NGRAM_DOCS])
    slim = without_signatures(feat)
    hits = dd.map_partitions(part_cont.partition_hits, read_for(ddf, "eval"), slim[["doc", HIT]], shared(rule),
                             text_column, meta=part_cont.HITS_META, align_dataframes=False)
    hits = persist(hits)
    prot = shared(rule)
    by_record = hits.map_partitions(part_cont.record_tallies, prot, meta=part_cont.RECORDS_META).groupby("record").agg(
        {"documents": "sum", "longest_run": "max", "gram": "min"}, split_out=1)
    by_file = hits.map_partitions(part_cont.file_tallies, prot, meta=part_cont.FILES_META).groupby("file")[
        "documents"].sum(split_out=1)
    grams = hits.map_partitions(part_cont.hit_grams, meta=part_cont.GRAMS_META).groupby("gram")["documents"].sum(
        split_out=1)
    lazy = [by_record, by_file, grams, slim[["source"]].map_partitions(_listed, meta={"source": np.int32, "listed": np.int64})]
    if examples:
        example_meta = pd.DataFrame({"source": pd.Series(dtype=np.int32), "gram": pd.Series(dtype=np.int64),
                                     "doc": pd.Series(dtype=np.int64), "_id": feat._meta["_id"]})
        lazy.append(dd.map_partitions(part_cont.hit_examples, hits, slim[["doc", "_id"]], prot, meta=example_meta,
                                      align_dataframes=False))
    recs, files, gram_docs, listed_parts, *first = compute(*lazy)
    recs = recs.reset_index().sort_values(["documents", "record"], ascending=[False, True])
    gram_docs = pd.DataFrame({"gram": gram_docs.index.to_numpy(np.int64), "documents": gram_docs.to_numpy(np.int64)})
    per_gram = np.zeros(len(rule), np.int64)
    per_gram[gram_docs["gram"].to_numpy()] = gram_docs["documents"].to_numpy()
    (what,) = compute(hits.map_partitions(part_cont.what_if, shared(per_gram), meta=part_cont.WHAT_IF_META))
    del hits
    what = what.groupby("max_ngram_docs")["documents"].sum()
    listed = listed_parts.groupby("source")["listed"].sum()
    by_file_map = dict(zip(files.index, files.to_numpy()))
    per_file = {name: int(by_file_map.get(i, 0)) for i, name in enumerate(full.files)}
    entries: list[dict[str, Any]] = []
    for rec, docs, gram in zip(recs["record"].tolist()[:MAX_RECORDS_IN_MANIFEST],
                               recs["documents"].tolist()[:MAX_RECORDS_IN_MANIFEST],
                               recs["gram"].tolist()[:MAX_RECORDS_IN_MANIFEST]):
        entries.append({"file": full.files[full.record_file[rec]], "record": full.record_labels[rec],
                        "documents": int(docs), "listed": int(listed.get(rec, 0)), "ngram": rule.ngram_text(int(gram))})
    return ContaminationCounts(per_file, entries, len(recs), first_examples(first[0]) if first else None,
                               eval_table(full, rule, recs, gram_docs),
                               [{"max_ngram_docs": int(k), "documents": int(d)} for k, d in what.items()])


def _listed(feat: pd.DataFrame) -> pd.DataFrame:
    """Per protected record, the documents of one partition removed under it (`removed.parquet`'s)."""
    counts = feat.loc[feat["source"] >= 0, "source"].value_counts()
    return pd.DataFrame({"source": counts.index.to_numpy(np.int32), "listed": counts.to_numpy(np.int64)})


def cut_input(part: dd.DataFrame, feat: dd.DataFrame, s: Settings, rule: ProtectedNgrams | None) -> dd.DataFrame:
    """The input as the steps after the features read it: with `--contaminated cut`, the texts of
    the documents the cut changes cut (`with_cuts`; `feat`: the features, read alongside)."""
    if s.contaminated != "cut" or rule is None:
        return part
    return dd.map_partitions(part_cont.with_cuts, part, feat[["doc", HIT, "source"]], shared(rule), s.text_column,
                             meta=part._meta, align_dataframes=False)


def after_check(s: Settings, rule: ProtectedNgrams | None) -> Any:
    """The protected n-grams a new text (after line or span dedup) is checked against, as a graph node;
    none with `--contaminated tag`, which removes nothing (the tag is read from the text written)."""
    return shared(rule) if rule is not None and s.contaminated != "tag" else None


class Contamination(Step):
    """With protected files: the documents hit per protected file and record (and an example of each
    for the page), the eval side and the cap's what-if; then the guard: a run that would remove more
    than `max_contaminated` of its input stops here."""

    name = "contamination"
    reads = ("source", "feat", "rule")
    gives = ("examples", "eval_records")
    tables = ("examples", "eval_records")

    def wanted(self, s: Settings) -> bool:
        return s.protected is not None

    def needs(self, s: Settings) -> tuple[str, ...]:
        return ("source", "feat", *rule_needed(s))

    def run(self, job: View) -> str:
        s, report = job.settings, job.report
        assert s.protected is not None and job.protected is not None
        got = contamination(job.source, job.feat, s.protected, job.protected, s.text_column, report.contamination_hit,
                            examples=s.details)
        job.examples = got.examples
        job.eval_records = got.eval_records
        report.contaminated_by_file = got.by_file
        report.contaminated_by_record = got.by_record
        report.contaminated_records = got.records
        report.eval_what_if = got.what_if
        for entry in got.by_record:  # the records are in order of documents: those warned of come first
            warn(report, record_warning(entry, report.input_rows))
        return f"{report.contamination_hit} documents hit {got.records} protected record(s)"

    def after(self, job: View) -> None:
        s = job.settings
        if s.max_contaminated is not None and (stop := contamination_guard(job.report, s.max_contaminated)):
            if not s.dry_run:
                raise TooContaminated(stop)
            if stop not in job.report.warnings:  # said once, however often the stage is read back
                warn(job.report, stop)  # a dry run says what the run would do
