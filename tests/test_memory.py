"""Where the features live: in memory while their estimate fits a quarter of the workers' memory,
on disk beyond, unless the user decides (`dedup.job.memory`)."""

from __future__ import annotations

import logging

import dask

from dedup.job import memory
from tests.conftest import run_dedup


def test_the_workers_memory_is_the_sum_of_their_limits() -> None:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, memory_limit="3GiB",
                      dashboard_address=":0") as lc, Client(lc):
        assert memory.workers_memory() == 2 * 3 * 2**30
        rows = int(0.25 * 6 * 2**30) // (4 * 128 + memory.FEATURE_OVERHEAD_BYTES)
        assert memory.features_on_disk(None, rows - 10, 128) is False
        assert memory.features_on_disk(None, rows + 10, 128) is True
    with LocalCluster(n_workers=7, threads_per_worker=1, processes=False, memory_limit="1GiB",
                      dashboard_address=":0") as lc, Client(lc) as client:
        client.wait_for_workers(7)
        assert memory.workers_memory() == 7 * 2**30  # every worker
    with LocalCluster(n_workers=1, processes=False, memory_limit=0, dashboard_address=":0") as lc, Client(lc):
        assert memory.workers_memory() is None  # no limit: nothing to weigh them against, kept in memory
        assert memory.features_on_disk(None, 10**12, 128) is False


