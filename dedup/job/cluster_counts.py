"""The roots stage's counts across releases on Dask (docs/contract.md §6d): this run's clusters routed to the
range of their root id's hash, where the earlier releases' counts for that range are read and, with an
index to write, this release's are written; the counts of clusters an earlier root heads go back to
their members' partitions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.job.routing import ID_ROW_BYTES, range_part, route_by
from dedup.partition.cluster_counts import CLUSTER_META, cluster_rows, with_chain_counts
from dedup.storage.index import IndexPart
from dedup.storage.index_counts import counted_range


@dataclass(frozen=True)
class Counting:
    """Where the counts come from and go: the earlier releases (`against`), the id-hash ranges (the
    features stage's, the index's `id_partitions`), the index being written (None: none), the id type."""

    against: Sequence[IndexPart]
    id_parts: int
    write_root: str | None
    id_type: pa.DataType


def chain_sizes(by_component: dd.DataFrame, first_indexed: int, counting: Counting, min_size: int = 2,
                rows: int | None = None) -> tuple[dd.DataFrame, dd.DataFrame]:
    """`roots_of_components` rows (lazy, a partition per group of components) whose `SIZE` counts every
    release of the chain, and a lazy frame of the counts routed back (a row a cluster an earlier root
    heads), whose computation writes the index's range files: to compute with the rows. Without earlier
    releases the rows are `by_component` as it is (every count is this run's), so the counts are a side
    branch of the same round trip, not a step the roots wait for. `rows`: an upper bound on the
    clusters, when known (the graph's edges: a cluster has one at least), so that few take one task
    (`route_small`), not shuffles."""
    k = max(1, counting.id_parts)
    clusters = by_component.map_partitions(cluster_rows, first_indexed, meta=CLUSTER_META)
    ranged = route_by(clusters, partial(range_part, column="_h", npartitions=k), k, rows, ID_ROW_BYTES, ranges=True)
    meta = pd.DataFrame({"root": pd.Series(dtype=object), "part": pd.Series(dtype=np.int64),
                         "size": pd.Series(dtype=np.int64)})
    counted = ranged.map_partitions(counted_range, list(counting.against), k, counting.write_root, counting.id_type,
                                    meta=meta)
    if not counting.against:
        return by_component, counted
    back = route_by(counted, _part_of, by_component.npartitions, rows, ID_ROW_BYTES)
    return dd.map_partitions(with_chain_counts, by_component, back, min_size, meta=by_component._meta,
                             align_dataframes=False), counted


def _part_of(frame: pd.DataFrame) -> np.ndarray:
    return frame["part"].to_numpy(np.int64)
