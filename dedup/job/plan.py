"""Everything a job checks before any cluster starts (`prepare`), and what it is asked to do (`Options`).

`prepare` reads no data and imports no Dask: parameters, paths, OUTPUT's lock, every input
footer and the unified schema, and the protected n-grams. So a usage error answers in about a
second, and a job that starts has inputs and an OUTPUT it can use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from dedup.config import (
    CLUSTER_MODES,
    COMPONENT_MODES,
    CONTAMINATION_ACTIONS,
    MAX_CONTAMINATED,
    MAX_LINES_REMOVED,
    MIN_COPIES,
    MIN_LINE_WORDS,
    PARTITION_ROWS,
    SPAN_PARTITION_ROWS,
    Params,
)
from dedup.job.counts import Report
from dedup.job.fingerprint import fingerprint
from dedup.job.notices import log_banding, warn, warn_unspaced
from dedup.job.timing import Timed
from dedup.partition.spans import KEEP_MODES, SPAN_TOKENS
from dedup.storage import grouping, reads
from dedup.storage import shards as shards_mod
from dedup.storage.safety import UsageError, check_output, expand_protected, input_places, read_manifest
from dedup.storage.staging import Staging

if TYPE_CHECKING:
    from dedup.core.decontam import ProtectedNgrams
    from dedup.storage.index import IndexPart
    from dedup.storage.protected import PathLike

log = logging.getLogger("dedup")

@dataclass(frozen=True)
class Plan:
    """A validated job: what it is asked (`options`), its inputs read to their footers, OUTPUT checked
    and locked, protected n-grams built, earlier outputs' indexes loaded.

    Made by `prepare` before any cluster starts, so every usage error surfaces in seconds;
    `execute` runs it on the active client. `close` releases OUTPUT's lock (execute does).
    """

    input: str
    output: str
    options: Options
    shards: list[shards_mod.Shard]
    schema: pa.Schema
    groups: list[list[shards_mod.Piece]]
    protected: ProtectedNgrams | None
    params: Params
    id_column: str
    """`options.id_column`, or when it is None the column `id`, else each document's position."""
    staging: Staging
    report: Report
    start: float
    against: list[IndexPart] = field(default_factory=list)
    """The indexes of `options.against`, loaded."""
    keep_by: tuple[str, str] | None = None
    """`--keep-by` checked against the input: (column, "max" or "min"); None without it or near dedup."""
    within: str | None = None
    """`--within`'s column (or Hive key), checked against the input; None without it."""
    hive: pa.Schema = field(default_factory=lambda: pa.schema([]))
    """The Hive keys of the input's directories that are not columns of its files (`shards.hive_schema`):
    columns `--keep-by` can name, never written into OUTPUT's shards."""

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


def _within(column: str, schema: pa.Schema) -> None:
    """`--within COLUMN` checked against the input's columns and Hive keys: there, and of a type whose
    values have a text form."""
    if column not in schema.names:
        raise UsageError(f"--within: the input has no column {column!r} (nor a Hive key {column}=... in its "
                         f"directories); columns found: {schema.names}.")
    t = schema.field(column).type
    if not reads.scopeable(t):
        raise UsageError(f"--within: column {column!r} has type {t}; give a column of strings, numbers, booleans, "
                         "dates or timestamps (a crawl, a language, a source).")


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


