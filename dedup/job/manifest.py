"""What `_dedup.json` says besides the counts: the package versions and the warnings a reader must
not miss."""

from __future__ import annotations

from typing import Any

from dedup.config import Params
from dedup.job.counts import Report
from dedup.job.notices import banding
from dedup.job.plan import Plan, writes_index
from dedup.job.stage import Job
from dedup.job.versions import versions
from dedup.report import removed
from dedup.report.shown import shorten
from dedup.storage import index

CONTAMINATION_WARN_SHARE = 0.01
"""A warning names any protected record that alone removes more than this share of the corpus."""


def record_warning(entry: dict[str, Any], input_rows: int) -> str | None:
    """The warning for one protected record (file, record, documents, ngram), if it alone removes more
    than `CONTAMINATION_WARN_SHARE` of the corpus: logged as the stage ends, kept in the manifest."""
    if not input_rows or entry["documents"] <= CONTAMINATION_WARN_SHARE * input_rows:
        return None
    return (f"Protected record {shorten(entry['record'])} of {entry['file']} alone hits {entry['documents']:,} "
            f"documents ({100 * entry['documents'] / input_rows:.1f}% of the corpus), e.g. by the n-gram "
            f"'{shorten(entry['ngram'])}': check that it is eval text and not boilerplate (--max-ngram-docs ignores "
            "n-grams found in many documents).")


def bucket_warning(buckets: int, max_bucket: int, largest: int) -> str | None:
    """The warning for LSH buckets joined by star edges, if any."""
    if not buckets:
        return None
    return (f"{buckets} LSH bucket(s) had more than {max_bucket} distinct texts (largest {largest}) and were joined "
            "by star edges, not all pairs.")


CHAINED_WARN_SHARE = 0.05
"""In connected clusters, a warning (suggesting `--clusters centred`) when more than this share of the
near duplicates is below the threshold with the document kept in their place."""


def chained_warning(report: Report, params: Params) -> str | None:
    """The warning for connected clusters whose removed members are often far from their survivor."""
    scored, below = report.survivor_scored, report.below_survivor
    if report.clusters_mode != "connected" or not scored or below <= CHAINED_WARN_SHARE * scored:
        return None
    return (f"{below:,} of {scored:,} near duplicates ({100 * below / scored:.1f}%) are below the threshold "
            f"{params.threshold} with the document kept in their place: chains of confirmed pairs joined them to it. "
            "--clusters centred keeps every removed document within the threshold of its survivor.")


def contamination_guard(report: Report, max_share: float) -> str | None:
    """The line that stops a run (or warns in a dry run) whose decontamination removes more than
    `max_share` of its input, naming the share and the records that remove the most."""
    if not report.input_rows or report.contaminated <= max_share * report.input_rows:
        return None
    top = sorted(report.contaminated_by_record, key=lambda r: (-r["documents"], r["file"], r["record"]))[:3]
    named = "; ".join(f"{shorten(r['record'])} of {r['file']} ({r['documents']:,})" for r in top)
    return (f"Decontamination would remove {report.contaminated:,} of {report.input_rows:,} documents "
            f"({100 * report.contaminated / report.input_rows:.1f}%), above --max-contaminated {max_share:g}; "
            f"most by {named}. Check those records are eval text, not boilerplate (--dry-run writes the page "
            f"that shows them){cap_hint(report, max_share)}, or raise --max-contaminated (1 turns the guard off).")


def cap_hint(report: Report, max_share: float) -> str:
    """When a few common n-grams do most of the removing: the largest `--max-ngram-docs` of the what-if
    that leaves the run within the guard, as a clause of the guard's line (else nothing)."""
    limit = max_share * report.input_rows
    fits = [w for w in report.eval_what_if if w["documents"] <= limit and w["documents"] < report.contamination_hit / 2]
    if not fits:
        return ""
    best = max(fits, key=lambda w: w["max_ngram_docs"])
    return (f"; most of it is common text: --max-ngram-docs {best['max_ngram_docs']} (ignore a protected n-gram "
            f"found in more documents) would leave {best['documents']:,} documents hit")


def dropped_near(plan: Plan) -> int:
    """Near duplicates dropped from the output (none when they are only tagged; those of clusters kept
    whole, below `--min-cluster-size`, stay)."""
    report = plan.report
    return report.near_duplicates - report.near_duplicates_kept_whole if (plan.options.near and plan.options.drop) else 0


