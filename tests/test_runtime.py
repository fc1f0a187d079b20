"""The local cluster the CLI starts: workers preloaded with the job's modules, kernels and Arrow memory setting."""

from __future__ import annotations

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

        from dedup import _kernels

        loaded = all(len(getattr(_kernels, k).signatures) > 0 for k in ("tokenize", "window_hashes", "minhash_rows"))
        return "dedup.pipeline" in sys.modules, loaded, pyarrow.default_memory_pool().backend_name

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


def _children() -> set[int]:
    import psutil

    return set(_alive([c.pid for c in psutil.Process().children(recursive=True)]))


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
