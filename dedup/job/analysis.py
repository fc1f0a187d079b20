"""The job's stages in the order they run: the pipeline is this list.

    read -> [common] -> features (and unique ids) -> [contamination] -> buckets -> confirm -> components
         -> [survivors] -> roots -> [lines] -> [spans] -> [shown] -> write -> [report]

Each is a `dedup.job.stage.Step` in the module of its name, declaring the results it reads and
gives; `dedup.job.stage.run_stages` runs those a job wants and holds each to its declaration.
Adding a stage is one module and one entry in `STAGES`. docs/architecture.md has the table.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.job.buckets import Buckets
from dedup.job.common import Common
from dedup.job.components import Components
from dedup.job.confirm import Confirm
from dedup.job.contamination import Contamination
from dedup.job.features import Features
from dedup.job.lines import Lines
from dedup.job.output import WRITE, Write
from dedup.job.page_data import Page, Shown
from dedup.job.read import Read
from dedup.job.roots import Roots
from dedup.job.spans import Spans
from dedup.job.stage import Step
from dedup.job.survivors import Survivors

STAGES: tuple[Step, ...] = (Read(), Common(), Features(), Contamination(), Buckets(), Confirm(), Components(), Survivors(),
                            Roots(), Lines(), Spans(), Shown(), Write(), Page())
"""The stages, in order; each runs when its `wanted` says the job needs it."""

ORDER = (*(s.name for s in STAGES if s.kept), WRITE)
"""The stages whose results are kept for a resumed run, in the order they run (the write keeps
each partition it finished, `dedup.job.output`)."""


def check_columns(ddf: dd.DataFrame, id_column: str, text_column: str) -> None:
    """A frame of the caller's: the id and text columns there, of types the job reads."""
    cols = list(ddf.columns)
    for role, name in (("id", id_column), ("text", text_column)):
        if name not in cols:
            raise ValueError(f"The {role} column {name!r} is not in the input; columns found: {cols}. "
                             f"Pass --{role}-column to name it.")
    tdtype = ddf._meta[text_column].dtype
    if not (pd.api.types.is_string_dtype(tdtype) or tdtype is np.dtype(object)):
        raise ValueError(f"The text column {text_column!r} has type {tdtype}; it must hold strings.")
    idtype = ddf._meta[id_column].dtype
    if not (pd.api.types.is_integer_dtype(idtype) or pd.api.types.is_string_dtype(idtype)):
        raise ValueError(f"The id column {id_column!r} has type {idtype}; ids must be strings or integers.")
    if "minhash_cluster" in cols:
        raise ValueError("The input already has a 'minhash_cluster' column; rename or drop it first.")
