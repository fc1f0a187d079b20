"""Workers size frames by their arrays (`dedup.job.frame_size`): the same bytes Dask's estimate
counts, without building a Series a column; frames holding Python objects keep Dask's estimate."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dedup.job import frame_size
from dedup.partition.features import sig_payload


def _dask_estimate(df: pd.DataFrame) -> int:
    from dask.sizeof import sizeof

    sizeof(pd.DataFrame())
    f = sizeof.dispatch(pd.DataFrame)
    while getattr(f, "dedup_frame_bytes", False):  # registered here: Dask's is the one ours falls back to
        f = next(c.cell_contents for c in f.__closure__ if callable(c.cell_contents))
    return int(f(df))


def _frames() -> dict[str, pd.DataFrame]:
    n = 5_000
    rng = np.random.default_rng(0)
    return {
        "integers": pd.DataFrame({"left": np.arange(n), "right": rng.integers(0, 9, n), "kind": np.zeros(n, np.uint8)}),
        "features": pd.DataFrame({"_id": pd.Series([f"doc-{i:08d}" for i in range(n)], dtype="str"),
                                  "doc": np.arange(n), "tkey": rng.integers(0, 2**63, n).astype(np.uint64),
                                  "sig": sig_payload(rng.integers(0, 2**32, (n, 16)).astype(np.uint32)).array}),
        "arrow": pd.DataFrame({"t": pd.array(["x" * 40] * n, dtype=pd.ArrowDtype(pa.large_string())),
                               "v": pd.array(np.arange(n, dtype=np.float64), dtype="Float64")}),
        "empty": pd.DataFrame({"a": np.zeros(0, np.int64)}),
    }


@pytest.mark.parametrize("name", list(_frames()))
def test_array_frames_weigh_what_dask_counts(name: str) -> None:
    df = _frames()[name]
    ours, dasks = frame_size.frame_bytes(df, _dask_estimate), _dask_estimate(df)
    assert abs(ours - dasks) <= 0.02 * dasks + 64 * len(df.columns) + 1200 * len(df.columns)


def test_frames_holding_python_objects_keep_dasks_estimate() -> None:
    df = pd.DataFrame({"n": np.arange(300), "texts": pd.Series([[("k", "a text " * (i % 7))] for i in range(300)],
                                                             dtype=object)})
    seen: list[pd.DataFrame] = []

    def objects(frame: pd.DataFrame) -> int:
        seen.append(frame)
        return 12345

    assert frame_size.frame_bytes(df, objects) == 12345 and seen == [df]
    py = pd.DataFrame({"s": pd.array(["a", "b"], dtype=pd.StringDtype("python"))})
    assert frame_size.frame_bytes(py, objects) == 12345


def test_registered_once_for_dask_and_on_the_workers(client) -> None:
    from dask.sizeof import sizeof

    frame_size.register()
    frame_size.register()  # idempotent: no estimate wrapped twice
    f = sizeof.dispatch(pd.DataFrame)
    assert getattr(f, "dedup_frame_bytes", False)
    inner = next(c.cell_contents for c in f.__closure__ if callable(c.cell_contents))
    assert not getattr(inner, "dedup_frame_bytes", False)
    df = _frames()["integers"]
    assert sizeof(df) == frame_size.frame_bytes(df, inner)

    def on_worker() -> bool:
        from dask.sizeof import sizeof as s

        return bool(getattr(s.dispatch(pd.DataFrame), "dedup_frame_bytes", False))

    # local workers are forked from the process that loaded the job's modules (`dedup.job.preforked`)
    assert set(client.run(on_worker).values()) == {True}
