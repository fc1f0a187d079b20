"""Dask DataFrame expressions of our own, for two steps where Dask's make more tasks than the work needs.

A task costs scheduler and worker time whatever it does, and every dependency between tasks adds
a round trip (docs/performance.md, Design choices).

- `persist`: `dask.persist` returns a DataFrame (`FromGraph`) whose partitions get new keys, each
  an alias task pointing at a result, and every later computation that uses the collection runs
  those tasks again: the job uses the features alone in five computations (80 alias tasks).
  `Persisted` names the results themselves, so a later graph holds no task for them at all.
- `gathered`: a small frame's rows gathered by one task and cut into pieces, one per output
  partition, with one task a partition (none for the smallest: the task using a piece takes it);
  `dask.delayed(nout=)` with `dd.from_delayed` made three (the piece, a container and the partition).
- `fused`: several collections computed or persisted together, each chain of per-partition steps
  one task a partition (Dask fuses the steps of one collection, not of several at once).
- `exchanged`: rows moved between few partitions by plain tasks: each input partition cut into
  one piece per output partition, each output partition the concatenation of its pieces. Dask's
  p2p shuffle pays a fixed cost (transfer tasks, a barrier, disk, unpack tasks) that a direct
  exchange of 16 x 16 pieces does not; its task count grows with the product of the partitions.
- `fanned`: each partition of a frame cut into the pieces of a run of output partitions, one
  task a partition to cut and one a piece: how a shuffle to groups of destinations
  (`dedup.job.routing.route_by`) ends, so it moves few large pieces instead of many small ones.
- `shuffled`: rows moved to the partition a column of theirs names, by dask's `Shuffle` (tasks in one
  process and between few partitions, else p2p on a cluster), the step its hash shuffles and
  `set_index` end with.
- `read_for`: a frame read from files (the input, the features on disk) read by tasks of its own for
  one step: Dask shares one read of each partition between every step of a computation that uses
  it, and holds it until the last has run.
"""

from __future__ import annotations

import functools
import operator
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import dask
import dask.dataframe as dd
import pandas as pd
from dask.base import tokenize
from dask.utils import funcname

from dedup.job.dask_internals import (
    ArrowStringConversion,
    Blockwise,
    Expr,
    FromGraph,
    FromMap,
    Shuffle,
    Task,
    TaskRef,
    new_collection,
)


class Persisted(FromGraph):
    """A persisted DataFrame whose partitions are its results' own keys (name, 0), (name, 1), ..."""

    # its own registry of live expressions by name: the name is that of the expression the
    # results were computed from, which must never be mistaken for this one
    _instances: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()

    @functools.cached_property
    def _name(self) -> str:
        return str(self.operand("keys")[0][0])

    def _layer(self) -> dict:
        return dict(self.operand("layer"))

    def __dask_tokenize__(self) -> str:
        """A token from the results' name, not from the results: held in this process, they are
        whole frames, which Dask's own token hashes byte by byte for every expression built on them."""
        if not self._determ_token:
            self._determ_token = tokenize("persisted", self._name)
        return self._determ_token


def persist(*collections: Any) -> Any:
    """dask.persist, each DataFrame of futures (a distributed client's) as a `Persisted`, returned
    once the results exist: one collection in, one out; a tuple for several, None passing through.
    The collections are optimized together first (`fused`), each chain of blockwise steps one task
    a partition, as `DataFrame.persist` does for one (`dask.persist` does not fuse).

    Why wait: a local cluster's scheduler builds the task graph from the expressions in a thread of
    this process, and under Python 3.11 an expression's cached properties (its `_meta`) take a lock
    shared by every instance of its class. Had this thread gone on building the next stage's
    expressions meanwhile, the two could each hold one such lock and wait for the other's: a hang.
    A later `compute` blocks until its results are back, so it does not need this."""
    given = fused(*[c for c in collections if c is not None])
    out = _held_here(given)
    if out is None:
        out = dask.persist(*given)
    if "distributed" in sys.modules:  # else there is no client, and no futures (`--threads`)
        from distributed import futures_of, wait

        futures = [f for c in out for f in futures_of(c)]
        if futures:
            wait(futures)
    it = iter(out)
    got = tuple(None if c is None else _without_aliases(next(it)) for c in collections)
    for c, g in zip(collections, got):
        if c is not None and g is not None and isinstance(getattr(g, "expr", None), Expr):
            _SOURCES[g.expr._name] = c.expr._name
            while len(_SOURCES) > _SOURCES_KEPT:
                _SOURCES.pop(next(iter(_SOURCES)))
    return got[0] if len(got) == 1 else got


