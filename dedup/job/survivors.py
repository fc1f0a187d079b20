"""The survivors stage on Dask: each member scored against its cluster's survivor, and with `--clusters centred`
the members below the threshold clustered again among themselves, round after round, until every
member reaches the threshold with its survivor.

A round: the labels go to their documents for ids (and `--keep-by` values), meet per cluster where
its survivor is chosen as the roots stage will choose it, and a pair (survivor, member) per other
member is scored by `confirm`'s two hops. Connected clusters end there (the similarities are the
report's); centred ones keep the members that passed, and the confirmed graph's edges between the
members that failed are joined again (on the client or on the cluster, as components are) for the
next round. A failed member left with no edge is a cluster of its own. Nothing corpus-sized
reaches the client: each round it sees counts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

import dask.dataframe as dd
import numpy as np

from dedup.config import CLIENT_COMPONENT_EDGES
from dedup.job.components import components_on_client, components_on_cluster
from dedup.job.confirm import SIMILARITY_BINS, score_pairs
from dedup.job.features import without_signatures
from dedup.job.graphs import persist, persist_counting
from dedup.job.manifest import chained_warning
from dedup.job.notices import warn
from dedup.job.routing import ID_ROW_BYTES, ROWS_META, label_part, route, route_by, row_count
from dedup.job.stage import Settings, Step, View
from dedup.partition.confirm import ROUTED_META
from dedup.partition.features import KEEP, ROOT_DOC
from dedup.partition.roots import SURVIVOR_ESTIMATE, SURVIVOR_JACCARD, component_rows_meta, with_ids
from dedup.partition.survivors import (
    CHOSEN_META,
    DOCS_META,
    PLACED_META,
    below_threshold,
    edges_among,
    failed_members,
    histogram_of,
    placed_members,
    survivor_pairs,
    survivor_rows,
    survivors_of,
)

log = logging.getLogger("dedup")

MAX_ROUNDS = 10_000
"""A bound no real graph meets: each round settles at least one member of every cluster."""


@dataclass(frozen=True)
class SurvivorCounts:
    """The survivors stage: its rounds; this run's members scored against their connected component's
    survivor (in the first round), and those below the threshold; the histogram of the final
    similarity to their survivor of this run's clustered documents that are not one."""

    rounds: int
    scored: int
    below: int
    histogram: list[int]


