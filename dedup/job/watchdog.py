"""No silent waits: a thread that watches the cluster while the job waits on it.

Dask waits without a word when no worker can take a task: every worker paused because its memory
is above the pause threshold, no worker at all (all died, none started), or a scheduler that runs
none of the job's tasks. The watchdog polls the scheduler; when no task of the job has finished
and nothing new has started for `WARN_AFTER` seconds it says so on stderr, naming the cause Dask
reports and what to change, and when the cause blocks the job (workers paused for memory, no
workers, nothing running) for `limit` seconds it ends the run with that cause as its error. Tasks
that are merely long (running, never paused) are reported, never failed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

log = logging.getLogger("dedup")

WARN_AFTER = 30.0
"""Seconds without progress before the first message (and between later ones, doubling)."""
POLL = 2.0
"""Seconds between two looks at the scheduler."""
DEFAULT_LIMIT = 600.0
"""Seconds a blocked cluster is waited for before the run fails (`--stall-timeout`)."""


class Stalled(RuntimeError):
    """The cluster made no progress on the job for the time allowed; the message names the cause."""


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB" if n < 2**30 else f"{n / 2**30:,.1f} GiB"


class Watchdog:
    """Watches `client`'s cluster from a daemon thread while the job runs (`start`, `stop`); on a
    blocked cluster past `limit` seconds, records a `Stalled` error (`failure`) and interrupts the
    main thread with SIGINT, whose handler ends the run (the CLI reports the error, exit 1)."""

    def __init__(self, client: Any, limit: float = DEFAULT_LIMIT) -> None:
        self.client, self.limit = client, limit
        self.failure: Stalled | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dedup-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    # -- what the scheduler says ------------------------------------------------------------------
    def _look(self) -> tuple[bool, frozenset[Any], int, dict[str, Any]]:
        """(the job waits on something, keys being processed, futures finished, workers)."""
        states = list(self.client.futures.values())
        waiting = any(getattr(s, "status", "") == "pending" for s in states)
        finished = sum(getattr(s, "status", "") == "finished" for s in states)
        processing = frozenset(k for keys in self.client.processing().values() for k in keys)
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        return waiting, processing, finished, workers

    def cause(self, workers: dict[str, Any], processing: frozenset[Any], paused_seen: bool) -> tuple[str, bool]:
        """(what holds the job up, whether it blocks the job rather than slows it)."""
        import dask

        if not workers:
            return ("the scheduler has no workers (they died or were never started): start workers for it "
                    "(`dask worker ADDRESS`), or look at why they ended", True)
        paused = [w for w in workers.values() if w.get("status") == "paused"]
        fraction = dask.config.get("distributed.worker.memory.pause", 0.8)
        limits = sorted({int(w.get("memory_limit") or 0) for w in workers.values()})
        limit = ", ".join(_mb(x) for x in limits if x) or "none"
        if paused or paused_seen:
            share = f"{len(paused)} of {len(workers)}" if paused else "workers"
            return (f"{share} worker(s) paused: their memory is above the pause threshold "
                    f"({fraction:.0%} of their memory limit, {limit}). Give each worker more memory "
                    "(`dask worker --memory-limit`), or use more workers", True)
        if not processing:
            return (f"none of the job's tasks is running on the {len(workers)} worker(s): look at the workers' logs "
                    "(a task they cannot import or unpickle, e.g. another dedup version than this one's)", True)
        return f"{len(processing)} task(s) still running on {len(workers)} worker(s), none finished", False

    # -- the loop ---------------------------------------------------------------------------------
    def _watch(self) -> None:
        warn_after = min(WARN_AFTER, self.limit / 2)  # a stall timeout shorter than the warning still warns first
        last_change = time.monotonic()
        blocked_since: float | None = None
        before: tuple[frozenset[Any], int] | None = None
        warn_at = warn_after
        paused_seen = False
        while not self._stop.wait(POLL):
            try:
                waiting, processing, finished, workers = self._look()
            except Exception as exc:  # noqa: BLE001 - a scheduler that is gone fails the job by itself
                log.debug("watchdog: no answer from the scheduler (%s)", exc)
                continue
            now = time.monotonic()
            if not waiting or (processing, finished) != before:
                before = (processing, finished)
                last_change, blocked_since, warn_at, paused_seen = now, None, warn_after, False
                continue
            paused_seen |= any(w.get("status") == "paused" for w in workers.values())
            idle = now - last_change
            if idle < warn_after:
                continue
            why, blocks = self.cause(workers, processing, paused_seen)
            if blocks:
                blocked_since = blocked_since or last_change
                if now - blocked_since >= self.limit:
                    self.failure = Stalled(f"no progress for {now - blocked_since:.0f} s: {why}. (--stall-timeout "
                                           f"{self.limit:g} ended the run.)")
                    FAILED.append(self.failure)
                    os.kill(os.getpid(), signal.SIGINT)
                    return
            if idle >= warn_at:
                if blocks:
                    log.warning("no progress for %.0f s: %s; the run fails after %.0f s of this (--stall-timeout)",
                                idle, why, self.limit)
                else:
                    log.warning("no task has finished for %.0f s: %s", idle, why)
                warn_at = idle + (warn_after if blocks else max(warn_after, min(idle, 300.0)))


FAILED: list[Stalled] = []
"""The stall that ended this process's run, if one did: the CLI reports it instead of an interrupt."""
