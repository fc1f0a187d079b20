"""The Dask job: Parquet shards in, near duplicates tagged or dropped, contaminated rows removed.

`run` checks everything it can before any cluster starts (`dedup.job.plan.prepare`), then `execute`
runs the stages (`dedup.job.analysis.STAGES`, each logging one line with its counts and seconds:
from reading the input to writing every input file back through Arrow with the decisions of its
rows, and the page), and publishes OUTPUT atomically. `process`, `near_dedup_frame` and `decontaminate_frame` run the
same stages on a Dask DataFrame of your own and return it lazily.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

import dask.dataframe as dd
import pandas as pd

from dedup.config import Params
from dedup.core.decontam import ProtectedNgrams
from dedup.job import memory, write
from dedup.job.analysis import ORDER, STAGES, check_columns
from dedup.job.checkpoints import STAGES_DIR, Checkpoints
from dedup.job.compute import settle
from dedup.job.counts import Report
from dedup.job.failures import explain_killed_worker
from dedup.job.manifest import build_manifest, dropped_near
from dedup.job.notices import warn
from dedup.job.output import WRITE
from dedup.job.plan import Options, Plan, prepare, writes_index
from dedup.job.stage import Job, Settings, run_stages
from dedup.partition.decisions import attach_roots
from dedup.partition.spans import SpanRule
from dedup.report import page as report_page
from dedup.report import removed
from dedup.storage import io
from dedup.storage.index import INDEX_DIR
from dedup.storage.protected import PathLike, read_protected
from dedup.storage.safety import MANIFEST, UsageError
from dedup.storage.staging import deferred_interrupts

log = logging.getLogger("dedup")

LABELS_DIR = "_labels"
"""In the staging directory: the labels client components leave for the workers (`Settings.spill_dir`)."""


def process(ddf: dd.DataFrame, *, protected: ProtectedNgrams | None = None, near: bool = True,
            id_column: str = "id", text_column: str = "text", params: Params | None = None, drop: bool = True,
            components: str = "auto", npartitions: int | None = None, report: Report | None = None,
            features_dir: str | None = None, clusters: str = "connected") -> dd.DataFrame:
    """Decontaminate (if `protected`), then near-dedup (if `near`); a lazy frame with `minhash_cluster`.

    Runs the clustering eagerly (it needs every document) and returns the final frame lazily,
    with the input's partitions and row order; `minhash_cluster` has the id column's dtype.
    Signatures are kept in worker memory (about 4 * num_perm bytes a document) unless
    `features_dir` names a directory to write them to. `clusters`: "connected" or "centred" (`run`).
    """
    o = Options(near=near, id_column=id_column, text_column=text_column, params=params, drop=drop,
                components=components, clusters=clusters)  # checked as `run`'s are
    params = o.params or Params()
    report = report if report is not None else Report()
    check_columns(ddf, id_column, text_column)
    settings = Settings(params, id_column=id_column, text_column=text_column, protected=protected, near=near,
                        components=components, npartitions=npartitions, features_dir=features_dir, clusters=clusters,
                        drop=drop)
    job = run_stages(Job(settings, report, Checkpoints.nowhere(), given={"source": ddf}), STAGES)
    meta = ddf._meta.assign(minhash_cluster=pd.Series(dtype=ddf._meta[id_column].dtype)) if near else ddf._meta
    return dd.map_partitions(_attach, ddf, job.given["feat"], job.given.get("roots"), id_column, drop and near, near,
                             meta=meta, align_dataframes=False)


def _attach(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, id_column: str, drop: bool,
            tag: bool) -> pd.DataFrame:
    return attach_roots(part, feat, roots, id_column, drop, tag)


def near_dedup_frame(ddf: dd.DataFrame, *, id_column: str = "id", text_column: str = "text", params: Params | None = None,
               drop: bool = True, **kwargs: Any) -> dd.DataFrame:
    """Tag near duplicates with `minhash_cluster` (the root id); with drop, keep roots only."""
    return process(ddf, near=True, id_column=id_column, text_column=text_column, params=params, drop=drop, **kwargs)


def decontaminate_frame(ddf: dd.DataFrame, protected: ProtectedNgrams | PathLike | Sequence[PathLike], *,
                  id_column: str = "id", text_column: str = "text", ngram_size: int = 13, **kwargs: Any) -> dd.DataFrame:
    """Drop documents that share a word n-gram with the protected texts."""
    prot = protected if isinstance(protected, ProtectedNgrams) else read_protected(
        protected if not isinstance(protected, (str, bytes)) and isinstance(protected, Iterable) else [protected],
        ngram_size)
    params = Params(ngram_size=prot.ngram_size)
    return process(ddf, protected=prot, near=False, id_column=id_column, text_column=text_column, params=params,
                   drop=False, **kwargs)


def execute(plan: Plan) -> dict[str, Any]:
    """Run a prepared job on the active client (or the local scheduler) and commit OUTPUT; the manifest.

    Reads as its steps: start (what the stages are asked, what an interrupted run kept), the stages
    (`dedup.job.analysis.STAGES`, from the read to the write and the page), publish (the accounting
    check, the manifest and the page, the commit). A failure or interrupt at any step leaves OUTPUT
    as it was."""
    job = None
    try:
        if plan.staging.complete:
            return _publish_left(plan)
        job = start(plan)
        if plan.shards:
            run_stages(job, STAGES)
        return publish(plan, job)
    except BaseException as exc:
        if isinstance(exc, Exception) and job is not None:
            explain_killed_worker(exc, [[p.describe() for p in g] for g in plan.groups],
                                  plan.protected.nbytes / 1e6 if plan.protected else 0.0)
        if _no_space(exc):  # what was kept would only hold the space a new attempt needs
            plan.staging.resumable = False
        plan.staging.abandon(settle=settle)  # the tasks still running end (or find their run ended) first
        if plan.staging.resumable and job is not None and job.kept.finished():
            log.warning("the finished stages (%s) are kept in %s: the same command resumes from them, --restart "
                        "starts over", ", ".join(job.kept.finished()), plan.staging.url)
        raise
    finally:
        plan.close()


def start(plan: Plan) -> Job:
    """What the stages are asked to do (`Settings`, made here once) and the results an interrupted run
    with this fingerprint kept (`Checkpoints`), said in one line."""
    o, staging = plan.options, plan.staging
    kept = Checkpoints(staging, ORDER)
    if kept.reused_stages:
        log.info("resuming: reusing %s from the %s of %s", ", ".join(kept.reused_stages),
                 "dry run" if staging.from_dry_run else "interrupted run", staging.resumed_from)
    elif staging.resumed_from is not None:
        log.info("resuming: the interrupted run of %s finished no stage; starting from the first",
                 staging.resumed_from)
    rows = sum(s.rows for s in plan.shards)
    on_disk = memory.features_on_disk(o.features_on_disk, rows, plan.params.num_perm) if plan.shards else \
        bool(o.features_on_disk)
    # the stages write their parts of the index in a dry run too: the run without --dry-run reuses them
    index_out = f"{staging.url}/{INDEX_DIR}" if writes_index(o) else None
    settings = Settings(
        plan.params, id_column=plan.id_column, text_column=o.text_column, protected=plan.protected, near=o.near,
        components=o.components, features_dir=kept.directory("features", "feat") if on_disk else None,
        locate=write.locator(plan.groups), details=o.write_report, against=plan.against,
        skip_existing=o.skip_existing, index_out=index_out, spill_dir=f"{staging.url}/{LABELS_DIR}", rows=rows,
        cluster_size=o.cluster_size and o.near, survivor_order=plan.keep_by[1] if plan.keep_by else None,
        clusters=o.clusters, max_contaminated=o.max_contaminated, lines=o.lines,
        min_copies=o.min_copies, min_line_words=o.min_line_words, max_lines_removed=o.max_lines_removed,
        drop=o.drop, spans=SpanRule(o.span_tokens, plan.params.shingle_unit, o.spans_keep) if o.spans else None,
        files=True, dry_run=o.dry_run, contaminated=o.contaminated, max_ngram_docs=o.max_ngram_docs,
        min_cluster_size=o.min_cluster_size)
    return Job(settings, plan.report, kept, plan)


def publish(plan: Plan, job: Job) -> dict[str, Any]:
    """Check the accounting, write the manifest and the page, and commit OUTPUT; the manifest."""
    plan.staging.remove(LABELS_DIR)
    if plan.options.dry_run:
        _set_aside_for_the_run(plan)
    if not plan.shards:
        warn(plan.report, f"input {plan.input} holds no files: writing an empty output")
    plan.staging.resumable = False  # from here a failure leaves nothing to resume from
    plan.staging.remove(STAGES_DIR)  # what a resumed run would need: never part of OUTPUT (nor is RESUME)
    output_rows = _accounted_rows(plan)
    plan.report.output_bytes = plan.staging.data_bytes() if plan.shards else 0
    plan.report.seconds["total"] = round(time.perf_counter() - plan.start, 3)
    manifest = build_manifest(plan, job, output_rows)
    if plan.options.write_report:
        if job.given.get("eval_records") is not None:
            _write_eval_records(plan, job.given["eval_records"])
        _write_page(plan, manifest, job.given.get("extras") or report_page.Extras(),
                    job.given.get("eval_records"))
    plan.staging.write_json(MANIFEST, manifest)  # written last: the manifest marks the output complete
    _commit(plan, output_rows)
    return manifest


def _set_aside_for_the_run(plan: Plan) -> None:
    """A dry run's finished stages (and the index parts they wrote), set aside beside OUTPUT for the same
    command without --dry-run, which takes them over and computes only the write; never part of the
    dry run's OUTPUT. The write stage is not kept: the dry run wrote no shard."""
    staging = plan.staging
    fingerprint = staging.fingerprint
    if fingerprint is not None and plan.shards:
        real = {**fingerprint, "options": {**fingerprint.get("options", {}), "dry_run": False}}
        aside = staging.set_aside([STAGES_DIR, INDEX_DIR], real)
        if aside is not None:
            if staging.fs.exists(f"{aside}/{STAGES_DIR}/{WRITE}"):
                staging.fs.rm(f"{aside}/{STAGES_DIR}/{WRITE}", recursive=True)
            log.info("the stages are kept in %s: the same command without --dry-run reuses them (any other run on "
                     "this OUTPUT removes them)", aside)
    staging.remove(INDEX_DIR)


