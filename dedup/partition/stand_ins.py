"""An earlier output's near duplicate stands for its root (it carries the root's id): per partition,
the roots such stand-ins name, to be read from the earlier index beside them, so that a member of
their cluster is scored against the document actually kept in its place (`dedup.job.survivors`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dedup.partition.features import ROOT_DOC
from dedup.partition.rows import concat_rows

KEYS_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64)})


def stand_in_roots(feat: pd.DataFrame) -> pd.DataFrame:
    """The keys of the roots named by the near duplicates among these indexed documents' features."""
    doc, root = feat["doc"].to_numpy(np.int64), feat[ROOT_DOC].to_numpy(np.int64)
    return pd.DataFrame({"doc": np.unique(root[root != doc])})


def stand_in_count(feat: pd.DataFrame) -> pd.DataFrame:
    """How many of these indexed documents are near duplicates standing for a root (an upper bound on
    the roots to read)."""
    return pd.DataFrame({"n": [int((feat[ROOT_DOC].to_numpy(np.int64) != feat["doc"].to_numpy(np.int64)).sum())]})


def with_roots(feat: pd.DataFrame, roots: pd.DataFrame) -> pd.DataFrame:
    """An index partition's features with the roots read for its stand-ins (`roots`, at their own
    partition) added, each document once, sorted by key (`rows_of` looks keys up)."""
    if roots.empty:
        return feat
    both = concat_rows([feat, roots[list(feat.columns)]])
    both = both.drop_duplicates("doc").sort_values("doc", kind="stable")
    return both.reset_index(drop=True)


def own_roots(feat: pd.DataFrame) -> pd.DataFrame:
    """This run's features, each document its own root (`ROOT_DOC`): beside the earlier indexes'."""
    return feat.assign(**{ROOT_DOC: feat["doc"].to_numpy(np.int64)})
