"""The confirm stage on Dask: each candidate pair taken to its left document's partition, then scored at its
right document's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.config import WHAT_IF_TASK_PAIRS, Params
from dedup.core.lsh import probability
from dedup.job.checkpoints import Through, as_is
from dedup.job.compute import compute
from dedup.job.features import without_signatures
from dedup.job.graphs import persist, persist_counting, persisted_bytes, read_for
from dedup.job.page_data import NEAR_PAIRS
from dedup.job.routing import ROWS_META, route, row_count
from dedup.job.stage import Settings, Step, View
from dedup.job.what_if import removed_on_cluster
from dedup.partition import keyspace
from dedup.partition.confirm import (
    GRAPH_META,
    NEAR_META,
    ROUTED_META,
    SCORED_META,
    confirm_routes,
    graph_pairs,
    left_payload_meta,
    nearest_threshold,
    pairs_with_left,
    score_at_right,
)
from dedup.partition.what_if import WHAT_IF_META, WHAT_IF_THRESHOLDS, removed_at_parts, what_if_edges


@dataclass(frozen=True)
class ConfirmCounts:
    """The confirm stage: candidate pairs, those confirmed, same-text pairs, the graph's edges, and
    the histogram of the candidates' similarities."""

    candidate_pairs: int
    confirmed_pairs: int
    same_text_pairs: int
    graph_edges: int
    similarity_histogram: list[int]
    near_threshold: pd.DataFrame | None = None
    """With `near_pairs`: the candidate pairs nearest the threshold on each side (`nearest_threshold`)."""
    what_if: list[int] | None = None
    """With `what_if`: the documents a run at each of its thresholds would remove (`removed_at`)."""

SIMILARITY_BINS = 50
"""Bins of [0, 1] for the similarity histogram of candidate pairs (the report's plot)."""


def confirm(edges: dd.DataFrame, feat: dd.DataFrame, texts: dd.DataFrame, *, text_column: str, params: Params,
            n_new: int | None = None, placement: keyspace.Placement = keyspace.OWN, edge_rows: int | None = None,
            near_pairs: int = 0, what_if: Sequence[float] = (), first_indexed: int = keyspace.NO_INDEX,
            through: Through = as_is) -> tuple[dd.DataFrame, dd.DataFrame, ConfirmCounts]:
    """Scored and confirmed pairs, found on the workers: each distinct candidate pair goes to its left
    document's partition (collecting its signature, and for exact Jaccard its shingle hashes),
    then to its right document's, where it is scored. Same-text edges of buckets travel the same
    two hops and are confirmed unscored (similarity 1), as are the same-text pairs inside each
    partition. Returns the persisted graph (left, right) the components are made of, the persisted
    scored pairs (`SCORED_META`, at their right document's partition: the report's matches
    come from them), and counts with a histogram of every candidate's similarity. Partitions from
    `n_new` on are earlier indexes' documents (never paired with each other), placed by `placement`.
    `edge_rows`: the bucket edges' rows (`buckets` counts them), which bound both hops' rows: small
    ones take `route_small`. `near_pairs`: also find that many candidate pairs nearest the threshold
    on each side, in the same round trip as the counts (the page's). `what_if`: the thresholds of the
    page's what-if table: the pairs any of them would join (`what_if_edges`) are counted in that round
    trip too, and what each threshold would remove is counted from them in one task while they are at
    most `WHAT_IF_TASK_PAIRS`, else by components on the cluster (`dedup.job.what_if`): the pairs never
    come to the client. `first_indexed`: the first key of the earlier indexes' documents."""
    n_new = feat.npartitions if n_new is None else n_new
    routes = edges.map_partitions(confirm_routes, meta=ROUTED_META)
    scored = through("scored", score_pairs(routes, feat, texts, text_column=text_column, params=params,
                                           placement=placement, rows=edge_rows))
    graph = through("graph", dd.map_partitions(graph_pairs, scored, without_signatures(feat), n_new, meta=GRAPH_META,
                                               align_dataframes=False))
    column = "jaccard" if params.confirm == "exact" else "estimate"
    lazy = [scored.map_partitions(_tally, column, meta={"candidates": "int64", "confirmed": "int64",
                                                        "same": "int64", "hist": object}),
            graph.map_partitions(row_count, meta=ROWS_META)]
    if near_pairs:
        lazy.append(scored.map_partitions(nearest_threshold, column, params.threshold, near_pairs, n_new,
                                          meta=NEAR_META))
    frames = [scored, graph]
    if what_if:
        frames.append(dd.map_partitions(what_if_edges, scored, without_signatures(feat), n_new, column, min(what_if),
                                        meta=WHAT_IF_META, align_dataframes=False))
        lazy.append(frames[-1].map_partitions(row_count, meta=ROWS_META))
    (scored, graph, *weighed), (c, s, *rest) = persist_counting(frames, lazy)  # one round trip
    near = rest[:1] if near_pairs else []
    removed = None
    if what_if:
        rows = int(rest[-1]["n"].sum())
        if rows <= WHAT_IF_TASK_PAIRS:  # one task counts them (a worker's), the counts come back
            (removed,) = compute(dask.delayed(removed_at_parts)(weighed[0].to_delayed(), tuple(what_if),
                                                                params.threshold, first_indexed))
        else:
            removed = removed_on_cluster(weighed[0], rows, what_if, params.threshold, first_indexed, n_new)
        del weighed
    nearest = None
    if near:
        nearest = near[0].sort_values(["distance", "left", "right"], kind="stable").groupby(
            "confirmed", sort=True).head(near_pairs).sort_values(["confirmed", "distance", "left", "right"],
                                                                 ascending=[False, True, True, True], kind="stable")
    hist = np.sum(np.stack(c["hist"].to_list()), axis=0) if len(c) else np.zeros(SIMILARITY_BINS, np.int64)
    confirmed, edges_total = int(c["confirmed"].sum()), int(s["n"].sum())
    counts = ConfirmCounts(candidate_pairs=int(c["candidates"].sum()), confirmed_pairs=confirmed,
                           same_text_pairs=edges_total - confirmed, graph_edges=edges_total,
                           similarity_histogram=[int(x) for x in hist],
                           near_threshold=nearest.reset_index(drop=True) if nearest is not None else None,
                           what_if=removed)
    return graph, scored, counts


