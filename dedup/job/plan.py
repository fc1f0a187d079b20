"""Everything a job checks before any cluster starts, and the report it fills as it runs.

`prepare` reads no data and imports no Dask: parameters, paths, OUTPUT's lock, every input
footer and the unified schema, and the protected n-grams. So a usage error answers in about a
second, and a job that starts has inputs and an OUTPUT it can use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import pyarrow as pa

from dedup.config import CLUSTER_MODES, COMPONENT_MODES, MAX_CONTAMINATED, Params
from dedup.storage import reads
from dedup.storage import shards as shards_mod
from dedup.storage.safety import UsageError, check_output, expand_protected, input_places, read_manifest
from dedup.storage.staging import INTERRUPT_REQUESTED, Staging

if TYPE_CHECKING:
    from dedup.core.decontam import ProtectedNgrams
    from dedup.storage.index import IndexPart
    from dedup.storage.protected import PathLike

log = logging.getLogger("dedup")

@dataclass
class Report:
    """What a run found, for the manifest; counts add up."""

    input_rows: int = 0
    contaminated: int = 0
    unspaced: list[int] = field(default_factory=lambda: [0, 0])
    """Of the texts sampled before the run (word shingles only): those in scripts written without spaces, and all."""
    contaminated_by_file: dict[str, int] = field(default_factory=dict)
    contaminated_by_record: list[dict[str, Any]] = field(default_factory=list)
    contaminated_records: int = 0
    near_duplicates: int = 0
    clusters: int = 0
    largest_cluster: int = 0
    candidate_pairs: int = 0
    confirmed_pairs: int = 0
    same_text_pairs: int = 0
    approximated_buckets: int = 0
    largest_approximated_bucket: int = 0
    components: str = ""
    component_rounds: int = 0
    similarity_histogram: list[int] = field(default_factory=list)
    clusters_mode: str = "connected"
    survivor_rounds: int = 0
    survivor_scored: int = 0
    """This run's clustered documents scored against their connected component's survivor."""
    below_survivor: int = 0
    """This run's clustered documents below the threshold with their connected component's survivor."""
    survivor_histogram: list[int] = field(default_factory=list)
    """This run's clustered documents' similarity to their survivor (by the confirm rule), 50 bins of [0, 1]."""
    skipped_existing: int = 0
    indexed_documents: int = 0
    near_duplicates_of_indexed: int = 0
    near_duplicates_by_output: list[int] = field(default_factory=list)
    """`near_duplicates_of_indexed` by earlier output, in the order of the run's indexes (`Plan.against`)."""
    index_bytes: int = 0
    index_documents: int = 0
    index_near_duplicates: int = 0
    bucket_partitions: int = 0
    id_partitions: int = 0
    output_bytes: int = 0
    """The bytes of the shards written (what a dataset reader of OUTPUT reads; no index, no report)."""
    seconds: dict[str, float] = field(default_factory=dict)
    what_if: list[dict[str, Any]] = field(default_factory=list)
    """Documents that other thresholds would remove (`dedup.partition.what_if`), with the banding's
    chance of making a pair at each a candidate; empty when not computed."""
    emptied_by_lines: int = 0
    """Documents line dedup left without a word (dropped, `empty_after_lines`)."""
    lines: dict[str, Any] = field(default_factory=dict)
    """With line dedup: lines and characters removed, documents changed and left without a word, and
    the histogram of the share of a changed document's characters removed (`dedup.job.lines`)."""
    top_lines: list[dict[str, Any]] = field(default_factory=list)
    """With line dedup: the most repeated lines, their counts and first occurrences (and texts)."""
    notes: list[str] = field(default_factory=list)
    """Warnings found before or outside the stages (each logged as found): an eval file that protects
    nothing, an earlier index whose files cannot be verified, an input of no files. The manifest's
    `warnings` lists them first."""


STAGE_LINE = "%s: %s (%.1f s)"
"""The line each stage logs as it ends: its name, what it did, its seconds (`Stage`)."""


class Stage:
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


