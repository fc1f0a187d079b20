"""Stage results kept on disk as the job goes, so that the same command resumes an interrupted run.

Each finished stage leaves, in the staging directory (`_stages/<stage>/`), its frames as Parquet (a
file a partition), its small tables, and last a `_done.json` holding the values later stages need
and the report as it stood. The staging directory also holds the run's fingerprint
(`dedup.storage.staging.RESUME`): a run with the same fingerprint takes the directory over
(`Staging`) and reuses every finished stage (`Checkpoints.reused`); the write stage also reuses each
partition it finished (`dedup.job.write`). Nothing stale can be reused: any change of input file,
protected file, parameter, option or version changes the fingerprint, and the run starts over.
Each `_done.json` also records the stamp of every file the stage kept (a Parquet part's size, rows
and footer hash; a pickle's size and hash): before anything is reused, every stage's files are
checked, and from the first stage with a file missing or damaged on, the stages are computed again,
with a line naming the file (`Checkpoints.verify`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import pickle
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import dask.dataframe as dd
import pandas as pd
import pyarrow as pa

from dedup.job.compute import compute
from dedup.job.counts import Report
from dedup.job.graphs import persisted_from
from dedup.storage import stamps
from dedup.storage.staging import Staging

log = logging.getLogger("dedup")

Through = Callable[[str, dd.DataFrame], dd.DataFrame]
"""A stage's kept frame, by name, with its parts written by its own tasks (`Checkpoints.through`)."""


def as_is(name: str, frame: dd.DataFrame) -> dd.DataFrame:
    """The `Through` of a job that keeps nothing: the frame itself."""
    return frame


STAGES_DIR = "_stages"
DONE = "_done.json"
META = "_meta.pkl"
"""Beside a kept frame's parts: its Dask meta (an empty frame with its dtypes), pickled."""