@dataclass(frozen=True)
class Options:
    """What a job is asked to do: `dedup.job.pipeline.run`'s keyword options and the CLI's flags, each
    default written here once. Checked as made (`UsageError`, naming the option and what it takes);
    what needs the input or OUTPUT is checked by `prepare`.

    `protected`: eval files whose 13-grams no kept document may share. `near`: near dedup (else only
    decontamination). `drop`: near duplicates removed (else only tagged). `components`: where the
    confirmed graph is joined ("auto", "client", "distributed"). `features_on_disk`: the features kept
    on disk (True), in worker memory (False), or as memory allows (None, `dedup.job.memory`).
    `partition_rows`: how many rows of small consecutive shards are read as one partition (None:
    `PARTITION_ROWS`, with span dedup `SPAN_PARTITION_ROWS`). `dry_run`:
    OUTPUT gets only the manifest and the report. `write_report`: `_report/` (the page and the removed
    list). `against`: earlier OUTPUTs whose indexes this run's documents are compared with;
    `skip_existing`: documents whose id one holds are skipped, not refused. `write_index`: `_index/`
    for a later run's `against`. `restart`: an interrupted run's kept stages are not reused.
    `cluster_size`: `minhash_cluster_size` on every row. `keep_by`: "COLUMN[:max|:min]", which member of
    a cluster survives. `clusters`: "connected" or "centred". `max_contaminated`: the share of the
    input decontamination may remove before the run stops (1: no guard). `lines`: exact line dedup
    (docs/contract.md, section 6b) on the survivors; `min_copies`: the occurrences that make a line
    repeated; `min_line_words`: the words a line needs to be removed for its own key;
    `max_lines_removed`: the share of the survivors' characters it may remove before the run stops.
    `spans`: exact substring dedup (section 6c) on the survivors, after lines: every repeated run of
    `span_tokens` tokens or more, its first occurrence kept (`spans_keep` "first") or not ("none").
    `contaminated`: what a document sharing a protected n-gram becomes: "drop", "tag" (kept, with
    `contaminated_by`), "cut" (the leaked passages cut, section 6e); `max_ngram_docs`: a protected
    n-gram found in more documents than this is ignored as common text (None: none is). `within`: a
    column (or a Hive key of the input's directories) whose values scope near dedup: documents whose
    values differ are never in one cluster (section 6d). `min_cluster_size`: near duplicates are removed
    only from clusters of at least this many documents; smaller ones are kept whole, tagged."""

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
    partition_rows: int | None = None
    dry_run: bool = False
    write_report: bool = True
    against: Sequence[str] = ()
    skip_existing: bool = False
    write_index: bool = True
    restart: bool = False
    cluster_size: bool = False
    keep_by: str | None = None
    clusters: str = "connected"
    max_contaminated: float = MAX_CONTAMINATED
    lines: bool = False
    min_copies: int = MIN_COPIES
    min_line_words: int = MIN_LINE_WORDS
    max_lines_removed: float = MAX_LINES_REMOVED
    spans: bool = False
    span_tokens: int = SPAN_TOKENS
    spans_keep: str = "first"
    contaminated: str = "drop"
    max_ngram_docs: int | None = None
    within: str | None = None
    min_cluster_size: int = 2

    def __post_init__(self) -> None:
        if self.components not in COMPONENT_MODES:
            raise UsageError(f"The 'components' parameter must be one of {COMPONENT_MODES}. Got {self.components!r} "
                             "instead.")
        if self.clusters not in CLUSTER_MODES:
            raise UsageError(f"--clusters must be one of {', '.join(CLUSTER_MODES)}. Got {self.clusters!r} instead.")
        if self.clusters != "connected" and not self.near:
            raise UsageError("--clusters says how near duplicates are clustered; it needs `run` or `near`.")
        m = self.max_contaminated
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 1:
            raise UsageError(f"--max-contaminated is a share of the input, from 0 to 1 (1 turns the guard off). Got "
                             f"{m!r} instead.")
        object.__setattr__(self, "max_contaminated", float(m) + 0.0)  # -0 is 0
        if isinstance(self.min_copies, bool) or not isinstance(self.min_copies, int) or self.min_copies < 2:
            raise UsageError(f"--min-copies is how many occurrences make a line repeated: an integer of at least 2. "
                             f"Got {self.min_copies!r} instead.")
        w = self.min_line_words
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise UsageError(f"--min-line-words is how many words a line needs to be removed: an integer of at "
                             f"least 1. Got {w!r} instead.")
        m = self.max_lines_removed
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 1:
            raise UsageError(f"--max-lines-removed is a share of the surviving documents' characters, from 0 to 1 "
                             f"(1 turns the guard off). Got {m!r} instead.")
        object.__setattr__(self, "max_lines_removed", float(m) + 0.0)
        t = self.span_tokens
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise UsageError(f"--span-tokens is the tokens of the shortest repeated substring cut: an integer of at "
                             f"least 1. Got {t!r} instead.")
        if self.spans_keep not in KEEP_MODES:
            raise UsageError(f"--spans-keep must be one of {', '.join(KEEP_MODES)}. Got {self.spans_keep!r} instead.")
        if self.spans and self.against:
            raise UsageError("--against with span dedup is not supported yet: an earlier output's index records its "
                             "documents, not their spans. Run `dedup spans` on the new crawl first, then `dedup near "
                             "--against` on its output.")
        if self.lines and self.against:
            raise UsageError("--against with line dedup is not supported yet: an earlier output's index records its "
                             "documents, not their lines, so lines repeated across releases could not be found. Run "
                             "`dedup lines` on the new crawl first, then `dedup near --against` on its output.")
        if self.contaminated not in CONTAMINATION_ACTIONS:
            raise UsageError(f"--contaminated must be one of {', '.join(CONTAMINATION_ACTIONS)}. Got "
                             f"{self.contaminated!r} instead.")
        k = self.max_ngram_docs
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise UsageError(f"--max-ngram-docs is how many documents make a protected n-gram common text: an integer "
                             f"of at least 1. Got {k!r} instead.")
        if (self.contaminated != "drop" or k is not None) and not self.protected:
            flag = "--contaminated" if self.contaminated != "drop" else "--max-ngram-docs"
            raise UsageError(f"{flag} says how protected n-grams are handled; give --protected FILE too.")
        k = self.min_cluster_size
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise UsageError(f"--min-cluster-size is the documents a cluster needs for its near duplicates to be "
                             f"removed: an integer of at least 2. Got {k!r} instead.")
        if k > 2 and not self.near:
            raise UsageError("--min-cluster-size says which near duplicates are removed; it needs `run` or `near`.")
        if self.within is not None:
            if not self.near:
                raise UsageError("--within scopes near dedup; it needs `run` or `near`.")
            for flag, on in (("--against", self.against), ("--lines", self.lines), ("--spans", self.spans)):
                if on:
                    raise UsageError(f"--within with {flag} is not supported yet: each value's documents must get what "
                                     f"a run over them alone gives, and {flag} reads across values. Run without "
                                     f"{flag}, or once per value.")
        p = self.partition_rows
        if p is None:
            object.__setattr__(self, "partition_rows", SPAN_PARTITION_ROWS if self.spans else PARTITION_ROWS)
        elif isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise UsageError(f"The 'partition_rows' parameter must be an integer >= 1. Got {p!r} instead.")
        if self.against and not self.near:
            raise UsageError("--against compares documents with an earlier output's near-dedup index; it needs `run` "
                             "or `near`, not `decontaminate`.")
        if self.skip_existing and not self.against:
            raise UsageError("--skip-existing skips documents already in an --against output; give --against too.")
        if self.cluster_size and not self.near:
            raise UsageError("--cluster-size counts near duplicates; it needs `run` or `near`, not `decontaminate`.")


