"""The local cluster the CLI starts: workers preloaded with the job's modules, kernels and Arrow memory setting."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from dedup.runtime import MALLOC_ENVIRON, dask_client

POOL = "import dedup.runtime as r; print(r.arrow_memory_pool())"
EXPECTED_POOL = "jemalloc" if "jemalloc" in pa.supported_memory_backends() else pa.default_memory_pool().backend_name
"""What a preloaded worker allocates from: jemalloc where pyarrow has it, else pyarrow's default."""


def _pool_in_subprocess(env_pool: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env_pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = env_pool
    return subprocess.run([sys.executable, "-c", POOL], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_arrow_pool_is_jemalloc_unless_the_user_names_one() -> None:
    assert _pool_in_subprocess(None) == EXPECTED_POOL
    assert _pool_in_subprocess("system") == "system"


def test_local_cluster_workers_are_ready_before_the_first_task() -> None:
    def state() -> tuple[bool, bool, str]:
        import sys

        import pyarrow

        from dedup.core import _kernels

        loaded = all(len(getattr(_kernels, k).signatures) > 0 for k in ("tokenize", "window_hashes", "minhash_rows"))
        return "dedup.job.pipeline" in sys.modules, loaded, pyarrow.default_memory_pool().backend_name

    with dask_client(n_workers=2) as client:
        got = client.run(state)
    assert len(got) == 2
    assert all(v == (True, True, EXPECTED_POOL) for v in got.values()), got


def _malloc_environ() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "OMP_NUM_THREADS")}


def test_local_workers_get_the_malloc_settings_and_the_users_own_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")  # the user's choice
    with dask_client(n_workers=2) as client:
        got = client.run(_malloc_environ)
    assert len(got) == 2
    want = {"MALLOC_TRIM_THRESHOLD_": "131072", "MALLOC_MMAP_THRESHOLD_": str(MALLOC_ENVIRON["MALLOC_MMAP_THRESHOLD_"]),
            "OMP_NUM_THREADS": "1"}  # Dask's own settings stay
    assert all(v == want for v in got.values()), got


def _alive(pids: list[int]) -> list[int]:
    """The pids of processes still running (a zombie, or one that ends while asked, is not)."""
    import psutil

    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


HELPERS = ("multiprocessing.forkserver import main", "multiprocessing.resource_tracker import main")
"""Python's forkserver (which local workers are forked from) and resource tracker: helpers that live
as long as the process that started them, not workers."""


def _children() -> set[int]:
    """This process's descendants but the helpers."""
    import psutil

    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if not any(h in " ".join(c.cmdline()) for h in HELPERS):
                out.append(c.pid)
        except psutil.NoSuchProcess:
            pass
    return set(_alive(out))


def test_local_cluster_ends_its_workers_when_the_job_is_done() -> None:
    """After a job that finished, the local cluster's worker processes are ended at once (no
    graceful close, no nanny starting a replacement); after an error the cluster closes the
    ordinary way. Either way no worker process outlives the block."""
    before = _children()
    with dask_client(n_workers=2) as client:
        pids = list(client.run(os.getpid).values())
        assert len(_alive(pids)) == 2
    assert _alive(pids) == []
    assert _children() <= before, "a worker process was started in place of an ended one"

    with pytest.raises(RuntimeError, match="job failed"), dask_client(n_workers=2) as client:
        pids = list(client.run(os.getpid).values())
        raise RuntimeError("job failed")
    assert _alive(pids) == []