def build_manifest(plan: Plan, job: Job, output_rows: int) -> dict[str, Any]:
    """`_dedup.json`: what the run read, removed and wrote, with its parameters, versions and timings
    (`job`: where the features were kept, and what an interrupted run's stages gave it)."""
    report, params, prot = plan.report, plan.params, plan.protected
    return {
        "tool": "dedup", "input": plan.input, "input_files": len(plan.shards), "output": plan.output,
        "partitions": len(plan.groups),
        "input_rows": report.input_rows, "output_rows": output_rows,
        "near_duplicates_dropped": dropped_near(plan), "near_duplicates_found": report.near_duplicates,
        "contaminated_dropped": report.contaminated, "contaminated_by_file": report.contaminated_by_file,
        "contaminated_by_record": report.contaminated_by_record,
        "contaminated_records": report.contaminated_records,
        "contamination": {
            "action": plan.options.contaminated, "documents_hit": report.contamination_hit,
            "removed": report.contaminated,
            "cut": report.contamination_hit - report.contaminated if plan.options.contaminated == "cut" else 0,
            "tagged": report.contamination_hit if plan.options.contaminated == "tag" else 0,
            "max_ngram_docs": plan.options.max_ngram_docs, "common_ngrams": report.common_ngram_count,
            "common_ngrams_listed": report.common_ngrams, "what_if": report.eval_what_if,
            "eval_records": removed.EVAL_RECORDS if plan.protected is not None and plan.options.write_report else None,
        } if plan.protected is not None else None,
        "within": {"column": plan.within, "values": report.within, "value_count": report.within_count}
        if plan.within is not None else None,
        "min_cluster_size": plan.options.min_cluster_size,
        "near_duplicates_kept_whole": report.near_duplicates_kept_whole,
        "min_cluster_size_what_if": report.min_size_what_if or None,
        "clusters": report.clusters, "largest_cluster": report.largest_cluster,
        "candidate_pairs": report.candidate_pairs, "confirmed_pairs": report.confirmed_pairs,
        "same_text_pairs": report.same_text_pairs,
        "approximated_buckets": report.approximated_buckets,
        "largest_approximated_bucket": report.largest_approximated_bucket,
        "max_bucket": params.max_bucket, "components": report.components,
        "component_rounds": report.component_rounds, "near_dedup": plan.options.near, "drop_duplicates": plan.options.drop,
        "cluster_size": plan.options.cluster_size, "keep_by": ":".join(plan.keep_by) if plan.keep_by else None,
        "cluster_mode": plan.options.clusters, "below_threshold_to_survivor": report.below_survivor,
        "survivor_rounds": report.survivor_rounds, "survivor_histogram": report.survivor_histogram,
        "features_on_disk": job.settings.features_dir is not None,
        "id_column": plan.id_column, "text_column": plan.options.text_column,
        "parameters": params.as_dict(), "fingerprint": params.fingerprint(),
        "banding": banding(params) if plan.options.near else None,
        "protected_files": list(prot.files) if prot else [],
        "versions": versions(), "seconds": report.seconds,
        "dry_run": plan.options.dry_run, "similarity_histogram": report.similarity_histogram,
        "what_if": report.what_if or None,
        "warnings": list(report.warnings),
        "max_contaminated": plan.options.max_contaminated,
        "max_lines_removed": plan.options.max_lines_removed if plan.options.lines else None,
        "report": removed.PAGE if plan.options.write_report else None,
        "against": [p.shown for p in plan.against], "indexed_documents": report.indexed_documents,
        "earlier_outputs": [{"output": p.shown, "indexed_documents": p.documents,
                             "near_duplicates": report.near_duplicates_by_output[i]
                             if i < len(report.near_duplicates_by_output) else None}
                            for i, p in enumerate(plan.against)],
        "near_duplicates_of_indexed": report.near_duplicates_of_indexed,
        "skipped_existing": report.skipped_existing,
        "lines": ({**report.lines, "top_lines": report.top_lines,
                   "removed_lines": removed.REMOVED_LINES if plan.options.write_report and plan.shards else None}
                  if plan.options.lines else None),
        "spans": ({**report.spans, "documents_dropped": report.emptied_by_spans} if plan.options.spans else None),
        "output_bytes": report.output_bytes,
        "index": ({"path": index.INDEX_DIR, "documents": report.index_documents,
                   "near_duplicates": report.index_near_duplicates, "bytes": report.index_bytes,
                   "bytes_per_document": (round(report.index_bytes / report.index_documents, 1)
                                          if report.index_documents else None)}
                  if writes_index(plan.options) and not plan.options.dry_run and plan.shards else None),
        "removed": removed.REMOVED if plan.options.write_report else None,
        **({"resumed": resumed} if (resumed := job.kept.summary()) else {}),
    }