class Checkpoints:
    """The kept results of one staging directory: those an interrupted run finished, and this run's."""

    def __init__(self, staging: Staging | None, order: Sequence[str] = ()) -> None:
        """`order`: the stages whose results are kept, in the order they run (`dedup.job.analysis.ORDER`)."""
        self.staging = staging
        self.order = tuple(order)
        self.done: dict[str, dict[str, Any]] = {}
        self.first_run: str | None = None
        self.reused_stages: list[str] = []
        self.through_names: dict[tuple[str, str], str] = {}
        """(stage, frame) -> the name of the frame `through` returned: its parts are written by its own tasks."""
        if staging is None:
            return
        self.root = f"{staging.tmp}/{STAGES_DIR}"
        for stage in self.order:
            try:
                with staging.fs.open(f"{self.root}/{stage}/{DONE}", "r") as fh:
                    self.done[stage] = json.load(fh)
            except (FileNotFoundError, ValueError):
                continue
        self.verify()
        self.reused_stages = [s for s in self.order if s in self.done]
        if self.done:
            staging.resumable = True

    def verify(self) -> None:
        """Keep only the stages before the first whose kept files are not all there as they were
        written (each stage reads the ones before it): that one and the rest are computed again, and
        their marks are removed, so that a damaged file can never stop the same command twice."""
        assert self.staging is not None
        for i, stage in enumerate(s for s in self.order if s in self.done):
            problem = self._damaged(stage)
            if problem is None:
                continue
            dropped = [s for s in self.order if s in self.done][i:]
            log.warning("a kept result of the interrupted run is damaged (%s): computing %s again", problem,
                        ", ".join(dropped))
            for s in dropped:
                del self.done[s]
                self.staging.fs.rm(f"{self.root}/{s}/{DONE}")
            return

    def _damaged(self, stage: str) -> str | None:
        """What is wrong with the files `stage` kept, or None when each is the one it wrote."""
        assert self.staging is not None
        fs, files = self.staging.fs, self.done[stage].get("files")
        if not isinstance(files, dict):
            return f"{self.root}/{stage}/{DONE} records no files"
        parquet = {n: s for n, s in files.items() if "footer" in s}
        try:
            stamps.verify(fs, self.root, parquet)
        except stamps.Damaged as exc:
            return str(exc)
        for name, want in files.items():
            if name in parquet:
                continue
            try:
                with fs.open(f"{self.root}/{name}", "rb") as fh:
                    blob = fh.read()
            except FileNotFoundError:
                return f"{self.root}/{name} is missing"
            if _digest(blob) != want.get("digest"):
                return f"{self.root}/{name} is not the file that was kept ({len(blob):,} bytes)"
        return None

    @classmethod
    def nowhere(cls) -> Checkpoints:
        """Nothing kept, nothing reused (a job on a frame of the caller's, with no staging directory)."""
        return cls(None)

    def reused(self, stage: str) -> dict[str, Any] | None:
        """The values an interrupted run saved for `stage`, when it finished it; else None (and
        `stage` is the first this run computes, if none was before it)."""
        if stage in self.done:
            return self.done[stage]["values"]
        if self.first_run is None:
            self.first_run = stage
        return None

    def restore(self, report: Report) -> None:
        """Put the report as it stood after the last reused stage back (counts, and their seconds)."""
        if not self.reused_stages:
            return
        saved = self.done[self.reused_stages[-1]]["report"]
        seconds = {**saved.get("seconds", {}), **report.seconds}
        for f in dataclasses.fields(Report):
            if f.name in saved:
                setattr(report, f.name, saved[f.name])
        report.seconds = seconds

    def maybe_frame(self, stage: str, name: str) -> dd.DataFrame | None:
        """`frame`, or None if `stage` saved None under `name`."""
        return self.frame(stage, name) if name in self.done[stage]["frames"] else None

    def frame(self, stage: str, name: str) -> dd.DataFrame:
        """A frame `stage` saved, read back a partition a task, with its dtypes."""
        assert self.staging is not None  # only a stage done is read back
        with self.staging.fs.open(f"{self.root}/{stage}/{name}/{META}", "rb") as fh:
            meta = pickle.load(fh)
        paths = [self._part(stage, name, i) for i in range(self.done[stage]["frames"][name])]
        return dd.from_map(partial(read_part, like=meta), paths, meta=meta, enforce_metadata=False,
                           label=f"kept-{name}")

    def table(self, stage: str, name: str) -> pd.DataFrame | None:
        """A small table `stage` saved (None if it saved None)."""
        if name not in self.done[stage]["tables"]:
            return None
        assert self.staging is not None
        with self.staging.fs.open(f"{self.root}/{stage}/{name}.pkl", "rb") as fh:
            return pickle.load(fh)

    def through(self, stage: str, name: str, frame: dd.DataFrame) -> dd.DataFrame:
        """`frame`, each of its partitions also written as the part `save` would keep for `stage`'s
        frame `name`, by the task that computes it: persisted, it is kept without a round trip of
        its own (`save` stamps the files). Without a staging directory, `frame` itself."""
        if self.staging is None:
            return frame
        self.staging.fs.makedirs(f"{self.root}/{stage}/{name}", exist_ok=True)
        out = frame.map_partitions(_write_through, self._part(stage, name, "{}"), meta=frame._meta)
        self.through_names[(stage, name)] = out._name
        return out

    def save(self, stage: str, report: Report, values: Mapping[str, Any] | None = None,
             frames: Mapping[str, dd.DataFrame | None] | None = None,
             tables: Mapping[str, pd.DataFrame | None] | None = None, written: Mapping[str, dd.DataFrame] | None = None
             ) -> None:
        """Keep a finished stage: its frames (persisted ones: nothing is computed again), its small
        tables, then the mark that it finished, with `values` and the report. `written`: frames the
        stage itself wrote in `directory` (as `part-NNNNNN.parquet`). From then on a failed run leaves
        its staging directory for the next run to resume from."""
        if self.staging is None:
            return
        fs = self.staging.fs
        fs.makedirs(f"{self.root}/{stage}", exist_ok=True)
        kept = {name: f for name, f in (frames or {}).items() if f is not None}
        # frames whose own tasks wrote their parts: those persisted from what `through` returned
        written = {**(written or {}), **{name: f for name, f in kept.items()
                                         if self.through_names.get((stage, name)) == persisted_from(f)}}
        kept = {name: f for name, f in kept.items() if name not in written}
        files: dict[str, dict[str, Any]] = {}  # the stamp of every file kept, relative to the stages' root

        def put(name: str, value: Any) -> None:
            blob = pickle.dumps(value)
            with fs.open(f"{self.root}/{name}", "wb") as fh:
                fh.write(blob)
            files[name] = {"size": len(blob), "digest": _digest(blob)}

        for name, f in {**kept, **(written or {})}.items():
            fs.makedirs(f"{self.root}/{stage}/{name}", exist_ok=True)
            put(f"{stage}/{name}/{META}", f._meta)
        lazy = [f.map_partitions(_write_part, self._part(stage, name, "{}"), meta=PART_STAMP_META)
                for name, f in kept.items()]
        for name, got in zip(kept, compute(*lazy) if lazy else []):  # stamped by the tasks that wrote them
            for i, row in enumerate(got.itertuples(index=False)):
                files[f"{stage}/{name}/part-{i:06d}.parquet"] = {"size": row.size, "rows": row.rows, "footer": row.footer}
        for name, f in (written or {}).items():
            parts = [f"{stage}/{name}/part-{i:06d}.parquet" for i in range(f.npartitions)]
            files.update(stamps.stamps(fs, self.root, parts))
        saved = [name for name, t in (tables or {}).items() if t is not None]
        for name in saved:
            put(f"{stage}/{name}.pkl", (tables or {})[name])
        done = {"values": dict(values or {}), "report": dataclasses.asdict(report), "tables": saved,
                "frames": {name: f.npartitions for name, f in {**kept, **(written or {})}.items()}, "files": files}
        with fs.open(f"{self.root}/{stage}/{DONE}", "w") as fh:
            json.dump(done, fh)
        self.staging.resumable = True

    def _part(self, stage: str, name: str, i: int | str) -> str:
        number = i if isinstance(i, str) else f"{i:06d}"
        return f"{self.directory(stage, name)}/part-{number}.parquet"

    def directory(self, stage: str, name: str) -> str | None:
        """Where the parts of frame `name` of `stage` are kept (None when nothing is kept)."""
        return None if self.staging is None else f"{self.staging.url}/{STAGES_DIR}/{stage}/{name}"

    def finished(self) -> list[str]:
        """The stages kept so far (reused or finished by this run), in order."""
        if self.staging is None:
            return []
        fs = self.staging.fs
        return [s for s in self.order if s in self.done or fs.exists(f"{self.root}/{s}/{DONE}")]

    def summary(self) -> dict[str, Any] | None:
        """The manifest's `resumed`: the first stage run again, the stages reused and the seconds the
        interrupted runs spent on them (`seconds.total` counts this run's only); None if none was."""
        if not self.reused_stages:
            return None
        spent = self.done[self.reused_stages[-1]]["report"].get("seconds", {})
        return {"from": self.first_run or "commit", "reused": list(self.reused_stages),
                "reused_seconds": round(sum(spent.get(s, 0.0) for s in self.reused_stages), 3),
                "of": "dry run" if self.staging is not None and self.staging.from_dry_run else "interrupted run"}


