"""The page's what-if table on the cluster: what each threshold from 0.7 to 0.9 would remove, counted
where the weighed pairs are when there are too many for one task (`WHAT_IF_TASK_PAIRS`).

For each threshold, the pairs it would join are joined into components by the same large-star/small-
star rounds as the components stage, on negated keys so that each component's label is its largest key
(an earlier output's document when it holds one, as those keys follow this run's); the documents of
this run that are not their component's label are those a run at that threshold removes. Only counts
reach the client."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.job.components import components_on_cluster
from dedup.job.graphs import persist_counting
from dedup.job.routing import route_by
from dedup.partition import keyspace
from dedup.partition.what_if import new_leaves, threshold_edges

PAIRS_META = pd.DataFrame({"left": pd.Series(dtype=np.int64), "right": pd.Series(dtype=np.int64)})


def removed_on_cluster(weighed: dd.DataFrame, rows: int, thresholds: Sequence[float], run_threshold: float,
                       first_indexed: int, npartitions: int) -> list[int]:
    """`dedup.partition.what_if.removed_at` of the persisted weighed pairs `weighed` (`rows` of them),
    computed on the cluster: one components computation a threshold, counts back."""
    out = []
    k = max(1, npartitions)
    for t in thresholds:
        edges = weighed.map_partitions(threshold_edges, t, run_threshold, meta=PAIRS_META)
        labels, _ = components_on_cluster(edges, k, rows)
        at_doc = route_by(labels, partial(_doc_part, npartitions=k), k, 2 * rows, 16)
        _, (counts,) = persist_counting([], [at_doc.map_partitions(new_leaves, first_indexed, meta={"n": "int64"})])
        out.append(int(counts["n"].sum()) if len(counts) else 0)
    return out


def _doc_part(frame: pd.DataFrame, npartitions: int) -> np.ndarray:
    return keyspace.label_partition(frame["doc"].to_numpy(np.int64), npartitions)
