"""The features stage on Dask: every document's features, computed once and kept (worker memory or disk)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import dask.dataframe as dd
import pandas as pd

from dedup.config import MAX_WITHIN_VALUES, Params
from dedup.core.decontam import ProtectedNgrams
from dedup.job.checkpoints import Through, as_is, read_part
from dedup.job.compute import compute, shared
from dedup.job.counts import Report
from dedup.job.graphs import file_read, persist, read_for
from dedup.job.ids import check_unique_ids, conflict_counts, existing_ids, id_conflicts
from dedup.job.stage import Settings, Step, View, rule_needed
from dedup.partition.features import (
    KEEP,
    SCOPE,
    SCOPE_TALLY_META,
    SIG,
    document_features,
    features_meta,
    scope_tally,
)
from dedup.storage import io


@dataclass(frozen=True)
class FeatureCounts:
    """What the features stage counted: rows read, contaminated documents, null ids."""

    rows: int
    contaminated: int
    hit: int
    null_ids: int


def features(ddf: dd.DataFrame, *, id_column: str, text_column: str, params: Params,
             protected: ProtectedNgrams | None, features_dir: str | None, through: Through = as_is,
             near: bool = True, action: str = "drop") -> tuple[dd.DataFrame, dd.DataFrame]:
    """Signatures, text hashes, keys and contamination per document, computed once (worker memory or
    disk), and their counts per partition (rows, contaminated, null_ids), lazy: computed with the
    next stage's (`FEATURE_COUNTS` sums them)."""
    prot = shared(protected) if protected is not None else None
    keep = ddf._meta[KEEP].dtype if KEEP in ddf.columns else None
    feat = ddf.map_partitions(document_features, id_column, text_column, params, prot, near, action,
                              meta=features_meta(params.num_perm, ddf._meta[id_column].dtype, keep, SCOPE in ddf.columns))
    feat = persist(through("feat", feat)) if features_dir is None else _materialise(feat, features_dir)
    counts = without_signatures(feat).map_partitions(
        _feature_counts, meta={"rows": "int64", "contaminated": "int64", "hit": "int64", "null_ids": "int64"})
    return feat, counts


def without_signatures(feat: dd.DataFrame) -> dd.DataFrame:
    """`feat` without its signatures, for a step that never reads them, when the features are read from
    disk (`_materialise`, or kept by an earlier run): Dask hands the columns a computation uses to the
    read (`read_part`'s `columns`), which then skips the signatures, nine tenths of the bytes. Reads of
    their own (`read_for`): a read shared with a step that takes the signatures would read them all,
    and be held until both steps have run. As it is when the features are held in memory: there a
    projection would be a task of its own a partition."""
    if file_read(feat) is None or SIG not in feat.columns:
        return feat
    return read_for(feat, "ids")[[c for c in feat.columns if c != SIG]]


def _feature_counts(f: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"rows": [len(f)], "contaminated": [int((f["source"] >= 0).sum())],
                         "hit": [int((f["hit"] >= 0).sum())], "null_ids": [int(f["_id"].isna().sum())]})


def feature_counts(c: pd.DataFrame) -> FeatureCounts:
    """The computed counts of `features`, summed."""
    return FeatureCounts(**{k: int(c[k].sum()) for k in ("rows", "contaminated", "hit", "null_ids")})


def _materialise(feat: dd.DataFrame, features_dir: str) -> dd.DataFrame:
    """Compute the features once, written to `features_dir` as Parquet: each partition is one file
    read back as one partition (`from_map`), so the features stay aligned with the input's
    partitions while worker memory holds only what a task is working on."""
    import fsspec

    n = feat.npartitions
    compute(feat.to_parquet(features_dir, write_index=False, compute=False, **io.working_options(feat.columns),
                            name_function=lambda i: f"part-{i:06d}.parquet"))
    fs, root = fsspec.core.url_to_fs(features_dir)
    proto = features_dir.split("://", 1)[0] + "://" if "://" in features_dir else ""
    paths = [f"{proto}{root}/part-{i:06d}.parquet" for i in range(n)]
    missing = [p for p in paths if not fs.exists(p.removeprefix(proto))]
    if missing:
        raise RuntimeError(f"Features were not written for {len(missing)} partition(s), e.g. {missing[0]}.")
    return dd.from_map(partial(read_part, like=feat._meta), paths, meta=feat._meta, enforce_metadata=False)