PART_STAMP_META = pd.DataFrame({"size": pd.Series(dtype="int64"), "rows": pd.Series(dtype="int64"),
                                "footer": pd.Series(dtype=object)})


def _write_part(frame: pd.DataFrame, pattern: str, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Write one partition of a kept frame; its stamp (`dedup.storage.stamps.stamp`), for the resume's check."""
    import fsspec

    assert partition_info is not None
    path = pattern.format(f"{partition_info['number']:06d}")
    write_part(frame, path)
    fs, local = fsspec.core.url_to_fs(path)
    got = stamps.stamp(fs, local)
    return pd.DataFrame({"size": [got["size"]], "rows": [got["rows"]], "footer": [got["footer"]]})


def _write_through(frame: pd.DataFrame, pattern: str, partition_info: dict[str, Any] | None = None
                   ) -> pd.DataFrame:
    """`frame`, once written as the part `pattern` names for its partition (`Checkpoints.through`)."""
    assert partition_info is not None
    write_part(frame, pattern.format(f"{partition_info['number']:06d}"))
    return frame


def _digest(blob: bytes) -> str:
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def write_part(frame: pd.DataFrame, path: str) -> None:
    """One frame as a Parquet file, index dropped, written whole or not at all (`io.write_atomic`)."""
    import pyarrow.parquet as pq

    from dedup.storage import io

    table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    io.write_atomic(path, lambda fh: pq.write_table(table, fh, **io.working_options(table.column_names)))


def read_part(path: str, like: pd.DataFrame | None = None, columns: list[str] | None = None) -> pd.DataFrame:
    """A file `write_part` wrote, with the dtypes of `like` (binary columns as Arrow's, as they were).
    `columns`: only those (Dask passes the columns a computation uses, `dd.from_map`'s projection), so
    that a step reading the features from disk without their signatures reads a tenth of their bytes.
    A local file is read by Arrow itself: through a Python file object every read waits for the GIL,
    which a busy worker's other threads hold (docs/performance.md: 2.3 s of reads instead of 3.7 s
    at 1,000,000 documents)."""
    import fsspec
    import pyarrow.parquet as pq
    from fsspec.implementations.local import LocalFileSystem

    fs, local = fsspec.core.url_to_fs(path)
    if isinstance(fs, LocalFileSystem):
        table = pq.read_table(local, columns=columns, use_threads=False)
    else:
        with fs.open(local, "rb") as fh:
            table = pq.read_table(fh, columns=columns, use_threads=False)
    mapper = {pa.large_binary(): pd.ArrowDtype(pa.large_binary()), pa.binary(): pd.ArrowDtype(pa.binary())}.get
    frame = table.to_pandas(types_mapper=mapper, use_threads=False)
    if like is None:
        return frame
    if columns is not None:
        like = like[list(columns)]
    differ = {c: t for c, t in like.dtypes.items() if c in frame.columns and frame[c].dtype != t}
    return frame.astype(differ)[list(like.columns)] if differ else frame[list(like.columns)]


def resumable(task: Callable[..., pd.DataFrame], marks: str | None, *args: Any,
              partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """`task(*args)` for one partition, unless a run on this staging directory already did it: each
    result is kept in `marks` as its task ends, and returned from there (`marks` None: no keeping)."""
    if marks is None:
        return task(*args, partition_info=partition_info)
    import fsspec

    from dedup.storage import io
    from dedup.storage.staging import check_live

    assert partition_info is not None
    path = f"{marks}/part-{partition_info['number']:06d}.pkl"
    fs, local = fsspec.core.url_to_fs(path)
    if fs.exists(local):
        try:
            with fs.open(local, "rb") as fh:
                return pickle.load(fh)
        except Exception as exc:  # a damaged mark: the partition is written again, as if it had none
            logging.getLogger("distributed.worker").warning("dedup: the mark %s is damaged (%s): writing the "
                                                            "partition again", path, exc)
    out = task(*args, partition_info=partition_info)
    check_live(fs, local)
    io.write_atomic(path, lambda fh: pickle.dump(out, fh))
    return out
