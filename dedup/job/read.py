"""The read stage: the input's Parquet files as a Dask frame, a partition a group of pieces, with the
columns the stages read (the id, the text, and `_keep` with `--keep-by`). Lazy: nothing is read until
the features stage computes."""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.core.text import TEXT_DTYPE
from dedup.job import write
from dedup.job.stage import Settings, Step, View
from dedup.partition.features import KEEP, SCOPE
from dedup.storage import reads
from dedup.storage import shards as shards_mod


class Read(Step):
    """In a run on files, the input (`source`); a job on a frame of the caller's is given it instead."""

    name = "read"
    gives = ("source",)
    kept = False
    timed = False

    def wanted(self, s: Settings) -> bool:
        return s.files

    def run(self, job: View) -> str:
        plan = job.plan
        assert plan is not None
        id_type = shards_mod.id_type_of(plan.schema, plan.id_column)
        meta = pd.DataFrame({plan.id_column: pd.Series(dtype=np.int64 if pa.types.is_integer(id_type) else object),
                             plan.options.text_column: pd.Series(dtype=TEXT_DTYPE)})
        keep = None
        if job.settings.survivor_order is not None:
            assert plan.keep_by is not None
            keep = (plan.keep_by[0], plan.column_type(plan.keep_by[0]))
            meta[KEEP] = pd.Series(dtype=pd.ArrowDtype(reads.keep_type(keep[1])))
        scope = None
        if plan.within is not None:
            scope = (plan.within, plan.column_type(plan.within))
            meta[SCOPE] = pd.Series(dtype=TEXT_DTYPE)
        job.source = dd.from_map(write.read_group, plan.groups, id_column=plan.id_column, text_column=plan.options.text_column,
                                 id_type=id_type, keep=keep, scope=scope, meta=meta, enforce_metadata=False,
                                 label="read-shards")
        return f"{len(plan.shards)} files in {len(plan.groups)} partitions"
