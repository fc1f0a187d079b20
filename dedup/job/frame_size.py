"""What a pandas frame weighs, as a Dask worker measures every task's result (`dask.sizeof`).

A worker sizes each result it keeps, to decide when to spill. Dask's own estimate for a DataFrame
builds a Series for every column and samples the column names as Python objects: about 120 µs for
a frame of four integer columns, 210 µs for a features frame of eight, where adding up the bytes
of its arrays takes 7 and 16: on a small job, about 6% of the workers' CPU (docs/performance.md,
Design choices). Frames holding Python objects keep Dask's estimate, which samples them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from dask.sizeof import sizeof

BLOCK_BYTES = 1200
"""Dask's allowance for each run of columns of one dtype: here, for each array the frame holds."""

NAME_BYTES = 64
"""A column name: a short Python string and its pointer (Dask samples them)."""


def frame_bytes(df: pd.DataFrame, objects: Callable[[pd.DataFrame], int]) -> int:
    """The bytes of `df`'s arrays, its index and an allowance for its column names; `objects(df)`
    (Dask's estimate) when a column holds Python objects, whose size only a sample tells."""
    arrays = getattr(getattr(df, "_mgr", None), "arrays", None)
    if arrays is None:  # not a pandas we know the insides of
        return objects(df)
    total = sizeof(df.index) + NAME_BYTES * len(df.columns)
    for a in arrays:
        dtype = a.dtype
        if dtype is np.dtype(object) or (isinstance(dtype, pd.StringDtype) and dtype.storage == "python"):
            return objects(df)
        total += BLOCK_BYTES + int(a.nbytes)
    return max(BLOCK_BYTES, total)


def register() -> None:
    """Have this process's Dask size DataFrames by `frame_bytes` (workers: `dedup.runtime.dask_setup`
    and the process local workers are forked from). Idempotent."""
    sizeof(pd.DataFrame())  # Dask registers its pandas estimates at the first frame it sizes: ours after
    dask_estimate: Any = sizeof.dispatch(pd.DataFrame)
    if getattr(dask_estimate, "dedup_frame_bytes", False):
        return

    def sized(df: pd.DataFrame) -> int:
        return frame_bytes(df, dask_estimate)

    sized.dedup_frame_bytes = True  # type: ignore[attr-defined]
    sizeof.register(pd.DataFrame)(sized)
