"""The job's stages on Dask collections, each returning its collections and its own counts.

features -> buckets -> confirm -> components (client or distributed) -> roots; the pure
per-partition work is in `dedup.partition.frames` and `dedup.partition.ccstar`. Nothing proportional to the corpus
reaches the client or the task graph: edges, pairs and roots move between workers by shuffles,
routed to the partition a document key names; the client receives counts (and, for client
components only, the confirmed edges).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.config import Params
from dedup.core.decontam import ProtectedNgrams
from dedup.core.text import encode_batch
from dedup.core.unionfind import components
from dedup.job.compute import active_client, compute, shared
from dedup.job.graphs import exchanged, gathered, persist, shuffled
from dedup.job.manifest import bucket_warning, record_warning
from dedup.partition import ccstar, frames, keyspace
from dedup.report.shown import shown_repr
from dedup.storage import index

log = logging.getLogger("dedup")

MAX_STAR_ROUNDS = 200


SMALL_ROUTE_BYTES = 64 * 2**20
"""A route whose rows are known to take at most about this many bytes (rows x the caller's estimate
of a row) goes through one task that gathers every partition and splits the rows by destination,
instead of a shuffle, whose fixed cost (transfer tasks, barrier, unpack tasks) is most of the time
of a small one (docs/performance.md, Design choices). A bound on bytes, not a share of the corpus:
no task gathers much more than this, and larger frames keep the shuffle's parallelism."""

DIRECT_ROUTE_PIECES = 256
"""A route to key ranges from n partitions to k whose n x k is at most this goes through plain tasks
(`route_direct`: n splits, n x k pieces, k joins) instead of a p2p shuffle: every piece is a task,
so their cost grows with the square of the partitions where a shuffle's grows with the rows.
Routes to the documents' own partitions keep the shuffle (docs/performance.md, Design choices)."""

ID_ROW_BYTES = 80
"""The estimate of a routed row holding a document key and an id (a string id of about 50 bytes)."""


@dataclass(frozen=True)
class FeatureCounts:
    """What the features stage counted: rows read, contaminated documents, null ids."""

    rows: int
    contaminated: int
    null_ids: int


@dataclass(frozen=True)
class IdCounts:
    """The ids' check: ids read twice, ids an earlier output already read, and the id ranges."""

    repeated: int
    existing: int
    id_partitions: int


@dataclass(frozen=True)
class ContaminationCounts:
    """Contaminated documents per protected file and record (the first `MAX_RECORDS_IN_MANIFEST`),
    the records hit, and (source, doc, _id) of an example document per record for the page."""

    by_file: dict[str, int]
    by_record: list[dict[str, Any]]
    records: int
    examples: pd.DataFrame | None


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


@dataclass(frozen=True)
class ConfirmCounts:
    """The confirm stage: candidate pairs, those confirmed, same-text pairs, the graph's edges, and
    the histogram of the candidates' similarities."""

    candidate_pairs: int
    confirmed_pairs: int
    same_text_pairs: int
    graph_edges: int
    similarity_histogram: list[int]


@dataclass(frozen=True)
class RootCounts:
    """The roots stage: clustered documents, near duplicates, clusters and the largest, near
    duplicates of earlier outputs' documents, and the page's summary of the clusters."""

    members: int
    duplicates: int
    clusters: int
    of_indexed: int
    largest: int
    summary: pd.DataFrame | None


PART = "_partitions"
"""The column holding each row's destination partition while it is routed (the name dask's shuffles use)."""


def _route_by(frame: dd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray], npartitions: int,
              rows: int | None = None, row_bytes: int = 64, ranges: bool = False) -> dd.DataFrame:
    """Partition i of the result holds the rows `part_of` sends to i; their index and their order
    inside a partition are unspecified (every consumer sorts or groups). `rows`: an upper bound on
    the frame's rows, when known, so that a small frame takes `route_small`. `ranges`: the result's
    partitions are key ranges of their own (joined with no other frame's partitions), and between
    few partitions it takes `route_direct`.

    Else a shuffle on the destination column itself (dask's own `Shuffle`, which its hash shuffles and
    `set_index` build on): `set_index` on the destination, as before, added three tasks a partition
    (a lookup of the destination in the divisions, the new index, a sort of every partition by it)."""
    if rows is not None and rows * row_bytes <= SMALL_ROUTE_BYTES:
        return route_small(frame, part_of, npartitions)
    if ranges and frame.npartitions * npartitions <= DIRECT_ROUTE_PIECES:
        return route_direct(frame, part_of, npartitions)
    meta = frame._meta.assign(**{PART: pd.Series(dtype=np.int64)})
    with_part = frame.map_partitions(_with_part, part_of, meta=meta)
    return shuffled(with_part, PART, npartitions)[list(frame.columns)]


