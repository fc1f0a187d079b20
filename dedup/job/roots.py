"""The roots stage on Dask: each component's root chosen where its members meet, and routed back to the
documents' partitions for the write."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.job import page_data
from dedup.job.cluster_counts import Counting, chain_sizes
from dedup.job.compute import compute
from dedup.job.features import without_signatures
from dedup.job.graphs import persist, persist_counting
from dedup.job.ids import id_arrow_type
from dedup.job.routing import ID_ROW_BYTES, ROWS_META, label_part, route, route_by, row_count
from dedup.job.stage import Settings, Step, View
from dedup.job.survivors import scored_against_survivors
from dedup.partition import keyspace
from dedup.partition.features import KEEP, ROOT_DOC, SCOPE, scope_duplicates
from dedup.partition.roots import (
    MIN_SIZE_WHAT_IF,
    SURVIVOR_ESTIMATE,
    component_counts,
    component_rows_meta,
    own_documents,
    roots_meta,
    roots_of_components,
    with_ids,
)


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
    of_part: list[int]
    """Near duplicates of each earlier output's documents (`component_counts`), in the layout's order."""
    whole: int = 0
    """Near duplicates kept, in clusters below `--min-cluster-size`."""
    by_size: list[int] = field(default_factory=list)
    """Near duplicates in clusters of at least each size of `MIN_SIZE_WHAT_IF`."""


@dataclass(frozen=True)
class RootRule:
    """How each cluster's root is chosen and what its members carry: `exact` (Jaccard 1 for identical
    words in the matches), `sizes` (each member's cluster size), `keep` ("max", "min": `--keep-by`),
    `min_size` (`--min-cluster-size`: clusters below it kept whole); `counts`: sizes counted over the
    chain of releases, and the index's counts written (`dedup.job.cluster_counts`)."""

    exact: bool = False
    sizes: bool = False
    keep: str | None = None
    min_size: int = 2
    counts: Counting | None = None


def roots(labels: dd.DataFrame, feat: dd.DataFrame, n_new: int | None = None, part_firsts: tuple[int, ...] = (),
          placement: keyspace.Placement = keyspace.OWN, placed: bool = False, edge_rows: int | None = None,
          summary: tuple[Callable[[pd.DataFrame], pd.DataFrame], Any] | None = None,
          scored: dd.DataFrame | None = None, rule: RootRule = RootRule()) -> tuple[dd.DataFrame, RootCounts]:
    """(doc, root, _id) for every clustered document, routed to its own partition for the write (lazy:
    `Roots` persists it, as the write uses it in two computations when an input file is split across
    partitions), and the counts.

    The labels (smallest key of each component) go to their documents' partitions to collect
    ids, then are shuffled on the label so each component is in one partition, where its root,
    the smallest id, is chosen (the smallest indexed id, when the component holds documents of an
    earlier output: partitions from `n_new` on, placed by `placement`; `part_firsts`, the first key of
    each earlier output's documents, ascending: theirs are the keys from the first on).
    `placed`: the labels are at their documents' partitions already (`components_on_client`).
    `edge_rows`: the graph's edges, when known: at most twice as many documents are clustered, and
    so few take `route_small` instead of shuffles. `summary`: (function, meta) run on each partition of
    (doc, root, _id) by component, computed with the counts (their "summary", concatenated).
    `scored` (`confirm`'s scored pairs): also give each document the one it was matched to, and
    that pair's similarities (matched, estimate, jaccard; `closest_matches`, with Jaccard 1
    for identical words when `rule.exact`): the pairs travel with the labels to their component.
    `rule.sizes`: each document's cluster size too (`dedup.partition.roots.SIZE`). `rule.keep` ("max",
    "min"): the root is the member with the largest (smallest) `--keep-by` value the features carry.
    `rule.min_size`: clusters below it are kept whole (`WHOLE`, with their sizes). `rule.counts`: the
    sizes count every release of the chain, and the index's counts are written as they are. Labels
    from the survivors stage (`dedup.job.survivors`) carry each member's similarities to its
    survivor, which the roots carry on."""
    exact, keep, min_size = rule.exact, rule.keep, rule.min_size
    n = feat.npartitions
    n_new = n if n_new is None else n_new
    first_indexed = part_firsts[0] if part_firsts else keyspace.NO_INDEX
    id_meta = feat._meta["_id"]
    members = 2 * edge_rows if edge_rows is not None else None
    at_docs = labels if placed else route(labels, "doc", n, placement, members, 16)
    to_survivor = SURVIVOR_ESTIMATE in labels.columns
    labelled = dd.map_partitions(with_ids, at_docs, without_signatures(feat), *([scored] if scored is not None else []),
                                 meta=component_rows_meta(id_meta, scored is not None,
                                                          feat._meta[KEEP] if KEEP in feat.columns else None,
                                                          to_survivor, ROOT_DOC in feat.columns),
                                 align_dataframes=False)
    sizes = rule.sizes or min_size > 2 or rule.counts is not None
    root_meta = roots_meta(id_meta, scored is not None, sizes, to_survivor, min_size > 2)
    k = max(1, n_new)
    rows = None if edge_rows is None else (2 + (scored is not None)) * edge_rows  # and a pair row per edge
    row_bytes = ID_ROW_BYTES + (32 if scored is not None else 0)  # the text keys and a pair's columns
    by_label = route_by(labelled, partial(label_part, npartitions=k), k, rows, row_bytes)
    by_component = by_label.map_partitions(roots_of_components, first_indexed, exact, sizes, keep, min_size,
                                           meta=root_meta)
    counted = None
    if rule.counts is not None:
        by_component, counted = chain_sizes(by_component, first_indexed, rule.counts, min_size, edge_rows)
    lazy = [by_component.map_partitions(
        component_counts, first_indexed, part_firsts,
        meta={"members": "int64", "duplicates": "int64", "clusters": "int64", "largest": "int64", "of_indexed": "int64",
              "of_part": object, "whole": "int64", "by_size": object})]
    if summary is not None:
        lazy.append(by_component.map_partitions(summary[0], meta=summary[1]))
    if counted is not None:  # the index's counts written in the same round trip
        lazy.append(counted.map_partitions(row_count, meta=ROWS_META))
    (by_component,), (c, *summarised) = persist_counting([by_component], lazy)  # one round trip
    of_part = np.sum(np.stack(c["of_part"].to_list()), axis=0) if len(c) else np.zeros(len(part_firsts), np.int64)
    by_size = np.sum(np.stack(c["by_size"].to_list()), axis=0) if len(c) else np.zeros(len(MIN_SIZE_WHAT_IF), np.int64)
    counts = RootCounts(**{k: int(c[k].sum()) for k in ("members", "duplicates", "clusters", "of_indexed", "whole")},
                        largest=int(c["largest"].max()), summary=summarised[0] if summary is not None else None,
                        of_part=[int(x) for x in of_part], by_size=[int(x) for x in by_size])
    own = by_component if first_indexed >= keyspace.NO_INDEX else \
        by_component.map_partitions(own_documents, first_indexed, meta=root_meta)
    row_bytes = 2 * ID_ROW_BYTES + (ID_ROW_BYTES if scored is not None else 0)
    return route(own, "doc", n_new, rows=counts.members, row_bytes=row_bytes), counts


class Roots(Step):
    """Each cluster's root, routed to its members' partitions for the write; the page's summary of the
    clusters. Reads the survivors stage's labels when it ran, else the components'."""

    name = "roots"
    reads = ("labels", "placed", "settled", "feat", "feat_all", "layout", "graph_edges", "scored")
    gives = ("roots", "summary")
    frames = ("roots",)
    tables = ("summary",)

    def wanted(self, s: Settings) -> bool:
        return s.near

    def needs(self, s: Settings) -> tuple[str, ...]:
        labels = ("settled",) if scored_against_survivors(s) else ("labels", "placed")
        return (*labels, "feat", "feat_all", "layout", "graph_edges", *(("scored",) if s.details else ()))

    def run(self, job: View) -> str:
        s, report = job.settings, job.report
        firsts = tuple(q << keyspace.ROW_BITS for q in job.layout.starts) if job.layout is not None else ()
        labels, placed = (job.settled, False) if scored_against_survivors(s) else (job.labels, job.placed)
        counting = None  # sizes over the chain: for the index written, and for the rows of a run against one
        if s.index_out is not None or (s.against and (s.cluster_size or s.min_cluster_size > 2)):
            counting = Counting(tuple(s.against), report.id_partitions, s.index_out, id_arrow_type(job.feat._meta["_id"]))
        routed, r = roots(labels, job.feat_all, job.feat.npartitions, firsts, job.placement,
                          placed=placed, edge_rows=job.graph_edges,
                          summary=(page_data.cluster_summary, page_data.CLUSTERS_META) if s.details else None,
                          scored=job.scored if s.details else None,
                          rule=RootRule(exact=s.params.confirm == "exact", sizes=s.cluster_size, keep=s.survivor_order,
                                        min_size=s.min_cluster_size, counts=counting))
        job.roots = persist(job.kept.through(self.name, "roots", routed))
        if SCOPE in job.feat.columns:  # --within: the near duplicates of each value
            dups = dd.map_partitions(scope_duplicates, job.roots, without_signatures(job.feat)[["_id", SCOPE]],
                                     meta={"scope": "uint64", "duplicates": "int64"}, align_dataframes=False)
            listed = [np.uint64(int(v["key"])) for v in report.within]  # the values the manifest lists
            (per,) = compute(dups[dups["scope"].isin(listed)].groupby("scope")["duplicates"].sum())
            report.within = [{**v, "near_duplicates": int(per.get(np.uint64(int(v["key"])), 0))} for v in report.within]
        report.clusters, report.largest_cluster = r.clusters, r.largest
        report.near_duplicates = r.duplicates
        report.near_duplicates_kept_whole = r.whole
        report.min_size_what_if = [{"min_cluster_size": k, "near_duplicates": n} for k, n in zip(MIN_SIZE_WHAT_IF, r.by_size)]
        report.near_duplicates_of_indexed = r.of_indexed
        report.near_duplicates_by_output = r.of_part
        job.summary = r.summary
        summary = f"{report.clusters} clusters, largest {report.largest_cluster}, {report.near_duplicates} near duplicates"
        if job.layout is not None:
            summary += f", {report.near_duplicates_of_indexed} of them of earlier outputs' documents"
        return summary
