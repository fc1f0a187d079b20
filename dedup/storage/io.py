"""Small Parquet look-ups for error messages and accounting (where ids occur, rows written), and
files written whole or not at all."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dedup.storage.files import open_input

RANDOM_COLUMNS = frozenset({"sig", "signature", "key", "tkey", "tkey2", "h"})
"""Columns of random bits in dedup's own files (the features' `SIG`, the index's signatures, band keys,
text hashes): neither a dictionary nor compression shrinks them, and trying both only costs time
writing and reading."""


def working_options(columns: Iterable[str]) -> dict[str, Any]:
    """`pq.write_table` options for a working file, one the job writes and reads back itself (features
    on disk, each stage's kept results): no dictionary, whose values are mostly distinct, and no
    compression of random columns. In one process a partition of 65,536 features reads back in a
    tenth of the time (docs/performance.md): a dictionary that overflows into plain pages, then
    snappy, dominated the read."""
    return {"use_dictionary": False, "compression": {c: "none" if c in RANDOM_COLUMNS else "snappy" for c in columns}}


def null_id_rows(files: Sequence[str], id_column: str, limit: int = 5) -> list[tuple[str, int]]:
    """(file, row) of the first null ids, reading only the id column of each file."""
    found: list[tuple[str, int]] = []
    for f in files:
        with open_input(f) as fh:
            col = pq.read_table(fh, columns=[id_column]).column(0)
        if col.null_count:
            rows = pc.indices_nonzero(pc.is_null(col)).to_pylist()
            found += [(f, r) for r in rows[: limit - len(found)]]
        if len(found) >= limit:
            break
    return found


def parquet_rows(fs: Any, directory: str) -> int:
    """Total rows of the output shards under a directory (any depth; `_`/`.` entries skipped), from their footers."""
    total = 0
    for f in fs.find(directory):
        rel = f[len(directory.rstrip("/")) + 1:]
        if not any(part.startswith(("_", ".")) for part in rel.split("/")):
            with fs.open(f, "rb") as fh:
                total += pq.ParquetFile(fh).metadata.num_rows
    return total


def write_atomic(path: str, write: Callable[[Any], None]) -> None:
    """Write a file whole or not at all: `write(fh)` fills a temporary file beside it, renamed into
    place once closed (on an object store an object appears only when its upload completes)."""
    import os
    import uuid

    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    fs, p = fsspec.core.url_to_fs(path)
    parent = p.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    if not isinstance(fs, LocalFileSystem):
        with fs.open(p, "wb") as fh:
            write(fh)
        return
    tmp = f"{p}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        with pa.OSFile(tmp, "wb") as fh:  # Arrow's own file: see `dedup.storage.shards.open_output`
            write(fh)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
