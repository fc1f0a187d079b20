from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask.config
import pandas as pd
import pytest
from hypothesis import settings

from dedup.corpus import CorpusDoc, generate, protected_example
from tests.warm import WarmChild, run_warm

QUIET_DASK = {
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "1s",
    "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING_INTERVAL": "1s",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "2s",
    "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "1s",
}
"""Dask's clocks that run while a cluster waits, slowed (or, the statistical profiler, stopped) for
every cluster the tests start, in this process or in the `dask` and `dedup` processes they run
(environment variables are inherited): an idle two-worker cluster took 3.5 CPU-seconds every 30 s,
a fifth of the suite's CPU with the clusters each pytest worker keeps; 1.0 with these. The workers'
memory monitor (every 100 ms by default, every second here) took half of what remained: 36 against
17 CPU-ms a second for an idle two-worker LocalCluster. What a job computes does not depend on them."""
for _name, _value in QUIET_DASK.items():
    os.environ.setdefault(_name, _value)
dask.config.refresh()  # in case a plugin imported dask before this module

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


FAST_MODULES = frozenset({
    "test_hashing", "test_lsh", "test_text_minhash", "test_unionfind", "test_near", "test_decontam",
    "test_partition_functions", "test_components", "test_graphs", "test_layers", "test_buckets_and_matches",
    "test_char_shingles", "test_benchmark_truth", "test_cluster_yaml",
})
"""The inner loop (`pytest -m fast`, about 40 s): the rule, the per-partition functions, the layers."""


LONGEST_MODULES = ("test_resume", "test_centred", "test_scale_out", "test_incremental", "test_faults",
                   "test_object_store", "test_pipeline", "test_fidelity", "test_row_groups", "test_cli",
                   "test_report", "test_keep_by", "test_lines", "test_stalls", "test_runtime", "test_first_hour",
                   "test_paths", "test_small_promises", "test_components", "test_bad_input", "test_cluster_size",
                   "test_evalfiles", "test_clean_failures")
"""The modules that take longest on 2 cores, longest first: pytest-xdist hands out whole modules
(`--dist loadfile`) in collection order (`--no-loadscope-reorder`, in pyproject.toml), so these are
collected first and the short ones fill the end; in alphabetical order a 35-second module started
last and one process waited 27 s for the other."""


def pytest_configure(config: pytest.Config) -> None:
    """In the process that starts the others (pytest-xdist's controller, or the only one): every
    compiled kernel loaded once, so that on a fresh checkout, whose numba cache is empty, one process
    compiles them (4.5 CPU-seconds) before the pytest workers, their clusters and the `dedup`
    processes start, instead of each of them compiling them at the same time."""
    if not hasattr(config, "workerinput"):
        from dedup.partition.warm import warm_kernels

        warm_kernels()


