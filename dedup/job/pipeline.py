"""The Dask job: Parquet shards in, near duplicates tagged or dropped, contaminated rows removed.

`analyse` runs the stages (a module each in `dedup.job`) top to bottom, each logging one line with its
counts and seconds:

    features (and unique ids) -> [contamination] -> buckets -> confirm -> components -> roots

and `execute` writes every input file back through Arrow with the decisions of its rows, then
commits OUTPUT atomically. `process`, `near_dedup_frame` and `decontaminate_frame` do the same on a Dask
DataFrame of your own and return it lazily.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.config import CLIENT_COMPONENT_EDGES, CLUSTER_MODES, COMPONENT_MODES, MAX_CONTAMINATED, Params
from dedup.core.decontam import PathLike, ProtectedNgrams
from dedup.core.text import TEXT_DTYPE
from dedup.job import memory, page_data, write
from dedup.job.buckets import buckets
from dedup.job.checkpoints import STAGES_DIR, Checkpoints, resumable
from dedup.job.components import components_on_client, components_on_cluster
from dedup.job.compute import compute, settle, shared
from dedup.job.confirm import confirm
from dedup.job.contamination import contamination
from dedup.job.decisions import Decisions
from dedup.job.features import feature_counts, features
from dedup.job.graphs import persist
from dedup.job.ids import check_unique_ids, conflict_counts, id_conflicts
from dedup.job.manifest import chained_warning, contamination_guard, warnings_of
from dedup.job.plan import Plan, Report, Stage, prepare
from dedup.job.roots import roots
from dedup.job.routing import ID_ROW_BYTES, route
from dedup.job.survivors import survivors
from dedup.job.versions import versions
from dedup.partition import keyspace
from dedup.partition.decisions import attach_roots
from dedup.partition.features import KEEP, ROOT_DOC, mark_skipped
from dedup.partition.stand_ins import own_roots
from dedup.report import page as report_page
from dedup.report import removed
from dedup.report.shown import shown_repr
from dedup.storage import index, io, stamps
from dedup.storage import shards as shards_mod
from dedup.storage.safety import MANIFEST, TooContaminated, UsageError
from dedup.storage.staging import RESUME, deferred_interrupts

log = logging.getLogger("dedup")


def _check_columns(ddf: dd.DataFrame, id_column: str, text_column: str) -> None:
    cols = list(ddf.columns)
    for role, name in (("id", id_column), ("text", text_column)):
        if name not in cols:
            raise ValueError(f"The {role} column {name!r} is not in the input; columns found: {cols}. "
                             f"Pass --{role}-column to name it.")
    tdtype = ddf._meta[text_column].dtype
    if not (pd.api.types.is_string_dtype(tdtype) or tdtype is np.dtype(object)):
        raise ValueError(f"The text column {text_column!r} has type {tdtype}; it must hold strings.")
    idtype = ddf._meta[id_column].dtype
    if not (pd.api.types.is_integer_dtype(idtype) or pd.api.types.is_string_dtype(idtype)):
        raise ValueError(f"The id column {id_column!r} has type {idtype}; ids must be strings or integers.")
    if "minhash_cluster" in cols:
        raise ValueError("The input already has a 'minhash_cluster' column; rename or drop it first.")


def analyse(ddf: dd.DataFrame, *, protected: ProtectedNgrams | None, near: bool, id_column: str, text_column: str,
            params: Params, report: Report, components: str = "auto", npartitions: int | None = None,
            features_dir: str | None = None, locate: Callable[[int], tuple[str, int]] | None = None,
            null_id_files: Sequence[str] = (), details: bool = False, against: Sequence[index.IndexPart] = (),
            skip_existing: bool = False, index_out: str | None = None, spill_dir: str | None = None,
            rows: int | None = None, kept: Checkpoints | None = None, cluster_size: bool = False,
            keep: str | None = None, clusters: str = "connected", max_contaminated: float | None = None) -> Decisions:
    """Run the stages; the report gets every count. `locate` maps a document key to (file, row);
    `details` also finds each clustered document's closest match (for `_report/removed.parquet`),
    and the page's summaries (`Decisions.clusters`, `Decisions.examples`) with the counts of their stages.
    `against`: earlier outputs' indexes, whose documents win their clusters; with `skip_existing`
    documents whose id one of them holds are skipped instead of refused. `index_out`: write this
    run's index band files there. `spill_dir`: where client components leave their labels. `rows`: the
    input's rows, when known before reading (Parquet footers): with the counts of each stage, it lets
    small routes skip a shuffle (`dedup.job.routing.SMALL_ROUTE_BYTES`). `kept`: each stage's results
    are kept there as it finishes, and the stages an interrupted run finished are read back instead
    of computed (`dedup.job.checkpoints`); `features_dir` is then where the checkpoints keep them.
    `cluster_size`: the roots also carry each clustered document's cluster size. `keep` ("max" or
    "min"): each cluster's root is the member with the largest (smallest) `--keep-by` value, which
    the input frame carries as `_keep`. `clusters` ("connected" or "centred"): with "centred", members
    below the threshold with their survivor are clustered again (`dedup.job.survivors`), which also
    scores every member against its survivor for the report when `details`. `max_contaminated`: a share
    of the input; once the contamination stage has counted more contaminated documents than that, the
    run stops (`TooContaminated`), before the near-dedup stages."""
    if components not in COMPONENT_MODES:
        raise UsageError(f"The 'components' parameter must be one of {COMPONENT_MODES}. Got {components!r} instead.")
    kept = kept or Checkpoints.nowhere()
    kept.restore(report)
    if kept.reused("features") is not None:
        feat = kept.frame("features", "feat")
        if features_dir is None:  # kept in memory, as the interrupted run did
            feat = persist(feat)
    else:
        feat = _features_stage(ddf, id_column=id_column, text_column=text_column, params=params, protected=protected,
                               features_dir=features_dir, npartitions=npartitions, against=against, rows=rows,
                               index_out=index_out, locate=locate, null_id_files=null_id_files,
                               skip_existing=skip_existing, report=report, kept=kept)
    examples = None
    if protected is not None:
        if kept.reused("contamination") is not None:
            examples = kept.table("contamination", "examples")
        else:
            with Stage(report, "contamination", kept) as stage:
                got = contamination(ddf, feat, protected, text_column, report.input_rows, report.contaminated,
                                    examples=details)
                examples = got.examples
                report.contaminated_by_file = got.by_file
                report.contaminated_by_record = got.by_record
                report.contaminated_records = got.records
                stage.summary = f"{report.contaminated} documents hit {got.records} protected record(s)"
                stage.keep(tables={"examples": examples})
        if max_contaminated is not None and (stop := contamination_guard(report, max_contaminated)):
            raise TooContaminated(stop)
    if not near:
        return Decisions(feat, None, None, None, examples)
    layout = index.Layout.gathering(against, feat.npartitions) if against else None
    first_indexed = layout.first_key if layout else keyspace.NO_INDEX
    placement = layout.placement if layout else keyspace.OWN
    if (saved := kept.reused("buckets")) is not None:
        edges, idx_feat, edge_rows = kept.frame("buckets", "edges"), kept.maybe_frame("buckets", "idx_feat"), saved["edges"]
    else:
        with Stage(report, "buckets", kept) as stage:
            edges, idx_feat, b = buckets(feat, params, npartitions, index_out=index_out, layout=layout,
                                         rows=report.input_rows)
            report.approximated_buckets = b.approximated_buckets
            report.largest_approximated_bucket = b.largest_approximated_bucket
            report.index_bytes += b.index_band_bytes
            report.bucket_partitions = b.bucket_partitions
            edge_rows = b.edges
            stage.summary = f"bucket edges on the workers, {report.approximated_buckets} approximated bucket(s)"
            if layout is not None:
                report.indexed_documents = sum(p.documents for p in against)
                stage.summary += (f"; {b.indexed_matched} of {report.indexed_documents} indexed documents share a "
                                  "bucket with this input")
            stage.keep({"edges": edge_rows}, frames={"edges": edges, "idx_feat": idx_feat})
    feat_all, texts = feat, ddf
    if idx_feat is not None:  # persisted once: every use in confirm and roots would redo the concat
        old = idx_feat.partitions[feat.npartitions:].clear_divisions()
        if KEEP in feat.columns:  # an earlier output's documents survive whatever their value: none is read
            old = old.map_partitions(_no_keep, feat._meta[KEEP].dtype,
                                     meta=old._meta.assign(**{KEEP: feat._meta[KEEP].iloc[:0]}))
        feat_all = persist(dd.concat([feat.map_partitions(own_roots, meta=own_roots(feat._meta)),
                                      old[[*feat.columns, ROOT_DOC]]]))
        texts = dd.concat([ddf[[text_column]], old[["_text"]].rename(columns={"_text": text_column})])
    if (saved := kept.reused("confirm")) is not None:
        graph, scored, graph_edges = kept.frame("confirm", "graph"), kept.frame("confirm", "scored"), saved["graph_edges"]
        near_pairs = kept.table("confirm", "near")
    else:
        with Stage(report, "confirm", kept) as stage:
            graph, scored, conf = confirm(edges, feat_all, texts, text_column=text_column, params=params,
                                          n_new=feat.npartitions, placement=placement, edge_rows=edge_rows,
                                          near_pairs=page_data.NEAR_PAIRS if details else 0)
            near_pairs = conf.near_threshold
            report.similarity_histogram = conf.similarity_histogram
            report.candidate_pairs, report.confirmed_pairs = conf.candidate_pairs, conf.confirmed_pairs
            report.same_text_pairs = conf.same_text_pairs
            graph_edges = conf.graph_edges
            stage.summary = (f"{report.confirmed_pairs} of {report.candidate_pairs} candidate pairs reach "
                             f"{params.threshold:.3f} ({params.confirm}), {report.same_text_pairs} same-text pairs")
            stage.keep({"graph_edges": graph_edges}, frames={"graph": graph, "scored": scored},
                       tables={"near": near_pairs})
    if (saved := kept.reused("components")) is not None:
        labels, mode = kept.frame("components", "labels"), saved["mode"]
    else:
        with Stage(report, "components", kept) as stage:
            mode = components
            if mode == "auto":
                mode = "client" if graph_edges <= CLIENT_COMPONENT_EDGES else "distributed"
            report.components = mode
            if mode == "client":
                labels = components_on_client(graph, feat_all.npartitions, spill_dir, placement)
                stage.summary = f"{graph_edges} edges joined on the client"
            else:
                labels, rounds = components_on_cluster(graph, npartitions or feat.npartitions)
                report.component_rounds = rounds
                stage.summary = f"{graph_edges} edges joined on the cluster in {rounds} large/small-star rounds"
            stage.keep({"mode": mode}, frames={"labels": labels})
    placed = mode == "client"
    if details or clusters == "centred":
        if kept.reused("survivors") is not None:
            labels = kept.frame("survivors", "labels")
        else:
            with Stage(report, "survivors", kept) as stage:
                labels, s = survivors(labels, graph, feat_all, texts, text_column=text_column, params=params,
                                      centred=clusters == "centred", first_indexed=first_indexed, placement=placement,
                                      placed=placed, edge_rows=graph_edges, keep=keep, spill_dir=spill_dir,
                                      npartitions=npartitions, components=components)
                report.clusters_mode = clusters
                report.survivor_rounds, report.survivor_scored, report.below_survivor = s.rounds, s.scored, s.below
                report.survivor_histogram = s.histogram
                if warning := chained_warning(report, params):
                    log.warning("%s", warning)
                stage.summary = (f"{s.scored} members scored against their connected component's survivor, "
                                 f"{s.below} below {params.threshold:.3f}")
                if clusters == "centred":
                    stage.summary += f"; clustered again in {s.rounds - 1} more round(s)"
                stage.keep(frames={"labels": labels})
        placed = False
    if kept.reused("roots") is not None:
        root_rows, summary = kept.frame("roots", "roots"), kept.table("roots", "summary")
    else:
        with Stage(report, "roots", kept) as stage:
            root_rows, r = roots(labels, feat_all, feat.npartitions, first_indexed, placement,
                                 placed=placed, edge_rows=graph_edges,
                                 summary=(page_data.cluster_summary, page_data.CLUSTERS_META) if details else None,
                                 scored=scored if details else None, exact=params.confirm == "exact",
                                 sizes=cluster_size, keep=keep)
            report.clusters, report.largest_cluster = r.clusters, r.largest
            report.near_duplicates = r.duplicates
            report.near_duplicates_of_indexed = r.of_indexed
            summary = r.summary
            stage.summary = (f"{report.clusters} clusters, largest {report.largest_cluster}, "
                             f"{report.near_duplicates} near duplicates")
            if layout is not None:
                stage.summary += f", {report.near_duplicates_of_indexed} of them of earlier outputs' documents"
            stage.keep(frames={"roots": root_rows}, tables={"summary": summary})
    return Decisions(feat, root_rows, root_rows if details else None, summary, examples, near_pairs)


def _features_stage(ddf: dd.DataFrame, *, id_column: str, text_column: str, params: Params,
                    protected: ProtectedNgrams | None, features_dir: str | None, npartitions: int | None,
                    against: Sequence[index.IndexPart], rows: int | None, index_out: str | None,
                    locate: Callable[[int], tuple[str, int]] | None, null_id_files: Sequence[str],
                    skip_existing: bool, report: Report, kept: Checkpoints) -> dd.DataFrame:
    """Stage 1: the features, kept (worker memory or `features_dir`), and the ids' check in the same
    round trip (every id unique, and new to the earlier outputs' indexes unless `skip_existing`)."""
    with Stage(report, "features", kept) as stage:  # and the ids' check: one round trip for both
        feat, lazy_counts = features(ddf, id_column=id_column, text_column=text_column, params=params,
                                     protected=protected, features_dir=features_dir)
        conflicts, k, lazy_ids = id_conflicts(feat, npartitions, against=against, index_out=index_out,
                                              rows=rows)
        fc, ic, sample = compute(lazy_counts, *lazy_ids)
        c = feature_counts(fc)
        if c.null_ids:
            located = io.null_id_rows(null_id_files, id_column) if null_id_files else []
            where = "; first at " + ", ".join(f"{f} row {r}" for f, r in located) if located else ""
            raise ValueError(f"{c.null_ids} document(s) have a null id in column {id_column!r}{where}. "
                             "Every document needs a unique id.")
        report.input_rows, report.contaminated = c.rows, c.contaminated
        id_counts, sample = conflict_counts(k, ic, sample)
        report.id_partitions = id_counts.id_partitions
        check_unique_ids(sample[sample["kind"] == 0], id_column, locate, id_counts.repeated)
        stage.summary = (f"{report.input_rows} rows in {ddf.npartitions} partitions, {report.contaminated} "
                         "contaminated; every id occurs once")
        if against:
            feat = _existing_ids(feat, conflicts, id_counts.existing, sample[sample["kind"] == 1], id_column, locate,
                                 skip_existing, report)
            stage.summary += (f"; {report.skipped_existing} already read by an earlier run, skipped"
                              if report.skipped_existing else "; none was read by an earlier run")
        on_disk = features_dir is not None and not report.skipped_existing  # else marked since, in memory
        stage.keep(**({"written": {"feat": feat}} if on_disk else {"frames": {"feat": feat}}))
    return feat


def _no_keep(part: pd.DataFrame, dtype: Any) -> pd.DataFrame:
    return part.assign(**{KEEP: pd.Series([None] * len(part), dtype=dtype, index=part.index)})


def _existing_ids(feat: dd.DataFrame, conflicts: dd.DataFrame, count: int, sample: pd.DataFrame, id_column: str,
                  locate: Callable[[int], tuple[str, int]] | None, skip: bool, report: Report) -> dd.DataFrame:
    """Refuse (or, with skip, mark as skipped) documents whose id an earlier run's index already holds."""
    report.skipped_existing = 0
    if not count:
        return feat
    if not skip:
        where = ""
        if locate is not None:
            where = " (" + ", ".join(f"{shown_repr(i)} in {f} row {r}" for i, (f, r) in
                                     zip(sample["_id"], (locate(int(k)) for k in sample["doc"]))) + ")"
        named = ", ".join(shown_repr(str(i)) for i in sample["_id"].head(5))
        if id_column == shards_mod.POSITION_ID:
            raise UsageError(f"{count} document(s) have the position of a document an earlier run given with --against "
                             f"read, e.g. [{named}]: without an id column a document's id is FILE#ROW, and it repeats "
                             "when files keep their names from one run to the next. Put this run's files under a "
                             "directory of their own inside INPUT, or name a column of ids with --id-column. Nothing "
                             "was written.")
        raise ValueError(f"{count} document id(s) in column {id_column!r} were already read by an earlier run given "
                         f"with --against, e.g. [{named}]{where}. Pass "
                         "--skip-existing to leave them out, or give them new ids. Nothing was written.")
    report.skipped_existing = count
    found = conflicts[conflicts["kind"] == 1][["doc", "_id"]]
    routed = route(found, "doc", feat.npartitions, rows=count, row_bytes=ID_ROW_BYTES)
    return persist(dd.map_partitions(mark_skipped, feat, routed, meta=feat._meta, align_dataframes=False))


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
    if clusters not in CLUSTER_MODES:
        raise UsageError(f"The 'clusters' parameter must be one of {CLUSTER_MODES}. Got {clusters!r} instead.")
    params = params or Params()
    report = report if report is not None else Report()
    _check_columns(ddf, id_column, text_column)
    d = analyse(ddf, protected=protected, near=near, id_column=id_column, text_column=text_column, params=params,
                report=report, components=components, npartitions=npartitions, features_dir=features_dir,
                clusters=clusters)
    meta = ddf._meta.assign(minhash_cluster=pd.Series(dtype=ddf._meta[id_column].dtype)) if near else ddf._meta
    return dd.map_partitions(_attach, ddf, d.feat, d.roots, id_column, drop and near, near, meta=meta,
                             align_dataframes=False)


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
    prot = protected if isinstance(protected, ProtectedNgrams) else ProtectedNgrams.from_paths(
        protected if not isinstance(protected, (str, bytes)) and isinstance(protected, Iterable) else [protected],
        ngram_size)
    params = Params(ngram_size=prot.ngram_size)
    return process(ddf, protected=prot, near=False, id_column=id_column, text_column=text_column, params=params,
                   drop=False, **kwargs)


def _explain_killed_worker(exc: BaseException, groups: Sequence[Sequence[str]], shared_mb: float = 0.0) -> None:
    """Turn a bare KilledWorker into a message that says what to look at.

    groups: the input files of each partition. Only a task that reads or featurises a partition
    names its files; a worker that dies in a shuffle, the write or on shared data is a memory
    problem of the cluster, not of an input file.
    """
    try:
        from distributed.scheduler import KilledWorker
    except ImportError:
        return
    if not isinstance(exc, KilledWorker):
        return
    key = exc.task
    name = str(key[0]) if isinstance(key, tuple) and key else str(key)
    part = key[1] if isinstance(key, tuple) and len(key) > 1 and isinstance(key[1], int) else None
    reads = any(tag in name for tag in ("read-shards", "features", "read_parquet"))
    shared = f" plus the shared protected n-grams ({shared_mb:.0f} MB)" if shared_mb >= 1 else ""
    if reads and part is not None and part < len(groups):
        files = list(groups[part])
        where = f"input file {files[0]!r} (partition {part})" if len(files) == 1 else \
            f"input partition {part} (files {files[:3]}{'...' if len(files) > 3 else ''})"
        raise RuntimeError(
            f"A worker died again and again while reading {where}: a document there may exhaust worker memory "
            f"or crash a library, or the workers' memory limit is below their baseline{shared}. Inspect that file, "
            "or give workers more memory. Nothing was written.") from exc
    raise RuntimeError(
        f"A worker died again and again while running {name!r}: the workers' memory limit is likely below what the "
        f"task needs (its partition{shared}). Give workers more memory or use more, smaller partitions. "
        "Nothing was written.") from exc


def execute(plan: Plan) -> dict[str, Any]:
    """Run a prepared job on the active client (or the local scheduler) and commit OUTPUT; the manifest.

    Reads as its steps: the stages and the write (`_write`), the accounting check, the manifest and
    the page, the commit. A failure or interrupt at any step leaves OUTPUT as it was."""
    try:
        extras = _write(plan) if plan.shards else report_page.Extras()
        if not plan.shards:
            log.warning("input %s holds no files: writing an empty output", plan.input)
        plan.staging.keep = False  # from here a failure leaves nothing to resume from
        for name in (STAGES_DIR, RESUME):  # what a resumed run would need: never part of OUTPUT
            plan.staging.remove(name)
        output_rows = _accounted_rows(plan)
        plan.report.output_bytes = plan.staging.data_bytes() if plan.shards else 0
        plan.report.seconds["total"] = round(time.perf_counter() - plan.start, 3)
        manifest = build_manifest(plan, output_rows)
        if plan.write_report:
            _write_page(plan, manifest, extras)
        plan.staging.write_json(MANIFEST, manifest)  # written last: the manifest marks the output complete
        _commit(plan, output_rows)
    except BaseException as exc:
        if _no_space(exc):  # what was kept would only hold the space a new attempt needs
            plan.staging.keep = False
        plan.staging.abandon(settle=settle)  # the tasks still running end (or find their run ended) first
        if plan.staging.keep and plan.kept is not None and plan.kept.finished():
            log.warning("the finished stages (%s) are kept in %s: the same command resumes from them, --restart "
                        "starts over", ", ".join(plan.kept.finished()), plan.staging.url)
        raise
    finally:
        plan.close()
    return manifest


def _write(plan: Plan) -> report_page.Extras:
    """The stages (`analyse`), then one round trip that writes the shards, the index's docs files and
    the removed list into the staging directory; the page's summaries."""
    report, params, staging = plan.report, plan.params, plan.staging
    groups = plan.groups
    id_type = shards_mod.id_type_of(plan.schema, plan.id_column)
    meta = pd.DataFrame({plan.id_column: pd.Series(dtype=np.int64 if pa.types.is_integer(id_type) else object),
                         plan.text_column: pd.Series(dtype=TEXT_DTYPE)})
    keep = None
    if plan.keep_by is not None and plan.near:
        keep = (plan.keep_by[0], plan.schema.field(plan.keep_by[0]).type)
        meta[KEEP] = pd.Series(dtype=pd.ArrowDtype(shards_mod.keep_type(keep[1])))
    ddf = dd.from_map(write.read_group, groups, id_column=plan.id_column, text_column=plan.text_column,
                      id_type=id_type, keep=keep, meta=meta, enforce_metadata=False, label="read-shards")
    write_index = plan.write_index and plan.near and not plan.dry_run
    extras = report_page.Extras()
    plan.features_on_disk = memory.features_on_disk(plan.features_on_disk, sum(s.rows for s in plan.shards),
                                                    params.num_perm)
    kept = plan.kept = Checkpoints(staging)
    if kept.reused_stages:
        log.info("resuming: reusing %s from the interrupted run of %s", ", ".join(kept.reused_stages),
                 staging.resumed_from)
    elif staging.resumed_from is not None:
        log.info("resuming: the interrupted run of %s finished no stage; starting from the first",
                 staging.resumed_from)
    try:
        decided = analyse(
            ddf, protected=plan.protected, near=plan.near, id_column=plan.id_column,
            text_column=plan.text_column, params=params, report=report, components=plan.components,
            features_dir=kept.directory("features", "feat") if plan.features_on_disk else None,
            locate=write.locator(groups), details=plan.write_report, against=plan.against,
            skip_existing=plan.skip_existing,
            index_out=f"{staging.url}/{index.INDEX_DIR}" if write_index else None,
            spill_dir=f"{staging.url}/_labels", rows=sum(s.rows for s in plan.shards), kept=kept,
            cluster_size=plan.cluster_size and plan.near,
            keep=plan.keep_by[1] if keep is not None and plan.keep_by else None, clusters=plan.clusters,
            max_contaminated=None if plan.dry_run else plan.max_contaminated)
        # reused whole, or else the partitions an interrupted run wrote (kept as each finished), and the rest written
        written = kept.reused("write") is not None
        inputs = shared((groups, plan.schema))
        shown = page_data.page_documents(decided) if plan.write_report else None
        # the shards, the removed list and the page's texts: one round trip; each task takes the
        # persisted features whole and reads the columns it needs (a projection of them would be a
        # task of its own a partition)
        lazy: dict[str, dd.DataFrame] = {}
        split = write.split_files(groups)
        offsets = None
        if split and write_index:  # where each piece of a split file starts in it, for the index
            (counts,) = compute(dd.map_partitions(write.kept_counts, decided.feat, decided.roots, inputs,
                                                  plan.drop and plan.near, align_dataframes=False,
                                                  meta={"partition": "int64", "piece": "int64", "kept": "int64"}))
            offsets = shared(write.row_offsets(groups, counts))
        if not plan.dry_run:
            lazy["shards"] = dd.map_partitions(
                resumable, write.write_group, kept.directory("write", "shards"), decided.feat, decided.roots, inputs,
                plan.id_column,
                plan.drop and plan.near, plan.near, staging.url, params.num_perm if write_index else None,
                shared((plan.text_column, shown.rows_by_partition())) if shown is not None else None, offsets,
                plan.cluster_size and plan.near,
                meta={"rows": "int64", "indexed": "int64", "absorbed": "int64", "bytes": "int64",
                      "texts": object}, align_dataframes=False)
        if plan.write_report:
            prot = shared(plan.protected) if plan.protected is not None else None
            lazy["removed"] = dd.map_partitions(
                resumable, write.write_removed, kept.directory("write", "removed"), decided.feat, decided.roots,
                decided.matches, inputs, plan.id_column, prot, staging.url, meta={"rows": "int64"},
                align_dataframes=False)
        with Stage(report, "report" if plan.dry_run else "write") as stage:
            got = dict(zip(lazy, compute(*lazy.values(), retries=plan.retries)))
            if split and lazy and not written:  # the parts of each split file joined into it, a task a file
                joins = [(name, pieces) for name, pieces in split.items() if "shards" in lazy] + \
                    [(f"{removed.REMOVED}/{name}", pieces) for name, pieces in split.items() if "removed" in lazy]
                compute(*[dask.delayed(write.join_pieces)(staging.url, name, pieces) for name, pieces in joins],
                        retries=plan.retries)
            kept.save("write", report)  # before the index's counts are added to the report, and the parts removed
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
        _explain_killed_worker(exc, [[p.describe() for p in g] for g in groups],
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
    return (f"; index of {report.index_documents} kept documents (and {report.index_near_duplicates} near duplicates "
            f"of them), {report.index_bytes / max(1, report.index_documents):.0f} bytes a kept document")


def _dropped_near(plan: Plan) -> int:
    return plan.report.near_duplicates if (plan.near and plan.drop) else 0


def _accounted_rows(plan: Plan) -> int:
    """The rows written, which must be the input's less every row removed, else nothing is published."""
    report = plan.report
    expected = report.input_rows - report.contaminated - _dropped_near(plan) - report.skipped_existing
    output_rows = expected if plan.dry_run else io.parquet_rows(plan.staging.fs, plan.staging.tmp)
    if output_rows != expected:
        raise RuntimeError(f"Accounting mismatch: wrote {output_rows} rows, expected {expected} "
                           f"({report.input_rows} in - {report.contaminated} contaminated - {_dropped_near(plan)} "
                           f"near duplicates - {report.skipped_existing} already indexed). Nothing was replaced; "
                           "please report this as a bug.")
    return output_rows


def build_manifest(plan: Plan, output_rows: int) -> dict[str, Any]:
    """`_dedup.json`: what the run read, removed and wrote, with its parameters, versions and timings."""
    report, params, prot = plan.report, plan.params, plan.protected
    return {
        "tool": "dedup", "input": plan.input, "input_files": len(plan.shards), "output": plan.output,
        "partitions": len(plan.groups),
        "input_rows": report.input_rows, "output_rows": output_rows,
        "near_duplicates_dropped": _dropped_near(plan), "near_duplicates_found": report.near_duplicates,
        "contaminated_dropped": report.contaminated, "contaminated_by_file": report.contaminated_by_file,
        "contaminated_by_record": report.contaminated_by_record,
        "contaminated_records": report.contaminated_records,
        "clusters": report.clusters, "largest_cluster": report.largest_cluster,
        "candidate_pairs": report.candidate_pairs, "confirmed_pairs": report.confirmed_pairs,
        "same_text_pairs": report.same_text_pairs,
        "approximated_buckets": report.approximated_buckets,
        "largest_approximated_bucket": report.largest_approximated_bucket,
        "max_bucket": params.max_bucket, "components": report.components,
        "component_rounds": report.component_rounds, "near_dedup": plan.near, "drop_duplicates": plan.drop,
        "cluster_size": plan.cluster_size, "keep_by": ":".join(plan.keep_by) if plan.keep_by else None,
        "cluster_mode": plan.clusters, "below_threshold_to_survivor": report.below_survivor,
        "survivor_rounds": report.survivor_rounds, "survivor_histogram": report.survivor_histogram,
        "features_on_disk": plan.features_on_disk,
        "id_column": plan.id_column, "text_column": plan.text_column,
        "parameters": params.as_dict(), "fingerprint": params.fingerprint(),
        "protected_files": list(prot.files) if prot else [],
        "versions": versions(), "seconds": report.seconds,
        "dry_run": plan.dry_run, "similarity_histogram": report.similarity_histogram,
        "warnings": warnings_of(report, params, plan.max_contaminated), "max_contaminated": plan.max_contaminated,
        "report": removed.PAGE if plan.write_report else None,
        "against": [p.output for p in plan.against], "indexed_documents": report.indexed_documents,
        "near_duplicates_of_indexed": report.near_duplicates_of_indexed,
        "skipped_existing": report.skipped_existing,
        "output_bytes": report.output_bytes,
        "index": ({"path": index.INDEX_DIR, "documents": report.index_documents,
                   "near_duplicates": report.index_near_duplicates, "bytes": report.index_bytes,
                   "bytes_per_document": round(report.index_bytes / max(1, report.index_documents), 1)}
                  if plan.write_index and plan.near and not plan.dry_run and plan.shards else None),
        "removed": removed.REMOVED if plan.write_report else None,
        **({"resumed": resumed} if plan.kept is not None and (resumed := plan.kept.summary()) else {}),
    }


def _no_space(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, is a full disk."""
    import errno

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _write_page(plan: Plan, manifest: dict[str, Any], extras: report_page.Extras) -> None:
    staging = plan.staging
    page = report_page.render(manifest, extras)
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
        if plan.dry_run:
            log.info("dry run: %d of %d rows would be kept; %s holds only the manifest and the report (%.1f s)",
                     output_rows, report.input_rows, plan.output, report.seconds["total"])
        else:
            log.info("wrote %d of %d rows to %s in %.1f s", output_rows, report.input_rows, plan.output,
                     report.seconds["total"])
    if deferred.received:
        log.warning("interrupt received after OUTPUT was replaced: %s holds the complete new output", plan.output)


def run(input: str, output: str, *, protected: Sequence[PathLike] = (), near: bool = True,
        id_column: str | None = None,
        text_column: str = "text", params: Params | None = None, drop: bool = True, overwrite: bool = False,
        components: str = "auto", retries: int = 2, features_on_disk: bool | None = None,
        partition_rows: int = shards_mod.PARTITION_ROWS, dry_run: bool = False, write_report: bool = True,
        against: Sequence[str] = (), skip_existing: bool = False, write_index: bool = True,
        restart: bool = False, cluster_size: bool = False, keep_by: str | None = None,
        clusters: str = "connected", max_contaminated: float = MAX_CONTAMINATED) -> dict[str, Any]:
    """Parquet to Parquet: decontaminate against `protected`, near-dedup, write OUTPUT atomically.

    Runs on the active distributed client (or the local scheduler without one). OUTPUT mirrors
    the input files (same relative names, same schema plus `minhash_cluster`) and holds
    `_dedup.json`, the manifest, which is returned and which marks OUTPUT complete.
    `partition_rows` bounds how many rows of small consecutive shards are read as one partition.
    Unless `write_report` is False, `_report/` gets `index.html` and `removed.parquet`; with
    `dry_run`, OUTPUT gets only the manifest and the report, no shards. Unless `write_index` is
    False, a near-dedup run writes `_index/`, which a later run takes with `against` (earlier
    OUTPUTs): its documents that duplicate one of theirs are dropped, theirs always survive.
    `features_on_disk`: keep the features on disk (True) or in worker memory (False); by default
    (None) in memory while they fit a quarter of it (`dedup.job.memory`).
    Each stage's results are kept in the staging directory as it finishes: a run that dies leaves
    them, and the same call resumes from them (`dedup.job.checkpoints`); `restart` starts over.
    `cluster_size`: every row written also gets `minhash_cluster_size`, how many input documents
    its cluster holds (1 for a document without near duplicates). `keep_by` ("COLUMN", "COLUMN:max" or
    "COLUMN:min"): the member of each cluster with the largest (smallest) value of COLUMN survives,
    ties and nulls to the smallest id (docs/contract.md). `clusters`: "connected" (the contract's
    union-find) or "centred" (every removed document reaches the threshold with its cluster's survivor).
    `max_contaminated`: a run whose decontamination would remove more than this share of the input
    raises `TooContaminated` before publishing, OUTPUT as it was (a dry run only warns; 1: no guard).
    When it returns, the job holds nothing in the cluster's memory.
    """
    plan = prepare(input, output, protected=protected, near=near, id_column=id_column, text_column=text_column,
                   params=params, drop=drop, overwrite=overwrite, components=components, retries=retries,
                   features_on_disk=features_on_disk, partition_rows=partition_rows, dry_run=dry_run,
                   write_report=write_report, against=against, skip_existing=skip_existing, write_index=write_index,
                   restart=restart, cluster_size=cluster_size, keep_by=keep_by, clusters=clusters,
                   max_contaminated=max_contaminated)
    try:
        return execute(plan)
    finally:
        # Exceptions raised and caught inside libraries while the job ran (matplotlib's font parser,
        # asyncio timeouts in distributed) sit in reference cycles with their tracebacks, whose frames
        # lead up to this job's and hold its persisted collections: without a collection here, their
        # data stayed in the cluster's memory until Python's cyclic collector happened to run.
        gc.collect()