# The functions tasks run are module-level (with `functools.partial` for their parameters), never
# lambdas or closures: those are pickled by value, once per task, by the client and again by the
# scheduler (about 0.6 ms each, after a failed plain pickle), where a module function is a name.

def _with_part(frame: pd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray]) -> pd.DataFrame:
    return frame.assign(**{PART: part_of(frame)})


def _placed_part(frame: pd.DataFrame, key_column: str, placement: keyspace.Placement) -> np.ndarray:
    return placement(frame[key_column].to_numpy(np.int64))


def _range_part(frame: pd.DataFrame, column: str, npartitions: int) -> np.ndarray:
    return index.key_range_of(frame[column].to_numpy(np.uint64), npartitions)


def _label_part(frame: pd.DataFrame, npartitions: int) -> np.ndarray:
    return keyspace.label_partition(frame["label"].to_numpy(np.int64), npartitions)


def _rows(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"n": [len(frame)]})


ROWS_META = {"n": "int64"}


def _split(frame: pd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray], npartitions: int) -> list[pd.DataFrame]:
    """The rows of `frame` (every partition, concatenated) cut into one frame per destination."""
    frame = frame.reset_index(drop=True)
    dest = np.asarray(part_of(frame), dtype=np.int64) if len(frame) else np.zeros(0, np.int64)
    order = np.argsort(dest, kind="stable")
    frame = frame.take(order).reset_index(drop=True)
    bounds = np.searchsorted(dest[order], np.arange(npartitions + 1))
    return [frame.iloc[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]


def route_small(frame: dd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray],
                npartitions: int) -> dd.DataFrame:
    """`_route_by` through one task: for frames small enough to gather (`SMALL_ROUTE_BYTES`)."""
    meta = frame._meta.reset_index(drop=True)
    return gathered(frame, partial(_split_parts, part_of=part_of, npartitions=npartitions), npartitions, meta)


def route_direct(frame: dd.DataFrame, part_of: Callable[[pd.DataFrame], np.ndarray],
                 npartitions: int) -> dd.DataFrame:
    """`_route_by` through plain tasks, each partition cut by destination (`_split`) and the pieces of
    each destination joined in partition order (`graphs.exchanged`): for few partitions
    (`DIRECT_ROUTE_PIECES`)."""
    meta = frame._meta.reset_index(drop=True)
    return exchanged(frame, partial(_split, part_of=part_of, npartitions=npartitions), frames.concat_rows,
                     npartitions, meta)


def _split_parts(parts: Sequence[pd.DataFrame], part_of: Callable[[pd.DataFrame], np.ndarray],
                 npartitions: int) -> list[pd.DataFrame]:
    """The rows of every part (`frames.concat_rows`) cut by destination (`_split`)."""
    return _split(frames.concat_rows(parts), part_of, npartitions)


def route(frame: dd.DataFrame, key_column: str, npartitions: int,
          placement: keyspace.Placement = keyspace.OWN, rows: int | None = None, row_bytes: int = 64) -> dd.DataFrame:
    """`frame`'s rows moved to the partition of the document key in `key_column`: partition i of the
    result holds exactly the rows whose key belongs to features partition i, by `placement` (a
    shuffle, or one task for a small frame: `rows`, an upper bound on its rows, and `row_bytes`;
    no graph data)."""
    return _route_by(frame, partial(_placed_part, key_column=key_column, placement=placement), npartitions, rows,
                     row_bytes)


def route_ranges(frame: dd.DataFrame, npartitions: int) -> dd.DataFrame:
    """Band rows moved to the bucket range of their key (`dedup.storage.index.key_range_of`): every bucket
    in one partition, and the same ranges as an index's band files."""
    return _route_by(frame, partial(_range_part, column="key", npartitions=npartitions), npartitions, ranges=True)


# -- features --------------------------------------------------------------------------------------

