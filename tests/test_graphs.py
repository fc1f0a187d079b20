"""dedup.job.graphs: persisted frames that later graphs run no task for, one-task gathering, direct exchange."""

from __future__ import annotations

from functools import partial

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dedup.job.compute import compute
from dedup.job.graphs import Persisted, exchanged, fused, gathered, persist


def _double(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(v=d["v"] * 2)


def _plus_one(d: pd.DataFrame) -> pd.DataFrame:
    return d.assign(v=d["v"] + 1)


def _frame() -> dd.DataFrame:
    pdf = pd.DataFrame({"k": np.arange(40, dtype=np.int64), "v": np.arange(40, dtype=np.int64) * 3})
    return dd.from_pandas(pdf, npartitions=4, sort=False).map_partitions(_double)


def _task_prefixes(events: list[dict]) -> list[str]:
    return [(t["key"][0] if isinstance(t["key"], tuple) else str(t["key"])).rsplit("-", 1)[0] for t in events]


def test_a_persisted_frame_is_its_results_and_later_graphs_run_no_task_for_it(client) -> None:
    from distributed import Future, get_task_stream

    frame = _frame()
    want = frame.compute().assign(v=lambda d: d["v"] + 1)
    held = persist(frame)
    assert isinstance(held.expr, Persisted)
    graph = dict(held.__dask_graph__())
    assert len(graph) == 4 and all(isinstance(v, Future) for v in graph.values())
    assert sorted(graph) == sorted(held.__dask_keys__())
    with get_task_stream(client) as ts:
        got = held.map_partitions(_plus_one).compute()
    pd.testing.assert_frame_equal(got, want)
    ours = _task_prefixes(ts.data)  # the 4 partitions' tasks and the concatenation: none for `held`
    assert ours.count("_plus_one") == 4 and len(ours) == 5
    # Dask's own persisted frame runs an alias task for each partition in every later computation
    with get_task_stream(client) as ts:
        frame.persist().map_partitions(_plus_one).compute()
    assert len(ts.data) == len(ours) + 4


def test_several_collections_and_none_pass_through_in_order(client) -> None:
    a, none, b = persist(_frame(), None, _frame().map_partitions(_plus_one))
    assert none is None and isinstance(a.expr, Persisted) and isinstance(b.expr, Persisted)
    pd.testing.assert_frame_equal(b.compute(), a.compute().assign(v=lambda d: d["v"] + 1))


def test_collections_computed_together_fuse_their_steps_and_share_what_both_use(client) -> None:
    from distributed import get_task_stream

    both_use = _frame().map_partitions(_plus_one)  # read, _double, _plus_one: used by both results
    a = both_use.map_partitions(_double)
    b = both_use.map_partitions(_plus_one)
    want = dask.compute(a, b, scheduler="sync")
    with get_task_stream(client) as ts:
        got = compute(a, b)
    for g, w in zip(got, want):
        pd.testing.assert_frame_equal(g, w)
    ours = [p for p in _task_prefixes(ts.data) if p.endswith(("_double", "_plus_one"))]
    # the shared steps fused into one task a partition, run once; each result's own step once a partition
    assert sorted(ours) == ["_double"] * 4 + ["_double-_plus_one"] * 4 + ["_plus_one"] * 4
    # Dask on its own runs each of the four steps as a task of its own
    with get_task_stream(client) as ts:
        dask.compute(a, b)
    theirs = [p for p in _task_prefixes(ts.data) if p.endswith(("_double", "_plus_one"))]
    assert sorted(theirs) == ["_double"] * 8 + ["_plus_one"] * 8


def test_fused_passes_anything_but_a_frame_as_it_is() -> None:
    value = dask.delayed(sum)([1, 2])
    frame = _frame()
    got_value, got_frame = fused(value, frame)
    assert got_value is value and got_frame.npartitions == frame.npartitions
    pd.testing.assert_frame_equal(got_frame.compute(scheduler="sync"), frame.compute(scheduler="sync"))


_CALLS: list[int] = []


def _counted(d: pd.DataFrame) -> pd.DataFrame:
    _CALLS.append(len(d))
    return d


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_without_a_client_the_results_are_held_here_and_never_hashed(scheduler: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from dask import tokenize as tokenize_module

    frame = _frame().map_partitions(_counted)
    want = frame.compute(scheduler="sync").assign(v=lambda d: d["v"] + 1)
    _CALLS.clear()
    with dask.config.set(scheduler=scheduler):
        a, b = persist(frame, frame.map_partitions(_plus_one))
        assert isinstance(a.expr, Persisted) and isinstance(b.expr, Persisted)
        assert len(_CALLS) == 4  # what both use ran once a partition
        graph = dict(a.__dask_graph__())
        assert sorted(graph) == sorted(a.__dask_keys__()) and len(graph) == 4
        assert all(isinstance(v, pd.DataFrame) for v in graph.values())
        hashed: list[object] = []
        real = tokenize_module.normalize_token.dispatch(pd.DataFrame)
        monkeypatch.setitem(tokenize_module.normalize_token._lookup, pd.DataFrame,
                            lambda d: hashed.append(d) or real(d))
        got = a.map_partitions(_plus_one).compute()
        assert not hashed  # a later expression's name never hashes the frames held
        pd.testing.assert_frame_equal(got, want)
        pd.testing.assert_frame_equal(b.compute(), want)
        assert len(_CALLS) == 4  # and no computation ran their steps again
        assert a.map_partitions(_plus_one)._name != frame.map_partitions(_plus_one)._name


def _cut(parts: list[pd.DataFrame], n: int) -> list[pd.DataFrame]:
    whole = pd.concat(parts)
    return [whole[whole["k"] % n == i] for i in range(n)]


def test_gathered_is_one_task_that_cuts_and_one_task_a_piece() -> None:
    frame = _frame()
    out = gathered(frame, partial(_cut, n=3), 3, frame._meta)
    assert out.npartitions == 3
    own = set(out.__dask_graph__()) - set(frame.__dask_graph__())
    assert len(own) == 3 + 1
    got = dask.compute(*out.to_delayed(), scheduler="sync")
    whole = frame.compute(scheduler="sync")
    for i, part in enumerate(got):
        pd.testing.assert_frame_equal(part, whole[whole["k"] % 3 == i])


def _split_mod(part: pd.DataFrame, n: int) -> list[pd.DataFrame]:
    return [part[part["k"] % n == i] for i in range(n)]


def _join(pieces: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(pieces, ignore_index=True)


def test_exchanged_joins_each_partitions_pieces_in_partition_order() -> None:
    """A task a partition to split, a task a piece, a task an output partition; output partition i
    holds exactly the rows split sends to i, in the order of the input partitions and of their rows."""
    frame = _frame()
    out = exchanged(frame, partial(_split_mod, n=3), _join, 3, frame._meta)
    assert out.npartitions == 3
    assert not out.known_divisions
    own = set(out.__dask_graph__()) - set(frame.__dask_graph__())
    assert len(own) == 4 + 4 * 3 + 3
    got = dask.compute(*out.to_delayed(), scheduler="sync")
    whole = frame.compute(scheduler="sync")
    for i, part in enumerate(got):
        pd.testing.assert_frame_equal(part, whole[whole["k"] % 3 == i].reset_index(drop=True))


def test_exchanged_on_a_cluster_gives_what_one_process_gives(client) -> None:
    frame = _frame()
    out = persist(exchanged(frame, partial(_split_mod, n=5), _join, 5, frame._meta))
    got = compute(*out.to_delayed())
    want = dask.compute(*exchanged(frame, partial(_split_mod, n=5), _join, 5, frame._meta).to_delayed(),
                        scheduler="sync")
    assert len(got) == 5
    for a, b in zip(got, want):
        pd.testing.assert_frame_equal(a, b)
