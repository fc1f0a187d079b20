"""What `_dedup.json` says besides the counts: the package versions and the warnings a reader must
not miss."""

from __future__ import annotations

from dedup.config import Params
from dedup.job import stages
from dedup.job.plan import Report
from dedup.report.shown import shorten


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("dedup", "numpy", "numba", "pandas", "pyarrow", "dask", "distributed"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "unknown"
    return out


def warnings_of(report: Report, params: Params) -> list[str]:
    """What a reader of the report must not miss."""
    out = []
    for r in report.contaminated_by_record:
        if report.input_rows and r["documents"] > stages.CONTAMINATION_WARN_SHARE * report.input_rows:
            out.append(f"Protected record {shorten(r['record'])} of {r['file']} alone removes {r['documents']:,} documents "
                       f"({100 * r['documents'] / report.input_rows:.1f}% of the corpus), e.g. by the n-gram "
                       f"'{shorten(r['ngram'])}': check that it is eval text and not boilerplate.")
    if report.approximated_buckets:
        out.append(f"{report.approximated_buckets} LSH bucket(s) had more than {params.max_bucket} distinct texts "
                   f"(largest {report.largest_approximated_bucket}) and were joined by star edges, not all pairs.")
    return out