def features(ddf: dd.DataFrame, *, id_column: str, text_column: str, params: Params,
             protected: ProtectedNgrams | None, features_dir: str | None) -> tuple[dd.DataFrame, dd.DataFrame]:
    """Signatures, text hashes, keys and contamination per document, computed once (worker memory or
    disk), and their counts per partition (rows, contaminated, null_ids), lazy: computed with the
    next stage's (`FEATURE_COUNTS` sums them)."""
    prot = shared(protected) if protected is not None else None
    feat = ddf.map_partitions(frames.features, id_column, text_column, params, prot,
                              meta=frames.features_meta(params.num_perm, ddf._meta[id_column].dtype))
    feat = _materialise(feat, features_dir)
    counts = feat.map_partitions(_feature_counts, meta={"rows": "int64", "contaminated": "int64", "null_ids": "int64"})
    return feat, counts


def _feature_counts(f: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"rows": [len(f)], "contaminated": [int((f["source"] >= 0).sum())],
                         "null_ids": [int(f["_id"].isna().sum())]})


def feature_counts(c: pd.DataFrame) -> FeatureCounts:
    """The computed counts of `features`, summed."""
    return FeatureCounts(**{k: int(c[k].sum()) for k in ("rows", "contaminated", "null_ids")})


def _materialise(feat: dd.DataFrame, features_dir: str | None) -> dd.DataFrame:
    """Compute the features once: kept in worker memory, or written to `features_dir` as Parquet.

    On disk, each partition is one file read back as one partition (`from_map`), so the
    features stay aligned with the input's partitions while worker memory holds only what a
    task is working on.
    """
    if features_dir is None:
        return persist(feat)
    import fsspec

    n = feat.npartitions
    compute(feat.to_parquet(features_dir, write_index=False, compute=False,
                            name_function=lambda i: f"features-{i:06d}.parquet"))
    fs, root = fsspec.core.url_to_fs(features_dir)
    proto = features_dir.split("://", 1)[0] + "://" if "://" in features_dir else ""
    paths = [f"{proto}{root}/features-{i:06d}.parquet" for i in range(n)]
    missing = [p for p in paths if not fs.exists(p.removeprefix(proto))]
    if missing:
        raise RuntimeError(f"Features were not written for {len(missing)} partition(s), e.g. {missing[0]}.")
    return dd.from_map(_read_features, paths, meta=feat._meta, enforce_metadata=False)


def _read_features(path: str) -> pd.DataFrame:
    """A features file written by `_materialise`, the signature column back in its Arrow type."""
    import fsspec
    import pyarrow.parquet as pq

    with fsspec.open(path, "rb") as fh:
        table = pq.read_table(fh, use_threads=False)  # on the task's thread, as `shards.read_table`
    return table.to_pandas(types_mapper={pa.large_binary(): pd.ArrowDtype(pa.large_binary())}.get, use_threads=False)


CONFLICT_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "kind": pd.Series(dtype=np.int8)})


def id_conflicts(feat: dd.DataFrame, npartitions: int | None = None, *, against: Sequence[index.IndexPart] = (),
                 index_out: str | None = None, rows: int | None = None
                 ) -> tuple[dd.DataFrame, int, tuple[dd.DataFrame, dd.DataFrame]]:
    """Documents whose id occurs twice in this run (kind 0) or is in an earlier index (kind 1).

    The ids are routed to the range of their stable hash (`dedup.core.hashing.id_hashes`), where they
    are compared exactly; each range also reads the same range of the earlier indexes' id files
    and, with `index_out`, writes this run's. Returns the conflicts persisted on the workers, the
    number of ranges, and, lazy, their counts by kind and a few of each for messages (to compute
    with the features' counts, then `conflict_counts`). `rows`: the input's rows, when known
    (a small input's ids take one task, `route_small`, not a shuffle).
    """
    keys = feat[["doc", "_id"]]
    k = max([npartitions or keys.npartitions] + [p.id_parts for p in against])
    with_h = keys.map_partitions(_with_id_hash, meta=keys._meta.assign(_h=pd.Series(dtype=np.uint64)))
    ranged = _route_by(with_h, partial(_range_part, column="_h", npartitions=k), k, rows, ID_ROW_BYTES, ranges=True)
    id_type = pa.int64() if pd.api.types.is_integer_dtype(keys._meta["_id"].dtype) else pa.string()
    meta = CONFLICT_META.assign(_id=keys._meta["_id"])[["doc", "_id", "kind"]]
    found = persist(ranged.map_partitions(index.id_conflicts, list(against), k, index_out, id_type, meta=meta))
    lazy = (found.map_partitions(_conflicts_by_kind, meta={"repeated": "int64", "existing": "int64"}),
            found.map_partitions(_conflict_sample, meta=meta))
    return found, k, lazy


