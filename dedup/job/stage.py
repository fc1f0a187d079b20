"""A stage of the job as one object, the job's settings and results as one context, and the runner.

A stage (`Step`) names itself, says whether this job runs it (`wanted`), computes (`run`: it reads
the results of the stages before it from the `Job` and sets its own, and returns its log line),
and lists the results a resumed run reads back (`values`, `frames`, `tables`: names of `Job`
fields). `run_stages` walks an ordered list of them and treats each the same way: a stage an
interrupted run finished is read back, any other is run inside `timing.Stage` (timing, the log
line, interrupt checks) and kept as it ends (`dedup.job.checkpoints`). Its `before` and `after` run
either way: what it needs set up, and what later stages derive from its results. The list itself is `dedup.job.analysis.STAGES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, cast

import dask.dataframe as dd
import pandas as pd

from dedup.config import Params
from dedup.job.checkpoints import Checkpoints
from dedup.job.counts import Report
from dedup.job.timing import Stage
from dedup.partition import keyspace

if TYPE_CHECKING:
    from dedup.core.decontam import ProtectedNgrams
    from dedup.storage.index import IndexPart
    from dedup.storage.index_layout import Layout


@dataclass(frozen=True)
class Settings:
    """What the stages are asked to do; fixed for the run.

    `locate` maps a document key to (file, row) for messages; `details`: the page's data too (each
    clustered document's closest match, the largest clusters, the pairs nearest the threshold).
    `against`: earlier outputs' indexes, whose documents win their clusters; with `skip_existing`
    documents whose id one of them holds are skipped instead of refused. `index_out`: where this
    run's index files go. `spill_dir`: where client components leave their labels. `rows`: the
    input's rows when known (Parquet footers), so small routes skip a shuffle. `features_dir`: the
    features on disk there, else in worker memory. `keep` ("max"/"min"): each cluster's root is the
    member with the largest (smallest) `--keep-by` value, carried as the `_keep` column.
    `max_contaminated`: the share of the input decontamination may remove before the run stops.
    `lines`: exact line dedup first (`dedup.job.lines`), a line's key removed from all but its first
    occurrence once it occurs `min_copies` times."""

    params: Params
    id_column: str = "id"
    text_column: str = "text"
    protected: ProtectedNgrams | None = None
    near: bool = True
    components: str = "auto"
    npartitions: int | None = None
    features_dir: str | None = None
    locate: Callable[[int], tuple[str, int]] | None = None
    null_id_files: Sequence[str] = ()
    details: bool = False
    against: Sequence[IndexPart] = ()
    skip_existing: bool = False
    index_out: str | None = None
    spill_dir: str | None = None
    rows: int | None = None
    cluster_size: bool = False
    keep: str | None = None
    clusters: str = "connected"
    max_contaminated: float | None = None
    lines: bool = False
    min_copies: int = 2


UNSET = cast(dd.DataFrame, None)
"""A frame a stage has not given yet: each stage reads only what the stages before it set."""


@dataclass
class Job:
    """One run of the stages: its settings, input, report and kept results, and what each stage
    gives the later ones (None until that stage has run or been read back)."""

    settings: Settings
    ddf: dd.DataFrame
    report: Report
    kept: Checkpoints
    decided: dd.DataFrame = UNSET
    """With line dedup: the repeated lines' keys settled, at each input partition holding them."""
    top_lines: pd.DataFrame | None = None
    line_counts: dict[str, Any] | None = None
    feat: dd.DataFrame = UNSET
    """Features (doc, _id, signature, text hashes, source, ...) per input partition, persisted."""
    examples: pd.DataFrame | None = None
    layout: Layout | None = None
    """Where the earlier outputs' documents sit in the key space, with `against`."""
    edges: dd.DataFrame = UNSET
    edge_rows: int | None = None
    idx_feat: dd.DataFrame | None = None
    """The earlier outputs' documents that share a bucket with this input, after this input's partitions."""
    feat_all: dd.DataFrame = UNSET
    """This input's features and those of `idx_feat`, in key order."""
    texts: dd.DataFrame = UNSET
    graph: dd.DataFrame = UNSET
    scored: dd.DataFrame = UNSET
    graph_edges: int = 0
    near_pairs: pd.DataFrame | None = None
    labels: dd.DataFrame = UNSET
    mode: str = ""
    placed: bool = False
    """Whether `labels` are at their documents' partitions already."""
    roots: dd.DataFrame | None = None
    summary: pd.DataFrame | None = None

    @property
    def first_indexed(self) -> int:
        return self.layout.first_key if self.layout is not None else keyspace.NO_INDEX

    @property
    def placement(self) -> keyspace.Placement:
        return self.layout.placement if self.layout is not None else keyspace.OWN


class Step:
    """One stage: override `run` (and `wanted`, `after`, `restore` when the defaults do not fit)."""

    name: ClassVar[str]
    values: ClassVar[tuple[str, ...]] = ()
    """`Job` fields kept as JSON values (small counts and modes)."""
    frames: ClassVar[tuple[str, ...]] = ()
    """`Job` fields kept as Parquet parts, a file a partition (None is kept as absent)."""
    tables: ClassVar[tuple[str, ...]] = ()
    """`Job` fields kept as small pickled tables."""

    def wanted(self, job: Job) -> bool:
        return True

    def run(self, job: Job) -> str:
        """Compute, set this stage's `Job` fields and the report's counts; the log line's words."""
        raise NotImplementedError

    def keep(self, job: Job) -> dict[str, Any]:
        """What `Checkpoints.save` keeps of this stage."""
        return {"values": {v: getattr(job, v) for v in self.values},
                "frames": {f: getattr(job, f) for f in self.frames},
                "tables": {t: getattr(job, t) for t in self.tables}}

    def restore(self, job: Job, values: dict[str, Any]) -> None:
        """Read back what an interrupted run kept of this stage."""
        for v in self.values:
            setattr(job, v, values[v])
        for f in self.frames:
            setattr(job, f, job.kept.maybe_frame(self.name, f))
        for t in self.tables:
            setattr(job, t, job.kept.table(self.name, t))

    def before(self, job: Job) -> None:
        """What this stage needs of the job's settings, set up whether it runs or is read back."""

    def after(self, job: Job) -> None:
        """What later stages read, derived from this stage's results however they came."""


def run_stages(job: Job, stages: Sequence[Step]) -> Job:
    """Each wanted stage in order: read back if an interrupted run finished it, else run and kept."""
    job.kept.restore(job.report)
    for step in stages:
        if not step.wanted(job):
            continue
        step.before(job)
        if (values := job.kept.reused(step.name)) is not None:
            step.restore(job, values)
        else:
            with Stage(job.report, step.name, job.kept) as stage:
                stage.summary = step.run(job)
                stage.keep(**step.keep(job))
        step.after(job)
    return job
