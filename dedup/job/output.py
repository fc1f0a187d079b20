"""The write stage: the shards, the index's docs files and the removed list written into the staging
directory in one round trip, from the results of the stages before it; then the index's
`index.json`. A resumed run reuses each partition an interrupted run wrote (`resumable`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import dask
import dask.dataframe as dd
import pandas as pd

from dedup.job import write
from dedup.job.checkpoints import resumable
from dedup.job.compute import compute, shared
from dedup.job.features import without_signatures
from dedup.job.plan import writes_index
from dedup.job.stage import Settings, Step, View, rule_needed
from dedup.report import removed
from dedup.storage import index, stamps

if TYPE_CHECKING:
    from dedup.job.plan import Plan

log = logging.getLogger("dedup")

WRITE = "write"


class Write(Step):
    """In a run on files: the shards (none in a dry run), the removed list (with the page) and the
    index's files; `written`: what each kind of file's tasks returned, by kind (the page's texts with
    the shards'). Kept a partition at a time, not as a whole."""

    name = WRITE
    reads = ("feat", "roots", "line_keys", "line_changes", "span_changes", "shown", "rule")
    gives = ("written",)
    kept = False

    def wanted(self, s: Settings) -> bool:
        return s.files

    def needs(self, s: Settings) -> tuple[str, ...]:
        return ("feat", *(("roots",) if s.near else ()), *(("line_keys", "line_changes") if s.lines else ()),
                *(("span_changes",) if s.spans is not None else ()),
                *(("shown",) if s.details else ()), *rule_needed(s))

    def title(self, s: Settings) -> str:
        return "report" if s.dry_run else WRITE

    def run(self, job: View) -> str:
        s, plan, kept = job.settings, job.plan, job.kept
        assert plan is not None
        report, params, staging, groups = job.report, s.params, plan.staging, plan.groups
        near, dry_run = s.near, plan.options.dry_run
        write_index = writes_index(plan.options) and not dry_run
        if plan.options.write_index and near and not dry_run and not write_index:
            log.info("no index written: line or span dedup changed the texts near dedup compared, so a later "
                     "--against could not continue from this OUTPUT")
        feat = job.feat
        roots = job.roots if near else None
        shown = job.shown if s.details else None
        written = kept.reused(WRITE) is not None  # whole, or else the partitions an interrupted run wrote
        inputs = shared((groups, plan.schema))
        drop = plan.options.drop and near
        # the shards, the removed list and the page's texts: one round trip; each task takes the
        # persisted features whole and reads the columns it needs (a projection of them would be a
        # task of its own a partition). Features on disk: the removed list reads them without their
        # signatures, by reads of its own, so that the shards' reads are released as they are used
        lazy: dict[str, dd.DataFrame] = {}
        line_keys, changes = (job.line_keys, job.line_changes) if s.lines else (None, None)
        span_changes = job.span_changes if s.spans is not None else None
        split = write.split_files(groups)
        rule = shared(job.protected) if job.protected is not None else None
        offsets = None
        if split and write_index:  # where each piece of a split file starts in it, for the index
            (counts,) = compute(dd.map_partitions(write.kept_counts, without_signatures(feat), roots, inputs, drop,
                                                  align_dataframes=False,
                                                  meta={"partition": "int64", "piece": "int64", "kept": "int64"}))
            offsets = shared(write.row_offsets(groups, counts))
        if not dry_run:
            lazy["shards"] = dd.map_partitions(
                resumable, write.write_group, kept.directory(WRITE, "shards"), feat, roots, line_keys, changes, span_changes,
                inputs,
                write.ShardOptions(s.id_column, s.text_column, drop, near, staging.url,
                                   params.num_perm if write_index else None, s.cluster_size, s.contaminated),
                shared((s.text_column, shown.rows_by_partition())) if shown is not None else None, offsets, rule,
                meta={"rows": "int64", "indexed": "int64", "absorbed": "int64", "bytes": "int64",
                      "texts": object}, align_dataframes=False)
        if plan.options.write_report:
            lazy["removed"] = dd.map_partitions(
                resumable, write.write_removed, kept.directory(WRITE, "removed"), without_signatures(feat), roots,
                roots if s.details and near else None, changes, span_changes, inputs, s.id_column, rule, staging.url,
                s.contaminated,
                meta={"rows": "int64"}, align_dataframes=False)
            if s.lines:
                lazy["removed_lines"] = dd.map_partitions(
                    resumable, write.write_removed_lines, kept.directory(WRITE, "removed_lines"),
                    without_signatures(feat), roots, line_keys, inputs, s.id_column, s.text_column, drop, staging.url,
                    meta={"rows": "int64"}, align_dataframes=False)
        got = dict(zip(lazy, compute(*lazy.values(), retries=plan.options.retries)))
        if split and lazy and not written:  # the parts of each split file joined into it, a task a file
            joins = [(name, pieces) for name, pieces in split.items() if "shards" in lazy] + \
                [(f"{removed.REMOVED}/{name}", pieces) for name, pieces in split.items() if "removed" in lazy] + \
                [(f"{removed.REMOVED_LINES}/{name}", pieces) for name, pieces in split.items()
                 if "removed_lines" in lazy]
            compute(*[dask.delayed(write.join_pieces)(staging.url, name, pieces) for name, pieces in joins],
                    retries=plan.options.retries)
        kept.save(WRITE, report)  # before the index's counts are added to the report, and the parts removed
        staging.remove(write.PIECES_DIR)  # after the mark: a run resumed before it joins the parts again
        job.written = got
        listed = f"; {int(got['removed']['rows'].sum())} removed documents listed in {removed.REMOVED}" \
            if "removed" in got else ""
        if "removed_lines" in got:
            listed += f", {int(got['removed_lines']['rows'].sum())} removed lines in {removed.REMOVED_LINES}"
        summary = (f"{len(plan.shards)} Parquet shards to the staging directory" if "shards" in got
                   else "no shards (dry run)") + listed
        if write_index:
            summary += _write_index_meta(plan, report, got["shards"])
        return summary


def _write_index_meta(plan: Plan, report: Any, written: pd.DataFrame) -> str:
    """`_index/index.json`, with the stamp of every file the index points at; the write stage's words on it."""
    staging = plan.staging
    report.index_documents = int(written["indexed"].sum())
    report.index_near_duplicates = int(written["absorbed"].sum())
    report.index_bytes += int(written["bytes"].sum())
    meta = f"{index.INDEX_DIR}/{index.INDEX_META}"  # one a resumed run's write left is written again
    pointed = [s.name for s in plan.shards] + [f for f in staging.files() if f.startswith(f"{index.INDEX_DIR}/")
                                               and f != meta]
    files = stamps.stamps(staging.fs, staging.tmp, pointed)
    report.index_bytes += sum(int(v["size"]) for f, v in files.items() if f.startswith(f"{index.INDEX_DIR}/{index.SIZES}/"))
    staging.write_json(meta, index.index_meta(
        plan.params, uid=index.new_uid(), id_type=write.cluster_type(plan.schema, plan.id_column),
        partitions=len(plan.groups), bucket_parts=report.bucket_partitions, id_parts=report.id_partitions,
        documents=report.index_documents, nbytes=report.index_bytes, text_column=plan.options.text_column,
        sources=plan.against, output=plan.output, files=files))
    if not report.index_documents:  # bytes of no document: not a size per document
        return f"; index of no kept document ({report.index_near_duplicates} near duplicates), {report.index_bytes} bytes"
    return (f"; index of {report.index_documents} kept documents (and {report.index_near_duplicates} near duplicates "
            f"of them), {report.index_bytes / report.index_documents:.0f} bytes a kept document")
