"""Connecting to a Dask cluster: an address, a scheduler file, or a local cluster sized to the machine."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("dedup")


def check_options(scheduler: str | None, scheduler_file: str | None, n_workers: int | None,
                  threads: int | None) -> None:
    """Raise `UsageError` for cluster options that would hang or fail late: checked by the CLI before
    anything starts, and by `dask_client`."""
    from dedup.storage.safety import UsageError

    if scheduler and scheduler_file:
        raise UsageError("Give either --scheduler or --scheduler-file, not both.")
    if scheduler_file:
        try:
            with open(scheduler_file, encoding="utf-8") as fh:
                address = json.load(fh).get("address")
        except FileNotFoundError:
            raise UsageError(f"--scheduler-file {scheduler_file!r} does not exist; start the scheduler with "
                             "`dask scheduler --scheduler-file FILE` first, or give --scheduler ADDRESS.") from None
        except (OSError, ValueError, AttributeError) as exc:
            raise UsageError(f"--scheduler-file {scheduler_file!r} is not a scheduler file ({exc}); give the file "
                             "`dask scheduler --scheduler-file FILE` wrote.") from None
        if not isinstance(address, str) or "://" not in address:
            raise UsageError(f"--scheduler-file {scheduler_file!r} names no scheduler address; give the file "
                             "`dask scheduler --scheduler-file FILE` wrote.")
    for name, value in (("--n-workers", n_workers), ("--threads", threads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{name} must be an integer >= 1. Got {value!r} instead.")
    if threads is not None and (scheduler or scheduler_file or n_workers is not None):
        raise UsageError("--threads runs without a cluster: give it without --scheduler, --scheduler-file "
                         "and --n-workers.")


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, scheduler_file: str | None = None,
                n_workers: int | None = None, threads: int | None = None,
                stall_timeout: float | None = None) -> Iterator[Any]:
    """A distributed Client for the job; a local process cluster when neither address nor file is given;
    with `threads`, no cluster and no client (None): `in_process`. With `stall_timeout`, a
    `dedup.job.watchdog.Watchdog` says when the cluster makes no progress and ends the run after that long."""
    check_options(scheduler, scheduler_file, n_workers, threads)
    if threads is not None:
        with in_process(threads):
            yield None
        return
    import dask
    from distributed import Client, LocalCluster

    if not scheduler and not scheduler_file and os.environ.get("DASK_SCHEDULER_ADDRESS"):
        scheduler = os.environ["DASK_SCHEDULER_ADDRESS"]  # set by the dask-kubernetes operator in a DaskJob
    if scheduler or scheduler_file:
        # how long to wait for the scheduler, at the start and when it is lost: Dask's setting (30 s by default)
        client = Client(scheduler, scheduler_file=scheduler_file,
                        timeout=dask.config.get("distributed.comm.timeouts.connect"))
        try:
            log.info("connected to %s (%d workers); dashboard %s", client.scheduler.address,
                     len(client.scheduler_info(n_workers=-1)["workers"]), client.dashboard_link)
            warming = warm_up(client)
            with watching(client, stall_timeout):
                yield client
            del warming
        finally:
            client.close()
        return
    workers = n_workers or max(1, os.cpu_count() or 1)
    # worker processes log nothing below CRITICAL unless --verbose: their errors reach the client as
    # task errors, and a client killed with SIGKILL would otherwise leave its orphaned workers
    # printing heartbeat tracebacks into the user's terminal
    quiet = logging.WARNING if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL
    # each worker has the job's modules and kernels before its first task: forked from a process that
    # loaded them while the job was planned (`start_forkserver`), or, spawned, loading them as it
    # starts (`dask_setup`), in parallel with the client's own imports (`dedup.cli`)
    config: dict[str, Any] = {"distributed.nanny.pre-spawn-environ": worker_environ()}
    if start_forkserver():
        config["distributed.worker.multiprocessing-method"] = "forkserver"
    with dask.config.set(config), contextlib.ExitStack() as closing:
        cluster = closing.enter_context(_closed_quietly(
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                         silence_logs=quiet, preload=[__name__])))
        client = closing.enter_context(_closed_quietly(Client(cluster)))
        log.info("local cluster: %d worker processes; dashboard %s", workers, client.dashboard_link)
        with watching(client, stall_timeout):
            yield client
        stop_workers(cluster)


@contextlib.contextmanager
def _closed_quietly(resource: Any) -> Iterator[Any]:
    """`resource` (a local cluster or its client), closed at the end: a failure to close it (a
    timeout on a loaded machine) is logged, never raised. After a finished job OUTPUT is committed,
    and the run must not end with an error; after a failed one, the job's own error is the one to see."""
    try:
        yield resource
    finally:
        try:
            resource.close()
        except Exception as exc:  # noqa: BLE001 - the processes end with this one anyway
            log.warning("the local cluster did not close cleanly (%s: %s); its processes end with this one",
                        type(exc).__name__, exc)