def score_pairs(routes: dd.DataFrame, feat: dd.DataFrame, texts: dd.DataFrame, *, text_column: str,
                params: Params, placement: keyspace.Placement = keyspace.OWN, rows: int | None = None
                ) -> dd.DataFrame:
    """Pairs (`ROUTED_META`: left, right, same) scored by the confirm rule in force (`SCORED_META`, at
    their right document's partition, lazy): each taken to its left document's partition for its
    payload, then to its right document's. `rows`: an upper bound on the pairs, when known, so that
    few take `route_small`."""
    n = feat.npartitions
    src = None if params.confirm == "estimate" else texts
    # each hop reads the features from disk for itself (`read_for`): none is held across the route
    at_left = dd.map_partitions(pairs_with_left, route(routes, "left", n, placement, rows, 24), read_for(feat, "left"), src,
                                text_column, params, placement, meta=left_payload_meta(params),
                                align_dataframes=False)
    payload_bytes = None
    if src is not None:  # each hop reads the texts it needs: none is held from the first hop to the second
        at_left = persist(at_left)
        payload_bytes = persisted_bytes(at_left)  # rows of shingle hashes: their bytes, not their rows, are known
    # a left payload row: the pair and the left signature (exact Jaccard: carriers hold those, and shingle hashes)
    payload_rows = rows if params.confirm == "estimate" else None
    return dd.map_partitions(score_at_right, route(at_left, "right", n, placement, payload_rows, 4 * params.num_perm + 24,
                                                   nbytes=payload_bytes),
                             read_for(feat, "right"), src, text_column, params, meta=SCORED_META, align_dataframes=False)


def _tally(d: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per partition of scored pairs: candidates, confirmed, same-text, and the histogram of `column`."""
    same = d["same"].to_numpy(bool)
    cand = d[~same]
    hist = np.histogram(cand[column].to_numpy(np.float64), bins=SIMILARITY_BINS, range=(0.0, 1.0))[0]
    return pd.DataFrame({"candidates": [len(cand)], "confirmed": [int(cand["confirmed"].sum())],
                         "same": [int(same.sum())], "hist": [hist]})


class Confirm(Step):
    """Every candidate pair scored, the confirmed graph; the pairs nearest the threshold for the page."""

    name = "confirm"
    reads = ("edges", "edge_rows", "feat", "feat_all", "texts", "layout")
    gives = ("graph", "graph_edges", "scored", "near_pairs")
    values = ("graph_edges",)
    frames = ("graph", "scored")
    tables = ("near_pairs",)

    def wanted(self, s: Settings) -> bool:
        return s.near

    def run(self, job: View) -> str:
        s, report = job.settings, job.report
        thresholds = sorted({*WHAT_IF_THRESHOLDS, s.params.threshold})
        job.graph, job.scored, conf = confirm(job.edges, job.feat_all, job.texts, text_column=s.text_column,
                                              params=s.params, n_new=job.feat.npartitions, placement=job.placement,
                                              edge_rows=job.edge_rows, near_pairs=NEAR_PAIRS if s.details else 0,
                                              what_if=thresholds if s.details else (), first_indexed=job.first_indexed,
                                              through=partial(job.kept.through, self.name))
        if conf.what_if is not None:
            p = s.params
            report.what_if = [{"threshold": t, "removed": r,
                               "candidate_at": round(float(probability(t, p.num_bands, p.rows_per_band)), 4)}
                              for t, r in zip(thresholds, conf.what_if)]
        job.near_pairs = conf.near_threshold
        report.similarity_histogram = conf.similarity_histogram
        report.candidate_pairs, report.confirmed_pairs = conf.candidate_pairs, conf.confirmed_pairs
        report.same_text_pairs = conf.same_text_pairs
        job.graph_edges = conf.graph_edges
        return (f"{report.confirmed_pairs} of {report.candidate_pairs} candidate pairs reach "
                f"{s.params.threshold:.3f} ({s.params.confirm}), {report.same_text_pairs} same-text pairs")
