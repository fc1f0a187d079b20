"""Running the job's collections on the active client (or Dask's local scheduler): one round
trip a stage with retries and a progress bar, the graph node shared by every partition, and the
wait for a failed run's tasks to end."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from typing import Any

log = logging.getLogger("dedup")


PROGRESS_LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("dedup_progress_label", default="")
"""The progress bar's label: the stage running and what it works on, set for the stage's duration by
`dedup.job.timing.Timed` (a context variable: scoped to the stage, and to the thread running it)."""


def show_progress(futures: Any) -> None:
    """A progress bar on stderr while `futures` run, labelled with the stage, when stderr is a terminal."""
    if not sys.stderr.isatty():
        return
    from distributed import progress

    label = PROGRESS_LABEL.get()
    with contextlib.redirect_stdout(sys.stderr):
        if label:
            print(f"{label}:", file=sys.stderr)
        progress(futures)
        print(file=sys.stderr)


def active_client() -> Any:
    """The distributed client to run on, or None for the local scheduler (no client, or
    `dask.config.set(scheduler=...)` names another one: "sync", "threads" or a function)."""
    import dask

    if dask.config.get("scheduler", None) not in (None, "dask.distributed"):
        return None
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def compute(*collections: Any, retries: int = 2) -> Any:
    """dask.compute on the active client with retries (dask.annotate(retries=) is ignored), with a
    progress bar on a terminal; on the local scheduler without a client."""
    import dask

    from dedup.job.graphs import fused

    collections = tuple(fused(*collections))
    client = active_client()
    if client is None:
        if not sys.stderr.isatty():
            return dask.compute(*collections)
        from dask.diagnostics import ProgressBar

        label = PROGRESS_LABEL.get()
        if label:
            print(f"{label}:", file=sys.stderr)
        with ProgressBar(out=sys.stderr):
            return dask.compute(*collections)
    futures = client.compute(list(collections), retries=retries)
    try:
        show_progress(futures)
        return client.gather(futures)
    except BaseException:
        with contextlib.suppress(Exception):  # the tasks not started yet never start
            client.cancel(futures, force=True)
        raise


SETTLE_SECONDS = 60.0
"""How long a failed run waits for the cluster's running tasks to end before it removes its staging
directory (its write tasks check the run's token before each file, so one still running then writes
at most the file it has begun)."""


def settle(seconds: float = SETTLE_SECONDS) -> None:
    """Wait until the active cluster runs no task (a task cannot be stopped midway; a failed run's
    futures are cancelled), for at most `seconds`."""
    import time

    from dedup.job.watchdog import FAILED

    client = active_client()
    if client is None:
        return
    if FAILED:  # a stalled cluster's tasks may never end: the token keeps them from writing
        seconds = min(seconds, 5.0)
    deadline = time.monotonic() + seconds
    with contextlib.suppress(Exception):  # a scheduler that is gone runs nothing of ours
        while time.monotonic() < deadline:
            if not any(client.processing().values()):
                return
            time.sleep(0.1)
        log.debug("tasks still running after %.0f s; removing the staging directory anyway", seconds)


def shared(value: Any) -> Any:
    """`value` as one graph node that every partition's task depends on.

    A delayed value, not a scattered future: the scheduler keeps it in the graph, so a worker
    killed mid-run loses nothing that cannot be recomputed (a scattered future would be gone).
    Only for values whose size does not grow with the corpus (parameters, the protected n-grams,
    the list of input files).
    """
    import dask

    return dask.delayed(value, pure=True, traverse=False)
