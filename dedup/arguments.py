"""The `dedup` command's arguments: every subcommand, flag, default and help text, in one parser."""

from __future__ import annotations

import argparse
from typing import Any

from dedup.config import (
    CLIENT_COMPONENT_EDGES,
    CLUSTER_MODES,
    COMPONENT_MODES,
    CONFIRM_MODES,
    CONTAMINATION_ACTIONS,
    CUT_MARGIN,
    CUT_MAX_WINDOWS,
    CUT_MIN_PIECE,
    DEFAULT_SHINGLE_SIZE,
    MAX_CONTAMINATED,
    MAX_LINES_REMOVED,
    MIN_COPIES,
    MIN_LINE_WORDS,
    PARTITION_ROWS,
    SHINGLE_UNITS,
    SPAN_PARTITION_ROWS,
    Params,
)
from dedup.job.watchdog import DEFAULT_LIMIT as STALL_TIMEOUT
from dedup.job.watchdog import WARN_AFTER
from dedup.partition.spans import KEEP_MODES, SPAN_TOKENS
from dedup.storage.safety import UsageError

P = Params()


def _add_algorithm(p: argparse.ArgumentParser, *, near: bool = True, decontam: bool = True,
                   lines: str = "", spans: str = "") -> None:
    """`lines`: "flag" (`run`: --lines turns line dedup on), "always" (`dedup lines`) or "" (none);
    `spans` the same for span dedup."""
    g = p.add_argument_group("columns")
    g.add_argument("--id-column", default=None,
                   help="column with unique document ids, strings or integers (default: id; without an id column, "
                        "each document's position FILE#ROW is its id)")
    g.add_argument("--text-column", default="text", help="column with the document text (default: text)")
    if near:
        a = p.add_argument_group("near-dedup parameters (defaults of docs/contract.md)")
        a.add_argument("--threshold", type=float, default=P.threshold,
                       help=f"Jaccard similarity a pair must reach to be merged (default: {P.threshold})")
        a.add_argument("--num-perm", type=int, default=P.num_perm, help=f"MinHash permutations (default: {P.num_perm})")
        a.add_argument("--num-bands", type=int, default=None,
                       help="LSH bands, given with --rows-per-band (default: the banding `dedup tune` recommends for "
                            f"--threshold and --num-perm: {P.num_bands} x {P.rows_per_band} for {P.threshold} and "
                            f"{P.num_perm})")
        a.add_argument("--rows-per-band", type=int, default=None,
                       help="rows per LSH band, given with --num-bands; bands x rows <= num-perm")
        a.add_argument("--shingle-unit", choices=SHINGLE_UNITS, default=P.shingle_unit,
                       help="what a shingle is made of: words, or characters of the normalised text (for Chinese, "
                            "Japanese, Thai and other scripts written without spaces; default: word)")
        sizes = ", ".join(f"{size} for {unit}" for unit, size in DEFAULT_SHINGLE_SIZE.items())
        a.add_argument("--shingle-size", type=int, default=None,
                       help=f"words or characters per shingle (default: {sizes})")
        a.add_argument("--seed", type=int, default=P.seed, help=f"seed of the permutations (default: {P.seed})")
        a.add_argument("--confirm", choices=CONFIRM_MODES, default=P.confirm,
                       help="confirm candidates by signature estimate or by exact shingle Jaccard (default: estimate)")
        a.add_argument("--keep-by", metavar="COLUMN[:max|:min]", default=None,
                       help="the member of each cluster with the largest (:max, the default) or smallest (:min) value "
                            "of COLUMN survives; ties and nulls fall to the smallest id (default: the smallest id)")
        a.add_argument("--clusters", choices=CLUSTER_MODES, default="connected",
                       help="connected: every chain of confirmed pairs is one cluster (the contract's union-find); "
                            "centred: every removed document reaches the threshold with its cluster's survivor, "
                            "members below it clustered again among themselves (default: connected)")
        a.add_argument("--within", metavar="COLUMN", default=None,
                       help="deduplicate each value of COLUMN (a column, or a Hive key of the directories such as "
                            "dump=... or lang=...) on its own: documents whose values differ are never in one cluster, "
                            "and each value's documents get what a run over them alone gives (null is a value of its "
                            "own); FineWeb found per-crawl dedup better than one global pass. Writes no _index/")
        a.add_argument("--min-cluster-size", type=int, default=2, metavar="S",
                       help="remove near duplicates only from clusters of at least S documents; smaller clusters are "
                            "kept whole, tagged with minhash_cluster (FineWeb's reading: the gain is in the large "
                            "clusters); the page shows what 2, 3, 5, 10 and 100 would remove; writes no _index/ "
                            "above 2 (default: 2, every near duplicate)")
        a.add_argument("--cluster-size", action="store_true",
                       help="add minhash_cluster_size (int64) to every row written: how many input documents its "
                            "cluster holds, survivor included (1 for a document without near duplicates)")
        a.add_argument("--keep-duplicates", action="store_true",
                       help="keep every row, tagged with minhash_cluster, instead of dropping non-roots")
        a.add_argument("--max-bucket", type=int, default=P.max_bucket,
                       help="distinct texts in one LSH bucket above which pairs are approximated by star edges "
                            f"(reported in the manifest; default: {P.max_bucket})")
        i = p.add_argument_group("incremental runs (see README: Adding a new crawl)")
        i.add_argument("--against", action="append", default=[], metavar="PREVIOUS_OUTPUT",
                       help="an earlier dedup OUTPUT (repeatable): documents of INPUT that are near duplicates of one it "
                            "kept are dropped (tagged with --keep-duplicates) with its id as minhash_cluster; its "
                            "documents always survive and are not read again. Parameters must match its index's")
        i.add_argument("--skip-existing", action="store_true",
                       help="leave out documents whose id is already in an --against output (default: refuse them)")
        i.add_argument("--no-index", action="store_true",
                       help="do not write OUTPUT/_index/ (about 150-250 bytes a kept document, docs/operations.md), "
                            "which later runs take with --against")
        a.add_argument("--components", choices=COMPONENT_MODES, default="auto",
                       help="where connected components are found: on the client (a vectorised union-find over the "
                            "confirmed edges, about 50 bytes an edge) or on the cluster (large-star/small-star "
                            f"shuffles); auto: the client up to {CLIENT_COMPONENT_EDGES:,} edges (default: auto)")
    if lines:
        ln = p.add_argument_group("exact line dedup (docs/contract.md section 6b)")
        if lines == "flag":
            ln.add_argument("--lines", action="store_true",
                            help="after near dedup (found on the original texts), remove from the surviving documents "
                                 "every line whose words occur as a line at least --min-copies times among them, but "
                                 "from its first occurrence (the document with the smallest id); the new texts are "
                                 "checked for protected n-grams again. Lists each line removed in "
                                 "_report/removed_lines.parquet; writes no _index/")
        ln.add_argument("--min-copies", type=int, default=MIN_COPIES, metavar="N",
                        help="occurrences (every surviving document and line counted) that make a line "
                             f"repeated (default: {MIN_COPIES})")
        ln.add_argument("--min-line-words", type=int, default=MIN_LINE_WORDS, metavar="N",
                        help="a line of fewer words is never removed for its own key (a heading, `or`, a piece of a "
                             f"hard-wrapped sentence); blank lines go with removed neighbours (default: {MIN_LINE_WORDS})")
        ln.add_argument("--max-lines-removed", type=float, default=MAX_LINES_REMOVED, metavar="FRACTION",
                        help="stop before publishing (exit 3, OUTPUT as it was) when line dedup would remove more than "
                             "this share of the surviving documents' characters; a --dry-run only warns; 1 turns the "
                             f"guard off (default: {MAX_LINES_REMOVED})")
    if spans:
        sp = p.add_argument_group("exact substring dedup (docs/contract.md section 6c)")
        if spans == "flag":
            sp.add_argument("--spans", action="store_true",
                            help="after near dedup (and --lines), cut from the surviving documents every run of "
                                 "--span-tokens tokens or more that occurs twice, but its first occurrence (Lee et "
                                 "al.'s ExactSubstr, without a suffix array); the new texts are checked for protected "
                                 "n-grams again; writes no _index/")
        sp.add_argument("--span-tokens", type=int, default=SPAN_TOKENS, metavar="K",
                        help=f"tokens of the shortest repeated substring cut (default: {SPAN_TOKENS})")
        sp.add_argument("--spans-keep", choices=KEEP_MODES, default="first",
                        help="first: the occurrence in the document with the smallest id stays; none: every "
                             "occurrence is cut (Lee et al.'s strike-all) (default: first)")
        if not near:
            sp.add_argument("--shingle-unit", choices=SHINGLE_UNITS, default=P.shingle_unit,
                            help="what a token is: a word, or one word character (for Chinese, Japanese, Thai and "
                                 "other scripts written without spaces; default: word)")
    if decontam:
        d = p.add_argument_group("decontamination")
        d.add_argument("--protected", action="append", default=[], metavar="PATH",
                       help="eval/validation file or directory whose 13-grams must not appear in the output; repeatable. "
                            ".jsonl/.json: every string value except under case_id/id/tags/scorer_args; .parquet: its "
                            "string columns; other files: the whole text; .gz/.bz2/.xz/.zst read through; a directory: "
                            "those files below it (see docs/contract.md section 6)")
        d.add_argument("--ngram-size", type=int, default=P.ngram_size, help=f"words per protected n-gram (default: {P.ngram_size})")
        d.add_argument("--max-contaminated", type=float, metavar="FRACTION", default=MAX_CONTAMINATED,
                       help="stop before publishing (exit 3, OUTPUT as it was) when decontamination would remove more "
                            "than this share of the input: an eval record quoting boilerplate can gut a corpus; a "
                            f"--dry-run only warns; 1 turns the guard off (default: {MAX_CONTAMINATED})")
        d.add_argument("--contaminated", choices=CONTAMINATION_ACTIONS, default="drop",
                       help="what a document sharing a protected n-gram becomes: drop (removed, listed in "
                            "_report/removed.parquet); tag (kept, with a contaminated_by column: the FILE#RECORD it "
                            f"shares n-grams with); cut (each match cut with {CUT_MARGIN} characters either side, "
                            f"pieces of {CUT_MIN_PIECE} or fewer dropped; more than {CUT_MAX_WINDOWS} matches or nothing "
                            "left drops it). Every run with "
                            "--protected writes _report/eval_records.parquet: what each eval record shares with the "
                            "corpus (default: drop)")
        d.add_argument("--max-ngram-docs", type=int, default=None, metavar="K",
                       help="ignore a protected n-gram found in more than K documents: common text (a license, a "
                            "form's wording), not a leak; each is listed with its count in the manifest and the page "
                            "(default: none ignored)")


