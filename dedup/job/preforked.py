"""Imported once by the process local workers are forked from (`dedup.runtime.start_forkserver`).

Importing this module loads what every worker needs before its first task: the modules the
tasks come from (dask.dataframe, distributed, pandas, pyarrow, numba and the job's own) and the
compiled kernels. Each worker forked from that process starts with them in memory instead of
importing and loading them itself (about 2 CPU-seconds a worker). A failure is swallowed here:
a worker then loads what it needs in its preload (`dedup.runtime.dask_setup`), where an error
is reported.

What was loaded is then frozen (`gc.freeze`, as Python's documentation advises before forking
without exec): a worker's garbage collections never walk these objects, and so never write to the
memory pages it shares with the other workers.
"""

from __future__ import annotations

import contextlib
import gc

with contextlib.suppress(Exception):
    import distributed  # noqa: F401

    import dedup.job.pipeline  # noqa: F401
    from dedup.job import frame_size
    from dedup.partition.warm import warm_kernels

    frame_size.register()
    warm_kernels()

gc.collect()
gc.freeze()