def writes_index(o: Options) -> bool:
    """Whether the run builds `_index/` (a dry run builds its bands and ids, which the run that
    publishes it reuses, but writes no docs files): near dedup asked for one, and no pass changed
    the texts near dedup compared (lines, spans, the contamination cut), which a later `--against`
    reads back from OUTPUT, no scope (`--within`) keyed its buckets, and every near duplicate found
    was removed (`--min-cluster-size` 2)."""
    return (o.write_index and o.near and not o.lines and not o.spans and o.contaminated != "cut" and o.within is None
            and o.min_cluster_size == 2)


def prepare(input: str, output: str, options: Options | None = None) -> Plan:
    """Check everything that can be checked without a cluster; raise `UsageError` (or ValueError) if not right.

    `options.id_column` None: the `id` column, or without one each document's position (`shards.position_id`).
    An interrupted run on the same OUTPUT with the same fingerprint (`fingerprint`) is resumed from
    the stages it finished (`dedup.job.checkpoints`), unless `options.restart`."""
    o = options or Options()
    start = time.perf_counter()
    params = o.params or Params()
    report = Report()
    files = shards_mod.discover(input)
    prot_paths = expand_protected([str(p) for p in o.protected])
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
    shards_mod.check_columns(found, schema, id_column, o.text_column, adds_cluster=o.near)
    if o.cluster_size and shards_mod.SIZE_COLUMN in schema.names:
        raise UsageError(f"The input already has a {shards_mod.SIZE_COLUMN!r} column; rename or drop it first.")
    if o.contaminated == "tag" and shards_mod.TAG_COLUMN in schema.names:
        raise UsageError(f"The input already has a {shards_mod.TAG_COLUMN!r} column (an earlier tagged output?); "
                         "rename or drop it first, or use --contaminated drop or cut.")
    keep = _keep_by(o.keep_by, pa.schema([*schema, *hive]), o.near) if o.keep_by else None
    if o.within is not None:
        _within(o.within, pa.schema([*schema, *hive]))
    if keep is not None and keep[0] in shards_mod.shadowed_keys(found, schema):
        log.info("--keep-by %s: the files' own column %r is read; the directories' %s=... values, a Hive key of the "
                 "same name, are not (as pyarrow and pandas read them)", keep[0], keep[0], keep[0])
    if o.near and params.shingle_unit == "word":
        warn_unspaced(found, o.text_column, report)
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
        if (o.cluster_size or o.min_cluster_size > 2) and (old := [p for p in parts if p.format < index.COUNTS]):
            warn(report, f"--against {old[0].shown}: its index (format {old[0].format}, an older dedup) holds no "
                 "cluster counts, so a cluster whose root it kept counts that root as one document, without its near "
                 "duplicates there; run that output again with this dedup to count them"
                 + (f" ({len(old) - 1} more such output(s))" if len(old) > 1 else ""))
    prot = None
    if prot_paths:
        from dedup.storage.protected import read_protected

        with Timed(report, "protected") as stage:
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
        chosen.update(lines=True, min_copies=o.min_copies, min_line_words=o.min_line_words, lines_after_near=True)
    if o.spans:
        chosen.update(spans=True, span_tokens=o.span_tokens, spans_keep=o.spans_keep)
    if o.contaminated != "drop" or o.max_ngram_docs is not None:
        chosen.update(contaminated=o.contaminated, max_ngram_docs=o.max_ngram_docs)
    if o.within is not None:
        chosen.update(within=o.within)
    if o.min_cluster_size != 2:
        chosen.update(min_cluster_size=o.min_cluster_size)
    staging = Staging(output, fingerprint(found, params, chosen, prot, parts), restart=o.restart)
    rows = o.partition_rows
    assert rows is not None  # resolved as the options were made
    groups, rows = grouping.grouped(found, rows=rows)  # the bound they were made under
    if big := grouping.oversized_groups(found, rows=rows):
        log.info("%d input file(s) hold a row group above the partition bound (%s: %d rows): each is read in row "
                 "ranges that decode it from its start; row groups of at most %d rows read faster", len(big),
                 big[0][0].path, big[0][1], rows)
    if o.near:  # once everything is checked: a refused run says one line
        log_banding(params, report)
    return Plan(input, output, o, found, schema, groups, prot, params, id_column, staging, report, start, parts,
                keep_by=keep, hive=hive, within=o.within)