@contextlib.contextmanager
def watching(client: Any, stall_timeout: float | None) -> Iterator[None]:
    """A `dedup.job.watchdog.Watchdog` on `client`'s cluster while the block runs (none without a timeout)."""
    if stall_timeout is None:
        yield
        return
    from dedup.job.watchdog import Watchdog

    dog = Watchdog(client, stall_timeout).start()
    try:
        yield
    finally:
        dog.stop()


MALLOC_ENVIRON = {"MALLOC_TRIM_THRESHOLD_": 16 * 2**20, "MALLOC_MMAP_THRESHOLD_": 4 * 2**20}
"""glibc settings for local workers. Dask's nanny sets MALLOC_TRIM_THRESHOLD_ to 64 KiB, which
returns every freed 64 KiB at the top of a heap to the system and also fixes the size above which
blocks are mmapped at 128 KiB: each chunk's arrays were mapped, faulted in and unmapped again
(docs/performance.md, Design choices). Allocations of 4 MiB or more are still mapped (and
returned at once); smaller ones reuse the heap, which keeps up to 16 MiB free at its top."""


def worker_environ() -> dict[str, Any]:
    """Dask's pre-spawn environment for local workers with `MALLOC_ENVIRON`; a variable set in this
    process's environment keeps its value (the user's choice)."""
    import dask

    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    for key, value in MALLOC_ENVIRON.items():
        env[key] = os.environ.get(key, value)
    return env


FORKSERVER_PRELOAD = "dedup.job.preforked"
"""The module the forkserver imports (the job's modules and kernels) before it forks any worker."""

_forkserver_environ: dict[str, str] | None = None
"""The environment the forkserver this process started was given, None before it starts one."""


def start_forkserver() -> bool:
    """Start, in the background, the process a local cluster's workers are forked from, if not
    started yet; whether local workers can be forked from it (else they are spawned, as Dask does).

    Spawned, each worker imported the job's modules and loaded the compiled kernels itself: about 2
    CPU-seconds a worker, on the cores the client plans on, before the first task. The forkserver
    (Python's `multiprocessing` forkserver, which Dask supports as its
    `distributed.worker.multiprocessing-method`) does that once (`FORKSERVER_PRELOAD`), while
    the client plans; each worker is then a fork of it. It starts with the environment Dask gives
    spawned workers (`worker_environ` and Dask's other pre-spawn variables), which its forks keep:
    variables such as `MALLOC_TRIM_THRESHOLD_` only take effect when a process starts.

    Only on Linux (elsewhere fork is unsafe or slow), and only when Dask's configured method is its
    default, spawn (a method you chose is kept). A forkserver this process did not start, or started
    with another environment (the user's variables changed since), is not used: workers are spawned."""
    global _forkserver_environ
    import dask

    distributed_defaults()  # the pre-spawn environment and the method, without importing distributed
    method = dask.config.get("distributed.worker.multiprocessing-method")
    if (not sys.platform.startswith("linux") or method not in ("spawn", "forkserver")
            or dask.config.get("multiprocessing-method", None) is not None):  # (its deprecated name, set)
        return False
    import multiprocessing
    from multiprocessing import forkserver

    # Python 3.11 starts the forkserver with `-c` and does not give it this process's sys.path, so the
    # working directory comes first on its path: run from a folder holding a clone of dedup (a `dedup`
    # directory), the workers imported the clone's folder instead of the installed package
    environ = {**spawn_environ(), "PYTHONSAFEPATH": "1"}
    if _forkserver_environ is not None:  # (should it have died, Dask starts it again with that environment)
        return environ == _forkserver_environ
    if _forkserver_pid() is not None:
        return False  # started by someone else, with other modules and perhaps another environment
    multiprocessing.get_context("forkserver").set_forkserver_preload([FORKSERVER_PRELOAD])
    _quiet_resource_tracker()
    saved = {k: os.environ.get(k) for k in environ}
    try:
        os.environ.update(environ)
        forkserver.ensure_running()
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v
    _forkserver_environ = environ
    return True


