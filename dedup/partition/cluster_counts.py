"""The roots stage's counts across releases, per partition: this run's clusters as one row each, and the
count over the chain put back on their members (the counts themselves: `dedup.storage.index_counts`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dedup.partition.keyspace import NO_INDEX
from dedup.partition.roots import SIZE, WHOLE

CLUSTER_META = pd.DataFrame({"_h": pd.Series(dtype=np.uint64), "root": pd.Series(dtype=object),
                             "part": pd.Series(dtype=np.int64), "own": pd.Series(dtype=np.int64),
                             "indexed": pd.Series(dtype=bool)})
"""This run's clusters, one row each, for the counts (`dedup.storage.index_counts`): the root id's hash and
id, the partition its members are in, this run's documents in it, and whether its root is an earlier
release's document."""


def cluster_rows(roots: pd.DataFrame, first_indexed: int = NO_INDEX,
                 partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """One row per cluster holding a document of this run, of one partition of `roots_of_components`
    output (`CLUSTER_META`): its root id and that id's hash, this partition's number, this run's
    documents in it, and whether its root is an earlier release's (a cluster holding one has it as root)."""
    from dedup.core.hashing import id_hashes

    if roots.empty:
        return CLUSTER_META.copy()
    doc = roots["doc"].to_numpy(np.int64)
    root = roots["root"]
    codes, uniques = pd.factorize(root.astype(object).to_numpy())
    own = np.bincount(codes, weights=doc < first_indexed, minlength=len(uniques)).astype(np.int64)
    indexed = np.bincount(codes, weights=doc >= first_indexed, minlength=len(uniques)) > 0
    ids = root.to_numpy()[np.unique(codes, return_index=True)[1]]  # each cluster's root, typed as the ids are
    out = pd.DataFrame({"_h": id_hashes(ids), "root": ids.astype(object),
                        "part": np.int64(partition_info["number"] if partition_info else 0),
                        "own": own, "indexed": indexed})
    return out[out["own"].to_numpy() > 0].reset_index(drop=True)


def with_chain_counts(roots: pd.DataFrame, counted: pd.DataFrame, min_size: int = 2) -> pd.DataFrame:
    """`roots_of_components` rows whose `SIZE` counts the chain (`counted`: (root, part, size) of the
    clusters an earlier release's root heads, in this partition), and `WHOLE` again with it."""
    if roots.empty or counted.empty:
        return roots
    size = pd.Series(counted["size"].to_numpy(np.int64), index=counted["root"].astype(object).to_numpy())
    chain = roots["root"].astype(object).map(size).to_numpy()
    out = roots.copy()
    out[SIZE] = np.where(pd.isna(chain), out[SIZE].to_numpy(np.int64), chain).astype(np.int64)
    if WHOLE in out.columns:
        out[WHOLE] = out[SIZE].to_numpy() < min_size
    return out