FORKED = r"""
import json, os, sys
import psutil
from dedup.runtime import dask_client

def state():
    from dedup.core import _kernels
    me = psutil.Process()
    # the environment the process started with, which glibc read (a fork keeps its parent's)
    raw = open(f"/proc/{os.getpid()}/environ", "rb").read().split(b"\0")
    start = dict(x.decode().split("=", 1) for x in raw if b"=" in x)
    return {"parent": " ".join(me.parent().cmdline()), "pid": os.getpid(),
            "loaded": all(len(getattr(_kernels, k).signatures) > 0 for k in ("tokenize", "minhash_rows")),
            "env": {k: start.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "OMP_NUM_THREADS")}}

if __name__ == "__main__":
    out = []
    with dask_client(n_workers=2) as client:
        out.append(list(client.run(state).values()))
    os.environ["MALLOC_TRIM_THRESHOLD_"] = "262144"  # the user's environment changed: spawned workers get it
    with dask_client(n_workers=2) as client:
        out.append(list(client.run(state).values()))
    print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="local workers are forked on Linux only")
def test_local_workers_are_forked_from_a_preloaded_process_started_with_their_environment(tmp_path) -> None:
    """On Linux the local cluster's workers are forks of Python's forkserver, which imported the job's
    modules and loaded the kernels once (`dedup.job.preforked`) and was started with the environment
    spawned workers get (the malloc settings, the user's own winning). A forkserver whose
    environment no longer matches this process's is not used: the next cluster's workers are
    spawned, with the new values."""
    import json

    script = tmp_path / "forked.py"
    script.write_text(FORKED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["MALLOC_TRIM_THRESHOLD_"] = "131072"
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = json.loads(done.stdout.strip().splitlines()[-1])
    mmap = str(MALLOC_ENVIRON["MALLOC_MMAP_THRESHOLD_"])
    assert len(first) == len(second) == 2
    for w in first:
        assert "multiprocessing.forkserver" in w["parent"] and "dedup.job.preforked" in w["parent"], w
        assert w["loaded"]
        assert w["env"] == {"MALLOC_TRIM_THRESHOLD_": "131072", "MALLOC_MMAP_THRESHOLD_": mmap, "OMP_NUM_THREADS": "1"}
    for w in second:
        assert "multiprocessing.forkserver" not in w["parent"], w
        assert w["loaded"]
        assert w["env"] == {"MALLOC_TRIM_THRESHOLD_": "262144", "MALLOC_MMAP_THRESHOLD_": mmap, "OMP_NUM_THREADS": "1"}


def _forkservers(tag: str) -> set[int]:
    """Live forkserver processes on this machine started by a process whose environment had
    DEDUP_TEST_RUN=`tag` (they inherit it): those of this test's `dedup`, not those of the runs other
    tests make at the same time (pytest-xdist)."""
    import psutil

    out = set()
    for p in psutil.process_iter(["cmdline", "status"]):
        line = " ".join(p.info["cmdline"] or [])
        if "multiprocessing.forkserver import main" in line and p.info["status"] != psutil.STATUS_ZOMBIE:
            try:
                if p.environ().get("DEDUP_TEST_RUN") == tag:
                    out.add(p.pid)
            except psutil.Error:  # gone meanwhile
                pass
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="local workers are forked on Linux only")
@pytest.mark.parametrize("ending", ["refused", "finished"])
def test_dedup_leaves_no_forkserver_behind(tmp_path, ending: str) -> None:
    """`dedup run` starts the forkserver before planning and ends it before it exits: a run refused
    while planning (here OUTPUT inside INPUT), rather than leave it loading the job's modules after
    `dedup` exited; a finished run, rather than leave it tearing its modules down while it holds
    the caller's pipes open."""
    import time

    import pandas as pd

    data = tmp_path / "data"
    data.mkdir()
    pd.DataFrame({"id": ["a", "b"], "text": ["one short text", "another short text"]}).to_parquet(
        data / "part-0.parquet")
    out = data / "out" if ending == "refused" else tmp_path / "out"
    tag = tmp_path.name
    # output to files, not pipes: a caller reading pipes until they close would also wait for a
    # forkserver left behind (it inherits them), and never see it
    with open(tmp_path / "err", "w") as err:
        code = subprocess.run([sys.executable, "-m", "dedup", "run", str(data), str(out), "--n-workers", "1"],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err, timeout=120,
                              env={**os.environ, "DEDUP_TEST_RUN": tag}).returncode
    message = (tmp_path / "err").read_text()
    if ending == "refused":
        assert code == 2 and "lies inside the input" in message, message
    else:
        assert code == 0 and (out / "part-0.parquet").exists(), message
    deadline = time.monotonic() + 0.5  # the kill is sent before `dedup` exits; let it land
    while _forkservers(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _forkservers(tag)


DEFAULTS = """
import json, sys
import dask
from dedup.runtime import distributed_defaults
distributed_defaults()
early = {"imported": "distributed" in sys.modules, "config": dask.config.config}
early = json.loads(json.dumps(early, default=str))
import distributed
late = json.loads(json.dumps(dask.config.config, default=str))
print(json.dumps({"imported": early["imported"], "same": early["config"] == late,
                  "method": dask.config.get("distributed.worker.multiprocessing-method"),
                  "trim": dask.config.get("distributed.nanny.pre-spawn-environ")["MALLOC_TRIM_THRESHOLD_"]}))
"""


@pytest.mark.parametrize("method", [None, "fork"])
def test_distributed_defaults_are_those_of_importing_distributed_without_importing_it(method: str | None) -> None:
    """The forkserver starts once the workers' method and environment are known; they come from
    distributed's configuration defaults, read without importing distributed (about 0.5 s): the
    configuration is then what importing distributed makes it, a value the user set included."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    if method:
        env["DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD"] = method
    out = subprocess.run([sys.executable, "-c", DEFAULTS], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got == {"imported": False, "same": True, "method": method or "spawn", "trim": 65536}


class _WontClose:
    """A resource whose close times out, as a local cluster's can on a loaded machine."""

    def close(self) -> None:
        raise TimeoutError("took too long")


def test_a_local_cluster_that_does_not_close_in_time_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    """After a finished job OUTPUT is committed: a cluster that then fails to close is a warning, not
    an error exit (and after a failed job the job's own error stays the one raised)."""
    import logging

    from dedup import runtime

    with caplog.at_level(logging.WARNING, logger="dedup"), runtime._closed_quietly(_WontClose()) as got:
        assert isinstance(got, _WontClose)
    assert "did not close cleanly (TimeoutError: took too long)" in caplog.text
    with pytest.raises(KeyError), runtime._closed_quietly(_WontClose()):
        raise KeyError("the job's error")


_KERNELS_AFTER_WARM_UP = r"""
import json, numba
from dedup.core import _kernels, _order_kernels
from dedup.partition.warm import warm_kernels
warm_kernels()
found = {name: len(getattr(m, name).signatures) for m in (_kernels, _order_kernels) for name in dir(m)
         if isinstance(getattr(m, name), numba.core.registry.CPUDispatcher)
         and getattr(m, name).targetoptions.get("inline") != "always"}
print(json.dumps(found))
"""


_FIRST_READ_AT_ONCE = """
import json, sys, threading
from dedup.core import _kernels  # not loaded yet: numba loads on the first read
assert "numba" not in sys.modules
errors, barrier = [], threading.Barrier(4)
def read():
    barrier.wait()
    try:
        _kernels.non_ascii, _kernels.tokenize, _kernels.window_hashes
    except AttributeError as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=read) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(errors))
"""


def test_threads_reading_the_kernels_first_at_once_all_get_them() -> None:
    """Four threads of a fresh process read the lazily loaded kernels module at the same moment (as
    `--threads` and a multi-threaded worker's first tasks do): every one gets the kernels. With the
    standard library's `LazyLoader` (Python 3.11), the ones that came second got an AttributeError."""
    got = subprocess.run([sys.executable, "-c", _FIRST_READ_AT_ONCE], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == []


def test_warm_up_loads_every_kernel() -> None:
    """In a fresh process, `warm_kernels` alone compiles (or loads) every kernel a task may call (the
    inlined helpers are compiled into their callers): a process forked after it loads none."""
    got = subprocess.run([sys.executable, "-c", _KERNELS_AFTER_WARM_UP], capture_output=True, text=True, timeout=240)
    assert got.returncode == 0, got.stderr
    found = json.loads(got.stdout)
    assert len(found) >= 10 and all(n >= 1 for n in found.values()), found


def test_as_a_schedulers_preload_it_drops_the_line_of_each_shuffle_start(caplog: pytest.LogCaptureFixture) -> None:
    """`dask scheduler --preload dedup.runtime`: the scheduler's P2P plugin logs a WARNING for every
    shuffle it starts (dozens a job); that line goes, its other warnings stay."""
    import asyncio

    from distributed import Scheduler

    from dedup import runtime

    async def setup() -> None:
        scheduler = Scheduler(dashboard_address=":0", host="127.0.0.1")
        runtime.dask_setup(scheduler)

    asyncio.run(setup())
    plugin = logging.getLogger(runtime.SHUFFLE_LOG)
    with caplog.at_level(logging.WARNING, logger=runtime.SHUFFLE_LOG):
        plugin.warning("Shuffle %s initialized by task %r executed on worker %s", "abc", ("t", 0), "tcp://w")
        plugin.warning("Shuffle %s restarted due to stimulus '%s", "abc", "s1")
    said = [r.getMessage() for r in caplog.records if r.name == runtime.SHUFFLE_LOG]
    assert said == ["Shuffle abc restarted due to stimulus 's1"]
