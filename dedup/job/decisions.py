"""What the stages decided, handed to the write and the page."""

from __future__ import annotations

from dataclasses import dataclass

import dask.dataframe as dd
import pandas as pd


@dataclass
class Decisions:
    """What `analyse` decided: persisted features (doc key, id, contamination per row, in input
    order) and, with near-dedup, (doc, root) of every clustered document routed to its partition."""

    feat: dd.DataFrame
    roots: dd.DataFrame | None
    matches: dd.DataFrame | None = None
    """(doc, matched, estimate, jaccard) per clustered document at its partition, for the report: the
    roots themselves, when they carry them (`dedup.job.roots.roots` with `scored`)."""
    clusters: pd.DataFrame | None = None
    """For the report: cluster sizes, the largest clusters and their first members (`page_data.cluster_summary`)."""
    examples: pd.DataFrame | None = None
    """For the report: (source, doc, _id), a contaminated document per protected record and partition."""
    near_pairs: pd.DataFrame | None = None
    """For the report: the candidate pairs nearest the threshold (`dedup.partition.confirm.NEAR_META`)."""
    lines: dd.DataFrame | None = None
    """With line dedup: the repeated lines' keys settled, at each input partition (`dedup.job.lines`):
    the write rewrites the texts with them."""