_SOURCES: dict[str, str] = {}
"""The name of each persisted frame's expression before optimization, by the persisted frame's name
(the last `_SOURCES_KEPT`): optimizing renames the expressions it fuses."""
_SOURCES_KEPT = 1024


def persisted_from(frame: Any) -> str:
    """The name of the expression `frame` was persisted from (by `persist`), else its own name."""
    name = frame.expr._name
    return _SOURCES.get(name, name)


def persist_counting(frames: Sequence[Any], counts: Sequence[Any]) -> tuple[tuple[Any, ...], list[pd.DataFrame]]:
    """`persist` of `frames` and `counts` (small per-partition tallies) in one graph, so that what
    they share runs once, and each tally's partitions brought back as one frame, without a second
    graph: one round trip where a persist and then a compute of the tallies made two."""
    got = persist(*frames, *counts)
    got = got if isinstance(got, tuple) else (got,)
    return got[:len(frames)], [_rows_of(t) for t in got[len(frames):]]


def persisted_bytes(frame: Any) -> int | None:
    """The bytes a frame `persist` returned holds (Dask's `sizeof` of each partition, as the workers
    report it: one question to the scheduler, no task), or None when it was not persisted."""
    if not isinstance(getattr(frame, "expr", None), Persisted):
        return None
    parts = _results(frame)
    if not parts:
        return 0
    if isinstance(parts[0], pd.DataFrame):  # held in this process (`_held_here`)
        from dask.sizeof import sizeof

        return int(sum(sizeof(part) for part in parts))
    sizes = parts[0].client.nbytes(keys=[f.key for f in parts], summary=False)
    return int(sum(sizes.get(f.key, 0) for f in parts))


def _results(frame: Any) -> list[Any]:
    """A persisted frame's partitions in order: futures, or frames held in this process (`_held_here`)."""
    layer = frame.expr._layer()
    return [layer[key] for key in frame.expr.operand("keys")]


def _held_here(given: list[Any]) -> list[Any] | None:
    """`given` computed by the scheduler of this process (threads, or sync), each DataFrame as a
    `Persisted` of its results; None when a client's scheduler is in use, or not all are DataFrames.

    Why not `dask.persist`: without a client it names the DataFrame of results it returns by
    tokenizing the results themselves, hashing every byte of every persisted frame in this thread:
    1.7 of the 10.7 seconds of `dedup run --threads 2` at 204,000 documents."""
    from dedup.job.dask_internals import _ExprSequence, collections_to_expr, flatten, get_scheduler

    if not given or not all(isinstance(getattr(c, "expr", None), Expr) for c in given):
        return None
    schedule = get_scheduler(collections=given)
    if schedule is None or callable(getattr(getattr(schedule, "__self__", schedule), "persist", None)):
        return None
    expr = collections_to_expr(list(given)).optimize()
    assert isinstance(expr, _ExprSequence) and len(expr.operands) == len(given)
    keys = [list(flatten(k)) for k in expr.__dask_keys__()]
    every = [k for ks in keys for k in ks]
    results = dict(zip(every, schedule(expr, every)))
    return [new_collection(Persisted({k: results[k] for k in ks}, c._meta, c.divisions, ks, "persisted"))
            for c, ks in zip(given, keys)]


def _rows_of(frame: Any) -> pd.DataFrame:
    """A persisted frame's rows, its partitions concatenated in order (as `compute` gives them)."""
    if isinstance(frame.expr, Persisted):
        futures = _results(frame)
        if futures and isinstance(futures[0], pd.DataFrame):  # held in this process (`_held_here`)
            return pd.concat(futures, ignore_index=True)
        parts = futures[0].client.gather(futures) if futures else []
        return pd.concat(parts, ignore_index=True) if parts else frame._meta
    return frame.compute()  # held in this process already