class Features(Step):
    """Each document's features (id, key, text hashes, contamination, signature), kept (worker memory
    or `features_dir`), and the ids' check in the same round trip (every id unique, and new to the
    earlier outputs' indexes unless `skip_existing`)."""

    name = "features"
    reads = ("source", "rule")
    gives = ("feat",)
    frames = ("feat",)

    def needs(self, s: Settings) -> tuple[str, ...]:
        return ("source", *rule_needed(s))

    def run(self, job: View) -> str:
        s, report = job.settings, job.report
        feat, lazy_counts = features(job.source, id_column=s.id_column, text_column=s.text_column, params=s.params,
                                     protected=job.protected,
                                     features_dir=s.features_dir, through=partial(job.kept.through, self.name),
                                     near=s.near, action=s.contaminated)
        conflicts, k, lazy_ids = id_conflicts(without_signatures(feat), s.npartitions, against=s.against, index_out=s.index_out,
                                              rows=s.rows)
        scoped = within_tally(job.source) if SCOPE in job.source.columns else ()
        fc, ic, sample, *tally = compute(lazy_counts, *lazy_ids, *scoped)
        if tally:
            report.within, report.within_count = scope_values(tally[0]), int(tally[1])
        c = feature_counts(fc)
        if c.null_ids:
            located = io.null_id_rows(s.null_id_files, s.id_column) if s.null_id_files else []
            where = "; first at " + ", ".join(f"{f} row {r}" for f, r in located) if located else ""
            raise ValueError(f"{c.null_ids} document(s) have a null id in column {s.id_column!r}{where}. "
                             "Every document needs a unique id.")
        report.input_rows, report.contaminated, report.contamination_hit = c.rows, c.contaminated, c.hit
        id_counts, sample = conflict_counts(k, ic, sample)
        report.id_partitions = id_counts.id_partitions
        check_unique_ids(sample[sample["kind"] == 0], s.id_column, s.locate, id_counts.repeated)
        summary = (f"{report.input_rows} rows in {job.source.npartitions} partitions, "
                   f"{contamination_words(report, s.contaminated)}; every id occurs once")
        if s.against:
            feat = existing_ids(feat, conflicts, id_counts.existing, sample[sample["kind"] == 1], s.id_column,
                                s.locate, s.skip_existing)
            report.skipped_existing = id_counts.existing if s.skip_existing else 0
            summary += (f"; {report.skipped_existing} already read by an earlier run, skipped"
                        if report.skipped_existing else "; none was read by an earlier run")
        job.feat = feat
        return summary

    def to_keep(self, job: View) -> dict[str, Any]:
        on_disk = job.settings.features_dir is not None and not job.report.skipped_existing  # else marked, in memory
        return {"written": {"feat": job.feat}} if on_disk else {"frames": {"feat": job.feat}}

    def restore(self, job: View, values: dict[str, Any]) -> None:
        job.feat = job.kept.frame(self.name, "feat")
        if job.settings.features_dir is None:  # kept in memory, as the interrupted run did
            job.feat = persist(job.feat)


def contamination_words(report: Report, action: str) -> str:
    """What the contamination action did to the documents hit, in the features' log line."""
    hit = report.contamination_hit
    if action == "tag":
        return f"{hit} contaminated (tagged)"
    if action == "cut":
        return f"{hit} contaminated ({hit - report.contaminated} cut, {report.contaminated} dropped by the cut)"
    return f"{report.contaminated} contaminated"


def within_tally(source: dd.DataFrame) -> tuple[dd.DataFrame, Any]:
    """The `--within` values' documents, summed by Dask's group-by (one row a value, never all of them on
    the client): the `MAX_WITHIN_VALUES` with the most documents (ties: the smallest key), and how many
    values there are; lazy."""
    by = source.map_partitions(scope_tally, meta=SCOPE_TALLY_META).groupby("scope").agg(
        {"value": "first", "documents": "sum"}).reset_index()
    ranked = by.assign(fewer=-by["documents"])
    return ranked.nsmallest(MAX_WITHIN_VALUES, ["fewer", "scope"]), by["documents"].count()


def scope_values(top: pd.DataFrame) -> list[dict[str, Any]]:
    """`within_tally`'s values, the most documents first: each one's value (None for null), its key (as a
    string, for JSON), its documents, and room for its near duplicates (the roots stage's)."""
    top = top.sort_values(["documents", "scope"], ascending=[False, True], kind="stable")
    return [{"value": None if pd.isna(v) else v, "key": str(k), "documents": int(d), "near_duplicates": 0}
            for k, v, d in zip(top["scope"].tolist(), top["value"].tolist(), top["documents"].tolist())]
