"""Connecting to a Dask cluster: an address, a scheduler file, or a local cluster sized to the machine."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("dedup")


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, scheduler_file: str | None = None,
                n_workers: int | None = None) -> Iterator[Any]:
    """A distributed Client for the job; a local process cluster when neither address nor file is given."""
    from distributed import Client, LocalCluster

    if scheduler and scheduler_file:
        raise ValueError("Give either --scheduler or --scheduler-file, not both.")
    if not scheduler and not scheduler_file and os.environ.get("DASK_SCHEDULER_ADDRESS"):
        scheduler = os.environ["DASK_SCHEDULER_ADDRESS"]  # set by the dask-kubernetes operator in a DaskJob
    if scheduler or scheduler_file:
        client = Client(scheduler, scheduler_file=scheduler_file, timeout="30s")
        try:
            log.info("connected to %s (%d workers); dashboard %s", client.scheduler.address,
                     len(client.scheduler_info(n_workers=-1)["workers"]), client.dashboard_link)
            yield client
        finally:
            client.close()
        return
    workers = n_workers or max(1, os.cpu_count() or 1)
    quiet = logging.WARNING if log.isEnabledFor(logging.DEBUG) else logging.ERROR
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=quiet) as cluster, \
            Client(cluster) as client:
        log.info("local cluster: %d worker processes; dashboard %s", workers, client.dashboard_link)
        yield client


def show_progress(futures: Any) -> None:
    """A text progress bar on stderr while `futures` run, when stderr is a terminal."""
    if not sys.stderr.isatty():
        return
    from distributed import progress

    with contextlib.redirect_stdout(sys.stderr):
        progress(futures)
        print(file=sys.stderr)
