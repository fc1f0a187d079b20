"""A stage of the job as one object that declares what it reads and gives, and the runner that holds it to that.

A stage (`Step`) names itself, says whether this job runs it (`wanted`, from the settings alone),
names the results of earlier stages it reads (`reads`; `needs` narrows them to this job's) and the
results it gives (`gives`), and computes (`run`, which returns its log line's words). `run_stages`
first walks the list without computing anything (`walk`): every result a wanted stage needs must be
given by a wanted stage before it, and every result has one giver. Then it runs each wanted stage on
a `View` of the job that lets it read only what it declared and set only what it gives, and after
the stage checks that it gave all of it.

A stage kept for a resumed run (`kept`) lists which of its results are kept and how (`values`,
`frames`, `tables`): one an interrupted run finished is read back (`restore`), any other is run
inside `timing.Timed` (timing, the log line, interrupt checks) and kept as it ends
(`dedup.job.checkpoints`). Its `before` and `after` run either way: what it needs set up, and what
it derives from its results however they came. Besides results, a stage sees the job's context:
its settings, the report (every count and warning, the one channel the log, the manifest and the
page read), the kept results (`kept`, for `Checkpoints.through`) and, in a run on files, the plan.
The list itself is `dedup.job.analysis.STAGES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from dedup.config import MAX_LINES_REMOVED, MIN_COPIES, MIN_LINE_WORDS, Params
from dedup.job.checkpoints import Checkpoints
from dedup.job.counts import Report
from dedup.job.timing import Timed
from dedup.partition import keyspace
from dedup.partition.spans import SpanRule

if TYPE_CHECKING:
    from dedup.core.decontam import ProtectedNgrams
    from dedup.job.plan import Plan
    from dedup.storage.index import IndexPart


class ContractError(RuntimeError):
    """A stage read or gave a result it does not declare, or read one no stage before it gave: a bug in dedup."""


@dataclass(frozen=True)
class Settings:
    """What the stages are asked to do; fixed for the run.

    `locate` maps a document key to (file, row) for messages; `details`: the page's data too (each
    clustered document's closest match, the largest clusters, the pairs nearest the threshold).
    `against`: earlier outputs' indexes, whose documents win their clusters; with `skip_existing`
    documents whose id one of them holds are skipped instead of refused. `index_out`: where this
    run's index files go. `spill_dir`: where client components leave their labels. `rows`: the
    input's rows when known (Parquet footers), so small routes skip a shuffle. `features_dir`: the
    features on disk there, else in worker memory. `survivor_order` ("max"/"min"): each cluster's root is the
    member with the largest (smallest) `--keep-by` value, carried as the `_keep` column.
    `max_contaminated`: the share of the input decontamination may remove before the run stops.
    `lines`: exact line dedup on the survivors (`dedup.job.lines`), a line's key of at least
    `min_line_words` words removed from all but its first occurrence once it occurs `min_copies`
    times; `max_lines_removed`: the share of the survivors' characters it may remove before the run
    stops. `contaminated`: what a document sharing a protected n-gram becomes ("drop", "tag", "cut",
    docs/contract.md §6e); `max_ngram_docs`: a protected n-gram found in more documents is ignored
    (the `rule` result, `dedup.job.common`). `min_cluster_size`: near duplicates are removed only
    from clusters of at least this many documents. `drop`: near duplicates are removed (else tagged
    and kept). `spans`: exact substring dedup on the survivors, after lines (`dedup.job.spans`), by this
    rule. `files`: a run on files (`run`): the input is read from them and OUTPUT's files are written
    (the stages `read`, `write` and the page's); `dry_run`: no shard is written."""

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
    survivor_order: str | None = None
    clusters: str = "connected"
    max_contaminated: float | None = None
    lines: bool = False
    min_copies: int = MIN_COPIES
    min_line_words: int = MIN_LINE_WORDS
    max_lines_removed: float = MAX_LINES_REMOVED
    drop: bool = True
    spans: SpanRule | None = None
    files: bool = False
    dry_run: bool = False
    contaminated: str = "drop"
    max_ngram_docs: int | None = None
    min_cluster_size: int = 2


@dataclass
class Job:
    """One run of the stages: its context (settings, report, kept results, and the plan of a run on
    files) and the results the stages gave so far, by name, with the stage that gave each."""

    settings: Settings
    report: Report
    kept: Checkpoints
    plan: Plan | None = None
    given: dict[str, Any] = field(default_factory=dict)
    givers: dict[str, str] = field(default_factory=dict)


CONTEXT = frozenset({"settings", "report", "kept", "plan"})
"""What every stage sees of the job besides the results it declares."""


class Step:
    """One stage: set `name`, `reads`, `gives`; override `run` (and `wanted`, `needs`, `before`, `after`,
    `restore` when the defaults do not fit)."""

    name: ClassVar[str]
    reads: ClassVar[tuple[str, ...]] = ()
    """The results of earlier stages this stage may read."""
    gives: ClassVar[tuple[str, ...]] = ()
    """The results this stage gives, each set by `before`, `run`/`restore` or `after`."""
    kept: ClassVar[bool] = True
    """Whether its results are kept as it finishes and read back by a resumed run (else it runs every time)."""
    timed: ClassVar[bool] = True
    """Whether it logs a line and its seconds (a stage that computes nothing does not)."""
    values: ClassVar[tuple[str, ...]] = ()
    """Results kept as JSON values (small counts and modes)."""
    frames: ClassVar[tuple[str, ...]] = ()
    """Results kept as Parquet parts, a file a partition (None is kept as absent)."""
    tables: ClassVar[tuple[str, ...]] = ()
    """Results kept as small pickled tables."""

    def wanted(self, s: Settings) -> bool:
        return True

    def needs(self, s: Settings) -> tuple[str, ...]:
        """Of `reads`, those this job's settings make it read: each must be given by a stage before it."""
        return self.reads

    def title(self, s: Settings) -> str:
        """Its name in the log and the report's seconds."""
        return self.name

    def run(self, job: View) -> str:
        """Compute, set this stage's results and the report's counts; the log line's words."""
        raise NotImplementedError

    def to_keep(self, job: View) -> dict[str, Any]:
        """What `Checkpoints.save` keeps of this stage."""
        return {"values": {v: getattr(job, v) for v in self.values},
                "frames": {f: getattr(job, f) for f in self.frames},
                "tables": {t: getattr(job, t) for t in self.tables}}

    def restore(self, job: View, values: dict[str, Any]) -> None:
        """Read back what an interrupted run kept of this stage."""
        for v in self.values:
            setattr(job, v, values[v])
        for f in self.frames:
            setattr(job, f, job.kept.maybe_frame(self.name, f))
        for t in self.tables:
            setattr(job, t, job.kept.table(self.name, t))

    def before(self, job: View) -> None:
        """What this stage needs of the job's settings, set up whether it runs or is read back."""

    def after(self, job: View) -> None:
        """What it derives from its results, however they came."""


def rule_needed(s: Settings) -> tuple[str, ...]:
    """`("rule",)` when the protected n-grams in force are a stage's result (`View.protected`)."""
    return ("rule",) if s.protected is not None and s.max_ngram_docs is not None else ()


class View:
    """What one stage sees of a job: the context, the results it reads (once given), and the results it
    gives (set once each). Anything else is a `ContractError`."""

    def __init__(self, job: Job, step: Step) -> None:
        object.__setattr__(self, "_job", job)
        object.__setattr__(self, "_step", step)
        object.__setattr__(self, "_gave", set())  # not a result's name: `written` is one

    def __getattr__(self, name: str) -> Any:
        job, step = self._job, self._step
        if name in CONTEXT:
            return getattr(job, name)
        if name not in step.reads and name not in step.gives:
            raise ContractError(f"stage {step.name!r} reads {name!r}, which it does not declare in `reads`")
        if name not in job.given:
            raise ContractError(f"stage {step.name!r} reads {name!r} before any stage gave it")
        return job.given[name]

    def __setattr__(self, name: str, value: Any) -> None:
        step = self._step
        if name not in step.gives:
            raise ContractError(f"stage {step.name!r} sets {name!r}, which it does not declare in `gives`")
        self._job.given[name] = value
        self._gave.add(name)

    @property
    def first_indexed(self) -> int:
        """The first key of the earlier outputs' documents (`--against`), read from the `layout` result."""
        layout = self.layout
        return layout.first_key if layout is not None else keyspace.NO_INDEX

    @property
    def protected(self) -> ProtectedNgrams | None:
        """The protected n-grams in force: the settings', or with `max_ngram_docs` the `rule` result
        (the common ones ignored), which a stage reading it declares."""
        s = self.settings
        return self.rule if s.protected is not None and s.max_ngram_docs is not None else s.protected

    @property
    def placement(self) -> keyspace.Placement:
        """Which partition holds each document key, read from the `layout` result."""
        layout = self.layout
        return layout.placement if layout is not None else keyspace.OWN


def walk(stages: Sequence[Step], s: Settings, given: Mapping[str, str] | None = None) -> list[Step]:
    """The stages this job runs, in order, checked without computing anything: every result each
    needs is given by a stage before it (or in `given`, result -> where from), and no result has two
    givers. Raises `ContractError`."""
    givers = dict(given or {})
    wanted = []
    for step in stages:
        if not step.wanted(s):
            continue
        if missing := [r for r in step.needs(s) if r not in givers]:
            raise ContractError(f"stage {step.name!r} reads {', '.join(missing)}, which no stage before it gives")
        if twice := [g for g in step.gives if g in givers]:
            raise ContractError(f"stage {step.name!r} gives {', '.join(twice)}, which {givers[twice[0]]!r} gave")
        givers.update(dict.fromkeys(step.gives, step.name))
        wanted.append(step)
    return wanted


def run_stages(job: Job, stages: Sequence[Step]) -> Job:
    """Each wanted stage in order (`walk`): read back if an interrupted run finished it, else run (and
    kept); each held to the results it declares."""
    wanted = walk(stages, job.settings, dict.fromkeys(job.given, "the caller"))
    job.kept.restore(job.report)  # the report as the last stage an interrupted run finished left it
    for step in wanted:
        view = View(job, step)
        step.before(view)
        if step.kept and (values := job.kept.reused(step.name)) is not None:
            step.restore(view, values)
        elif step.timed:
            with Timed(job.report, step.title(job.settings), job.kept if step.kept else None) as stage:
                stage.summary = step.run(view)
                if step.kept:
                    stage.keep(**step.to_keep(view))
        else:
            step.run(view)
        step.after(view)
        if missing := [g for g in step.gives if g not in view._gave]:
            raise ContractError(f"stage {step.name!r} did not give {', '.join(missing)}")
        job.givers.update(dict.fromkeys(step.gives, step.name))
    return job