def _add_runtime(p: argparse.ArgumentParser) -> None:
    r = p.add_argument_group("where it runs (Dask scheduler and workers, or threads)")
    r.add_argument("--scheduler", metavar="ADDRESS", help="address of a running Dask scheduler, e.g. tcp://host:8786 "
                        "(default: $DASK_SCHEDULER_ADDRESS if set, else a local cluster)")
    r.add_argument("--scheduler-file", metavar="FILE", help="scheduler file written by `dask scheduler --scheduler-file`")
    r.add_argument("--n-workers", type=int, help="worker processes of the local cluster (default: one per core)")
    r.add_argument("--stall-timeout", type=float, metavar="SECONDS", default=STALL_TIMEOUT,
                   help="end the run when the cluster has made no progress for this long because its workers are "
                        "paused for memory, there are none, or none runs the job's tasks (a message names the cause "
                        f"after {WARN_AFTER:.0f} s, or half this timeout when shorter; long-running tasks are only reported; "
                        f"default: {STALL_TIMEOUT:.0f})")
    r.add_argument("--threads", type=int, metavar="N",
                   help="no cluster: run in this process on N threads (fastest on one machine, for a corpus whose "
                        "features, about 0.6 KB a document, fit its memory; nothing spills to disk)")
    r.add_argument("--partition-rows", type=int, metavar="N", default=None,
                   help=f"read consecutive small shards together until a partition holds N rows (default "
                        f"{PARTITION_ROWS:,}, {SPAN_PARTITION_ROWS:,} with span dedup; a larger file is read as several "
                        "partitions, by row groups, and written back as one file): fewer, larger partitions "
                        "mean fewer tasks (faster on a small cluster) and more memory a task; the shards written are the "
                        "same, and so is the report; the index is laid out by partition")
    o = p.add_argument_group("output")
    o.add_argument("--overwrite", action="store_true",
                   help="replace an earlier dedup output (a directory with _dedup.json) once the new output is complete; "
                        "any other non-empty OUTPUT is refused")
    place = o.add_mutually_exclusive_group()
    place.add_argument("--features-on-disk", dest="features_on_disk", action="store_const", const=True, default=None,
                       help="write the features (signatures and hashes, about 0.6 KB a document) to Parquet in the "
                            "staging directory instead of keeping them in worker memory (the default when they would "
                            "take more than a quarter of the workers' memory)")
    place.add_argument("--features-in-memory", dest="features_on_disk", action="store_const", const=False,
                       help="keep the features in worker memory even when they would take more than a quarter of it")
    o.add_argument("--restart", action="store_true",
                   help="start over, discarding what an interrupted run on this OUTPUT left (by default the same "
                        "command resumes from the stages it finished)")
    o.add_argument("--dry-run", action="store_true",
                   help="run everything but write only _dedup.json and _report/ into OUTPUT, no shards: see what "
                        "would be removed before paying for the write")
    o.add_argument("--no-report", action="store_true",
                   help="skip _report/ (index.html, the page to read, and removed.parquet, one row per removed document)")
    o.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")


