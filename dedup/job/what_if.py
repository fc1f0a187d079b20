"""The page's what-if table on the cluster: what each threshold from 0.7 to 0.9 would remove, counted
where the weighed pairs are when there are too many for one task (`WHAT_IF_TASK_PAIRS`).

Every threshold joins a subset of the weighed pairs, so each of its components lies inside one
component of all of them. Those are found once, by the same large-star/small-star rounds as the
components stage; the pairs are then gathered by component, and each partition counts what every
threshold removes from its own components (`dedup.partition.what_if.removed_at`). One components
computation, not one a threshold. Only counts reach the client."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.job.components import EDGE_ROW_BYTES, components_on_cluster
from dedup.job.graphs import persist_counting
from dedup.job.routing import label_part, route_by
from dedup.partition.what_if import COMPONENT_META, removed_in_part, with_component

WEIGHED_ROW_BYTES = 40
"""The estimate of a routed what-if row (two int64 keys, a score, a flag, a component, and the routing's own)."""


def removed_on_cluster(weighed: dd.DataFrame, rows: int, thresholds: Sequence[float], run_threshold: float,
                       first_indexed: int, npartitions: int) -> list[int]:
    """`dedup.partition.what_if.removed_at` of the persisted weighed pairs `weighed` (`rows` of them),
    computed on the cluster: the components of every pair, each pair gathered with its component,
    counts back."""
    k = max(1, npartitions)
    labels, _ = components_on_cluster(weighed[["left", "right"]], k, rows)
    labels_at = route_by(labels, partial(label_part, npartitions=k, column="doc"), k, 2 * rows, EDGE_ROW_BYTES)
    edges_at = route_by(weighed, partial(label_part, npartitions=k, column="left"), k, rows, WEIGHED_ROW_BYTES)
    placed = dd.map_partitions(with_component, edges_at, labels_at, meta=COMPONENT_META, align_dataframes=False)
    gathered = route_by(placed, partial(label_part, npartitions=k, column="component"), k, rows, WEIGHED_ROW_BYTES)
    meta = pd.DataFrame({str(i): pd.Series(dtype=np.int64) for i in range(len(thresholds))})
    _, (counts,) = persist_counting([], [gathered.map_partitions(removed_in_part, tuple(thresholds), run_threshold,
                                                                 first_indexed, meta=meta)])
    return [int(counts[str(i)].sum()) for i in range(len(thresholds))]