def _quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (the forkserver would) with its warnings off: when a run
    is interrupted while the local cluster starts, the tracker frees the semaphores the cluster had
    made, as it should, and warned "leaked semaphore objects" into the user's terminal."""
    from multiprocessing import resource_tracker

    saved = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = "ignore::UserWarning"
    try:
        resource_tracker.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = saved


def distributed_defaults() -> None:
    """Add distributed's configuration defaults to dask's (what `import distributed` does first), from
    its `distributed.yaml`, without importing it (a slow import), since the forkserver starts only
    once its environment is known. Importing distributed later adds the same defaults
    again, which changes nothing; a value you set (a file, DASK_* variables) is kept by both."""
    import importlib.util

    import dask
    import yaml

    spec = importlib.util.find_spec("distributed")
    folder = next(iter(spec.submodule_search_locations or []), None) if spec else None
    try:
        with open(os.path.join(str(folder), "distributed.yaml")) as fh:
            defaults = yaml.safe_load(fh)
    except (OSError, TypeError, yaml.YAMLError):
        import distributed  # noqa: F401  (its own way, should the file not be where it always is)

        return
    dask.config.update_defaults(defaults)


def _forkserver_pid() -> int | None:
    """The pid of this process's running forkserver (multiprocessing keeps it in a private attribute)."""
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def stop_forkserver() -> None:
    """End the forkserver this process started, if any: after a run refused before its cluster starts
    (it would otherwise finish loading the job's modules, for nothing), and as `dedup` exits (it would
    otherwise tear its modules down while holding the caller's pipes open)."""
    global _forkserver_environ
    if _forkserver_environ is None:
        return
    import signal

    pid = _forkserver_pid()
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
    _forkserver_environ = None


def spawn_environ() -> dict[str, str]:
    """The variables Dask sets before it spawns a local worker: its pre-spawn environment with
    `MALLOC_ENVIRON` (`worker_environ`), a variable already in this process's environment keeping
    its value, and a fixed PYTHONHASHSEED unless one is set (as `distributed.Nanny` does)."""
    env = {k: os.environ.get(k, str(v)) for k, v in worker_environ().items() if v is not None}
    if env.get("PYTHONHASHSEED") in (None, "0"):
        env["PYTHONHASHSEED"] = "6640"
    return env


def stop_workers(cluster: Any) -> None:
    """End a local cluster's worker processes at once (SIGKILL), once the job using them has
    finished without an error, instead of asking each worker to close and waiting for it after the
    output is committed. Nothing is lost:
    the job holds nothing in them any more; each worker leaves its empty lock file in dask's scratch
    directory, which the next cluster to start there purges. (After an error the cluster closes
    the ordinary way.)"""
    import signal

    log.debug("job finished: ending the local cluster's worker processes")
    for nanny in list(cluster.workers.values()):
        nanny.auto_restart = False  # the nanny must not start a new worker in its place
        pid = getattr(getattr(nanny, "process", None), "pid", None)
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))


