"""The job's last step: the stages (`dedup.job.analysis`), then the shards, the index's docs files,
the removed list and the page's data written into the staging directory in one round trip."""

from __future__ import annotations

import logging

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.core.text import TEXT_DTYPE
from dedup.job import memory, page_data, write
from dedup.job.analysis import ORDER, WRITE, analyse
from dedup.job.checkpoints import Checkpoints, resumable
from dedup.job.compute import compute, shared
from dedup.job.failures import explain_killed_worker
from dedup.job.features import without_signatures
from dedup.job.lines import with_texts
from dedup.job.plan import Plan
from dedup.job.stage import Settings
from dedup.job.timing import Stage
from dedup.partition.features import KEEP
from dedup.report import page as report_page
from dedup.report import removed
from dedup.storage import index, reads, stamps
from dedup.storage import shards as shards_mod

log = logging.getLogger("dedup")


def write_outputs(plan: Plan) -> report_page.Extras:
    """The stages (`analyse`), then one round trip that writes the shards, the index's docs files and
    the removed list into the staging directory; the page's summaries."""
    report, params, staging = plan.report, plan.params, plan.staging
    groups = plan.groups
    id_type = shards_mod.id_type_of(plan.schema, plan.id_column)
    meta = pd.DataFrame({plan.id_column: pd.Series(dtype=np.int64 if pa.types.is_integer(id_type) else object),
                         plan.text_column: pd.Series(dtype=TEXT_DTYPE)})
    keep = None
    if plan.keep_by is not None and plan.near:
        keep = (plan.keep_by[0], plan.column_type(plan.keep_by[0]))
        meta[KEEP] = pd.Series(dtype=pd.ArrowDtype(reads.keep_type(keep[1])))
    ddf = dd.from_map(write.read_group, groups, id_column=plan.id_column, text_column=plan.text_column,
                      id_type=id_type, keep=keep, meta=meta, enforce_metadata=False, label="read-shards")
    write_index = plan.write_index and plan.near and not plan.dry_run
    extras = report_page.Extras()
    plan.features_on_disk = memory.features_on_disk(plan.features_on_disk, sum(s.rows for s in plan.shards),
                                                    params.num_perm)
    kept = plan.kept = Checkpoints(staging, ORDER)
    if kept.reused_stages:
        log.info("resuming: reusing %s from the %s of %s", ", ".join(kept.reused_stages),
                 "dry run" if staging.from_dry_run else "interrupted run", staging.resumed_from)
    elif staging.resumed_from is not None:
        log.info("resuming: the interrupted run of %s finished no stage; starting from the first",
                 staging.resumed_from)
    try:
        # the stages write their parts of the index in a dry run too: the run without --dry-run reuses them
        decided = analyse(ddf, _settings(plan, kept, plan.write_index and plan.near), report, kept)
        if plan.lines:
            report.top_lines = with_texts(report.top_lines, write.locator(groups), plan.text_column)
        # reused whole, or else the partitions an interrupted run wrote (kept as each finished), and the rest written
        written = kept.reused(WRITE) is not None
        inputs = shared((groups, plan.schema))
        shown = page_data.page_documents(decided) if plan.write_report else None
        # the shards, the removed list and the page's texts: one round trip; each task takes the
        # persisted features whole and reads the columns it needs (a projection of them would be a
        # task of its own a partition). Features on disk: the removed list reads them without their
        # signatures, by reads of its own, so that the shards' reads are released as they are used
        lazy: dict[str, dd.DataFrame] = {}
        split = write.split_files(groups)
        offsets = None
        if split and write_index:  # where each piece of a split file starts in it, for the index
            (counts,) = compute(dd.map_partitions(write.kept_counts, without_signatures(decided.feat), decided.roots, inputs,
                                                  plan.drop and plan.near, align_dataframes=False,
                                                  meta={"partition": "int64", "piece": "int64", "kept": "int64"}))
            offsets = shared(write.row_offsets(groups, counts))
        if not plan.dry_run:
            lazy["shards"] = dd.map_partitions(
                resumable, write.write_group, kept.directory(WRITE, "shards"), decided.feat, decided.roots,
                decided.lines, inputs,
                write.ShardOptions(plan.id_column, plan.text_column, plan.drop and plan.near, plan.near, staging.url,
                                   params.num_perm if write_index else None, plan.cluster_size and plan.near),
                shared((plan.text_column, shown.rows_by_partition())) if shown is not None else None, offsets,
                meta={"rows": "int64", "indexed": "int64", "absorbed": "int64", "bytes": "int64",
                      "texts": object}, align_dataframes=False)
        if plan.write_report:
            prot = shared(plan.protected) if plan.protected is not None else None
            lazy["removed"] = dd.map_partitions(
                resumable, write.write_removed, kept.directory(WRITE, "removed"), without_signatures(decided.feat),
                decided.roots,
                decided.matches, inputs, plan.id_column, prot, staging.url, meta={"rows": "int64"},
                align_dataframes=False)
        with Stage(report, "report" if plan.dry_run else "write") as stage:
            got = dict(zip(lazy, compute(*lazy.values(), retries=plan.retries)))
            if split and lazy and not written:  # the parts of each split file joined into it, a task a file
                joins = [(name, pieces) for name, pieces in split.items() if "shards" in lazy] + \
                    [(f"{removed.REMOVED}/{name}", pieces) for name, pieces in split.items() if "removed" in lazy]
                compute(*[dask.delayed(write.join_pieces)(staging.url, name, pieces) for name, pieces in joins],
                        retries=plan.retries)
            kept.save(WRITE, report)  # before the index's counts are added to the report, and the parts removed
            staging.remove(write.PIECES_DIR)  # after the mark: a run resumed before it joins the parts again
            listed = f"; {int(got['removed']['rows'].sum())} removed documents listed in {removed.REMOVED}" \
                if "removed" in got else ""
            stage.summary = (f"{len(plan.shards)} Parquet shards to the staging directory" if "shards" in got
                             else "no shards (dry run)") + listed
            if write_index:
                stage.summary += _write_index_meta(plan, got["shards"])
        if shown is not None:
            kept.reused("report")  # never kept: run again whenever the write was reused
            with Stage(report, "report") as stage:
                text_of = ({k: t for pairs in got["shards"]["texts"] for k, t in pairs} if "shards" in got
                           else page_data.read_texts(shown.keys, write.locator(groups), plan.text_column))
                extras = page_data.report_extras(shown, text_of, params, plan.protected)
                stage.summary = "the largest clusters and examples for the page"
        staging.remove("_labels")
    except Exception as exc:
        explain_killed_worker(exc, [[p.describe() for p in g] for g in groups],
                               plan.protected.nbytes / 1e6 if plan.protected else 0.0)
        raise
    return extras