@dataclass
class Plan:
    """A validated job: inputs read to their footers, OUTPUT checked and locked, protected n-grams built.

    Made by `prepare` before any cluster starts, so every usage error surfaces in seconds;
    `execute` runs it on the active client. `close` releases OUTPUT's lock (execute does).
    """

    input: str
    output: str
    shards: list[shards_mod.Shard]
    schema: pa.Schema
    groups: list[list[shards_mod.Piece]]
    protected: ProtectedNgrams | None
    params: Params
    near: bool
    drop: bool
    id_column: str
    text_column: str
    components: str
    retries: int
    features_on_disk: bool | None
    dry_run: bool
    write_report: bool
    staging: Staging
    report: Report
    start: float
    against: list[IndexPart] = field(default_factory=list)
    skip_existing: bool = False
    write_index: bool = True
    cluster_size: bool = False
    keep_by: tuple[str, str] | None = None
    """`--keep-by`: (column, "max" or "min")."""
    clusters: str = "connected"
    """`--clusters`: "connected" or "centred" (`dedup.config.CLUSTER_MODES`)."""
    max_contaminated: float = MAX_CONTAMINATED
    """`--max-contaminated`: the share of the input decontamination may remove before the run stops."""
    kept: Any = None
    """The stage results kept as the job goes (`dedup.job.checkpoints.Checkpoints`, made when it starts)."""
    hive: pa.Schema = field(default_factory=lambda: pa.schema([]))
    """The Hive keys of the input's directories that are not columns of its files (`shards.hive_schema`):
    columns `--keep-by` can name, never written into OUTPUT's shards."""
    lines: bool = False
    """Exact line dedup first (`dedup lines`, `run --lines`)."""
    min_copies: int = 2
    """`--min-copies`: the occurrences that make a line's key repeated."""

    def column_type(self, name: str) -> pa.DataType:
        """The type of an input column: a column of the files, or a Hive key of their directories."""
        return (self.schema if name in self.schema.names else self.hive).field(name).type

    def close(self) -> None:
        self.staging.close()


def _keep_by(spec: str, schema: pa.Schema, near: bool) -> tuple[str, str]:
    """`--keep-by COLUMN[:max|:min]` checked against the input's columns (its files' and the Hive keys
    of their directories, `shards.hive_schema`): (column, "max" or "min")."""
    column, _, way = spec.rpartition(":") if spec.endswith((":max", ":min")) else (spec, ":", "max")
    if not near:
        raise UsageError("--keep-by chooses which copy of a near duplicate survives; it needs `run` or `near`.")
    if column not in schema.names:
        raise UsageError(f"--keep-by: the input has no column {column!r}; columns found: {schema.names}.")
    t = schema.field(column).type
    if not reads.orderable(t):
        raise UsageError(f"--keep-by: column {column!r} has type {t}, which has no order; give a column of numbers, "
                         "strings, booleans, dates or timestamps.")
    return column, way


def _check_positions(found: Sequence[shards_mod.Shard], parts: Sequence[IndexPart]) -> None:
    """Without an id column a document's id is FILE#ROW: refuse, before any work, input files named as
    files of an earlier output (given with --against, or one it builds on) whose ids were positions too."""
    from dedup.storage import index

    names = {s.name for s in found}
    for part in parts:
        fs, root = index.fsspec_root(part.output)
        manifest = read_manifest(fs, root) or {}
        if manifest.get("id_column") != shards_mod.POSITION_ID:
            continue
        same = sorted(names & index.shard_names(part))
        if same:
            raise UsageError(
                f"--against {part.shown}: this input has no id column, so a document's id is FILE#ROW, and "
                f"{len(same)} of its file name(s) are those of that output ({', '.join(same[:3])}"
                f"{', ...' if len(same) > 3 else ''}): their ids would repeat. Put this run's files under a "
                "directory of their own inside INPUT (e.g. INPUT/2026-12/part-0.parquet), or name a column of ids "
                "with --id-column.")


UNSPACED_WARN_SHARE = 0.1
"""Under word shingles, a warning when at least this share of a sample of texts (`reads.sample_texts`)
is of scripts written without spaces (`dedup.core.text.unspaced`): a mixed corpus too."""


def warn(report: Report, text: str) -> None:
    """Log a warning and keep it for the manifest's `warnings` and the page (`Report.notes`)."""
    log.warning("%s", text)
    report.notes.append(text)


