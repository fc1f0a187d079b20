"""The write stage, per partition: which rows are kept and the `minhash_cluster` each carries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dedup.partition.features import CLEAN, ROOT_DOC
from dedup.partition.keyspace import key_row
from dedup.partition.roots import WHOLE


def row_decisions(feat: pd.DataFrame, roots: pd.DataFrame | None, drop: bool) -> tuple[NDArray[np.bool_], NDArray[Any]]:
    """Per row of a features partition: keep it?, and its cluster root id (its own id when alone).

    roots: (doc, root) of this partition's documents that are in a cluster of two or more
    (root ids are int64 for integer ids, str otherwise). Contaminated rows are never kept; with
    drop, only roots are, and the members of clusters kept whole (`WHOLE`, `--min-cluster-size`).
    """
    own = feat["_id"].to_numpy(dtype=np.int64 if pd.api.types.is_integer_dtype(feat["_id"].dtype) else object)
    cluster = own.copy()
    if roots is not None and len(roots):
        rows = key_row(roots["doc"].to_numpy(np.int64))
        cluster[rows] = roots["root"].to_numpy()
    keep = (feat["source"].to_numpy() == CLEAN) & ~feat["skipped"].to_numpy(bool)
    if drop:
        keep &= (cluster == own) | whole_rows(feat, roots)
    return keep, cluster


def whole_rows(feat: pd.DataFrame, roots: pd.DataFrame | None) -> NDArray[np.bool_]:
    """Per row of a features partition: in a cluster below `--min-cluster-size`, kept whole (`WHOLE`)."""
    whole = np.zeros(len(feat), bool)
    if roots is not None and len(roots) and WHOLE in roots.columns:
        whole[key_row(roots["doc"].to_numpy(np.int64))] = roots[WHOLE].to_numpy(bool)
    return whole


def root_keys(feat: pd.DataFrame, roots: pd.DataFrame | None) -> NDArray[np.int64]:
    """Per row of a features partition: the key of the document kept in its place (its own when it
    is in no cluster or is its cluster's root), for the index (`roots`' `ROOT_DOC`)."""
    keys = feat["doc"].to_numpy(np.int64).copy()
    if roots is not None and len(roots):
        keys[key_row(roots["doc"].to_numpy(np.int64))] = roots[ROOT_DOC].to_numpy(np.int64)
    return keys


def cluster_sizes(feat: pd.DataFrame, roots: pd.DataFrame | None) -> NDArray[np.int64]:
    """Per row of a features partition: the size of its cluster (`roots`' `size`), 1 for a document
    in no cluster."""
    size = np.ones(len(feat), np.int64)
    if roots is not None and len(roots):
        size[key_row(roots["doc"].to_numpy(np.int64))] = roots["size"].to_numpy(np.int64)
    return size


def attach_roots(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, id_column: str, drop: bool,
                 tag: bool = True) -> pd.DataFrame:
    """Add `minhash_cluster` (the root id, typed like the id column) and drop contaminated rows
    (and non-roots if drop). With tag=False (decontamination only) no column is added."""
    keep, cluster = row_decisions(feat, roots, drop)
    if not tag:
        return part[keep]
    out = part.copy()
    out["minhash_cluster"] = pd.array(cluster, dtype=part[id_column].dtype)
    return out[keep]