def _write_index_meta(plan: Plan, written: pd.DataFrame) -> str:
    """`_index/index.json`, with the stamp of every file the index points at; the write stage's words on it."""
    report, staging = plan.report, plan.staging
    report.index_documents = int(written["indexed"].sum())
    report.index_near_duplicates = int(written["absorbed"].sum())
    report.index_bytes += int(written["bytes"].sum())
    meta = f"{index.INDEX_DIR}/{index.INDEX_META}"  # one a resumed run's write left is written again
    pointed = [s.name for s in plan.shards] + [f for f in staging.files() if f.startswith(f"{index.INDEX_DIR}/")
                                               and f != meta]
    staging.write_json(f"{index.INDEX_DIR}/{index.INDEX_META}", index.index_meta(
        plan.params, uid=index.new_uid(), id_type=write.cluster_type(plan.schema, plan.id_column),
        partitions=len(plan.groups), bucket_parts=report.bucket_partitions, id_parts=report.id_partitions,
        documents=report.index_documents, nbytes=report.index_bytes, text_column=plan.text_column,
        sources=plan.against, output=plan.output, files=stamps.stamps(staging.fs, staging.tmp, pointed)))
    if not report.index_documents:  # bytes of no document: not a size per document
        return f"; index of no kept document ({report.index_near_duplicates} near duplicates), {report.index_bytes} bytes"
    return (f"; index of {report.index_documents} kept documents (and {report.index_near_duplicates} near duplicates "
            f"of them), {report.index_bytes / report.index_documents:.0f} bytes a kept document")


def _settings(plan: Plan, kept: Checkpoints, write_index: bool) -> Settings:
    """What the stages are asked to do, from the plan; where they keep what they keep."""
    staging = plan.staging
    return Settings(
        plan.params, id_column=plan.id_column, text_column=plan.text_column, protected=plan.protected, near=plan.near,
        components=plan.components, features_dir=kept.directory("features", "feat") if plan.features_on_disk else None,
        locate=write.locator(plan.groups), details=plan.write_report, against=plan.against,
        skip_existing=plan.skip_existing, index_out=f"{staging.url}/{index.INDEX_DIR}" if write_index else None,
        spill_dir=f"{staging.url}/_labels", rows=sum(s.rows for s in plan.shards),
        cluster_size=plan.cluster_size and plan.near, keep=plan.keep_by[1] if plan.keep_by and plan.near else None,
        clusters=plan.clusters, max_contaminated=None if plan.dry_run else plan.max_contaminated,
        lines=plan.lines, min_copies=plan.min_copies)