def _publish_left(plan: Plan) -> dict[str, Any]:
    """Publish the complete output an interrupted run with this fingerprint left in its staging directory
    (a client killed while an object store's commit copied it): nothing is computed again."""
    with plan.staging.fs.open(f"{plan.staging.tmp}/{MANIFEST}", "r") as fh:
        manifest: dict[str, Any] = json.load(fh)
    log.info("the run of %s finished and was publishing to %s when it stopped: publishing its output, nothing "
             "computed again", plan.staging.resumed_from, plan.output)
    plan.report.input_rows = manifest["input_rows"]
    plan.report.seconds["total"] = round(time.perf_counter() - plan.start, 3)
    _commit(plan, manifest["output_rows"])
    return manifest


def _accounted_rows(plan: Plan) -> int:
    """The rows written, which must be the input's less every row removed, else nothing is published."""
    report = plan.report
    expected = report.input_rows - report.contaminated - dropped_near(plan) - report.skipped_existing - \
        report.emptied_by_lines - report.contaminated_after_lines - report.emptied_by_spans - \
        report.contaminated_after_spans
    output_rows = expected if plan.options.dry_run else io.parquet_rows(plan.staging.fs, plan.staging.tmp)
    if output_rows != expected:
        raise RuntimeError(f"Accounting mismatch: wrote {output_rows} rows, expected {expected} "
                           f"({report.input_rows} in - {report.contaminated} contaminated - {dropped_near(plan)} "
                           f"near duplicates - {report.skipped_existing} already indexed - {report.emptied_by_lines} "
                           f"left without a word by line dedup - {report.contaminated_after_lines} contaminated "
                           f"after line dedup - {report.emptied_by_spans} left without a word by span dedup - "
                           f"{report.contaminated_after_spans} contaminated after span dedup). Nothing was replaced; "
                           "please report this as a bug.")
    return output_rows