def survivors(job: View) -> tuple[dd.DataFrame, SurvivorCounts]:
    """Settled labels (`PLACED_META`: doc, label = the survivor's key, the similarities to it) for every
    clustered document, persisted, and the counts. Reads the components stage's labels (at their
    documents' partitions when `job.placed`) and the confirmed graph. Each round's failed members
    are joined again where `--components` says, as for the components stage."""
    s = job.settings
    labels, graph, feat, texts, placed = job.labels, job.graph, job.feat_all, job.texts, job.placed
    params, keep, first_indexed, placement = s.params, s.survivor_order, job.first_indexed, job.placement
    centred = s.clusters == "centred"
    n = feat.npartitions
    k = max(1, n)
    keep_meta = feat._meta[KEEP] if KEEP in feat.columns else None
    settled: list[dd.DataFrame] = []
    graph_rows: int | None = job.graph_edges
    scored_first = below = rounds = 0
    column = SURVIVOR_JACCARD if params.confirm == "exact" else SURVIVOR_ESTIMATE
    hist = np.zeros(SIMILARITY_BINS, np.int64)
    while True:
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise RuntimeError(f"Centred clusters did not settle in {MAX_ROUNDS} rounds; please report this as a bug.")
        members = 2 * graph_rows if graph_rows is not None else None
        at_docs = labels if placed else route(labels, "doc", n, placement, members, 16)
        labelled = dd.map_partitions(with_ids, at_docs, without_signatures(feat), align_dataframes=False,
                                     meta=component_rows_meta(feat._meta["_id"], False, keep_meta,
                                                              root_doc=ROOT_DOC in feat.columns))
        by_label = route_by(labelled, partial(label_part, npartitions=k), k, members, ID_ROW_BYTES)
        chosen = by_label.map_partitions(survivors_of, first_indexed, keep, meta=CHOSEN_META)
        pairs = chosen.map_partitions(survivor_pairs, meta=ROUTED_META)
        scored = score_pairs(pairs, feat, texts, text_column=s.text_column, params=params, placement=placement,
                             rows=members)
        rows = dd.concat([chosen.map_partitions(survivor_rows, meta=PLACED_META),
                          scored.map_partitions(placed_members, centred, first_indexed, meta=PLACED_META)])
        if not centred:  # the only round's rows are the stage's result, kept as they are computed
            rows = job.kept.through(Survivors.name, "settled", rows)
        tallies = [scored.map_partitions(below_threshold, first_indexed, meta={"scored": "int64", "below": "int64"}),
                   rows.map_partitions(histogram_of, column, SIMILARITY_BINS, first_indexed, meta={"hist": object})]
        if centred:
            failed = scored.map_partitions(failed_members, first_indexed, meta=DOCS_META)
            tallies.append(failed.map_partitions(row_count, meta=ROWS_META))
        # each step once, in one graph with its tallies (the rows settled in different rounds differ,
        # so the histogram of them all is the sum of the rounds')
        (placed_rows, *kept), (b, h, *f) = persist_counting([rows, *([failed] if centred else [])], tallies)
        settled.append(placed_rows)
        if len(h):
            hist = hist + np.sum(np.stack(h["hist"].to_list()), axis=0)
        if rounds == 1:
            scored_first, below = int(b["scored"].sum()), int(b["below"].sum())
        if not centred or not int(f[0]["n"].sum()):
            break
        (failed,) = kept
        # the graph's edges between failed members: kept at the right end's partition, then at the left's
        right = dd.map_partitions(edges_among, route(graph, "right", n, placement, graph_rows, 16), failed, "right",
                                  meta=graph._meta, align_dataframes=False)
        left = dd.map_partitions(edges_among, route(right, "left", n, placement, graph_rows, 16), failed, "left",
                                 meta=graph._meta, align_dataframes=False)
        (graph,), (e,) = persist_counting([left], [left.map_partitions(row_count, meta=ROWS_META)])
        graph_rows = int(e["n"].sum())
        if not graph_rows:  # every failed member is alone: a cluster of its own
            break
        if s.components == "client" or (s.components == "auto" and graph_rows <= CLIENT_COMPONENT_EDGES):
            labels = components_on_client(graph, n, f"{s.spill_dir}/round-{rounds}" if s.spill_dir else None,
                                          placement)
            placed = True
        else:
            labels, _ = components_on_cluster(graph, s.npartitions or n, graph_rows)
            placed = False
    final = settled[0] if len(settled) == 1 else persist(job.kept.through(Survivors.name, "settled", dd.concat(settled)))
    return final, SurvivorCounts(rounds=rounds, scored=scored_first, below=below, histogram=[int(x) for x in hist])


def scored_against_survivors(s: Settings) -> bool:
    """Whether the survivors stage runs: for the page, or with `--clusters centred`."""
    return s.near and (s.details or s.clusters == "centred")


class Survivors(Step):
    """For the page, or with `--clusters centred`: each member scored against its cluster's survivor;
    centred clusters formed again from the members below the threshold with theirs (`settled`: the
    labels the roots stage reads instead of the components', at no particular partition)."""

    name = "survivors"
    reads = ("labels", "placed", "graph", "graph_edges", "feat_all", "texts", "layout")
    gives = ("settled",)
    frames = ("settled",)

    def wanted(self, s: Settings) -> bool:
        return scored_against_survivors(s)

    def run(self, job: View) -> str:
        s, report = job.settings, job.report
        job.settled, c = survivors(job)
        report.clusters_mode = s.clusters
        report.survivor_rounds, report.survivor_scored, report.below_survivor = c.rounds, c.scored, c.below
        report.survivor_histogram = c.histogram
        warn(report, chained_warning(report, s.params))
        summary = (f"{c.scored} members scored against their connected component's survivor, "
                   f"{c.below} below {s.params.threshold:.3f}")
        if s.clusters == "centred":
            summary += f"; clustered again in {c.rounds - 1} more round(s)"
        return summary
