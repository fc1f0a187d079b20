"""The buckets stage on Dask: band rows routed to their key's range, made into bucket edges (and written as
the index's band files); with `--against`, the earlier indexes' rows of the same buckets joined."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.config import Params
from dedup.job.checkpoints import Through, as_is
from dedup.job.graphs import persist, persist_counting
from dedup.job.manifest import bucket_warning
from dedup.job.notices import warn
from dedup.job.routing import ROWS_META, route, route_ranges, row_count
from dedup.job.stage import Settings, Step, View
from dedup.partition import keyspace
from dedup.partition.buckets import EDGE_META, KIND_APPROX, LONG_META, bucket_edges, long_form
from dedup.partition.features import KEEP, ROOT_DOC
from dedup.partition.stand_ins import KEYS_META, own_roots
from dedup.storage import index_files, index_layout, index_lookup

log = logging.getLogger("dedup")


@dataclass(frozen=True)
class BucketCounts:
    """The buckets stage: buckets joined by star edges and the largest, index band bytes written,
    indexed documents sharing a bucket with the input, the bucket ranges, the candidate edges."""

    approximated_buckets: int
    largest_approximated_bucket: int
    index_band_bytes: int
    indexed_matched: int
    bucket_partitions: int
    edges: int


def _write_band_part(rows: pd.DataFrame, root: str, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    assert partition_info is not None
    return pd.DataFrame({"bytes": [index_files.write_bands(rows, root, partition_info["number"])], "rows": [len(rows)]})


def _both(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([a.reset_index(drop=True), b.reset_index(drop=True)], ignore_index=True)


def buckets(feat: dd.DataFrame, params: Params, npartitions: int | None = None, *, index_out: str | None = None,
            layout: index_layout.Layout | None = None, rows: int | None = None, through: Through = as_is
            ) -> tuple[dd.DataFrame, dd.DataFrame | None, BucketCounts]:
    """Bucket edges on the workers: the long form (band, key, doc) routed to the range of its key,
    every bucket turned into same-text, candidate or star edges. Persisted; counts approximated buckets.

    index_out: also write the routed rows there as this run's index band files. layout: join each
    bucket range with the earlier indexes' rows of the same range that share a bucket with this run's
    documents (their features, read at their index partitions with the roots their near duplicates
    stand for (`dedup.partition.stand_ins`), persisted, are returned); edges
    between two indexed documents are dropped. Band rows of indexes older than format 3, and with
    exact Jaccard, first go to their documents' partitions for their text hashes and to learn which
    documents take part, then back. rows: this input's documents, when known (each gives at most a
    band row a band), so that the shuffle moves pieces of a bounded size (`routing.route_by`).
    """
    long = feat.map_partitions(long_form, params, meta=LONG_META)
    k = npartitions or max(1, long.npartitions)
    if layout is not None and layout.parts:  # at least as many ranges as the indexes have: each reads a slice
        k = max([k] + [p.bucket_parts for p in layout.parts])
    ranged = route_ranges(long, k, None if rows is None else rows * params.num_bands)
    combined, idx_feat, first_indexed = ranged, None, keyspace.NO_INDEX
    if layout is not None and layout.parts:
        first_indexed = layout.first_key
        exact = params.confirm == "exact"
        matched = ranged.map_partitions(index_lookup.matched_rows, layout, k, meta=LONG_META)
        at_docs = route(matched, "doc", layout.total, layout.placement)
        # the roots the matched near duplicates stand for, counted (so few take one task, not a
        # shuffle) and read with them: each earlier output's texts are read once
        named = at_docs.map_partitions(index_lookup.named_roots, layout, exact, meta=KEYS_META)
        (ranged, at_docs, named), (n_named,) = persist_counting([ranged, at_docs, named],
                                                                [named.map_partitions(row_count, meta=ROWS_META)])
        roots = None
        if n := int(n_named["n"].sum()):
            roots = route(named, "doc", layout.total, layout.placement, rows=n, row_bytes=8)
        id_dtype = feat._meta["_id"].dtype
        meta = index_lookup.features_meta(params.num_perm, id_dtype)
        idx_feat = dd.map_partitions(index_lookup.index_features, at_docs, roots, layout, params, exact, id_dtype,
                                     meta=meta, align_dataframes=False)
        if layout.direct(exact):  # the features are read beside the buckets, not on their way
            joined = matched
        else:  # text hashes, and which documents take part, come from the docs files: and back
            kept = dd.map_partitions(index_lookup.kept_rows, at_docs, idx_feat, params, meta=LONG_META,
                                    align_dataframes=False)
            joined = route_ranges(kept, k)
        combined = dd.map_partitions(_both, ranged, joined, meta=LONG_META, align_dataframes=False)
    edges = combined.map_partitions(bucket_edges, params.max_bucket, first_indexed, meta=EDGE_META)
    writes = ranged.map_partitions(_write_band_part, index_out, meta={"bytes": "int64", "rows": "int64"}) \
        if index_out is not None else None
    edges = through("edges", edges)
    # one pass over the routed rows, and one round trip for every count: the bucket sizes, the band
    # files written, the indexed documents read
    lazy = {"sizes": edges.map_partitions(_approx_sizes, meta={"buckets": "int64", "largest": "int64", "edges": "int64"})}
    if writes is not None:
        lazy["writes"] = writes
    if idx_feat is not None:
        lazy["matched"] = dd.map_partitions(index_lookup.matched_count, at_docs, idx_feat, params, meta=ROWS_META,
                                            align_dataframes=False)
    (edges, idx_feat), tallies = persist_counting([edges, idx_feat], list(lazy.values()))
    got = dict(zip(lazy, tallies))
    c = got["sizes"]
    counts = BucketCounts(approximated_buckets=int(c["buckets"].sum()), largest_approximated_bucket=int(c["largest"].max()),
                          index_band_bytes=int(got["writes"]["bytes"].sum()) if "writes" in got else 0,
                          indexed_matched=int(got["matched"]["n"].sum()) if "matched" in got else 0,
                          bucket_partitions=k, edges=int(c["edges"].sum()))
    return edges, idx_feat, counts


def _approx_sizes(e: pd.DataFrame) -> pd.DataFrame:
    """Per partition of bucket edges: approximated buckets, the largest one's size, and the edges."""
    a = e[e["kind"] == KIND_APPROX]
    sizes = a.groupby(["band", "left"]).size() + 1 if len(a) else pd.Series(dtype=np.int64)
    return pd.DataFrame({"buckets": [len(sizes)], "largest": [int(sizes.max()) if len(sizes) else 0], "edges": [len(e)]})


