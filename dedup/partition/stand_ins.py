"""An earlier output's near duplicate stands for its root (it carries the root's id, and its root is
read from the earlier index beside it: `dedup.storage.index_lookup.named_roots`), so that a member of
its cluster is scored against the document actually kept in its place (`dedup.job.survivors`). This
run's own documents are each their own root."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dedup.partition.features import ROOT_DOC

KEYS_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64)})
"""Document keys: the roots named by near duplicates, routed to their partitions."""


def own_roots(feat: pd.DataFrame) -> pd.DataFrame:
    """This run's features, each document its own root (`ROOT_DOC`): beside the earlier indexes'."""
    return feat.assign(**{ROOT_DOC: feat["doc"].to_numpy(np.int64)})