@contextlib.contextmanager
def in_process(threads: int) -> Iterator[None]:
    """Run the job in this process on `threads` threads (Dask's threaded scheduler; `check_options`
    checks the number): no cluster to start, no task results pickled or sent between processes,
    shuffles in memory. The compiled
    kernels release the GIL, so their threads run in parallel. Every result the job keeps (the
    features, about 0.6 KB a document) lives in this process, and nothing spills to disk: for
    corpora that fit one machine's memory. The shards, index and removed list it writes are those a
    cluster writes, byte for byte."""
    import dask

    arrow_memory_pool()
    # the kernels load while the job plans, as a cluster's workers do when they start
    loading = threading.Thread(target=_load_kernels_quietly, name="dedup-kernels", daemon=True)
    loading.start()
    # shuffles as tasks, in memory: the "disk" default (partd) pays serialisation to a temporary
    # directory. The scheduler as a function, not the name "threads": for a name, Dask imports
    # distributed to look for a client first.
    import dask.threaded

    with dask.config.set({"scheduler": dask.threaded.get, "num_workers": threads,
                          "dataframe.shuffle.method": "tasks"}):
        log.info("in this process: %d threads, no cluster", threads)
        yield


def _load_kernels_quietly() -> None:
    from dedup.partition.warm import warm_kernels

    with contextlib.suppress(Exception):  # the first task that needs them raises the error
        warm_kernels()


SHUFFLE_LOG = "distributed.shuffle._scheduler_plugin"
"""The scheduler's logger of P2P shuffles: a WARNING line for every shuffle it starts."""


def _not_a_shuffle_start(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Shuffle %s initialized by task")


def quiet_shuffle_starts() -> None:
    """Drop the scheduler's line for each P2P shuffle it starts ("Shuffle ... initialized by task ...
    executed on worker ..."), logged as a WARNING: a dedup job starts dozens, which fill its log. The
    shuffle plugin's other warnings (a shuffle restarted, deactivated) stay."""
    logging.getLogger(SHUFFLE_LOG).addFilter(_not_a_shuffle_start)


def dask_setup(server: Any) -> None:
    """Worker preload (local clusters use it; `dask worker --preload dedup.runtime` on your own):
    Arrow memory from jemalloc (`arrow_memory_pool`), then the modules the tasks
    come from, frames sized by their arrays (`dedup.job.frame_size`) and the compiled kernels,
    loaded before the worker takes tasks. A failure here is only logged: the first task that needs
    the module then raises it where the user sees it. As a scheduler's preload (`dask scheduler
    --preload dedup.runtime`), it quiets that scheduler's line for each shuffle started
    (`quiet_shuffle_starts`)."""
    from distributed import Scheduler

    if isinstance(server, Scheduler):
        quiet_shuffle_starts()
        return
    try:
        arrow_memory_pool()
        import dedup.job.pipeline  # noqa: F401  (the tasks' functions live there and in its imports)
        from dedup.job import frame_size
        from dedup.partition.warm import warm_kernels

        frame_size.register()
        warm_kernels()
    except Exception as exc:  # pragma: no cover - the task that needs it reports the error
        log.warning("worker preload failed: %s", exc)


def arrow_memory_pool() -> str:
    """Make Arrow allocate from jemalloc, unless the user chose a pool with ARROW_DEFAULT_MEMORY_POOL;
    the pool's name. Arrow's default (mimalloc) holds on to more freed memory: a worker's peak RSS
    was about 5% higher with it, for the same time (docs/operations.md)."""
    import pyarrow as pa

    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:  # a pyarrow built without jemalloc (e.g. macOS wheels)
            pass
    return str(pa.default_memory_pool().backend_name)


def warm_up(client: Any) -> list[Any]:
    """Load the kernels on every worker of a cluster we connect to, in the background while the
    client plans and builds the graph (else the first features task pays it). Local clusters do it
    as the workers start (`dask_setup`)."""
    workers = list(client.scheduler_info(n_workers=-1)["workers"])
    from dedup.partition.warm import warm_kernels

    return [client.submit(warm_kernels, pure=False, workers=[w], allow_other_workers=False) for w in workers]
