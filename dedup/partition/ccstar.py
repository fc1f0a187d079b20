"""Connected components by alternating large-star and small-star (Kiveris et al., 2014), per partition.

Each step is a plain pandas function of the edges grouped on one node (the Dask side shuffles
on that node first, so every node's edges are in one partition). Repeated until a whole round
leaves the edge set unchanged, the graph becomes one star per component, centred on the
component's smallest node: the label of every node. O(log n) rounds.

Edges are (a, b) int64 with a < b. A checksum of the edge set (count and two sums of 64-bit
mixes, all modulo 2^64) detects the fixed point without bringing edges to the client.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import NDArray

EDGE_META = pd.DataFrame({"a": pd.Series(dtype=np.int64), "b": pd.Series(dtype=np.int64)})
ADJ_META = pd.DataFrame({"u": pd.Series(dtype=np.int64), "v": pd.Series(dtype=np.int64)})
CHECKSUM_META = pd.DataFrame({"count": pd.Series(dtype=np.uint64), "s1": pd.Series(dtype=np.uint64),
                              "s2": pd.Series(dtype=np.uint64)})


def normalised(left: NDArray[np.int64], right: NDArray[np.int64]) -> pd.DataFrame:
    """Edges as (a < b), self loops dropped."""
    a, b = np.minimum(left, right), np.maximum(left, right)
    keep = a != b
    return pd.DataFrame({"a": a[keep], "b": b[keep]})


def both_directions(edges: pd.DataFrame) -> pd.DataFrame:
    """(u, v) rows for each edge in both directions, for grouping on u."""
    a, b = edges["a"].to_numpy(np.int64), edges["b"].to_numpy(np.int64)
    return pd.DataFrame({"u": np.concatenate([a, b]), "v": np.concatenate([b, a])})


def _mix(x: NDArray[np.uint64], salt: np.uint64) -> NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        z = (x ^ salt) * np.uint64(0x9E3779B97F4A7C15)
        z ^= z >> np.uint64(31)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        return z ^ (z >> np.uint64(29))


def checksum(adj: pd.DataFrame) -> pd.DataFrame:
    """Checksum of the distinct undirected edges in this partition of an adjacency grouped on u
    (each edge counted once, at its smaller node); sums over partitions give the whole graph's."""
    adj = adj.drop_duplicates()
    one = adj[adj["v"].to_numpy() > adj["u"].to_numpy()]
    u, v = one["u"].to_numpy(np.int64).view(np.uint64), one["v"].to_numpy(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        h1 = _mix(u, np.uint64(1)) + _mix(v, np.uint64(2)) * np.uint64(3)
        h2 = _mix(u ^ _mix(v, np.uint64(5)), np.uint64(7))
        return pd.DataFrame({"count": [np.uint64(len(one))], "s1": [h1.sum(dtype=np.uint64)],
                             "s2": [h2.sum(dtype=np.uint64)]})


def _min_neighbour(u: NDArray[np.int64], v: NDArray[np.int64]) -> NDArray[np.int64]:
    """Per row: the smallest of u and every neighbour v of u (rows grouped on u)."""
    m = pd.Series(v).groupby(u).transform("min").to_numpy(np.int64)
    return np.minimum(m, u)


def large_star(adj: pd.DataFrame) -> pd.DataFrame:
    """Large-star: connect every neighbour v > u of u to m(u), the smallest of u and its neighbours."""
    adj = adj.drop_duplicates()
    u, v = adj["u"].to_numpy(np.int64), adj["v"].to_numpy(np.int64)
    if len(u) == 0:
        return EDGE_META.copy()
    m = _min_neighbour(u, v)
    big = v > u
    return normalised(v[big], m[big])


def small_star(edges_on_b: pd.DataFrame) -> pd.DataFrame:
    """Small-star, with each edge (a < b) at its larger node b: connect b and each smaller neighbour
    a of b to m(b), the smallest of them."""
    edges_on_b = edges_on_b.drop_duplicates()
    a, b = edges_on_b["a"].to_numpy(np.int64), edges_on_b["b"].to_numpy(np.int64)
    if len(a) == 0:
        return EDGE_META.copy()
    m = _min_neighbour(b, a)
    out = normalised(np.concatenate([a, b]), np.concatenate([m, m]))
    return out.drop_duplicates().reset_index(drop=True)


def star_labels(edges: pd.DataFrame) -> pd.DataFrame:
    """(doc, label) from a converged star graph: each leaf b gets its centre a; centres label themselves."""
    a, b = edges["a"].to_numpy(np.int64), edges["b"].to_numpy(np.int64)
    return pd.DataFrame({"doc": np.concatenate([b, a]), "label": np.concatenate([a, a])})