def _module(item: pytest.Item) -> str:
    return item.module.__name__.rsplit(".", 1)[-1] if item.module is not None else ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _module(item) in FAST_MODULES:
            item.add_marker(pytest.mark.fast)
    rank = {name: i for i, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(_module(item), len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def corpus() -> list[CorpusDoc]:
    """The contract §7 corpus, small: about 550 documents."""
    return generate(300, seed=1)


@pytest.fixture(scope="session")
def corpus_frame(corpus: list[CorpusDoc]) -> pd.DataFrame:
    return pd.DataFrame({"id": [d.id for d in corpus], "text": [d.text for d in corpus],
                         "family": [d.family for d in corpus]})


SKEW_BASE = " ".join(f"boilerplate{i}" for i in range(100))  # 100 distinct words: copies with one more word have J > 0.97


@pytest.fixture(scope="session")
def skewed_frame(corpus_frame: pd.DataFrame) -> pd.DataFrame:
    """The corpus plus 12 near copies of one page, shuffled: one bucket holds 12 distinct texts (> max_bucket 4)."""
    near = pd.DataFrame({"id": [f"zz{i:02d}" for i in range(12)], "text": [f"{SKEW_BASE} tail{i}" for i in range(12)],
                         "family": "zz"})
    return pd.concat([corpus_frame, near], ignore_index=True).sample(frac=1.0, random_state=1).reset_index(drop=True)


def clean_partitions(frame: pd.DataFrame, parts: int) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """`frame` (id, text) cut into `parts` consecutive partitions, each beside the features frame a
    partition step reads of it (`_id`, `doc`, `source`, `skipped`), every document clean and kept."""
    import numpy as np

    from dedup.partition.keyspace import doc_keys

    bounds = np.linspace(0, len(frame), parts + 1).astype(int)
    pieces = [frame.iloc[lo:hi].reset_index(drop=True) for lo, hi in zip(bounds[:-1], bounds[1:])]
    return [(p, pd.DataFrame({"_id": p["id"].to_numpy(object), "doc": doc_keys(n, len(p)),
                              "source": np.full(len(p), -1, np.int32), "skipped": np.zeros(len(p), bool)}))
            for n, p in enumerate(pieces)]


def write_shards(frame: pd.DataFrame, directory: Path, shards: int) -> Path:
    """Write `frame` as `shards` Parquet files (round robin rows) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(shards):
        frame.iloc[i::shards].to_parquet(directory / f"shard-{i:02d}.parquet", index=False)
    return directory


@pytest.fixture(scope="session")
def protected_file(tmp_path_factory: pytest.TempPathFactory, corpus: list[CorpusDoc]) -> Path:
    path = tmp_path_factory.mktemp("protected") / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in protected_example(corpus)))
    return path


def fork_local_workers() -> None:
    """Have this process's local clusters (the shared one, the faults tests') fork their worker
    processes as `dedup run` has its own: from a process that loaded the job's modules and kernels
    once (`dedup.runtime.start_forkserver`), where spawned workers each imported them (2 to 3
    CPU-seconds a worker, and again for every worker a nanny starts after a kill)."""
    from dedup.runtime import start_forkserver

    if start_forkserver():
        dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})


def freeze_what_is_loaded() -> None:
    """Collect this process's garbage, then keep every object left out of later collections
    (`gc.freeze`): the modules, fixtures and clusters a pytest process holds for the whole session.
    `dedup.job.pipeline.run` collects garbage as it returns (so that nothing a job persisted
    outlives it); in a pytest process each collection walked all of these, 0.2 CPU-seconds a run."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def cluster_client() -> Iterator[object]:
    """A real multi-process Dask cluster (2 worker processes), shared by the integration tests."""
    from distributed import Client, LocalCluster

    import dedup.job.pipeline  # noqa: F401  (loaded before the freeze)
    from dedup.report.page import plotting

    plotting()
    fork_local_workers()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        freeze_what_is_loaded()
        yield client


@pytest.fixture()
def client(cluster_client: object) -> Iterator[object]:
    """The shared cluster's client, made current for the test."""
    with cluster_client.as_current():  # type: ignore[attr-defined]
        yield cluster_client


DEDUP = [sys.executable, "-m", "dedup"]

ASSIGNMENTS_ONLY = {"write_report": False, "write_index": False}
"""`run` arguments for a test that checks only which cluster each row is in: no page and no index,
whose steps (the survivors stage, the removed list, the rendering) are about half of a small run.
The tests of the page, the removed list and the index run with both, in every mode."""


def run_dedup(*args: str, cwd: Path | None = None, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    """`dedup ARGS...` as a child process, its output captured as text: forked from a warm
    interpreter (`tests.warm`), so that it skips only the imports."""
    return run_warm(list(args), cwd, timeout)


def start_command(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str] | WarmChild:
    """`cmd` started, its stderr a text stream to read line by line (stdout kept apart); a
    `[*DEDUP, ...]` command is forked from the warm interpreter (`tests.warm.WarmChild`, with the
    `Popen` methods the tests use: `stderr`, `poll`, `wait`, `send_signal`, `communicate`, `returncode`).
    One warm child at a time: start concurrent runs with `subprocess.Popen`."""
    if cmd[:len(DEDUP)] == DEDUP:
        return WarmChild(cmd[len(DEDUP):], env=env, stream=True)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def run_command(cmd: list[str], cwd: Path | None = None, timeout: float = 240,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(cmd)` with its output captured as text; a `[*DEDUP, ...]` command runs as
    `run_dedup` does (forked from the warm interpreter)."""
    if cmd[:len(DEDUP)] == DEDUP:
        return run_warm(cmd[len(DEDUP):], cwd, timeout, env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
DASK_BIN = Path(sys.executable).parent / "dask"


def start_dask(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`dask ARGS...` as a process of its own (with `env` added to the environment), its output discarded."""
    return subprocess.Popen([str(DASK_BIN), *args], env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_scheduler(directory: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`dask scheduler` on 127.0.0.1 and the scheduler file it wrote in `directory`."""
    sched_file = directory / "scheduler.json"
    proc = start_dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
                      str(sched_file))
    try:  # an interrupt (Ctrl-C) while it starts stops it too: nothing else knows of it yet
        deadline = time.time() + 60
        while not sched_file.exists():
            if time.time() > deadline:
                raise RuntimeError("dask scheduler did not start")
            time.sleep(0.2)
    except BaseException:
        stop_processes([proc])
        raise
    return proc, sched_file


def parquet_digests(out: Path) -> dict[str, str]:
    """Every Parquet file under OUTPUT (shards, the removed list, the index), by path."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*.parquet")) if p.is_file()}


def wait_for_line(proc: subprocess.Popen[str] | WarmChild, found: Callable[[str], bool], timeout: float = 120) -> str:
    """The stderr of `proc` read until a line for which `found` is true; all of it read so far (an
    AssertionError with it when no such line comes within `timeout` seconds)."""
    seen = ""
    deadline = time.time() + timeout
    assert proc.stderr is not None
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
        if found(line):
            return seen
    raise AssertionError(f"the line looked for never appeared; stderr so far:\n{seen}")


def kill_after(cmd: list[str], line: str, timeout: float = 240) -> str:
    """Start `cmd` (`start_command`), SIGKILL it as soon as a line of its stderr starts with `line`
    (after the log's time and name); its stderr until then."""
    proc = start_command(cmd)
    try:
        seen = wait_for_line(proc, lambda got: got.split(" ", 3)[-1].startswith(line), timeout)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        return seen
    finally:
        end_process(proc)


def end_process(proc: subprocess.Popen[str] | WarmChild) -> None:
    """`proc` killed if it still runs, and waited for; a warm child's files removed too."""
    if isinstance(proc, WarmChild):
        proc.close()
    elif proc.poll() is None:
        proc.kill()
        proc.wait()


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate the processes newest first, each waited for (killed after 30 s) before the next: the
    workers leave while their scheduler is still there to say goodbye to, not retrying it."""
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


SHARED_CLUSTER = "dask-processes"
"""The folder, in the session's base temporary directory (pytest-xdist's controller's, which its
workers' are in), that holds the scheduler file and the process ids of the `dask_processes` cluster."""


def _shared_cluster_dir(factory: pytest.TempPathFactory, config: pytest.Config) -> Path:
    base = factory.getbasetemp()
    return (base.parent if hasattr(config, "workerinput") else base) / SHARED_CLUSTER


@pytest.fixture(scope="session")
def dask_processes(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    """`dask scheduler` and one `dask worker` (2 processes) on 127.0.0.1, as separate processes; the
    scheduler file. One such cluster for the whole session: the first pytest process that needs it
    starts it (under a lock), the others connect to it, and the process that started the pytest
    processes stops it (`pytest_unconfigure`). Each pytest process started its own before: a
    scheduler, a nanny and two spawned workers, each importing dask and dedup."""
    import fcntl

    directory = _shared_cluster_dir(tmp_path_factory, pytestconfig)
    directory.mkdir(parents=True, exist_ok=True)
    sched_file, pids = directory / "scheduler.json", directory / "pids"
    with open(directory / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not pids.exists():
            # each process recorded as it starts (`pids`: newest first, the order they are stopped in), so
            # that an interrupt at any point leaves none running: the process that started the pytest
            # processes stops what `pids` names, and this one stops what it started if it is interrupted
            started: list[subprocess.Popen[bytes]] = []
            try:
                scheduler, sched_file = start_scheduler(directory)
                started.append(scheduler)
                _started.append(scheduler)
                pids.write_text(f"{scheduler.pid}\n")
                worker = start_dask("worker", "--scheduler-file", str(sched_file), "--nworkers", "2", "--nthreads", "1",
                                    "--no-dashboard", "--host", "127.0.0.1")
                started.append(worker)
                _started.append(worker)
                pids.write_text(" ".join(str(p.pid) for p in reversed(started)) + "\n")
            except BaseException:
                stop_processes(started)
                pids.unlink(missing_ok=True)
                raise
    return sched_file


_started: list[subprocess.Popen[bytes]] = []
"""The shared cluster's processes, in the process that started them (to wait for them at its end)."""


def pytest_unconfigure(config: pytest.Config) -> None:
    """In the process that started the others (or the only one): the shared `dask_processes` cluster
    stopped, the worker before the scheduler, each waited for (killed after 30 s)."""
    if hasattr(config, "workerinput"):
        return
    factory = getattr(config, "_tmp_path_factory", None)
    pids = _shared_cluster_dir(factory, config) / "pids" if factory is not None else None
    if _started:  # this process started it (no pytest-xdist): its own children, waited for
        stop_processes(_started)
    elif pids is not None and pids.exists():  # a pytest-xdist worker started it, and has ended
        for pid in (int(x) for x in pids.read_text().split()):
            _stop_pid(pid)


def _stop_pid(pid: int) -> None:
    """SIGTERM to `pid` (not a child of this process), then SIGKILL if it still runs after 30 s."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _SharedBrowser:
    """The test process's one Chromium, as a test uses it: `quit` leaves it for the next test (starting
    one takes about a second); `pytest_sessionfinish` quits it."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)

    def quit(self) -> None:
        self._driver.get("about:blank")


_browser: list[Any] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    while _browser:
        _browser.pop().quit()


def chromium(width: int = 1200, height: int = 2000) -> Any:
    """The test process's headless Chromium (started at its first use), at this window size, with the
    console and network logs of earlier tests drained: what each test then reads is its own."""
    if not _browser:
        _browser.append(_start_chromium())
    driver = _browser[0]
    driver.set_window_size(width, height)
    for kind in ("browser", "performance"):
        driver.get_log(kind)
    return _SharedBrowser(driver)


def table_cells(driver: Any, rows: str) -> list[list[str]]:
    """The text of each cell (`td`) of each row the CSS selector `rows` finds on the open page."""
    from selenium.webdriver.common.by import By

    return [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in driver.find_elements(By.CSS_SELECTOR, rows)]


def share_counts(driver: Any, rows: str) -> list[int]:
    """The documents column (the second cell) of a page's histogram of shares removed, row by row."""
    return [int(cells[1].replace(",", "")) for cells in table_cells(driver, rows) if cells]


def _start_chromium() -> Any:
    """A headless Chromium driven by Selenium, logging the console and the network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        raise RuntimeError("the report tests need Chromium and chromedriver (`apt-get install chromium "
                           "chromium-driver`; .ci/run installs them)")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.binary_location = browser
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)