class Buckets(Step):
    """Bucket edges (and this run's index band files); with `--against`, where the earlier outputs'
    documents sit in the key space (`layout`) and those that share a bucket with this input, whose
    features and texts the next stages read after this input's (`feat_all`, `texts`)."""

    name = "buckets"
    reads = ("feat", "source")
    gives = ("layout", "edges", "edge_rows", "idx_feat", "feat_all", "texts")
    values = ("edge_rows",)
    frames = ("edges", "idx_feat")

    def wanted(self, s: Settings) -> bool:
        return s.near

    def before(self, job: View) -> None:
        against = job.settings.against
        job.layout = index_layout.Layout.gathering(against, job.feat.npartitions) if against else None

    def run(self, job: View) -> str:
        s, report = job.settings, job.report
        job.edges, job.idx_feat, b = buckets(job.feat, s.params, s.npartitions, index_out=s.index_out,
                                             layout=job.layout, rows=report.input_rows,
                                             through=partial(job.kept.through, self.name))
        warn(report, bucket_warning(b.approximated_buckets, s.params.max_bucket, b.largest_approximated_bucket))
        report.approximated_buckets = b.approximated_buckets
        report.largest_approximated_bucket = b.largest_approximated_bucket
        report.index_bytes += b.index_band_bytes
        report.bucket_partitions = b.bucket_partitions
        job.edge_rows = b.edges
        summary = f"bucket edges on the workers, {report.approximated_buckets} approximated bucket(s)"
        if job.layout is not None:
            report.indexed_documents = sum(p.documents for p in s.against)
            summary += (f"; {b.indexed_matched} of {report.indexed_documents} indexed documents share a "
                        "bucket with this input")
        return summary

    def after(self, job: View) -> None:
        feat, ddf, text_column = job.feat, job.source, job.settings.text_column
        if job.idx_feat is None:
            job.feat_all, job.texts = feat, ddf
            return
        # persisted once: every use in confirm and roots would redo the concat
        old = job.idx_feat.partitions[feat.npartitions:].clear_divisions()
        if KEEP in feat.columns:  # an earlier output's documents survive whatever their value: none is read
            old = old.map_partitions(_no_keep, feat._meta[KEEP].dtype,
                                     meta=old._meta.assign(**{KEEP: feat._meta[KEEP].iloc[:0]}))
        job.feat_all = persist(dd.concat([feat.map_partitions(own_roots, meta=own_roots(feat._meta)),
                                          old[[*feat.columns, ROOT_DOC]]]))
        job.texts = dd.concat([ddf[[text_column]], old[["_text"]].rename(columns={"_text": text_column})])


def _no_keep(part: pd.DataFrame, dtype: Any) -> pd.DataFrame:
    return part.assign(**{KEEP: pd.Series([None] * len(part), dtype=dtype, index=part.index)})
