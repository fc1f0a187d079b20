"""Reading Parquet shards and writing output atomically (staging directory, then rename)."""

from __future__ import annotations

import glob
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def input_files(path: str) -> list[str]:
    """The Parquet files of a file, a directory of shards or a glob, sorted; local inputs checked.

    Raises naming the path when nothing is found, or naming a file in the directory that is not
    Parquet (a stray file would otherwise be read as a shard or silently skipped).
    """
    if _is_url(path):
        fs, root = fsspec.core.url_to_fs(path)
        proto = path.split("://", 1)[0]
        if fs.isdir(root):
            return sorted(f"{proto}://{f}" for f in fs.find(root) if not Path(f).name.startswith((".", "_")))
        found = fs.glob(root) if any(c in root for c in "*?[") else ([root] if fs.exists(root) else [])
        if not found:
            raise FileNotFoundError(f"No input files at {path!r}.")
        return sorted(f"{proto}://{f}" for f in found)
    if any(c in path for c in "*?["):
        files = sorted(f for f in glob.glob(path) if os.path.isfile(f))
        if not files:
            raise FileNotFoundError(f"No input files match {path!r}.")
    elif os.path.isdir(path):
        files = sorted(
            os.path.join(dirpath, name)
            for dirpath, dirnames, names in os.walk(path)
            for name in names
            if not name.startswith((".", "_")) and not any(part.startswith((".", "_")) for part in
                                                           Path(os.path.relpath(dirpath, path)).parts)
        )
    elif os.path.isfile(path):
        files = [path]
    else:
        raise FileNotFoundError(f"Input {path!r} does not exist.")
    return files


def read_schema(path: str) -> pa.Schema:
    """The Arrow schema of one Parquet file; raises naming the file when it is not readable Parquet."""
    try:
        if _is_url(path):
            with fsspec.open(path, "rb") as fh:
                return pq.ParquetFile(fh).schema_arrow
        return pq.ParquetFile(path).schema_arrow
    except Exception as exc:  # pyarrow raises several types for bad files
        raise ValueError(f"Input file {path!r} is not a readable Parquet file ({type(exc).__name__}: {exc}). "
                         "Remove it from the input or repair it.") from None


def _schema_or_error(path: str) -> pa.Schema | Exception:
    try:
        return read_schema(path)
    except ValueError as exc:
        return exc


