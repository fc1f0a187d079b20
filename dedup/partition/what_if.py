"""What other thresholds would remove: the scored candidate pairs, as edges weighed by their
similarity, and the documents each threshold's connected components would remove (the page's
what-if table, so that a dry run answers "how many would 0.75 remove?")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from dedup.partition.buckets import same_text_edges

WHAT_IF_THRESHOLDS = (0.7, 0.75, 0.8, 0.85, 0.9)
"""The thresholds of the what-if table (with the run's own)."""

WHAT_IF_META = pd.DataFrame({"left": pd.Series(dtype=np.int64), "right": pd.Series(dtype=np.int64),
                             "score": pd.Series(dtype=np.float32), "confirmed": pd.Series(dtype=bool)})
"""An edge of the what-if graph: a pair, its similarity by the confirm rule (1 for the same words),
and whether the run confirmed it."""


def what_if_edges(scored: pd.DataFrame, feat: pd.DataFrame, n_new: int, column: str, lowest: float,
                  partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """One partition's scored pairs (`dedup.partition.confirm.SCORED_META`) that some threshold from
    `lowest` up would join: same-text, confirmed, or scoring at least `lowest` by `column`; on a
    partition of this run's documents, its same-text pairs too (`graph_pairs` joins them)."""
    same = scored["same"].to_numpy(bool)
    confirmed = scored["confirmed"].to_numpy(bool)
    score = np.where(same, np.float32(1.0), scored[column].to_numpy(np.float32))
    keep = same | confirmed | (score >= np.float32(lowest))
    out = pd.DataFrame({"left": scored["left"].to_numpy(np.int64)[keep], "right": scored["right"].to_numpy(np.int64)[keep],
                        "score": score[keep], "confirmed": (same | confirmed)[keep]})
    if partition_info is None or partition_info["number"] >= n_new:
        return out
    inside = same_text_edges(feat)
    n = len(inside)
    return pd.concat([out, pd.DataFrame({"left": inside["left"].to_numpy(np.int64),
                                         "right": inside["right"].to_numpy(np.int64),
                                         "score": np.ones(n, np.float32), "confirmed": np.ones(n, bool)})],
                     ignore_index=True)


def removed_at(edges: pd.DataFrame, thresholds: Sequence[float], run_threshold: float, first_indexed: int
               ) -> list[int]:
    """For each threshold, the documents of this run (keys below `first_indexed`) that its connected
    components would remove: every one in a component with an earlier output's document, all but one
    in the others (the contract's rule). At the run's own threshold the run's confirmed edges, exactly.
    One compiled union-find pass a threshold over the pairs' node codes: about 40 bytes a pair while it
    runs (five vectorised union-finds took 128)."""
    from dedup.core import _kernels

    left, right = edges["left"].to_numpy(np.int64), edges["right"].to_numpy(np.int64)
    score, confirmed = edges["score"].to_numpy(np.float32), edges["confirmed"].to_numpy(bool)
    codes, nodes = pd.factorize(np.concatenate([left, right]))  # a hash table: lighter than sorting
    a, b = codes[:len(left)], codes[len(left):]
    indexed = np.asarray(nodes) >= first_indexed
    out = []
    for t in thresholds:
        use = confirmed if t == run_threshold else score >= np.float32(t)
        out.append(int(_kernels.removed_by_unions(a, b, use, indexed, len(nodes))))
    return out


def removed_at_parts(parts: Sequence[pd.DataFrame], thresholds: Sequence[float], run_threshold: float,
                     first_indexed: int) -> list[int]:
    """`removed_at` of the weighed pairs of every partition, in one task (a worker's: its kernels are
    loaded, and the pairs never come to the client); only while they are few (`WHAT_IF_TASK_PAIRS`)."""
    edges = pd.concat(list(parts), ignore_index=True) if parts else WHAT_IF_META.copy()
    return removed_at(edges, thresholds, run_threshold, first_indexed)


COMPONENT_META = WHAT_IF_META.assign(component=pd.Series(dtype=np.int64))
"""A what-if edge and the component of every what-if edge it is in (`with_component`)."""


def with_component(edges: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """What-if edges (`WHAT_IF_META`, routed by their left document) and the label of their left
    document's component of the whole what-if graph ((doc, label) rows routed by doc, repeats allowed),
    as `component`. Every threshold joins a subset of the what-if edges, so each of its components lies
    inside one of these: gathered by `component`, a partition's edges are counted on their own."""
    left = edges["left"].to_numpy(np.int64)
    doc, first = np.unique(labels["doc"].to_numpy(np.int64), return_index=True)
    if not len(doc):
        return edges.assign(component=left)
    at = np.minimum(np.searchsorted(doc, left), len(doc) - 1)
    # a document in no labelled edge has only self loops (never made): it is a component of its own
    return edges.assign(component=np.where(doc[at] == left, labels["label"].to_numpy(np.int64)[first][at], left))


def removed_in_part(edges: pd.DataFrame, thresholds: Sequence[float], run_threshold: float, first_indexed: int
                    ) -> pd.DataFrame:
    """`removed_at` of one partition's what-if edges, whole components of them (`with_component`), as
    one row of a column a threshold: the sums over partitions are the whole graph's counts."""
    counts = removed_at(edges, thresholds, run_threshold, first_indexed)
    return pd.DataFrame({str(i): [n] for i, n in enumerate(counts)}, dtype=np.int64)
