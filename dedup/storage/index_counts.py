"""Cluster counts across releases (`_index/sizes/`, index format 8, docs/contract.md §6d): how many documents
of every release in a chain of `--against` runs carry each cluster id, kept by the hash of that id so a
later run continues a count without reading an earlier release's shards.

A range's file holds one row per cluster of two or more documents in the chain: `size` (the documents of
every release carrying its id, the writing run's included), `added` (the writing run's documents in it)
and `read_here` (the writing run read the root document itself). A cluster no row names is a document
alone: a count of one. The newest release's files answer for every cluster of its chain; where several
releases were made against one earlier release (no one newest), the count is the sum of what each
release added, plus the root document itself when no release that read it listed it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.storage.index import COUNTS, SIZES, IndexPart
from dedup.storage.index_files import read_range, write_sizes


def sizes_schema(id_type: pa.DataType) -> pa.Schema:
    return pa.schema([("h", pa.uint64()), ("id", id_type), ("size", pa.int64()), ("added", pa.int64()),
                      ("read_here", pa.bool_())])


def _no_counts(id_type: pa.DataType) -> pd.DataFrame:
    """A sizes file's columns, no row."""
    return sizes_schema(id_type).empty_table().to_pandas()


def heads(parts: Sequence[IndexPart]) -> list[IndexPart]:
    """The releases no other one was made against: with one, its counts cover every release before it."""
    named = {uid for p in parts for uid in p.sources}
    return [p for p in parts if p.uid not in named]


def _read(part: IndexPart, m: int, k: int, id_type: pa.DataType) -> pd.DataFrame:
    table = read_range(part, SIZES, m, k, "h")
    return table.to_pandas() if table.num_rows else _no_counts(id_type)


def chain_counts(parts: Sequence[IndexPart], m: int, k: int, id_type: pa.DataType) -> pd.DataFrame:
    """(h, id, size) of every cluster of two or more documents the earlier releases `parts` counted, whose
    id hash is in range m of `k`. Releases of formats before `COUNTS` counted none: a cluster whose root
    one of them read counts that root alone (docs/contract.md §6d)."""
    top = heads(parts)
    if len(top) == 1:
        rows = _read(top[0], m, k, id_type) if top[0].format >= COUNTS else _no_counts(id_type)
        return rows[["h", "id", "size"]]
    # several newest releases may each have added to one cluster of a release they share: sum what each added
    rows = pd.concat([_read(p, m, k, id_type) for p in parts if p.format >= COUNTS] or [_no_counts(id_type)],
                     ignore_index=True)
    got = rows.groupby(["h", "id"], sort=False).agg(added=("added", "sum"), read_here=("read_here", "any"))
    got["size"] = got["added"] + ~got["read_here"].to_numpy(bool)
    return got.reset_index()[["h", "id", "size"]]


def counted_range(clusters: pd.DataFrame, parts: Sequence[IndexPart], k: int, write_root: str | None,
                  id_type: pa.DataType, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """In one id-hash range: this run's clusters
    (`dedup.partition.cluster_counts.CLUSTER_META`) given their count over the chain, and,
    with `write_root`, the range's sizes file written there (the earlier counts carried on, this run's
    clusters counted). Returns (root, part, size) of the clusters whose root an earlier release read:
    their count so far plus this run's documents (the others' count is this run's documents)."""
    assert partition_info is not None
    m = partition_info["number"]
    old = chain_counts(parts, m, k, id_type) if parts else _no_counts(id_type)[["h", "id", "size"]]
    ids = clusters["root"].astype(object).to_numpy()
    indexed = clusters["indexed"].to_numpy(bool)
    own = clusters["own"].to_numpy(np.int64)
    so_far = pd.Series(old["size"].to_numpy(np.int64), index=pd.MultiIndex.from_arrays(
        [old["h"].to_numpy(np.uint64), old["id"].astype(object).to_numpy()]))
    at = pd.MultiIndex.from_arrays([clusters["_h"].to_numpy(np.uint64), ids])
    earlier = so_far.reindex(at).fillna(1).to_numpy(np.int64)  # a root no release counted: itself alone
    size = own + np.where(indexed, earlier, 0)
    if write_root is not None:
        carried = ~so_far.index.isin(at)
        table = pa.table({
            "h": pa.array(np.r_[old["h"].to_numpy(np.uint64)[carried], clusters["_h"].to_numpy(np.uint64)], pa.uint64()),
            "id": pa.array([*old["id"].to_numpy()[carried].tolist(), *ids.tolist()], id_type),
            "size": pa.array(np.r_[old["size"].to_numpy(np.int64)[carried], size], pa.int64()),
            "added": pa.array(np.r_[np.zeros(int(carried.sum()), np.int64), own], pa.int64()),
            "read_here": pa.array(np.r_[np.zeros(int(carried.sum()), bool), ~indexed], pa.bool_())},
            schema=sizes_schema(id_type))
        write_sizes(table, write_root, m)
    return pd.DataFrame({"root": clusters["root"].to_numpy()[indexed], "part": clusters["part"].to_numpy(np.int64)[indexed],
                         "size": size[indexed]})
