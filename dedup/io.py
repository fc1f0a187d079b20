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
import pyarrow.parquet as pq

IGNORED = ("_SUCCESS", "_metadata", "_common_metadata", "_dedup.json")


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
            found = [f for f in fs.find(root) if not Path(f).name.startswith((".", "_"))]
        else:
            found = fs.glob(root) if any(c in root for c in "*?[") else [root]
        if not found:
            raise FileNotFoundError(f"No input files at {path!r}.")
        return sorted(f"{proto}://{f}" for f in found)
    if any(c in path for c in "*?["):
        files = sorted(f for f in glob.glob(path) if os.path.isfile(f))
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
    if not files:
        raise FileNotFoundError(f"Input {path!r} holds no files.")
    for f in files:
        check_parquet(f)
    return files


def check_parquet(path: str) -> None:
    """Raise naming `path` when it is not a readable Parquet file."""
    try:
        pq.ParquetFile(path).metadata  # noqa: B018 - reads the footer
    except Exception as exc:  # pyarrow raises several types for bad files
        raise ValueError(f"Input file {path!r} is not a readable Parquet file ({type(exc).__name__}: {exc}). "
                         "Remove it from the input or repair it.") from None


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
            roots = [src] + ([src.parent] if src.is_file() else [])
            if out == src or src in out.parents or (src.is_file() and out == src.parent):
                raise ValueError(f"OUTPUT {output!r} is or lies inside the input {i!r}; choose another directory.")
            del roots
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
