"""The job's stages in the order they run, and `analyse`, which runs them on a Dask frame.

    [lines] -> features (and unique ids) -> [contamination] -> buckets -> confirm -> components -> [survivors] -> roots

Each is a `dedup.job.stage.Step` in the module of its name; the write (`dedup.job.output`) follows
them. Adding a stage is one module and one entry in `STAGES`.
"""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.config import COMPONENT_MODES
from dedup.job.buckets import Buckets
from dedup.job.checkpoints import Checkpoints
from dedup.job.components import Components
from dedup.job.confirm import Confirm
from dedup.job.contamination import Contamination
from dedup.job.counts import Report
from dedup.job.decisions import Decisions
from dedup.job.features import Features
from dedup.job.lines import Lines
from dedup.job.roots import Roots
from dedup.job.stage import Job, Settings, Step, run_stages
from dedup.job.survivors import Survivors
from dedup.storage.safety import UsageError

STAGES: tuple[Step, ...] = (Lines(), Features(), Contamination(), Buckets(), Confirm(), Components(), Survivors(), Roots())
"""The stages, in order; each runs when its `wanted` says the job needs it."""

WRITE = "write"
ORDER = (*(s.name for s in STAGES), WRITE)
"""The stages whose results are kept for a resumed run, in the order they run (the write keeps
each partition it finished, `dedup.job.output`)."""


def analyse(ddf: dd.DataFrame, settings: Settings, report: Report, kept: Checkpoints | None = None) -> Decisions:
    """Run the stages on `ddf` (the id and text columns, and `_keep` with `--keep-by`); the report gets
    every count. `kept`: each stage's results are kept there as it finishes, and those an interrupted
    run finished are read back instead of computed."""
    if settings.components not in COMPONENT_MODES:
        raise UsageError(f"The 'components' parameter must be one of {COMPONENT_MODES}. "
                         f"Got {settings.components!r} instead.")
    job = run_stages(Job(settings, ddf, report, kept or Checkpoints.nowhere()), STAGES)
    lines = job.decided if settings.lines else None
    if not settings.near:
        return Decisions(job.feat, None, None, None, job.examples, lines=lines)
    return Decisions(job.feat, job.roots, job.roots if settings.details else None, job.summary, job.examples,
                     job.near_pairs, lines)


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