def banding(params: Params) -> dict[str, Any]:
    """The banding and how often it makes a pair at the threshold a candidate, beside the banding
    `dedup tune` recommends for that threshold (`recall_banding`; what `dedup run` uses unless
    --num-bands and --rows-per-band are given): the manifest's `banding`."""
    from dedup.core.lsh import probability, recall_banding

    t = params.threshold
    out: dict[str, Any] = {"num_bands": params.num_bands, "rows_per_band": params.rows_per_band,
                           "candidate_at_threshold": round(float(probability(t, params.num_bands, params.rows_per_band)), 4)}
    if 0.0 < t <= 1.0:
        b, r = recall_banding(t, params.num_perm)
        out["recommended"] = {"num_bands": b, "rows_per_band": r,
                              "candidate_at_threshold": round(float(probability(t, b, r)), 4)}
    return out


def banding_warning(params: Params) -> str | None:
    """The warning for a banding that makes a pair at the threshold a candidate less often than
    `dedup tune`'s rule asks (`RECALL_AT_THRESHOLD`): near duplicates close to it are missed."""
    from dedup.core.lsh import RECALL_AT_THRESHOLD

    b = banding(params)
    best = b.get("recommended")
    if best is None or b["candidate_at_threshold"] >= RECALL_AT_THRESHOLD:
        return None
    t = params.threshold
    return (f"The banding {b['num_bands']} x {b['rows_per_band']} makes a pair at the threshold {t} a candidate only "
            f"{b['candidate_at_threshold']:.0%} of the time, so near duplicates close to it are missed; "
            f"{best['num_bands']} x {best['rows_per_band']} (`dedup tune --threshold {t}`) finds "
            f"{best['candidate_at_threshold']:.0%}: leave out --num-bands and --rows-per-band to use it.")


def unspaced_warning(hits: int, sampled: int) -> str | None:
    """The warning for a corpus of which a meaningful share is Chinese, Japanese, Thai or the like,
    under word shingles (`hits` of `sampled` texts)."""
    if not sampled or hits < UNSPACED_WARN_SHARE * sampled:
        return None
    return (f"{hits} of {sampled} sampled texts ({100 * hits / sampled:.0f}%) are mostly in scripts written without "
            "spaces (Chinese, Japanese, Thai, ...): word shingles see each run of them as one word and miss their near "
            "duplicates; use --shingle-unit char (or run those texts apart from the rest with it)")


def _log_banding(params: Params) -> None:
    """One line on the banding: the one the threshold's rule gives, or a warning for one given that
    misses pairs at the threshold (`banding_warning`, also in the manifest and on the page)."""
    if warning := banding_warning(params):
        log.warning("%s", warning)
        return
    b = banding(params)
    best = b.get("recommended") or {}
    rule = (best.get("num_bands"), best.get("rows_per_band")) == (b["num_bands"], b["rows_per_band"])
    log.info("banding %d x %d: a pair at the threshold %s is a candidate %.1f%% of the time%s", b["num_bands"],
             b["rows_per_band"], params.threshold, 100 * b["candidate_at_threshold"],
             " (the banding `dedup tune` recommends for it)" if rule else "")


def _warn_unspaced(shards: Sequence[shards_mod.Shard], text_column: str, report: Report) -> None:
    """Sample the corpus; one line when a meaningful share of it is unspaced text under word shingles
    (also in the manifest's warnings and on the page, from `report.unspaced`)."""
    from dedup.core.text import unspaced

    sample = reads.sample_texts(shards, text_column)
    report.unspaced = [sum(map(unspaced, sample)), len(sample)]
    if warning := unspaced_warning(*report.unspaced):
        log.warning("%s", warning)


def fingerprint(shards: Sequence[shards_mod.Shard], params: Params, options: dict[str, Any],
                protected: ProtectedNgrams | None, against: Sequence[IndexPart]) -> dict[str, Any]:
    """What a run's results depend on: dedup's version and code, the parameters and options, the protected
    text (`ProtectedNgrams.digest`), the earlier indexes, and each input file's version (its file
    system's identity of it, `stamps.file_versions`, and its footer's hash). Two runs with equal
    fingerprints compute the same stage results."""
    from dedup.job.versions import code_digest, versions
    from dedup.storage.stamps import file_versions

    return {"version": versions(), "code": code_digest(), "parameters": params.as_dict(), "options": options,
            "protected": protected.digest() if protected is not None else None,
            "against": [p.uid for p in against],
            "input": {s.name: {**v, "footer": s.footer} for s, v in zip(shards, file_versions([s.path for s in shards]))}}