DESCRIPTION = ("Remove near-duplicate documents, documents that overlap your eval sets, and (with `lines` or "
               "`run --lines`) repeated lines from Parquet text corpora, on a laptop or a Dask cluster.")
"""What `dedup --help` says the tool does (this module's docstring is for its readers)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dedup", description=DESCRIPTION,
                                     epilog="INPUT: a Parquet file, a directory of shards, a glob or an fsspec URL. "
                                            "OUTPUT: the same shards (same names, same schema plus minhash_cluster) plus "
                                            "_dedup.json, the manifest that marks it complete. Exit codes: 0 done, 1 the "
                                            "run failed, 2 bad usage, 3 stopped by --max-contaminated or --max-lines-removed, "
                                            "130 interrupted (OUTPUT as it was). The contract: docs/contract.md.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    specs = [
        ("run", "decontaminate, near-dedup, then [repeated lines and spans of the survivors], in one job", True, True,
         "flag", "flag"),
        ("near", "near-dedup only: tag with minhash_cluster, drop non-roots", True, False, "", ""),
        ("decontaminate", "drop documents that share a 13-gram with protected files", False, True, "", ""),
        ("lines", "exact line dedup only: remove every repeated line but its first occurrence", False, False, "always",
         ""),
        ("spans", "exact substring dedup only: cut every repeated run of --span-tokens tokens but its first "
                  "occurrence", False, False, "", "always"),
    ]
    for name, help_text, near, decontam, lines, spans in specs:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("input", metavar="INPUT", help="Parquet file, directory of shards, glob or URL")
        p.add_argument("output", metavar="OUTPUT",
                       help="output directory: new, empty, or an earlier dedup output with --overwrite; never an input, "
                            "a protected path, the working directory or a parent of any of them")
        _add_algorithm(p, near=near, decontam=decontam, lines=lines, spans=spans)
        _add_runtime(p)
    t = sub.add_parser("tune", help="choose bands x rows for a threshold and print the S-curve",
                       description="choose bands x rows for a threshold and print the S-curve")
    t.add_argument("--threshold", type=float, required=True, help="target Jaccard similarity")
    t.add_argument("--num-perm", type=int, default=P.num_perm, help=f"permutations available (default: {P.num_perm})")
    t.add_argument("--fp-weight", type=float, default=None,
                   help="with --fn-weight: recommend instead the banding minimising fp-weight x the area under the "
                        "S-curve below the threshold + fn-weight x the area above it (datasketch's criterion)")
    t.add_argument("--fn-weight", type=float, default=None, help="weight of false negatives (with --fp-weight)")
    t.add_argument("--num-bands", type=int, help="a banding of your own, printed next to the recommended one "
                                                 "(with --rows-per-band)")
    t.add_argument("--rows-per-band", type=int, help="rows per band of your own banding (with --num-bands)")
    t.add_argument("--shingle-unit", choices=SHINGLE_UNITS, default=P.shingle_unit,
                   help="the shingle unit the similarity is measured in (default: word)")
    t.add_argument("--shingle-size", type=int, default=None, help="units per shingle (default: 5)")
    t.add_argument("-v", "--verbose", action="store_true", help="full tracebacks")
    d = sub.add_parser("demo", help="generate an example corpus and run the whole job on a local cluster",
                       description="generate an example corpus with planted near duplicates and a protected file, "
                                   "then run `dedup run` on it on a local cluster")
    d.add_argument("output", metavar="OUTPUT", nargs="?", default="dedup-demo",
                   help="directory for the example input and the result (default: ./dedup-demo)")
    d.add_argument("--originals", type=int, default=650, help="original articles to generate (default: 650)")
    d.add_argument("--n-workers", type=int, default=2, help="local worker processes (default: 2)")
    d.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    return parser


def params_of(args: argparse.Namespace) -> Params:
    """The similarity parameters the subcommand's flags give (checked by `Params.of`). Without
    --num-bands and --rows-per-band, the banding follows the threshold: the one `dedup tune`
    recommends for it (`recommended_banding`)."""
    names = ("num_perm", "num_bands", "rows_per_band", "threshold", "shingle_size", "shingle_unit", "seed", "confirm",
             "ngram_size", "max_bucket")
    given = {name: getattr(args, name) for name in names if hasattr(args, name)}
    if "num_bands" in given and (given["num_bands"] is None) != (given["rows_per_band"] is None):
        raise UsageError("Give --num-bands and --rows-per-band together, or neither: the banding then follows "
                         "--threshold (`dedup tune --threshold T` shows it).")
    if "num_bands" in given and given["num_bands"] is None:
        given["num_bands"], given["rows_per_band"] = recommended_banding(given)
    return Params.of(**given)


def recommended_banding(given: dict[str, Any]) -> tuple[int | None, int | None]:
    """`dedup tune`'s banding (`recall_banding`) for the threshold and permutations given (None: the
    defaults'); (None, None), the defaults', when those are not valid (`Params` then says why)."""
    from dedup.core.lsh import recall_banding

    threshold = P.threshold if given.get("threshold") is None else given["threshold"]
    num_perm = P.num_perm if given.get("num_perm") is None else given["num_perm"]
    try:
        return recall_banding(threshold, num_perm)
    except (TypeError, ValueError):
        return None, None