def check_inputs(files: Sequence[str], id_column: str, text_column: str) -> None:
    """Every file is Parquet and has the id and text columns with usable types; errors name the file.

    Footers are read by a small thread pool (object stores answer slowly, one at a time); the
    first bad file in sorted order is the one reported.
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(files)))) as pool:
        schemas = list(pool.map(_schema_or_error, files))
    for f, schema in zip(files, schemas):
        if isinstance(schema, Exception):
            raise schema
        for role, name in (("id", id_column), ("text", text_column)):
            if name not in schema.names:
                raise ValueError(f"{f}: the {role} column {name!r} is missing; columns found: {schema.names}. "
                                 f"Pass --{role}-column to name the right one.")
        ttype = schema.field(text_column).type
        if not (pa.types.is_string(ttype) or pa.types.is_large_string(ttype) or pa.types.is_null(ttype)
                or ttype == pa.string_view()):
            raise ValueError(f"{f}: the text column {text_column!r} has type {ttype}; it must hold strings "
                             "(cast it, or name the right column with --text-column).")
        itype = schema.field(id_column).type
        if not (pa.types.is_integer(itype) or pa.types.is_string(itype) or pa.types.is_large_string(itype)
                or itype == pa.string_view()):
            raise ValueError(f"{f}: the id column {id_column!r} has type {itype}; ids must be strings or integers.")


def null_id_rows(files: Sequence[str], id_column: str, limit: int = 5) -> list[tuple[str, int]]:
    """(file, row) of the first null ids, reading only the id column of each file."""
    found: list[tuple[str, int]] = []
    for f in files:
        with fsspec.open(f, "rb") as fh:
            col = pq.read_table(fh, columns=[id_column]).column(0)
        if col.null_count:
            rows = pc.indices_nonzero(pc.is_null(col)).to_pylist()
            found += [(f, r) for r in rows[: limit - len(found)]]
        if len(found) >= limit:
            break
    return found


def id_locations(files: Sequence[str], id_column: str, ids: Sequence[Any], limit: int = 10) -> list[tuple[str, int, Any]]:
    """(file, row, id) where the given ids occur, for error messages."""
    wanted = pa.array(list(ids))
    found: list[tuple[str, int, Any]] = []
    for f in files:
        with fsspec.open(f, "rb") as fh:
            col = pq.read_table(fh, columns=[id_column]).column(0)
        if pa.types.is_integer(col.type) != pa.types.is_integer(wanted.type):
            col = col.cast(pa.string())
            wanted = wanted.cast(pa.string())
        rows = pc.indices_nonzero(pc.is_in(col, value_set=wanted)).to_pylist()
        found += [(f, r, col[r].as_py()) for r in rows[: limit - len(found)]]
        if len(found) >= limit:
            break
    return found


def _local(path: str) -> Path | None:
    if _is_url(path):
        return None
    return Path(path.removeprefix("file://")).resolve()


def check_output(inputs: Sequence[str], output: str, overwrite: bool) -> None:
    """Refuse an OUTPUT that is or lies inside an input, or is non-empty without overwrite."""
    out = _local(output)
    if out is not None:
        for i in inputs:
            src = _local(i)
            if src is None:
                continue
            if out == src or src in out.parents or (src.is_file() and out == src.parent):
                raise ValueError(f"OUTPUT {output!r} is or lies inside the input {i!r}; choose another directory.")
    fs, root = fsspec.core.url_to_fs(output)
    if fs.exists(root):
        if not fs.isdir(root):
            raise ValueError(f"OUTPUT {output!r} exists and is a file; give a directory path.")
        if fs.ls(root) and not overwrite:
            raise FileExistsError(f"OUTPUT {output!r} is not empty; pass --overwrite to replace it "
                                  "(it is replaced only once the new output is complete).")


class Staging:
    """A temporary sibling of OUTPUT; `commit` renames it into place, replacing an old OUTPUT last."""

    def __init__(self, output: str) -> None:
        self.output = output.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.output)
        parent, name = self.root.rsplit("/", 1) if "/" in self.root else (".", self.root)
        token = uuid.uuid4().hex[:12]
        self.tmp = f"{parent}/.{name}.dedup-tmp-{token}"
        self.old = f"{parent}/.{name}.dedup-old-{token}"
        self.fs.makedirs(parent, exist_ok=True)

    @property
    def url(self) -> str:
        proto = self.output.split("://", 1)[0] + "://" if _is_url(self.output) else ""
        return proto + self.tmp

    def write_json(self, name: str, obj: Any) -> None:
        with self.fs.open(f"{self.tmp}/{name}", "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=True)
            fh.write("\n")

    def write_empty(self, id_column: str, text_column: str, tag: bool) -> None:
        """An empty Parquet shard with the id, text (and minhash_cluster) columns."""
        fields = [pa.field(id_column, pa.string()), pa.field(text_column, pa.string())]
        if tag:
            fields.append(pa.field("minhash_cluster", pa.string()))
        self.fs.makedirs(self.tmp, exist_ok=True)
        with self.fs.open(f"{self.tmp}/part-00000-of-00001.parquet", "wb") as fh:
            pq.write_table(pa.schema(fields).empty_table(), fh)

    def remove(self, name: str) -> None:
        """Delete an intermediate entry of the staging directory, if present."""
        path = f"{self.tmp}/{name}"
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def commit(self) -> None:
        if self.fs.exists(self.root):
            self.fs.mv(self.root, self.old, recursive=True)
        self.fs.mv(self.tmp, self.root, recursive=True)
        if self.fs.exists(self.old):
            self.fs.rm(self.old, recursive=True)

    def discard(self) -> None:
        if self.fs.exists(self.tmp):
            self.fs.rm(self.tmp, recursive=True)


def parquet_rows(fs: Any, directory: str) -> int:
    """Total rows of the Parquet files in a directory, from their footers."""
    total = 0
    for f in fs.ls(directory, detail=False):
        if f.endswith(".parquet"):
            with fs.open(f, "rb") as fh:
                total += pq.ParquetFile(fh).metadata.num_rows
    return total