def _with_id_hash(d: pd.DataFrame) -> pd.DataFrame:
    from dedup.core.hashing import id_hashes

    return d.assign(_h=id_hashes(d["_id"].to_numpy()))


def _conflicts_by_kind(d: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"repeated": [int(d["_id"][d["kind"] == 0].nunique())], "existing": [int((d["kind"] == 1).sum())]})


def _conflict_sample(d: pd.DataFrame) -> pd.DataFrame:
    return d.groupby("kind").head(6)


def conflict_counts(k: int, c: pd.DataFrame, sample: pd.DataFrame) -> tuple[IdCounts, pd.DataFrame]:
    """The computed counts of `id_conflicts`: repeated (distinct ids occurring more than once; an
    id's rows are all in one range), existing (documents whose id an earlier index holds), and the
    sample sorted by key."""
    counts = IdCounts(repeated=int(c["repeated"].sum()), existing=int(c["existing"].sum()), id_partitions=k)
    return counts, sample.sort_values("doc")


def check_unique_ids(repeated: pd.DataFrame, id_column: str,
                     locate: Callable[[int], tuple[str, int]] | None = None, count: int | None = None) -> None:
    """Raise naming the repeated ids and where they occur (file and row, when `locate` maps keys);
    `repeated` may be a sample of them, `count` their number of distinct ids."""
    if repeated.empty:
        return
    repeated = repeated.sort_values("doc")
    names = sorted({str(i) for i in repeated["_id"]})
    where = ""
    if locate is not None:
        spots = [locate(int(k)) for k in repeated["doc"].head(6)]
        where = " (" + ", ".join(f"{shown_repr(i)} in {f} row {r}" for (f, r), i in zip(spots, repeated["_id"].head(6))) + ")"
    number = count if count is not None else len(names)
    raise ValueError(f"{number} document id(s) in column {id_column!r} occur more than once, e.g. "
                     f"[{', '.join(shown_repr(n) for n in names[:5])}]{where}; ids must be unique. Nothing was written.")


# -- contamination ---------------------------------------------------------------------------------

MAX_RECORDS_IN_MANIFEST = 1000


def _hit_counts(part: pd.DataFrame, feat: pd.DataFrame, protected: ProtectedNgrams, text_column: str) -> pd.DataFrame:
    rows = np.flatnonzero(feat["source"].to_numpy() >= 0)
    texts = frames.texts_of(part[text_column].iloc[rows]) if len(rows) else []
    return protected.hit_counts(encode_batch(texts))


def contamination(ddf: dd.DataFrame, feat: dd.DataFrame, protected: ProtectedNgrams, text_column: str,
                  input_rows: int, contaminated_rows: int, examples: bool = False) -> ContaminationCounts:
    """Documents removed per protected file and per record (re-reading only contaminated texts), and a
    warning for any record that alone removes a large share of the corpus. With `examples`, also
    each record's contaminated document with the smallest id (`frames.first_per_record`, for the page)."""
    if contaminated_rows == 0:
        return ContaminationCounts(dict.fromkeys(protected.files, 0), [], 0, None)
    meta = protected.hit_counts(encode_batch([]))
    lazy = [dd.map_partitions(_hit_counts, ddf, feat[["source"]], shared(protected), text_column, meta=meta,
                              align_dataframes=False)]
    if examples:
        lazy.append(feat.map_partitions(frames.first_per_record, meta=feat._meta[["source", "doc", "_id"]]))
    hc, *first = compute(*lazy)
    agg = hc.groupby(["kind", "index"]).agg(documents=("documents", "sum"), gram=("gram", "min")).reset_index()
    files = agg[agg["kind"] == 1]
    by_file = dict(zip(files["index"], files["documents"]))
    per_file = {name: int(by_file.get(i, 0)) for i, name in enumerate(protected.files)}
    recs = agg[agg["kind"] == 0].sort_values(["documents", "index"], ascending=[False, True])
    entries: list[dict[str, Any]] = []
    for rec, docs, gram in zip(recs["index"], recs["documents"], recs["gram"]):
        entry = {"file": protected.files[protected.record_file[rec]], "record": protected.record_labels[rec],
                 "documents": int(docs), "ngram": protected.ngram_text(int(gram))}
        if len(entries) < MAX_RECORDS_IN_MANIFEST:
            entries.append(entry)
        if (warning := record_warning(entry, input_rows)) is not None:
            log.warning("%s", warning)
    return ContaminationCounts(per_file, entries, len(recs), first[0] if first else None)