def test_the_choice_waits_for_a_clusters_first_worker() -> None:
    """A run connected to a scheduler whose workers are still starting (`--scheduler-file`, workers
    started beside it) waits for one before weighing the features against their memory: without a
    worker it would keep any corpus in memory. The worker here is a `dask worker` process started
    once the run says it is waiting."""
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    from distributed import Client, LocalCluster

    lines = _Lines()
    log = logging.getLogger("dedup")
    level = log.level
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    started: list[subprocess.Popen] = []

    def start_a_worker(address: str) -> None:
        deadline = time.monotonic() + 60
        while not any("no worker yet" in line for line in lines.lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        started.append(subprocess.Popen(
            [str(Path(sys.executable).parent / "dask"), "worker", address, "--nthreads", "1", "--memory-limit", "300MiB",
             "--no-dashboard", "--no-nanny"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    try:
        with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=":0") as lc, Client(lc):
            starter = threading.Thread(target=start_a_worker, args=(lc.scheduler_address,))
            starter.start()
            assert memory.workers_memory() == 300 * 2**20
            starter.join()
            assert any("no worker yet" in line for line in lines.lines)
    finally:
        log.removeHandler(lines)
        log.setLevel(level)
        for proc in started:  # a worker whose scheduler has gone retries: killed, not asked
            proc.kill()
            proc.wait(30)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_above_a_quarter_of_the_memory_the_features_go_to_disk_with_a_line_saying_why() -> None:
    import psutil

    total = psutil.virtual_memory().total
    lines = _Lines()
    log = logging.getLogger("dedup")
    level = log.level
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    try:
        with dask.config.set(scheduler="sync"):
            assert memory.workers_memory() == total  # one process: the machine's memory
            assert memory.features_on_disk(None, 1000, 128) is False
            assert not lines.lines
            assert memory.features_on_disk(None, total // 100, 128) is True
            assert len(lines.lines) == 1 and "--features-in-memory" in lines.lines[0]
            assert memory.features_on_disk(False, total // 100, 128) is False  # the user's choice wins
            assert memory.features_on_disk(True, 10, 128) is True
    finally:
        log.removeHandler(lines)
        log.setLevel(level)


def test_the_two_choices_exclude_each_other() -> None:
    res = run_dedup("run", "in", "out", "--features-on-disk", "--features-in-memory")
    assert res.returncode == 2
    assert "not allowed with argument" in res.stderr.strip().splitlines()[-1]


def test_steps_that_never_read_signatures_read_the_features_from_disk_without_them(tmp_path) -> None:
    from functools import partial

    import dask.dataframe as dd
    import numpy as np
    import pandas as pd
    from dask.dataframe.dask_expr.io.io import FromMapProjectable

    from dedup.job.checkpoints import read_part
    from dedup.job.features import without_signatures
    from dedup.partition.features import SIG, features_meta, sig_payload

    meta = features_meta(4, np.dtype(object))
    paths = []
    for p in range(2):
        n = 5
        pd.DataFrame({"_id": [f"d{p}-{i}" for i in range(n)], "doc": np.arange(n) + 100 * p,
                      "tkey": np.arange(n, dtype=np.uint64), "tkey2": np.arange(n, dtype=np.uint64),
                      "source": np.full(n, -1, np.int32), "source_gram": np.full(n, -1, np.int64),
                      "skipped": np.zeros(n, bool), "hit": np.full(n, -1, np.int32),
                      "windows": np.zeros(n, np.int32), SIG: sig_payload(np.full((n, 4), p, np.uint32)).array,
                      }).to_parquet(tmp_path / f"part-{p}.parquet", index=False)
        paths.append(str(tmp_path / f"part-{p}.parquet"))
    on_disk = dd.from_map(partial(read_part, like=meta), paths, meta=meta, enforce_metadata=False)

    def read_columns(frame: dd.DataFrame) -> list[list[str]]:
        step = frame.map_partitions(len, meta=(None, "int64"))
        return [e.columns for e in step.expr.optimize(fuse=False).walk() if isinstance(e, FromMapProjectable)]

    assert read_columns(on_disk) == [list(meta.columns)]
    lean = without_signatures(on_disk)
    assert read_columns(lean) == [[c for c in meta.columns if c != SIG]]
    whole = on_disk.compute(scheduler="sync")
    pd.testing.assert_frame_equal(lean.compute(scheduler="sync"), whole.drop(columns=[SIG]))
    in_memory = dd.from_pandas(whole, npartitions=2)
    assert without_signatures(in_memory) is in_memory  # a projection there would be a task a partition


def _features_on_disk(tmp_path, parts: int = 2, n: int = 5):
    """Features of `parts` partitions of `n` documents written as `_materialise` writes them, and
    read back by `read_part`: (the frame read from disk, the same frame in memory)."""
    from functools import partial

    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    from dedup.job.checkpoints import read_part
    from dedup.partition.features import SIG, features_meta, sig_payload
    from dedup.partition.keyspace import doc_keys

    meta = features_meta(4, np.dtype(object))
    paths = []
    rng = np.random.default_rng(0)
    for p in range(parts):
        pd.DataFrame({"_id": [f"d{p}-{i}" for i in range(n)], "doc": doc_keys(p, n),
                      "tkey": np.arange(n, dtype=np.uint64), "tkey2": np.arange(n, dtype=np.uint64),
                      "source": np.full(n, -1, np.int32), "source_gram": np.full(n, -1, np.int64),
                      "skipped": np.zeros(n, bool), "hit": np.full(n, -1, np.int32),
                      "windows": np.zeros(n, np.int32),
                      SIG: sig_payload(rng.integers(0, 4, (n, 4)).astype(np.uint32)).array,
                      }).to_parquet(tmp_path / f"part-{p}.parquet", index=False)
        paths.append(str(tmp_path / f"part-{p}.parquet"))
    on_disk = dd.from_map(partial(read_part, like=meta), paths, meta=meta, enforce_metadata=False)
    return on_disk, dd.from_pandas(on_disk.compute(scheduler="sync"), npartitions=parts, sort=False)


def _reads(*frames) -> dict[str, tuple[list[str], int]]:
    """Every task of `frames`' one graph that reads features from disk: its columns and how many
    tasks take its result. A read that two steps take is held until both have run."""
    import dask
    from dask.core import get_dependencies

    graph = dict(dask.base.collections_to_expr(list(frames)).optimize().__dask_graph__())
    users: dict = {}
    for key in graph:
        for dep in get_dependencies(graph, key):
            users[dep] = users.get(dep, 0) + 1
    return {k: users.get(k, 0) for k in graph if str(k[0] if isinstance(k, tuple) else k).startswith("read_part")}


def test_each_step_reading_the_features_from_disk_reads_them_for_itself(tmp_path) -> None:
    """The two hops of a pair's scoring (its left document's partition, then its right one's) read the
    features by reads of their own, and a step without signatures never shares a read with one that
    takes them: a read two steps share stays in worker memory from the first to the second, every
    partition of it (at 10,000,000 documents more than two 2 GiB workers hold). The scores are those
    of the features held in memory."""
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd

    from dedup.config import Params
    from dedup.job.confirm import score_pairs
    from dedup.job.features import without_signatures
    from dedup.partition.confirm import ROUTED_META
    from dedup.partition.keyspace import doc_keys

    on_disk, in_memory = _features_on_disk(tmp_path)
    left, right = np.repeat(doc_keys(0, 5), 2), np.tile(doc_keys(1, 2), 5)
    routes = dd.from_pandas(pd.DataFrame({"left": left, "right": right, "same": np.zeros(10, bool)}).astype(
        ROUTED_META.dtypes.to_dict()), npartitions=2)
    params = Params(num_perm=4, num_bands=2, rows_per_band=2)
    scored = score_pairs(routes, on_disk, None, text_column="text", params=params, rows=10)
    reads = _reads(scored)
    assert len(reads) == 4 and set(reads.values()) == {1}, reads  # 2 partitions x 2 hops, each read by one task
    expected = score_pairs(routes, in_memory, None, text_column="text", params=params, rows=10)
    by = ["left", "right"]
    pd.testing.assert_frame_equal(scored.compute().sort_values(by).reset_index(drop=True),
                                  expected.compute().sort_values(by).reset_index(drop=True))

    whole = on_disk.map_partitions(len, meta=(None, "int64"))
    lean = without_signatures(on_disk).map_partitions(len, meta=(None, "int64"))
    assert set(_reads(whole, lean).values()) == {1}


def test_features_on_disk_keep_their_random_columns_plain_and_read_back_as_written(tmp_path) -> None:
    """The job's working files (features on disk, each stage's kept results) store signatures and hashes
    without a dictionary or compression (`io.working_options`): the same frame comes back."""
    import dask.dataframe as dd
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    from dedup.job.checkpoints import read_part, write_part
    from dedup.job.features import _materialise
    from dedup.partition.features import SIG, features_meta, sig_payload

    rng = np.random.default_rng(3)
    n = 3000
    frame = pd.DataFrame({"_id": np.arange(n, dtype=np.int64) * 7, "doc": np.arange(n, dtype=np.int64),
                          "tkey": rng.integers(1, 2**63, n, dtype=np.uint64), "tkey2": rng.integers(1, 2**63, n, dtype=np.uint64),
                          "source": np.full(n, -1, np.int32), "source_gram": np.full(n, -1, np.int64),
                          "skipped": np.zeros(n, bool), "hit": np.full(n, -1, np.int32),
                          "windows": np.zeros(n, np.int32),
                          SIG: sig_payload(rng.integers(0, 2**32, (n, 8), dtype=np.uint64).astype(np.uint32)).array})
    frame = frame.astype(features_meta(8, np.dtype(np.int64)).dtypes.to_dict())
    with dask.config.set(scheduler="sync"):
        on_disk = _materialise(dd.from_pandas(frame, npartitions=2, sort=False), str(tmp_path / "feat"))
        back = on_disk.compute()
    pd.testing.assert_frame_equal(back.reset_index(drop=True), frame)
    write_part(frame, str(tmp_path / "kept.parquet"))
    pd.testing.assert_frame_equal(read_part(str(tmp_path / "kept.parquet"), like=frame), frame)
    for path in [*sorted((tmp_path / "feat").glob("*.parquet")), tmp_path / "kept.parquet"]:
        group = pq.ParquetFile(path).metadata.row_group(0)
        chunks = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
        for name in (SIG, "tkey", "tkey2"):
            assert chunks[name].compression == "UNCOMPRESSED", (path.name, name)
        assert all("DICTIONARY" not in e for c in chunks.values() for e in c.encodings), path.name
        assert chunks["_id"].compression == "SNAPPY"