def fused(*collections: Any) -> list[Any]:
    """The collections optimized together, each chain of per-partition steps fused into one task a
    partition, as a single DataFrame's own `optimize` (and so its `persist`) does. `dask.compute`,
    `dask.persist` and `Client.compute` optimize several collections without fusing them: every
    `map_partitions` of a stage was a task of its own a partition, its result handed to the next
    step through the scheduler. A step that several collections use stays one task of its own (it is
    never fused into one of its users). Anything but a DataFrame passes as it is."""
    frames_at = [i for i, c in enumerate(collections) if isinstance(getattr(c, "expr", None), Expr)]
    out = list(collections)
    if not frames_at:
        return out
    from dedup.job.dask_internals import _ExprSequence, optimize_blockwise_fusion

    exprs = _ExprSequence(*[collections[i].expr for i in frames_at]).optimize(fuse=False)
    for i, expr in zip(frames_at, optimize_blockwise_fusion(exprs).operands):
        out[i] = new_collection(expr)
    return out


def _without_aliases(collection: Any) -> Any:
    """`collection` as a `Persisted` when it is Dask's persisted DataFrame of futures with keys
    (name, 0 .. n-1); anything else (results held in this process, other keys) as it is."""
    expr = getattr(collection, "expr", None)
    if type(expr) is not FromGraph or "distributed" not in sys.modules:
        return collection
    from distributed import Future

    keys, layer = expr.operand("keys"), expr.operand("layer")
    names = {k[0] for k in keys if isinstance(k, tuple) and len(k) == 2}
    if (len(names) != 1 or [k[1] for k in keys] != list(range(len(keys)))
            or not all(isinstance(v, Future) for v in layer.values())):
        return collection
    return new_collection(Persisted(*expr.operands))


_TOKENS: dict[int, str] = {}
"""The token of each operand object of the expressions below, by its id while it lives (`_token_of`)."""


def _token_of(value: Any) -> Any:
    """`value`'s token for an expression's name, computed once per object: the optimizer makes new
    expressions each time it fuses steps, and tokenizing their metas and functions anew (pandas
    frames, partials) was most of the client's time optimizing a small job's graphs."""
    if isinstance(value, Expr):
        return value._name
    if value is None or isinstance(value, (int, str)):
        return value
    key = id(value)
    token = _TOKENS.get(key)
    if token is None:
        token = tokenize(value)
        try:
            weakref.finalize(value, _TOKENS.pop, key, None)
        except TypeError:  # an object without weak references: tokenized each time
            return token
        _TOKENS[key] = token
    return token


class _Named(Expr):
    """An expression of ours, its name from its operands' tokens computed once each (`_token_of`)."""

    def __dask_tokenize__(self) -> str:
        if not self._determ_token:
            self._determ_token = tokenize(type(self).__name__, *[_token_of(op) for op in self.operands])
        return self._determ_token


class Gathered(_Named):
    """Partition i holds piece i of `cut` applied to every partition of `frame` (one task)."""

    _parameters = ["frame", "cut", "npartitions", "meta"]

    @functools.cached_property
    def _meta(self) -> pd.DataFrame:
        return self.operand("meta")

    def _divisions(self) -> tuple:
        n = self.operand("npartitions")
        return tuple(range(n)) + (n - 1,)

    def _layer(self) -> dict:
        every = f"cut-{self._name}"  # the one task that gathers and cuts
        parts = [(self.frame._name, j) for j in range(self.frame.npartitions)]
        dsk: dict = {every: (self.operand("cut"), parts)}
        for i in range(self.operand("npartitions")):
            dsk[(self._name, i)] = (operator.getitem, every, i)
        return dsk


class Pieces(_Named):
    """One partition: `cut` applied to the list of `frame`'s partitions (the pieces `Piece` takes; its
    key names it, `pieces-...`)."""

    _parameters = ["frame", "cut", "meta"]

    @functools.cached_property
    def _meta(self) -> pd.DataFrame:
        return self.operand("meta")

    def _divisions(self) -> tuple:
        return (None, None)

    def _layer(self) -> dict:
        parts = [(self.frame._name, j) for j in range(self.frame.npartitions)]
        return {(self._name, 0): (self.operand("cut"), parts)}


