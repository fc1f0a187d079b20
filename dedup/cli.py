"""The `dedup` command: run, near, decontaminate, tune, demo."""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dedup.arguments import build_parser, params_of
from dedup.config import (
    Params,
)
from dedup.job.watchdog import DEFAULT_LIMIT as STALL_TIMEOUT
from dedup.job.watchdog import FAILED as STALLS
from dedup.runtime import check_options, start_forkserver, stop_forkserver
from dedup.storage.safety import TooContaminated, UsageError

log = logging.getLogger("dedup")
def _setup_logging(verbose: bool) -> None:
    """dedup's own INFO lines on stderr; other libraries' only from WARNING (object stores' clients say
    where they found credentials and endpoints: noise in a run's log), everything with --verbose."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    if not verbose:
        log.setLevel(logging.INFO)


def _quiet_libraries(verbose: bool, cluster: bool) -> None:
    """Silence dask's and its friends' logs (they configure their loggers on import, so call it after).
    Without a cluster (`--threads`) distributed is never imported (a slow import, for nothing)."""
    if verbose:
        return
    if cluster:
        import distributed  # noqa: F401

    for name in ("distributed", "bokeh", "tornado", "numba", "fsspec", "asyncio"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for name in ("asyncio", "distributed.client"):
        logging.getLogger(name).addFilter(_replaced)


def _replaced(record: logging.LogRecord) -> bool:
    """False for the library records that the CLI's own line replaces: the client's gathers ended by an
    interrupt (asyncio's "Task exception was never retrieved ... AllExit" traceback), the client's
    "Failed to reconnect to scheduler" and its reconnection cancelled as the client closes after a lost
    scheduler (a `CancelledError` traceback; the run ends with a line naming the lost scheduler)."""
    exc = record.exc_info[1] if record.exc_info else None
    if exc is not None and type(exc).__name__ == "AllExit":
        return False
    if record.name == "distributed.client" and type(exc).__name__ == "CancelledError":
        return False
    return not (record.name == "distributed.client" and record.getMessage().startswith("Failed to reconnect"))


def _check_runtime(args: argparse.Namespace) -> None:
    """Cluster options that would hang or fail late, refused before anything starts."""
    check_options(args.scheduler, args.scheduler_file, args.n_workers, args.threads)
    if args.partition_rows is not None and args.partition_rows < 1:
        raise UsageError(f"--partition-rows must be an integer >= 1. Got {args.partition_rows} instead.")
    if args.stall_timeout <= 0:
        raise UsageError(f"--stall-timeout must be a number of seconds > 0. Got {args.stall_timeout} instead.")


def _local_cluster(args: argparse.Namespace) -> bool:
    """Whether the job will run on a local cluster this process starts (`dedup.runtime.dask_client`)."""
    return (args.threads is None and not args.scheduler and not args.scheduler_file
            and not os.environ.get("DASK_SCHEDULER_ADDRESS"))


def _prepare(args: argparse.Namespace) -> Any:
    """Everything that can be checked without a cluster: parameters, paths, inputs, protected files."""
    _check_runtime(args)
    params = params_of(args)
    near = args.command in ("run", "near")
    protected = getattr(args, "protected", [])
    if args.command == "decontaminate" and not protected:
        raise UsageError("`dedup decontaminate` needs at least one --protected FILE.")
    if not _local_cluster(args):
        return _plan(args, params, near, protected)
    start_forkserver()  # the workers' modules and kernels load while the job is planned
    try:
        return _plan(args, params, near, protected)
    except BaseException:
        stop_forkserver()  # refused: nothing will be forked from it
        raise


def _plan(args: argparse.Namespace, params: Any, near: bool, protected: list[str]) -> Any:
    from dedup.job import plan

    given = {"protected": protected, "near": near, "id_column": args.id_column, "text_column": args.text_column,
             "params": params, "overwrite": args.overwrite, "features_on_disk": args.features_on_disk,
             "dry_run": args.dry_run, "write_report": not args.no_report, "restart": args.restart,
             "write_index": near and not getattr(args, "no_index", False),
             "lines": args.command == "lines" or getattr(args, "lines", False),
             "spans": args.command == "spans" or getattr(args, "spans", False)}
    # the flags this command has; the rest take `Options`' defaults
    given.update({name: getattr(args, name) for name in OPTIONAL_FLAGS if hasattr(args, name)})
    if hasattr(args, "keep_duplicates"):
        given["drop"] = not args.keep_duplicates
    if args.partition_rows:
        given["partition_rows"] = args.partition_rows
    return plan.prepare(args.input, args.output, plan.Options(**given))


OPTIONAL_FLAGS = ("components", "against", "skip_existing", "cluster_size", "keep_by", "clusters", "max_contaminated",
                  "min_copies", "min_line_words", "max_lines_removed", "span_tokens", "spans_keep", "contaminated",
                  "max_ngram_docs", "within", "min_cluster_size")
"""Options whose flags only some commands have (`dedup.arguments`), by their `Options` name."""


def _import_pipeline(report: bool) -> None:
    with contextlib.suppress(Exception):  # imported again below, where an error would be raised
        importlib.import_module("dedup.job.pipeline")
        if report:
            from dedup.report.page import plotting

            plotting()


def _execute(args: argparse.Namespace, plan: Any) -> dict[str, Any]:
    from dedup.runtime import dask_client

    _quiet_libraries(args.verbose, cluster=args.threads is None)
    # the job's modules (dask.dataframe, pandas, pyarrow) and the page's plotting library load while
    # the cluster starts; the job waits for them, so that no import holds
    # the GIL the scheduler in this process needs while the job runs
    importing = threading.Thread(target=_import_pipeline, args=(plan.options.write_report,), name="dedup-import",
                                 daemon=True)
    importing.start()
    try:
        with dask_client(args.scheduler, args.scheduler_file, args.n_workers, args.threads, args.stall_timeout):
            importing.join()
            from dedup.job import pipeline

            return pipeline.execute(plan)
    except BaseException:
        plan.staging.abandon()  # interrupted or failed before the job started (cluster start, imports)
        raise
    finally:
        plan.close()


def _close_kept_copies(kept: Any, threshold: float) -> int:
    """Of the demo's kept documents, those beyond the first of their article whose exact Jaccard with
    an earlier kept copy reaches the threshold: near duplicates the run missed (MinHash estimates)."""
    from dedup.core.text import jaccard, shingles

    close = 0
    for _, texts in kept.groupby("family", sort=False)["text"]:
        sets = [shingles(t) for t in texts]
        close += sum(any(jaccard(sets[i], sets[j]) >= threshold for j in range(i)) for i in range(1, len(sets)))
    return close


def _summary(m: dict[str, Any]) -> str:
    lines = [
        f"input rows            {m['input_rows']:>10,}",
        f"contaminated dropped  {m['contaminated_dropped']:>10,}",
        *([f"contaminated tagged   {c['tagged']:>10,}  kept, the records each shares n-grams with in "
           "contaminated_by"] if (c := m.get("contamination") or {}).get("action") == "tag" else []),
        *([f"contaminated cut      {c['cut']:>10,}  kept with the matched passages cut out (the rest dropped by the "
           "cut: too many matches, or nothing left)"] if c.get("action") == "cut" else []),
        *([f"common n-grams ignored {c['common_ngrams']:>9,}  found in more than {c['max_ngram_docs']:,} documents"]
          if c.get("max_ngram_docs") is not None else []),
        f"near duplicates found {m['near_duplicates_found']:>10,}  in {m['clusters']:,} clusters (largest {m['largest_cluster']})",
        f"near duplicates dropped {m['near_duplicates_dropped']:>8,}",
        *([f"  kept whole           {m['near_duplicates_kept_whole']:>10,}  in clusters of fewer than "
           f"{m['min_cluster_size']} documents (--min-cluster-size)"] if m.get("min_cluster_size", 2) > 2 else []),
        *([f"  of earlier outputs   {m['near_duplicates_of_indexed']:>10,}  ({m['indexed_documents']:,} indexed "
           f"documents in {len(m['against'])} output(s))"] if m.get("against") else []),
        *([f"skipped (id indexed)  {m['skipped_existing']:>10,}"] if m.get("skipped_existing") else []),
        *([f"repeated lines removed {ln['lines_removed']:>9,}  from {ln['documents_changed']:,} documents "
           f"({ln['characters_removed']:,} characters, {ln['characters_removed_share']:.1%} of the survivors'); "
           f"{ln['documents_dropped']:,} left without a word and {ln['documents_contaminated']:,} contaminated anew, "
           "dropped"] if (ln := m.get("lines")) else []),
        *([f"repeated spans cut    {sp['spans_cut']:>10,}  from {sp['documents_changed']:,} documents "
           f"({sp['tokens_removed']:,} tokens, {sp['characters_removed']:,} characters); "
           f"{sp['documents_dropped']:,} left without a word and {sp['documents_contaminated']:,} contaminated anew, "
           "dropped"] if (sp := m.get("spans")) else []),
        f"output rows           {m['output_rows']:>10,}",
        f"seconds               {m['seconds'].get('total', 0):>10.1f}"
        + (f"  (and {r['reused_seconds']:.1f} s of the {r.get('of', 'interrupted run')}'s stages, reused)"
           if (r := m.get("resumed")) else ""),
    ]
    if m.get("approximated_buckets"):
        lines.append(f"approximated buckets  {m['approximated_buckets']:>10,}  (largest {m['largest_approximated_bucket']})")
    if m.get("dry_run"):
        lines.append("dry run: no shards written")
    if m.get("report"):
        lines.append(f"report                {m['output'].rstrip('/')}/{m['report']}")
    if m.get("index"):
        ix = m["index"]
        each = f", {ix['bytes_per_document']:.0f} bytes each" if ix["documents"] else ""
        share = f"; {100 * ix['bytes'] / m['output_bytes']:.0f}% of the shards' size" if m.get("output_bytes") else ""
        lines.append(f"index                 {m['output'].rstrip('/')}/{ix['path']}  ({ix['documents']:,} kept documents{each}"
                     f"{share})")
        if not m.get("against"):
            lines.append("                      for later runs with --against; --no-index leaves it out")
    return "\n".join(lines)


def _tune(args: argparse.Namespace) -> None:
    """The recommended banding for a threshold (and the user's, if given), with both S-curves."""
    import numpy as np

    from dedup.config import check_banding
    from dedup.core.lsh import RECALL_AT_THRESHOLD, optimal_params, probability, recall_banding

    size = Params.of(threshold=args.threshold, num_perm=args.num_perm, shingle_unit=args.shingle_unit,
                     shingle_size=args.shingle_size).shingle_size  # checked there
    if (args.fp_weight is None) != (args.fn_weight is None):
        raise UsageError("Give --fp-weight and --fn-weight together.")
    if args.fp_weight is None:
        b, r = recall_banding(args.threshold, args.num_perm)
        why = (f"the most rows per band that still finds a pair at the threshold {RECALL_AT_THRESHOLD:.0%} of the "
               "time: candidates are confirmed before anything merges, so a missed pair is lost while an extra "
               "candidate only costs its scoring")
    else:
        b, r = optimal_params(args.threshold, args.num_perm, args.fp_weight, args.fn_weight)
        why = (f"minimises {args.fp_weight} x the S-curve's area below the threshold + {args.fn_weight} x the area "
               "above it; it may find pairs near the threshold far less often than the default")
    choices = [("recommended", b, r)]
    if (args.num_bands is None) != (args.rows_per_band is None):
        raise UsageError("Give --num-bands and --rows-per-band together.")
    if args.num_bands is not None:
        check_banding(args.num_bands, args.rows_per_band, args.num_perm)
        choices.append(("yours", args.num_bands, args.rows_per_band))
    t = args.threshold
    print(f"similarity: Jaccard of the sets of {size}-{args.shingle_unit} shingles (--shingle-unit {args.shingle_unit} "
          f"--shingle-size {size})")
    print(f"recommended: {why}")
    for name, nb, nr in choices:
        print(f"{name}: --num-bands {nb} --rows-per-band {nr}  (uses {nb * nr} of {args.num_perm} permutations; "
              f"50% point {(1 / nb) ** (1 / nr):.4f}; a pair at the threshold {t} is a candidate "
              f"{100 * probability(t, nb, nr):.1f}% of the time, one at {max(0.0, t - 0.2):.2f} "
              f"{100 * probability(max(0.0, t - 0.2), nb, nr):.2f}%)")
    print("| similarity | " + " | ".join(f"P(candidate), {n} {nb} x {nr}" for n, nb, nr in choices) + " |")
    print("|---:|" + "---:|" * len(choices))
    for sim in np.round(np.arange(t - 0.2, t + 0.2001, 0.05), 4):
        if 0.0 <= sim <= 1.0:
            print(f"| {sim:.2f} | " + " | ".join(f"{probability(sim, nb, nr):.4f}" for _, nb, nr in choices) + " |")


def _demo(args: argparse.Namespace) -> dict[str, Any]:
    from dedup.runtime import dask_client

    start_forkserver()  # the workers' modules and kernels load while the example is written
    import pandas as pd

    from dedup.corpus import generate, protected_example
    from dedup.job import pipeline

    root = Path(args.output)
    inp, out = root / "input", root / "output"
    docs = generate(args.originals, seed=0)
    inp.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame({"id": [d.id for d in docs], "text": [d.text for d in docs], "family": [d.family for d in docs]})
    shards = 4
    for i in range(shards):
        frame.iloc[i::shards].to_parquet(inp / f"shard-{i:02d}.parquet", index=False)
    prot = root / "protected.jsonl"
    prot.write_text("".join(json.dumps(r) + "\n" for r in protected_example(docs)))
    log.info("demo: wrote %d documents in %d shards to %s and a protected file %s", len(docs), shards, inp, prot)
    _quiet_libraries(args.verbose, cluster=True)
    with dask_client(n_workers=args.n_workers, stall_timeout=STALL_TIMEOUT):
        manifest = pipeline.run(str(inp), str(out), protected=[str(prot)], overwrite=True)
    kept = pd.read_parquet(out)
    copies = len(frame) - frame["family"].nunique()
    left = int(kept["family"].duplicated().sum())
    close = _close_kept_copies(kept, manifest["parameters"]["threshold"])
    t = manifest["parameters"]["threshold"]
    print(_summary(manifest))
    print(f"planted copies        {copies:>10,}  ({copies - left:,} gone: near duplicates of their article, or contaminated)")
    print(f"  edited below {t:<8}{left - close:>10,}  kept: their exact Jaccard with every kept copy of their article "
          f"is below {t}, as the contract keeps them")
    if close:
        print(f"  missed              {close:>10,}  kept, though within {t} of a kept copy: MinHash made no candidate "
              "of the pair, or estimated it below the threshold")
    print(f"result: {out} (manifest: {out / '_dedup.json'})")
    return manifest


class _Interrupts:
    """SIGINT/SIGTERM: stop the run while OUTPUT is untouched; once it has been replaced, finish instead."""

    def __init__(self) -> None:
        self.plan: Any = None
        self.ignored = False

    def __call__(self, signum: int, frame: object) -> None:
        from dedup.storage.staging import INTERRUPT_REQUESTED

        if self.plan is not None and self.plan.staging.committed:
            if not self.ignored:
                log.warning("interrupt received after OUTPUT was replaced: finishing")
            self.ignored = True
            return
        if not INTERRUPT_REQUESTED.is_set() and not STALLS:  # the user's (a stall's is the watchdog's): said at once,
            # as ending the tasks may take a while (up to a minute)
            with contextlib.suppress(OSError):  # os.write: safe in a handler, where logging's lock may be held
                os.write(2, b"dedup: interrupt received: stopping the run's tasks; OUTPUT is left as it was\n")
        INTERRUPT_REQUESTED.set()
        raise KeyboardInterrupt(signum)


def _unraisable(hook: Any) -> Any:
    """sys.unraisablehook that drops interrupts landing in finalisers (they are handled), prints the rest."""
    def quiet(info: Any) -> None:
        if not isinstance(info.exc_value, KeyboardInterrupt):
            hook(info)
    return quiet


def _message(exc: BaseException, args: argparse.Namespace) -> str:
    """What the user reads for a failure: the first real cause where a library wraps it (no space left),
    on one line."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            where = getattr(args, "output", None)
            return (f"no space left on the device{f' holding OUTPUT {where!r}' if where else ''} ({seen}); free space "
                    "there or choose another OUTPUT. OUTPUT was left as it was.")
        seen = seen.__cause__ or seen.__context__
    seen = exc
    while seen is not None:
        if isinstance(seen, ConnectionError) or type(seen).__name__ == "CommClosedError":
            return (f"lost the connection to the scheduler ({type(seen).__name__}: {seen}): it stopped, restarted or "
                    "could not be reached. OUTPUT was left as it was; run the job again once the scheduler is back.")
        seen = seen.__cause__ or seen.__context__
    if any(c.__name__ in ("FutureCancelledError", "FuturesCancelledError", "CancelledError")
           for c in type(exc).__mro__):  # distributed's: a lost scheduler; never the task's key
        lines = str(exc).splitlines()
        reason = getattr(exc, "reason", None) or next(
            (line.split("for reason:", 1)[1].strip(" .") for line in lines if "for reason:" in line), "unknown")
        return (f"the scheduler cancelled the job's tasks (reason: {reason}): it stopped, restarted or could not be "
                "reached. OUTPUT was left as it was; run the job again once the scheduler is back.")
    return str(exc).strip() or f"{type(exc).__name__} (no message; run with --verbose for the traceback)"


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 done, 1 the run failed, 2 bad usage (arguments, paths, input), 3 stopped by
    `--max-contaminated` or `--max-lines-removed` (OUTPUT as it was), 130 interrupted before OUTPUT was
    replaced (OUTPUT as it was)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    interrupts = _Interrupts()
    for sig in (signal.SIGINT, signal.SIGTERM):  # Kubernetes stops pods with SIGTERM
        signal.signal(sig, interrupts)
    if not args.verbose:
        sys.unraisablehook = _unraisable(sys.unraisablehook)
    stage = "usage"
    plan = None
    try:
        if args.command == "tune":
            _tune(args)
            return 0
        if args.command == "demo":
            stage = "run"
            _demo(args)
            return 0
        start = time.perf_counter()
        plan = interrupts.plan = _prepare(args)
        stage = "run"
        manifest = _execute(args, plan)
        print(_summary(manifest))
        log.debug("finished in %.1f s", time.perf_counter() - start)
        return 0
    except KeyboardInterrupt:
        if STALLS:
            print(f"dedup: error: {STALLS[0]} OUTPUT was left as it was.", file=sys.stderr)
            return 1
        if plan is not None and plan.staging.committed:
            print(f"dedup: interrupted after OUTPUT was replaced; {args.output} holds the complete new output",
                  file=sys.stderr)
            return 0
        print("dedup: interrupted; OUTPUT was left as it was", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.verbose:
            raise
        if isinstance(exc, TooContaminated):
            print(f"dedup: stopped: {exc} OUTPUT was left as it was.", file=sys.stderr)
            return 3
        message = ' '.join(_message(exc, args).split())  # one line
        if plan is not None and plan.staging.committed:  # what failed came after the job: OUTPUT is whole
            print(f"dedup: warning: {message} (after OUTPUT was replaced; {args.output} holds the complete new "
                  "output)", file=sys.stderr)
            return 0
        print(f"dedup: error: {message}", file=sys.stderr)
        return 2 if stage == "usage" or isinstance(exc, UsageError) else 1


def entry() -> None:
    """The `dedup` command: `main`, then, once it has returned and its output is flushed, a hard exit.

    Python's own teardown, freeing every module and object (dask, pandas, numba's compiler), is slow
    and has nothing left to do: OUTPUT is committed, a local cluster closed, every file closed.
    An exception that escapes `main` (with --verbose) and argparse's exits take the ordinary way out.

    The forkserver the local workers were forked from ends first: left to notice this process is
    gone, it would tear its own modules down holding this process's stdout and stderr open, so that
    a caller reading them (`subprocess.run(capture_output=True)`, a pipe, `$(dedup ...)`) waited."""
    try:
        code = main()
    finally:
        stop_forkserver()  # also when an exception escapes (--verbose)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