# -- buckets ---------------------------------------------------------------------------------------

def _write_band_part(rows: pd.DataFrame, root: str, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    assert partition_info is not None
    return pd.DataFrame({"bytes": [index.write_bands(rows, root, partition_info["number"])], "rows": [len(rows)]})


def _both(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([a.reset_index(drop=True), b.reset_index(drop=True)], ignore_index=True)


def buckets(feat: dd.DataFrame, params: Params, npartitions: int | None = None, *, index_out: str | None = None,
            layout: index.Layout | None = None) -> tuple[dd.DataFrame, dd.DataFrame | None, BucketCounts]:
    """Bucket edges on the workers: the long form (band, key, doc) routed to the range of its key,
    every bucket turned into same-text, candidate or star edges. Persisted; counts approximated buckets.

    index_out: also write the routed rows there as this run's index band files. layout: join each
    bucket range with the earlier indexes' rows of the same range that share a bucket with this run's
    documents (their features, read at their index partitions and persisted, are returned); edges
    between two indexed documents are dropped. Band rows of indexes older than format 3, and with
    exact Jaccard, first go to their documents' partitions for their text hashes and to learn which
    documents take part, then back.
    """
    long = feat.map_partitions(frames.long_form, params, meta=frames.LONG_META)
    k = npartitions or max(1, long.npartitions)
    if layout is not None and layout.parts:  # at least as many ranges as the indexes have: each reads a slice
        k = max([k] + [p.bucket_parts for p in layout.parts])
    ranged = route_ranges(long, k)
    combined, idx_feat, first_indexed = ranged, None, keyspace.NO_INDEX
    if layout is not None and layout.parts:
        first_indexed = layout.first_key
        exact = params.confirm == "exact"
        matched = ranged.map_partitions(index.matched_rows, layout, k, meta=frames.LONG_META)
        at_docs = route(matched, "doc", layout.total, layout.placement)
        id_dtype = feat._meta["_id"].dtype
        idx_feat = at_docs.map_partitions(index.index_features, layout, params, exact, id_dtype,
                                          meta=index.features_meta(params.num_perm, id_dtype))
        if layout.direct(exact):  # the features are read beside the buckets, not on their way
            joined = matched
        else:  # text hashes, and which documents take part, come from the docs files: and back
            kept = dd.map_partitions(index.kept_rows, at_docs, idx_feat, meta=frames.LONG_META, align_dataframes=False)
            joined = route_ranges(kept, k)
        combined = dd.map_partitions(_both, ranged, joined, meta=frames.LONG_META, align_dataframes=False)
    edges = combined.map_partitions(frames.bucket_edges, params.max_bucket, first_indexed, meta=frames.EDGE_META)
    writes = ranged.map_partitions(_write_band_part, index_out, meta={"bytes": "int64", "rows": "int64"}) \
        if index_out is not None else None
    edges, idx_feat, writes = persist(edges, idx_feat, writes)  # one pass over the routed rows
    # one round trip for every count: the bucket sizes, the band files written, the indexed documents read
    lazy = {"sizes": edges.map_partitions(_approx_sizes, meta={"buckets": "int64", "largest": "int64", "edges": "int64"})}
    if writes is not None:
        lazy["writes"] = writes
    if idx_feat is not None:
        lazy["matched"] = idx_feat.map_partitions(_rows, meta=ROWS_META)
    got = dict(zip(lazy, compute(*lazy.values())))
    c = got["sizes"]
    counts = BucketCounts(approximated_buckets=int(c["buckets"].sum()), largest_approximated_bucket=int(c["largest"].max()),
                          index_band_bytes=int(got["writes"]["bytes"].sum()) if "writes" in got else 0,
                          indexed_matched=int(got["matched"]["n"].sum()) if "matched" in got else 0,
                          bucket_partitions=k, edges=int(c["edges"].sum()))
    warning = bucket_warning(counts.approximated_buckets, params.max_bucket, counts.largest_approximated_bucket)
    if warning is not None:
        log.warning("%s", warning)
    return edges, idx_feat, counts


def _approx_sizes(e: pd.DataFrame) -> pd.DataFrame:
    """Per partition of bucket edges: approximated buckets, the largest one's size, and the edges."""
    a = e[e["kind"] == frames.KIND_APPROX]
    sizes = a.groupby(["band", "left"]).size() + 1 if len(a) else pd.Series(dtype=np.int64)
    return pd.DataFrame({"buckets": [len(sizes)], "largest": [int(sizes.max()) if len(sizes) else 0], "edges": [len(e)]})


# -- confirm ---------------------------------------------------------------------------------------

SIMILARITY_BINS = 50
"""Bins of [0, 1] for the similarity histogram of candidate pairs (the report's plot)."""


def confirm(edges: dd.DataFrame, feat: dd.DataFrame, texts: dd.DataFrame, *, text_column: str, params: Params,
            n_new: int | None = None, placement: keyspace.Placement = keyspace.OWN, edge_rows: int | None = None
            ) -> tuple[dd.DataFrame, dd.DataFrame, ConfirmCounts]:
    """Scored and confirmed pairs, found on the workers: each distinct candidate pair goes to its left
    document's partition (collecting its signature, and for exact Jaccard its shingle hashes),
    then to its right document's, where it is scored. Same-text edges of buckets travel the same
    two hops and are confirmed unscored (similarity 1), as are the same-text pairs inside each
    partition. Returns the persisted graph (left, right) the components are made of, the persisted
    scored pairs (`frames.SCORED_META`, at their right document's partition: the report's matches
    come from them), and counts with a histogram of every candidate's similarity. Partitions from
    `n_new` on are earlier indexes' documents (never paired with each other), placed by `placement`.
    `edge_rows`: the bucket edges' rows (`buckets` counts them), which bound both hops' rows: small
    ones take `route_small`."""
    n = feat.npartitions
    n_new = n if n_new is None else n_new
    routes = edges.map_partitions(frames.confirm_routes, meta=frames.ROUTED_META)
    src = None if params.confirm == "estimate" else texts
    at_left = dd.map_partitions(frames.pairs_with_left, route(routes, "left", n, placement, edge_rows, 24), feat, src,
                                text_column, params, meta=frames.left_payload_meta(params), align_dataframes=False)
    # a left payload row: the pair and the left signature (exact Jaccard adds shingle hashes of any length)
    payload_rows = edge_rows if params.confirm == "estimate" else None
    scored = persist(dd.map_partitions(frames.score_at_right, route(at_left, "right", n, placement, payload_rows,
                                                                    4 * params.num_perm + 24),
                                       feat, src, text_column, params, meta=frames.SCORED_META,
                                       align_dataframes=False))
    graph = persist(dd.map_partitions(frames.graph_pairs, scored, feat, n_new, meta=frames.GRAPH_META,
                                      align_dataframes=False))
    column = "jaccard" if params.confirm == "exact" else "estimate"
    (c, s) = compute(scored.map_partitions(_tally, column, meta={"candidates": "int64", "confirmed": "int64",
                                                                 "same": "int64", "hist": object}),
                     graph.map_partitions(_rows, meta=ROWS_META))
    hist = np.sum(np.stack(c["hist"].to_list()), axis=0) if len(c) else np.zeros(SIMILARITY_BINS, np.int64)
    confirmed, edges_total = int(c["confirmed"].sum()), int(s["n"].sum())
    counts = ConfirmCounts(candidate_pairs=int(c["candidates"].sum()), confirmed_pairs=confirmed,
                           same_text_pairs=edges_total - confirmed, graph_edges=edges_total,
                           similarity_histogram=[int(x) for x in hist])
    return graph, scored, counts


def _tally(d: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per partition of scored pairs: candidates, confirmed, same-text, and the histogram of `column`."""
    same = d["same"].to_numpy(bool)
    cand = d[~same]
    hist = np.histogram(cand[column].to_numpy(np.float64), bins=SIMILARITY_BINS, range=(0.0, 1.0))[0]
    return pd.DataFrame({"candidates": [len(cand)], "confirmed": [int(cand["confirmed"].sum())],
                         "same": [int(same.sum())], "hist": [hist]})


# -- components ------------------------------------------------------------------------------------

def components_on_client(graph: dd.DataFrame, npartitions: int, spill_dir: str | None = None,
                         placement: keyspace.Placement = keyspace.OWN) -> dd.DataFrame:
    """(doc, label) by the vectorised min-label union-find on the client, fed partition by
    partition, and already placed: partition i of the result holds the labels of the documents of
    features partition i (by `placement`), so the roots stage needs no shuffle to reach them. The
    labels go back to the workers as Parquet files in `spill_dir`, one row group a partition (read
    back by the tasks that need them, so a worker lost later costs a re-read, not the job), or
    without it as scattered pieces; never through the graph."""
    client = active_client()
    lefts: list[np.ndarray] = []
    rights: list[np.ndarray] = []
    parts: Iterable[pd.DataFrame]
    if client is None:
        parts = compute(graph)
    else:
        from distributed import as_completed

        futures = client.compute(graph.to_delayed())
        parts = (f.result() for f in as_completed(futures))
    for part in parts:
        lefts.append(part["left"].to_numpy(np.int64))
        rights.append(part["right"].to_numpy(np.int64))
    left = np.concatenate(lefts) if lefts else np.zeros(0, np.int64)
    right = np.concatenate(rights) if rights else np.zeros(0, np.int64)
    members, labels = components(left, right)
    members = members.astype(np.int64)
    # members come sorted by key, and placement is monotone in the key: one slice a partition
    bounds = np.searchsorted(placement(members), np.arange(npartitions + 1))
    pieces = [pd.DataFrame({"doc": members[lo:hi], "label": labels[lo:hi].astype(np.int64)})
              for lo, hi in zip(bounds[:-1], bounds[1:])]
    if client is None:
        return dd.from_map(_piece, pieces, meta=frames.MEMBER_META, enforce_metadata=False)
    if spill_dir is not None:
        return dd.from_map(_read_labels, _spill_labels(pieces, spill_dir), meta=frames.MEMBER_META,
                           enforce_metadata=False)
    futures = client.scatter(pieces)
    return dd.from_delayed(futures, meta=frames.MEMBER_META, verify_meta=False)


LABEL_FILE_ROWS = 1_000_000
"""Rows of a labels file written by client components: each partition's labels are one row group."""


def _spill_labels(pieces: Sequence[pd.DataFrame], spill_dir: str) -> list[tuple[str, int] | None]:
    """Write the pieces as row groups of a few Parquet files; (file, row group) per piece, None if empty."""
    import fsspec
    import pyarrow.parquet as pq

    files: list[list[int]] = []  # the non-empty pieces of each file
    rows = LABEL_FILE_ROWS
    for i, piece in enumerate(pieces):
        if piece.empty:
            continue
        if rows >= LABEL_FILE_ROWS:
            files.append([])
            rows = 0
        files[-1].append(i)
        rows += len(piece)
    fs, root = fsspec.core.url_to_fs(spill_dir)
    fs.makedirs(root, exist_ok=True)
    where: list[tuple[str, int] | None] = [None] * len(pieces)
    schema = pa.schema([("doc", pa.int64()), ("label", pa.int64())])
    for f, members in enumerate(files):
        name = f"labels-{f:06d}.parquet"
        with fs.open(f"{root}/{name}", "wb") as fh, pq.ParquetWriter(fh, schema) as writer:
            for group, i in enumerate(members):
                writer.write_table(pa.Table.from_pandas(pieces[i], schema=schema, preserve_index=False),
                                   row_group_size=len(pieces[i]))
                where[i] = (f"{spill_dir}/{name}", group)
    return where


def _read_labels(where: tuple[str, int] | None) -> pd.DataFrame:
    if where is None:
        return frames.MEMBER_META.copy()
    import fsspec
    import pyarrow.parquet as pq

    path, group = where
    with fsspec.open(path, "rb") as fh:
        return pq.ParquetFile(fh).read_row_group(group, use_threads=False).to_pandas(use_threads=False)


def _piece(piece: pd.DataFrame) -> pd.DataFrame:
    return piece


def components_on_cluster(graph: dd.DataFrame, npartitions: int) -> tuple[dd.DataFrame, int]:
    """(doc, label) by alternating large-star and small-star with shuffles, until a round leaves the
    edge set unchanged (its checksum, the only thing the client sees). Returns the labels and rounds."""
    k = max(1, npartitions)
    edges = persist(graph.map_partitions(_normalised, meta=ccstar.EDGE_META))
    previous = None
    for rounds in range(1, MAX_STAR_ROUNDS + 1):
        adj = persist(edges.map_partitions(ccstar.both_directions, meta=ccstar.ADJ_META).shuffle(on="u", npartitions=k))
        (sums,) = compute(adj.map_partitions(ccstar.checksum, meta=ccstar.CHECKSUM_META))
        state = tuple(int(sums[c].to_numpy(np.uint64).sum(dtype=np.uint64)) for c in ("count", "s1", "s2"))
        if state == previous:
            return edges.map_partitions(ccstar.star_labels, meta=frames.MEMBER_META), rounds
        previous = state
        large = adj.map_partitions(ccstar.large_star, meta=ccstar.EDGE_META)
        edges = persist(large.shuffle(on="b", npartitions=k).map_partitions(ccstar.small_star, meta=ccstar.EDGE_META))
    raise RuntimeError(f"Connected components did not converge in {MAX_STAR_ROUNDS} rounds; please report this as a bug.")


def _normalised(d: pd.DataFrame) -> pd.DataFrame:
    return ccstar.normalised(d["left"].to_numpy(np.int64), d["right"].to_numpy(np.int64))


# -- roots -----------------------------------------------------------------------------------------

def roots(labels: dd.DataFrame, feat: dd.DataFrame, n_new: int | None = None, first_indexed: int = keyspace.NO_INDEX,
          placement: keyspace.Placement = keyspace.OWN, placed: bool = False, edge_rows: int | None = None,
          summary: tuple[Callable[[pd.DataFrame], pd.DataFrame], Any] | None = None,
          scored: dd.DataFrame | None = None, exact: bool = False) -> tuple[dd.DataFrame, RootCounts]:
    """(doc, root, _id) for every clustered document, routed to its own partition for the write, and
    the counts.

    The labels (smallest key of each component) go to their documents' partitions to collect
    ids, then are shuffled on the label so each component is in one partition, where its root,
    the smallest id, is chosen (the smallest indexed id, when the component holds documents of an
    earlier output: partitions from `n_new` on, placed by `placement`, keys from `first_indexed` on).
    `placed`: the labels are at their documents' partitions already (`components_on_client`).
    `edge_rows`: the graph's edges, when known: at most twice as many documents are clustered, and
    so few take `route_small` instead of shuffles. `summary`: (function, meta) run on each partition of
    (doc, root, _id) by component, computed with the counts (their "summary", concatenated).
    `scored` (`confirm`'s scored pairs): also give each document the one it was matched to, and
    that pair's similarities (matched, estimate, jaccard; `frames.closest_matches`, with Jaccard 1
    for identical words when `exact`): the pairs travel with the labels to their component."""
    n = feat.npartitions
    n_new = n if n_new is None else n_new
    id_meta = feat._meta["_id"]
    members = 2 * edge_rows if edge_rows is not None else None
    at_docs = labels if placed else route(labels, "doc", n, placement, members, 16)
    with_ids = dd.map_partitions(frames.with_ids, at_docs, feat, *([scored] if scored is not None else []),
                                 meta=frames.component_rows_meta(id_meta, scored is not None), align_dataframes=False)
    root_meta = frames.roots_meta(id_meta, scored is not None)
    k = max(1, n_new)
    rows = None if edge_rows is None else (2 + (scored is not None)) * edge_rows  # and a pair row per edge
    row_bytes = ID_ROW_BYTES + (32 if scored is not None else 0)  # the text keys and a pair's columns
    by_label = _route_by(with_ids, partial(_label_part, npartitions=k), k, rows, row_bytes)
    by_component = persist(by_label.map_partitions(frames.roots_of_components, first_indexed, exact,
                                                   meta=root_meta))
    lazy = [by_component.map_partitions(
        frames.component_counts, first_indexed,
        meta={"members": "int64", "duplicates": "int64", "clusters": "int64", "largest": "int64", "of_indexed": "int64"})]
    if summary is not None:
        lazy.append(by_component.map_partitions(summary[0], meta=summary[1]))
    c, *summarised = compute(*lazy)
    counts = RootCounts(**{k: int(c[k].sum()) for k in ("members", "duplicates", "clusters", "of_indexed")},
                        largest=int(c["largest"].max()), summary=summarised[0] if summarised else None)
    own = by_component if first_indexed >= keyspace.NO_INDEX else \
        by_component.map_partitions(frames.own_documents, first_indexed, meta=root_meta)
    row_bytes = 2 * ID_ROW_BYTES + (ID_ROW_BYTES if scored is not None else 0)
    return route(own, "doc", n_new, rows=counts.members, row_bytes=row_bytes), counts