class Piece(_Named, Blockwise):
    """Partition i is piece `which[i]` of a `Pieces`: a step per partition, so that the optimizer fuses it
    into the task that uses the piece, which then receives every piece. The piece numbers are a frame
    of their own (`which`, partition i holding i), not the partition's index: Dask's optimizer takes
    a selection of partitions (`.partitions[...]`) into the non-broadcast operands of a blockwise step."""

    _parameters = ["cut", "which", "meta"]

    @functools.cached_property
    def _meta(self) -> pd.DataFrame:
        return self.operand("meta")

    def _divisions(self) -> tuple:
        n = self.which.npartitions
        return tuple(range(n)) + (n - 1,)

    def _broadcast_dep(self, dep: Expr) -> bool:
        return dep._name == self.cut._name

    def _task(self, name: Any, index: int) -> Task:
        which = 0 if self.which.npartitions == 1 else index  # (a single partition is broadcast when fused)
        return Task(name, operator.getitem, TaskRef((self.cut._name, 0)), TaskRef((self.which._name, which)))


def _number(i: int) -> int:
    return i


def gathered(frame: dd.DataFrame, cut: Callable[[Sequence[pd.DataFrame]], list[pd.DataFrame]], npartitions: int,
             meta: pd.DataFrame, inline: bool = False) -> dd.DataFrame:
    """A frame of `npartitions` partitions (divisions 0 .. npartitions - 1): one task runs `cut` on the list
    of `frame`'s partitions, and partition i is the i-th frame it returns. `inline`: each piece is
    taken by the task that uses it (`Piece`), not by a task of its own: a task fewer a partition,
    but every worker that uses a piece receives them all (for frames of a few MiB at most)."""
    if inline:
        which = dd.from_map(_number, range(npartitions), meta=meta, enforce_metadata=False, label="piece-number")
        return new_collection(Piece(Pieces(frame.expr, cut, meta), which.expr, meta))
    return new_collection(Gathered(frame.expr, cut, npartitions, meta))


class _Moved(_Named):
    """Rows moved into `npartitions` partitions of unknown divisions, with the `meta` given."""

    @functools.cached_property
    def _meta(self) -> pd.DataFrame:
        return self.operand("meta")

    def _divisions(self) -> tuple:
        return (None,) * (self.operand("npartitions") + 1)


