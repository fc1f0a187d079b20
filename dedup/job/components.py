"""The components stage on Dask: connected components of the confirmed graph, on the client (union-find, fed
partition by partition) or on the cluster (large-star/small-star rounds)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.config import CLIENT_COMPONENT_EDGES
from dedup.core.unionfind import components
from dedup.job.compute import active_client, compute
from dedup.job.graphs import persist, persist_counting
from dedup.job.routing import label_part, route_by
from dedup.job.stage import Settings, Step, View
from dedup.partition import ccstar, keyspace
from dedup.partition.roots import MEMBER_META
from dedup.storage.files import open_output

MAX_STAR_ROUNDS = 200


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
        return dd.from_map(_piece, pieces, meta=MEMBER_META, enforce_metadata=False)
    if spill_dir is not None:
        return dd.from_map(_read_labels, _spill_labels(pieces, spill_dir), meta=MEMBER_META,
                           enforce_metadata=False)
    futures = client.scatter(pieces)
    return dd.from_delayed(futures, meta=MEMBER_META, verify_meta=False)

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
        with open_output(fs, f"{root}/{name}") as fh, pq.ParquetWriter(fh, schema) as writer:
            for group, i in enumerate(members):
                writer.write_table(pa.Table.from_pandas(pieces[i], schema=schema, preserve_index=False),
                                   row_group_size=len(pieces[i]))
                where[i] = (f"{spill_dir}/{name}", group)
    return where


def _read_labels(where: tuple[str, int] | None) -> pd.DataFrame:
    if where is None:
        return MEMBER_META.copy()
    import fsspec
    import pyarrow.parquet as pq

    path, group = where
    with fsspec.open(path, "rb") as fh:
        return pq.ParquetFile(fh).read_row_group(group, use_threads=False).to_pandas(use_threads=False)


def _piece(piece: pd.DataFrame) -> pd.DataFrame:
    return piece


def components_on_cluster(graph: dd.DataFrame, npartitions: int, rows: int | None = None) -> tuple[dd.DataFrame, int]:
    """(doc, label) by alternating large-star and small-star, each step's edges moved to the
    partition of the node it groups on, until a round leaves the edge set unchanged (its checksum,
    the only thing the client sees). Returns the labels and rounds. `rows`: the graph's edges when
    known; no round holds more (each star step maps an edge to at most one), so a small graph's
    moves take one gathering task instead of a shuffle (`dedup.job.routing.route_by`)."""
    k = max(1, npartitions)
    edges = persist(graph.map_partitions(_normalised, meta=ccstar.EDGE_META))
    adj_rows = 2 * rows if rows is not None else None
    previous = None
    for rounds in range(1, MAX_STAR_ROUNDS + 1):
        both = edges.map_partitions(ccstar.both_directions, meta=ccstar.ADJ_META)
        at_u = route_by(both, partial(label_part, npartitions=k, column="u"), k, adj_rows, EDGE_ROW_BYTES)
        (adj,), (sums,) = persist_counting([at_u], [at_u.map_partitions(ccstar.checksum, meta=ccstar.CHECKSUM_META)])
        state = tuple(int(sums[c].to_numpy(np.uint64).sum(dtype=np.uint64)) for c in ("count", "s1", "s2"))
        if state == previous:
            return edges.map_partitions(ccstar.star_labels, meta=MEMBER_META), rounds
        previous = state
        large = adj.map_partitions(ccstar.large_star, meta=ccstar.EDGE_META)
        at_b = route_by(large, partial(label_part, npartitions=k, column="b"), k, rows, EDGE_ROW_BYTES)
        edges = persist(at_b.map_partitions(ccstar.small_star, meta=ccstar.EDGE_META))
    raise RuntimeError(f"Connected components did not converge in {MAX_STAR_ROUNDS} rounds; please report this as a bug.")


EDGE_ROW_BYTES = 24
"""The estimate of a routed edge row (two int64 nodes, and the routing's own)."""


def _normalised(d: pd.DataFrame) -> pd.DataFrame:
    return ccstar.normalised(d["left"].to_numpy(np.int64), d["right"].to_numpy(np.int64))


class Components(Step):
    """The confirmed graph's connected components (`labels`: doc, label), on the client while its edges
    are few (`CLIENT_COMPONENT_EDGES`), else on the cluster; `placed`: whether the labels are at their
    documents' partitions already (the client puts them there)."""

    name = "components"
    reads = ("graph", "graph_edges", "feat", "feat_all", "layout")
    gives = ("labels", "placed")
    values = ("placed",)
    frames = ("labels",)

    def wanted(self, s: Settings) -> bool:
        return s.near

    def run(self, job: View) -> str:
        s = job.settings
        mode = s.components
        if mode == "auto":
            mode = "client" if job.graph_edges <= CLIENT_COMPONENT_EDGES else "distributed"
        job.report.components = mode
        job.placed = mode == "client"
        if mode == "client":
            job.labels = components_on_client(job.graph, job.feat_all.npartitions, s.spill_dir, job.placement)
            return f"{job.graph_edges} edges joined on the client"
        job.labels, rounds = components_on_cluster(job.graph, s.npartitions or job.feat.npartitions, job.graph_edges)
        job.report.component_rounds = rounds
        return f"{job.graph_edges} edges joined on the cluster in {rounds} large/small-star rounds"
