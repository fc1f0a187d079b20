"""Which copy survives, and how far from it, per partition: each cluster's survivor found where its
members meet, a pair (survivor, member) for every other member to be scored by the confirm rule,
and for `--clusters centred` the graph cut down to the members that fell below the threshold with
their survivor, to be clustered again (`dedup.job.survivors`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dedup.partition.confirm import ROUTED_META
from dedup.partition.features import ROOT_DOC
from dedup.partition.keyspace import NO_INDEX
from dedup.partition.roots import SURVIVOR_ESTIMATE, SURVIVOR_JACCARD, survival_ranks

CHOSEN_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "label": pd.Series(dtype=np.int64),
                            "survivor": pd.Series(dtype=np.int64)})
"""`survivors_of` rows: each member's document key, its cluster's label and its survivor's key."""

PLACED_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "label": pd.Series(dtype=np.int64),
                            SURVIVOR_ESTIMATE: pd.Series(dtype=np.float32),
                            SURVIVOR_JACCARD: pd.Series(dtype=np.float32)})
"""A member whose cluster is settled: (doc, label = its survivor's key, its similarities to it)."""

DOCS_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64)})


def survivors_of(rows: pd.DataFrame, first_indexed: int = NO_INDEX, keep: str | None = None) -> pd.DataFrame:
    """(doc, label, survivor) for every member of the clusters in `rows` (`with_ids` rows, every
    member of a cluster in this partition): the survivor is the member that `roots_of_components`
    makes the root (`survival_ranks`), and of members of equal rank (an earlier output's near
    duplicate carries its root's id) the smallest key. When that member is an earlier output's near
    duplicate, the survivor is the document kept in its place (its `ROOT_DOC`), which the run read
    beside it (`dedup.partition.stand_ins`), a member of the cluster or not."""
    rows = rows.drop_duplicates("doc")
    if rows.empty:
        return CHOSEN_META.copy()
    rank, _, _ = survival_ranks(rows, first_indexed, keep)
    doc = rows["doc"].to_numpy(np.int64)
    kept = rows[ROOT_DOC].to_numpy(np.int64) if ROOT_DOC in rows.columns else doc
    label = rows["label"].to_numpy(np.int64)
    order = np.lexsort((doc, rank, label))
    first = np.r_[True, label[order][1:] != label[order][:-1]]
    group = np.cumsum(first) - 1
    survivor = np.empty(len(doc), np.int64)
    survivor[order] = kept[order][first][group]
    return pd.DataFrame({"doc": doc, "label": label, "survivor": survivor})


def survivor_pairs(chosen: pd.DataFrame) -> pd.DataFrame:
    """A pair (left = survivor, right = member) to score for every member that is not its cluster's survivor."""
    other = chosen[chosen["doc"].to_numpy(np.int64) != chosen["survivor"].to_numpy(np.int64)]
    if other.empty:
        return ROUTED_META.copy()
    return pd.DataFrame({"left": other["survivor"].to_numpy(np.int64), "right": other["doc"].to_numpy(np.int64),
                         "same": np.zeros(len(other), bool)})


def survivor_rows(chosen: pd.DataFrame) -> pd.DataFrame:
    """The survivors' own rows, settled: labelled with their own key, no similarity (once each: an
    earlier output's document may survive in clusters that joined none of its own members)."""
    own = np.unique(chosen["survivor"].to_numpy(np.int64))
    n = len(own)
    return pd.DataFrame({"doc": own, "label": own,
                         SURVIVOR_ESTIMATE: np.full(n, np.nan, np.float32),
                         SURVIVOR_JACCARD: np.full(n, np.nan, np.float32)})


def placed_members(scored: pd.DataFrame, passed_only: bool, first_indexed: int = NO_INDEX) -> pd.DataFrame:
    """Members scored against their survivor (`score_at_right` rows: left = survivor, right = member),
    settled in its cluster: all of them (connected), or those that reached the threshold and an
    earlier output's documents, which this run never removes (centred)."""
    if passed_only:
        scored = scored[scored["confirmed"].to_numpy(bool) | (scored["right"].to_numpy(np.int64) >= first_indexed)]
    return pd.DataFrame({"doc": scored["right"].to_numpy(np.int64), "label": scored["left"].to_numpy(np.int64),
                         SURVIVOR_ESTIMATE: scored["estimate"].to_numpy(np.float32),
                         SURVIVOR_JACCARD: scored["jaccard"].to_numpy(np.float32)})


def failed_members(scored: pd.DataFrame, first_indexed: int = NO_INDEX) -> pd.DataFrame:
    """This run's members below the threshold with their survivor, sorted: clustered again among
    themselves (an earlier output's documents stay where they were placed)."""
    right = scored["right"].to_numpy(np.int64)
    failed = right[~scored["confirmed"].to_numpy(bool) & (right < first_indexed)]
    return pd.DataFrame({"doc": np.unique(failed)})


def edges_among(edges: pd.DataFrame, docs: pd.DataFrame, column: str) -> pd.DataFrame:
    """The edges (left, right) whose `column` end is one of `docs` (this partition's failed members)."""
    end = edges[column].to_numpy(np.int64)
    return edges[np.isin(end, docs["doc"].to_numpy(np.int64))].reset_index(drop=True)


def below_threshold(scored: pd.DataFrame, first_indexed: int = NO_INDEX) -> pd.DataFrame:
    """Per partition of members scored against their survivor: this run's members, and those below the threshold."""
    own = scored["right"].to_numpy(np.int64) < first_indexed
    return pd.DataFrame({"scored": [int(own.sum())], "below": [int((own & ~scored["confirmed"].to_numpy(bool)).sum())]})


def histogram_of(placed: pd.DataFrame, column: str, bins: int, first_indexed: int = NO_INDEX) -> pd.DataFrame:
    """Per partition of settled members: the histogram over [0, 1] of this run's members' similarity
    to their survivor (`column`)."""
    own = placed[placed["doc"].to_numpy(np.int64) < first_indexed]
    values = own[column].to_numpy(np.float64)
    values = values[~np.isnan(values)]
    hist = np.histogram(values, bins=bins, range=(0.0, 1.0))[0]
    return pd.DataFrame({"hist": [hist]})