def group_starts(groups: int, npartitions: int) -> list[int]:
    """The first output partition of each of `groups` runs of `npartitions` consecutive partitions
    (and `npartitions` last): partition i is in run i * groups // npartitions."""
    return [-(-j * npartitions // groups) for j in range(groups)] + [npartitions]


class Fanned(_Moved):
    """Output partition i is piece i - start of `cut` applied to the partition of `frame` whose run
    (`group_starts`) holds i; `cut(part, start, stop)` returns the pieces of partitions start .. stop - 1."""

    _parameters = ["frame", "cut", "npartitions", "meta"]

    def _layer(self) -> dict:
        n = self.operand("npartitions")
        starts = group_starts(self.frame.npartitions, n)
        cut = f"cut-{self._name}"
        dsk: dict = {}
        for j, (lo, hi) in enumerate(zip(starts[:-1], starts[1:])):
            dsk[(cut, j)] = (self.operand("cut"), (self.frame._name, j), lo, hi)
            for i in range(lo, hi):
                dsk[(self._name, i)] = (operator.getitem, (cut, j), i - lo)
        return dsk


def fanned(frame: dd.DataFrame, cut: Callable[[pd.DataFrame, int, int], list[pd.DataFrame]], npartitions: int,
           meta: pd.DataFrame) -> dd.DataFrame:
    """A frame of `npartitions` partitions (unknown divisions), at least as many as `frame` has: partition
    j of `frame` holds the rows of the j-th run of them (`group_starts`), which `cut` splits."""
    return new_collection(Fanned(frame.expr, cut, npartitions, meta))


TASK_SHUFFLE_PIECES = 256
"""A shuffle of n partitions to k with n x k at most this runs as tasks when no method is configured
(on a cluster Dask's default is p2p, whose fixed cost, a barrier and its transfers staged on disk, is
most of a small shuffle's time): `dedup run --n-workers 2` at 1,000,000 documents (16 partitions) took
27.9 and 27.0 s wall with task shuffles against 31.4 and 28.1 s with p2p, in two interleaved pairs.
Larger shuffles keep p2p, whose memory stays bounded."""


def shuffled(frame: dd.DataFrame, column: str, npartitions: int) -> dd.DataFrame:
    """`frame`'s rows moved to the partition their integer `column` names (0 .. npartitions - 1), by the
    configured shuffle method, else as tasks between few partitions (`TASK_SHUFFLE_PIECES`) and by
    Dask's default (p2p on a cluster) beyond; the index is not kept. A p2p shuffle drops `column`, a
    task shuffle keeps it: select the columns wanted afterwards."""
    few = frame.npartitions * npartitions <= TASK_SHUFFLE_PIECES
    method = "tasks" if few and dask.config.get("dataframe.shuffle.method", None) is None else None
    return new_collection(Shuffle(frame.expr, column, npartitions, True, method))


class Exchanged(_Moved):
    """Partition j holds `join` of piece j of `split` applied to each partition of `frame`, in the
    order of `frame`'s partitions: a task a partition to split it, a task a piece to pick it (only the
    piece travels to the worker that joins it), a task an output partition to join its pieces."""

    _parameters = ["frame", "split", "join", "npartitions", "meta"]

    def _layer(self) -> dict:
        n, k = self.frame.npartitions, self.operand("npartitions")
        split, piece = f"split-{self._name}", f"piece-{self._name}"
        dsk: dict = {}
        for i in range(n):
            dsk[(split, i)] = (self.operand("split"), (self.frame._name, i))
            for j in range(k):
                dsk[(piece, i, j)] = (operator.getitem, (split, i), j)
        for j in range(k):
            dsk[(self._name, j)] = (self.operand("join"), [(piece, i, j) for i in range(n)])
        return dsk


def exchanged(frame: dd.DataFrame, split: Callable[[pd.DataFrame], list[pd.DataFrame]],
              join: Callable[[Sequence[pd.DataFrame]], pd.DataFrame], npartitions: int,
              meta: pd.DataFrame) -> dd.DataFrame:
    """A frame of `npartitions` partitions (unknown divisions): `split` cuts each of `frame`'s partitions
    into `npartitions` pieces, and output partition j is `join` of the j-th pieces, in partition order
    (so its rows' order is decided, whatever the scheduling). Its tasks number about
    frame.npartitions x npartitions: for few partitions (`dedup.job.routing.DIRECT_ROUTE_PIECES`)."""
    return new_collection(Exchanged(frame.expr, split, join, npartitions, meta))


def read_for(frame: dd.DataFrame, use: str) -> dd.DataFrame:
    """`frame`, read from its files by tasks of its own when it is read from files (named for `use`).
    Two steps of one computation that read the same files with a shuffle between them (the features
    of a pair's left document, then of its right; the input's texts before and after span dedup's
    moves) otherwise share one read of each partition, which the workers then hold until the second
    step has run, every partition of it at once: the whole input's texts, or at 10,000,000 documents
    more features than two 2 GiB workers hold. Read again, each read is released once its step has
    used it. As it is when the frame is held in memory (a caller's, or persisted)."""
    expr = file_read(frame)
    if expr is None:
        return frame
    label = f"{expr.label or funcname(expr.func)}_{use}"
    return new_collection(frame.expr.substitute(expr, expr.substitute_parameters({"label": label})))


def file_read(frame: dd.DataFrame) -> Any:
    """The expression reading `frame` from its files (`dd.from_map`), under Dask's conversion of its
    strings, or None: the frame is held in memory."""
    expr = frame.expr
    while isinstance(expr, ArrowStringConversion):
        expr = expr.frame
    return expr if isinstance(expr, FromMap) else None