@dataclass(frozen=True)
class Options:
    """What a job is asked to do (`dedup.job.pipeline.run`'s keyword options, and the CLI's flags)."""

    protected: Sequence[PathLike] = ()
    near: bool = True
    id_column: str | None = None
    text_column: str = "text"
    params: Params | None = None
    drop: bool = True
    overwrite: bool = False
    components: str = "auto"
    retries: int = 2
    features_on_disk: bool | None = None
    partition_rows: int = shards_mod.PARTITION_ROWS
    dry_run: bool = False
    write_report: bool = True
    against: Sequence[str] = ()
    """Earlier OUTPUTs whose indexes this run's documents are compared with (near-dedup only)."""
    skip_existing: bool = False
    write_index: bool = True
    restart: bool = False
    cluster_size: bool = False
    keep_by: str | None = None
    clusters: str = "connected"
    max_contaminated: float = MAX_CONTAMINATED
    lines: bool = False
    """Exact line dedup before everything else (docs/contract.md, section 6b)."""
    min_copies: int = 2


def prepare(input: str, output: str, options: Options | None = None) -> Plan:
    """Check everything that can be checked without a cluster; raise `UsageError` (or ValueError) if not right.

    `options.id_column` None: the `id` column, or without one each document's position (`shards.position_id`).
    An interrupted run on the same OUTPUT with the same fingerprint (`fingerprint`) is resumed from
    the stages it finished (`dedup.job.checkpoints`), unless `options.restart`."""
    o = options or Options()
    start = time.perf_counter()
    params = o.params or Params()
    report = Report()
    if o.components not in COMPONENT_MODES:
        raise UsageError(f"The 'components' parameter must be one of {COMPONENT_MODES}. Got {o.components!r} instead.")
    if o.clusters not in CLUSTER_MODES:
        raise UsageError(f"--clusters must be one of {', '.join(CLUSTER_MODES)}. Got {o.clusters!r} instead.")
    if o.clusters != "connected" and not o.near:
        raise UsageError("--clusters says how near duplicates are clustered; it needs `run` or `near`.")
    if isinstance(o.max_contaminated, bool) or not isinstance(o.max_contaminated, (int, float)) or \
            not 0 <= o.max_contaminated <= 1:
        raise UsageError(f"--max-contaminated is a share of the input, from 0 to 1 (1 turns the guard off). Got "
                         f"{o.max_contaminated!r} instead.")
    if isinstance(o.min_copies, bool) or not isinstance(o.min_copies, int) or o.min_copies < 2:
        raise UsageError(f"--min-copies is how many occurrences make a line repeated: an integer of at least 2. Got "
                         f"{o.min_copies!r} instead.")
    if o.lines and o.against:
        raise UsageError("--against with line dedup is not supported yet: an earlier output's index records its "
                         "documents, not their lines, so lines repeated across releases could not be found. Run "
                         "`dedup lines` on the new crawl first, then `dedup near --against` on its output.")
    if isinstance(o.partition_rows, bool) or not isinstance(o.partition_rows, int) or o.partition_rows < 1:
        raise UsageError(f"The 'partition_rows' parameter must be an integer >= 1. Got {o.partition_rows!r} instead.")
    files = shards_mod.discover(input)
    prot_paths = expand_protected([str(p) for p in o.protected])
    if o.against and not o.near:
        raise UsageError("--against compares documents with an earlier output's near-dedup index; it needs `run` or "
                         "`near`, not `decontaminate`.")
    if o.skip_existing and not o.against:
        raise UsageError("--skip-existing skips documents already in an --against output; give --against too.")
    check_output(output, inputs=input_places(input, files) + [a for a in o.against if "://" not in a],
                 protected=prot_paths, overwrite=o.overwrite, dry_run=o.dry_run)
    found = shards_mod.read_footers(files)
    schema = shards_mod.unify(found)
    id_column = o.id_column
    if id_column is None:  # not named: the `id` column, else each document's position
        id_column = "id" if "id" in schema.names or not found else shards_mod.POSITION_ID
        if id_column == shards_mod.POSITION_ID:
            log.info("the input has no 'id' column: each document's id is its position, FILE#ROW (e.g. %s); "
                     "--id-column names a column of ids", shards_mod.position_id(found[0].name, 0))
    hive = shards_mod.hive_schema(found, schema)
    if id_column in hive.names:
        raise UsageError(f"--id-column {id_column}: {id_column!r} is a Hive key of the input's directories "
                         f"({id_column}=...), shared by every document below each one, so it cannot tell documents "
                         "apart; name a column of the files.")
    shards_mod.check_columns(found, schema, id_column, o.text_column)
    if o.cluster_size and not o.near:
        raise UsageError("--cluster-size counts near duplicates; it needs `run` or `near`, not `decontaminate`.")
    if o.cluster_size and shards_mod.SIZE_COLUMN in schema.names:
        raise UsageError(f"The input already has a {shards_mod.SIZE_COLUMN!r} column; rename or drop it first.")
    keep = _keep_by(o.keep_by, pa.schema([*schema, *hive]), o.near) if o.keep_by else None
    if keep is not None and keep[0] in shards_mod.shadowed_keys(found, schema):
        log.info("--keep-by %s: the files' own column %r is read; the directories' %s=... values, a Hive key of the "
                 "same name, are not (as pyarrow and pandas read them)", keep[0], keep[0], keep[0])
    if o.near and params.shingle_unit == "word":
        _warn_unspaced(found, o.text_column, report)
    parts: list[IndexPart] = []
    if o.against:
        from dedup.storage import index

        notes: list[str] = []
        parts = index.load(list(o.against), params, shards_mod.id_type_of(schema, id_column), notes)
        for note in notes:
            warn(report, note)
        if id_column == shards_mod.POSITION_ID:
            _check_positions(found, parts)
        if o.clusters == "centred" and (old := [p for p in parts if p.format < index.ROOTS_LOCATED]):
            raise UsageError(f"--clusters centred --against: the index of {old[0].shown} (format {old[0].format}, an "
                             "older dedup) does not record where its near duplicates' roots are, so a new document "
                             "cannot be scored against the document kept in their place. Run that output again with "
                             "this dedup, or use --clusters connected.")
    prot = None
    if prot_paths:
        from dedup.storage.protected import read_protected

        with Stage(report, "protected") as stage:
            prot = read_protected(prot_paths, params.ngram_size)
            report.contaminated_by_file = dict.fromkeys(prot.files, 0)
            for name, count in zip(prot.files, prot.gram_counts()):
                if count == 0:
                    warn(report, f"protected file {name} holds no {params.ngram_size}-gram: it protects nothing")
            stage.summary = f"{len(prot)} distinct {params.ngram_size}-grams from {len(prot.files)} file(s)"
    chosen = {"input": input, "near": o.near, "drop": o.drop, "id_column": id_column, "text_column": o.text_column,
               "components": o.components, "partition_rows": o.partition_rows, "dry_run": o.dry_run,
               "write_report": o.write_report, "skip_existing": o.skip_existing, "write_index": o.write_index,
               "cluster_size": o.cluster_size, "keep_by": o.keep_by, "clusters": o.clusters}
    if o.lines:  # as before for a run without them: an interrupted one resumes
        chosen.update(lines=True, min_copies=o.min_copies)
    staging = Staging(output, fingerprint(found, params, chosen, prot, parts), restart=o.restart)
    groups = shards_mod.partitions(found, rows=o.partition_rows)
    if big := shards_mod.oversized_groups(found, rows=o.partition_rows):
        log.info("%d input file(s) hold a row group above the partition bound (%s: %d rows): each is read in row "
                 "ranges that decode it from its start; row groups of at most %d rows read faster", len(big),
                 big[0][0].path, big[0][1], o.partition_rows)
    if o.near:  # once everything is checked: a refused run says one line
        _log_banding(params)
    return Plan(input, output, found, schema, groups, prot, params, o.near, o.drop, id_column, o.text_column, o.components,
                o.retries, o.features_on_disk, o.dry_run, o.write_report, staging, report, start, parts, o.skip_existing,
                o.write_index, cluster_size=o.cluster_size, keep_by=keep, clusters=o.clusters,
                max_contaminated=float(o.max_contaminated) + 0.0, hive=hive, lines=o.lines, min_copies=o.min_copies)


