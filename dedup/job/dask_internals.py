"""Every name the job takes from dask beyond its public API, in one place, each with why.

A dask release that moves or changes one of them breaks this module's import, by name, rather than a
stage deep inside a run; pyproject.toml pins the dask and distributed versions the suite ran on. The
public API is imported where it is used (`dask.dataframe`, `dask.config`, `dask.sizeof`,
`dask.base.tokenize`, `distributed.Client`, `distributed.scheduler.KilledWorker`); `tests/test_layers.py`
holds that no other module of dedup imports a private name of dask or distributed.

- `_ExprSequence`, `collections_to_expr`, `optimize_blockwise_fusion`: several collections optimised
  together, each chain of per-partition steps fused into one task a partition, as one DataFrame's own
  `optimize` does (`graphs.fused`).
- `get_scheduler`, `flatten`: which scheduler a computation would use, and its keys, so that a run
  without a client persists without tokenizing every byte of its results (`graphs._held_here`).
- `Task`, `TaskRef`, `FromGraph`, `new_collection`: a DataFrame over results already computed, named
  by their own keys (`graphs.Persisted`).
- `Expr`, `Blockwise`, `Shuffle`: the expression classes a graph is inspected by (`graphs`).
- `ArrowStringConversion`, `FromMap`: a read from files (the input's, the features'), found under the
  string conversion and given a name of its own for each step that reads it (`graphs.read_for`).
"""

from __future__ import annotations

from dask._expr import _ExprSequence
from dask._task_spec import Task, TaskRef
from dask.base import collections_to_expr, get_scheduler
from dask.core import flatten
from dask.dataframe.dask_expr import new_collection
from dask.dataframe.dask_expr._expr import ArrowStringConversion, Blockwise, Expr, optimize_blockwise_fusion
from dask.dataframe.dask_expr._shuffle import Shuffle
from dask.dataframe.dask_expr.io.io import FromGraph, FromMap

__all__ = ["ArrowStringConversion", "Blockwise", "Expr", "FromGraph", "FromMap", "Shuffle", "Task", "TaskRef",
           "_ExprSequence", "collections_to_expr", "flatten", "get_scheduler", "new_collection",
           "optimize_blockwise_fusion"]
