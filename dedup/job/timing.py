"""Each stage timed into the report, logged in one line, and kept for a resumed run as it ends (`Timed`)."""

from __future__ import annotations

import logging
import time
from typing import Any, Self

from dedup.job.counts import Report
from dedup.storage.staging import INTERRUPT_REQUESTED

log = logging.getLogger("dedup")


STAGE_LINE = "%s: %s (%.1f s)"
"""The line each stage logs as it ends: its name, what it did, its seconds (`Timed`)."""


class Timed:
    """Times one stage into the report and logs one line for it: what it did, and its seconds. With
    `kept` (`dedup.job.checkpoints.Checkpoints`), what the stage gave to `keep` is saved as it ends,
    before its line: a run killed after the line resumes after the stage."""

    def __init__(self, report: Report, name: str, kept: Any = None) -> None:
        self.report, self.name, self.kept = report, name, kept
        self.summary = ""
        self._keep: dict[str, Any] | None = None

    def keep(self, values: dict[str, Any] | None = None, **what: Any) -> None:
        """What to save of this stage when it ends (`Checkpoints.save`'s arguments)."""
        self._keep = {"values": values, **what}

    def __enter__(self) -> Self:
        from dedup.job.compute import PROGRESS_LABEL

        _honour_interrupt()
        self.start = time.perf_counter()
        rows = f" ({self.report.input_rows:,} rows)" if self.report.input_rows else ""
        self._label = PROGRESS_LABEL.set(self.name + rows)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        from dedup.job.compute import PROGRESS_LABEL

        PROGRESS_LABEL.reset(self._label)
        if exc_type is None and self.kept is not None and self._keep is not None:
            secs = time.perf_counter() - self.start  # with the seconds so far: the saved report has them
            self.report.seconds[self.name] = round(self.report.seconds.get(self.name, 0.0) + secs, 3)
            self.kept.save(self.name, self.report, **self._keep)
            self.report.seconds[self.name] = round(self.report.seconds[self.name] - secs, 3)
        secs = time.perf_counter() - self.start
        self.report.seconds[self.name] = round(self.report.seconds.get(self.name, 0.0) + secs, 3)
        if exc_type is None:
            log.info(STAGE_LINE, self.name, self.summary or "done", secs)
            _honour_interrupt()


def _honour_interrupt() -> None:
    """Raise the interrupt the CLI received if its KeyboardInterrupt was swallowed on the way (once in
    CI a SIGINT sent after the features line ended the run only at the commit): so it ends the run
    at the next stage's start or end."""
    if INTERRUPT_REQUESTED.is_set():
        raise KeyboardInterrupt