def _no_space(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, is a full disk."""
    import errno

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _write_eval_records(plan: Plan, records: pd.DataFrame) -> None:
    """`_report/eval_records.parquet`: the eval side, a row per protected record (docs/contract.md §6e)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    staging = plan.staging
    staging.fs.makedirs(f"{staging.tmp}/{removed.REPORT_DIR}", exist_ok=True)
    with staging.fs.open(f"{staging.tmp}/{removed.EVAL_RECORDS}", "wb") as fh:
        pq.write_table(pa.Table.from_pandas(records, schema=removed.EVAL_RECORDS_SCHEMA, preserve_index=False), fh)


def _write_page(plan: Plan, manifest: dict[str, Any], extras: report_page.Extras,
                eval_records: pd.DataFrame | None = None) -> None:
    staging = plan.staging
    page = report_page.render(manifest, extras, eval_records)
    staging.fs.makedirs(f"{staging.tmp}/{removed.REPORT_DIR}", exist_ok=True)
    with staging.fs.open(f"{staging.tmp}/{removed.PAGE}", "w", encoding="utf-8") as fh:
        fh.write(page)


def _commit(plan: Plan, output_rows: int) -> None:
    """Publish the staging directory as OUTPUT, interrupts deferred while it happens."""
    staging, report = plan.staging, plan.report
    with deferred_interrupts() as deferred:
        try:
            staging.commit()
        except BaseException as exc:
            if staging.remote and not staging.committed:
                raise RuntimeError(f"Publishing to {plan.output} failed midway ({exc}); OUTPUT has no {MANIFEST} and "
                                   f"is incomplete. The complete new output is in {staging.url}.") from exc
            raise
        if plan.options.dry_run:
            log.info("dry run: %d of %d rows would be kept; %s holds only the manifest and the report (%.1f s)",
                     output_rows, report.input_rows, plan.output, report.seconds["total"])
        else:
            log.info("wrote %d of %d rows to %s in %.1f s", output_rows, report.input_rows, plan.output,
                     report.seconds["total"])
    if deferred.received:
        log.warning("interrupt received after OUTPUT was replaced: %s holds the complete new output", plan.output)


def run(input: str, output: str, options: Options | None = None, /, **changes: Any) -> dict[str, Any]:
    """Parquet to Parquet: decontaminate against `protected`, near-dedup, [remove repeated lines,] write
    OUTPUT atomically. The options are `dedup.job.plan.Options`' fields, by keyword (or an `Options`).

    Runs on the active distributed client (or the local scheduler without one). OUTPUT mirrors
    the input files (same relative names, same schema plus `minhash_cluster`) and holds
    `_dedup.json`, the manifest, which is returned and which marks OUTPUT complete. Unless
    `write_report` is False, `_report/` gets `index.html` and `removed.parquet`; with `dry_run`,
    OUTPUT gets only the manifest and the report, no shards. Unless `write_index` is False, a
    near-dedup run writes `_index/`, which a later run takes with `against` (earlier OUTPUTs): its
    documents that duplicate one of theirs are dropped, theirs always survive. Each stage's results
    are kept in the staging directory as it finishes: a run that dies leaves them, and the same call
    resumes from them (`dedup.job.checkpoints`); `restart` starts over. `max_contaminated`: a run
    whose decontamination would remove more than this share of the input raises `TooContaminated`
    before publishing, OUTPUT as it was (a dry run only warns). When it returns, the job holds
    nothing in the cluster's memory.
    """
    plan = prepare(input, output, _options(options, changes))
    try:
        return execute(plan)
    finally:
        # Exceptions raised and caught inside libraries while the job ran (matplotlib's font parser,
        # asyncio timeouts in distributed) sit in reference cycles with their tracebacks, whose frames
        # lead up to this job's and hold its persisted collections: without a collection here, their
        # data stayed in the cluster's memory until Python's cyclic collector happened to run.
        gc.collect()


def _options(options: Options | None, changes: dict[str, Any]) -> Options:
    """`options` (or the defaults) with `changes`, each an `Options` field by name."""
    names = {f.name for f in dataclasses.fields(Options)}
    if unknown := sorted(set(changes) - names):
        raise UsageError(f"run() got unknown option(s) {', '.join(unknown)}; the options are {', '.join(sorted(names))}.")
    return dataclasses.replace(options or Options(), **changes)
