"""Finding and joining rows of partition frames."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import NDArray


def rows_of(feat: pd.DataFrame, keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """Positions of document keys in a features partition (its `doc` column is sorted; an index
    partition holds only the documents a run needs, so positions are looked up, not computed)."""
    return np.searchsorted(feat["doc"].to_numpy(np.int64), keys)


def concat_rows(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The rows of `parts` (at least one) in order, with a fresh index. Empty parts are left out, as
    Dask's own concatenation does: pandas can give an empty frame's columns other dtypes."""
    full = [p for p in parts if len(p)] or [parts[0]]
    return pd.concat(full, ignore_index=True) if len(full) > 1 else full[0].reset_index(drop=True)
