"""Where the features live: worker memory while they fit a share of it, the staging directory beyond.

The features (a signature, two text hashes, a key and an id a document) are the one thing the job
keeps for every document between stages. Kept in memory they cost nothing to read back; a
corpus whose features would crowd the workers' memory gets them on disk instead, by itself,
with one log line saying so (`--features-on-disk` and `--features-in-memory` decide instead).
"""

from __future__ import annotations

import logging

from dedup.job.compute import active_client

log = logging.getLogger("dedup")

FEATURES_MEMORY_SHARE = 0.25
"""The share of the workers' memory the features may take in memory: the rest is for the tasks,
the shuffles' buffers and the persisted edges."""

FEATURE_OVERHEAD_BYTES = 96
"""A document's features beyond its signature: key, text hashes, contamination columns, an id
(about 50 bytes of a string id) and pandas' share."""


def feature_bytes(rows: int, num_perm: int) -> int:
    """An estimate of the features' bytes in memory for `rows` documents."""
    return rows * (4 * num_perm + FEATURE_OVERHEAD_BYTES)


WORKER_WAIT_SECONDS = 60.0
"""How long the choice waits for a cluster's first worker, when it has none yet (workers started
beside the run, still importing): a choice made on no workers would keep any corpus in memory."""


def workers_memory() -> int | None:
    """The memory the features' holders may use: the sum of every worker's memory limit on a
    cluster (waiting for its first worker when it has none yet), the machine's memory for the
    threaded scheduler; None when a worker has no limit, or no worker came."""
    client = active_client()
    if client is None:
        import psutil

        return int(psutil.virtual_memory().total)
    workers = client.scheduler_info(n_workers=-1)["workers"]
    if not workers:
        log.info("the cluster has no worker yet: waiting up to %.0f s for one, whose memory decides where the "
                 "features go", WORKER_WAIT_SECONDS)
        try:
            client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
        except TimeoutError:
            return None
        workers = client.scheduler_info(n_workers=-1)["workers"]
    limits = [int(w.get("memory_limit") or 0) for w in workers.values()]
    if not limits or not all(limits):
        return None
    return sum(limits)


def features_on_disk(choice: bool | None, rows: int, num_perm: int) -> bool:
    """The user's choice when given; otherwise disk when the features' estimate is above
    `FEATURES_MEMORY_SHARE` of `workers_memory()`, logged in one line."""
    if choice is not None:
        return choice
    memory = workers_memory()
    need = feature_bytes(rows, num_perm)
    if memory is None or need <= FEATURES_MEMORY_SHARE * memory:
        return False
    log.info("features of %d documents (about %.1f GiB) are above a quarter of the workers' memory (%.1f GiB): "
             "they go to the staging directory on disk (--features-in-memory keeps them in memory)",
             rows, need / 2**30, memory / 2**30)
    return True
