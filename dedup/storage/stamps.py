"""What identifies one version of a Parquet file, read from its footer alone: size, rows, footer hash.

An index records the stamp of every file it points at (the output's shards and its own files), and
`--against` compares them before any work: a file rewritten, truncated, replaced by another run's
or filtered since changes its footer (row counts, byte offsets, statistics, schema) or its size, so
a later run never compares new documents with rows that are not the ones indexed. Reading a
footer costs two small reads, whatever the file's size.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MAGIC = b"PAR1"
THREADS = 16
"""Footers read at once: on an object store each is two requests' latency."""


class Damaged(ValueError):
    """A file that is not the version a stamp recorded; the message names it and what changed."""


def stamp(fs: Any, path: str) -> dict[str, Any]:
    """{"size", "rows", "footer"} of one Parquet file; raises `Damaged` when it is not one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        size = int(fs.size(path))
    except FileNotFoundError:
        raise Damaged(f"{path} is missing") from None
    with fs.open(path, "rb") as fh:
        footer, end = read_footer(fh, size, path)
    try:
        rows = pq.read_metadata(pa.BufferReader(MAGIC + footer + end)).num_rows
    except (OSError, ValueError) as exc:
        raise Damaged(f"{path} has an unreadable Parquet footer ({exc})") from None
    return {"size": size, "rows": int(rows), "footer": footer_digest(footer)}


def read_footer(fh: Any, size: int, path: str) -> tuple[bytes, bytes]:
    """The footer bytes of the open Parquet file `fh` of `size` bytes, and its last 8 bytes (length and
    magic): two small reads; raises `Damaged` when there is none."""
    if size < 12:
        raise Damaged(f"{path} is not a Parquet file ({size} bytes)")
    fh.seek(size - 8)
    end = fh.read(8)
    length = struct.unpack("<i", end[:4])[0]
    if end[4:] != MAGIC or not 0 < length <= size - 12:
        raise Damaged(f"{path} is not a Parquet file (no footer: truncated or overwritten?)")
    fh.seek(size - 8 - length)
    return fh.read(length), end


def footer_digest(footer: bytes) -> str:
    """A Parquet footer's hash: it holds every column chunk's offsets, sizes and statistics, so a file
    rewritten with other values almost always has another."""
    return hashlib.blake2b(footer, digest_size=16).hexdigest()


def stamps(fs: Any, root: str, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The stamp of each file `root/name`, keyed by name (footers read by a few threads)."""
    with ThreadPoolExecutor(max_workers=max(1, min(THREADS, len(names)))) as pool:
        found = list(pool.map(lambda n: stamp(fs, f"{root}/{n}"), names))
    return dict(zip(names, found))


def _differs(path: str, was: Mapping[str, Any], now: dict[str, Any]) -> str | None:
    if was.get("rows") != now["rows"]:
        return f"{path} holds {now['rows']:,} rows, {was.get('rows'):,} when indexed"
    if was.get("size") != now["size"]:
        return f"{path} is {now['size']:,} bytes, {was.get('size'):,} when indexed"
    if was.get("footer") != now["footer"]:
        return f"{path} was rewritten since it was indexed (its Parquet footer differs)"
    return None


def verify(fs: Any, root: str, recorded: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise `Damaged` naming the first file (sorted by name) under `root` that is missing, not Parquet,
    or not the version `recorded` says."""
    names = sorted(recorded)

    def check(name: str) -> str | None:
        path = f"{root}/{name}"
        try:
            return _differs(path, recorded[name], stamp(fs, path))
        except Damaged as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=max(1, min(THREADS, len(names)))) as pool:
        problems = [p for p in pool.map(check, names) if p]
    if problems:
        more = f" (and {len(problems) - 1} more file(s))" if len(problems) > 1 else ""
        raise Damaged(problems[0] + more)


def seal(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` with a "checksum" of its other fields, so that an edit of the file holding it shows."""
    body = {k: v for k, v in meta.items() if k != "checksum"}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return {**body, "checksum": hashlib.blake2b(blob, digest_size=16).hexdigest()}


def sealed(meta: Mapping[str, Any]) -> bool:
    """Whether `meta`'s checksum matches its other fields."""
    return "checksum" in meta and seal(dict(meta))["checksum"] == meta["checksum"]


VERSION_KEYS = ("mtime", "ETag", "etag", "LastModified", "last_modified", "updated", "generation", "md5Hash")
"""What file systems report of a file's version, besides its size (local, S3, GCS, Azure, ...)."""


def file_versions(paths: Sequence[str]) -> list[dict[str, Any]]:
    """What identifies the version of each file, as its file system reports it (one request each, a few
    at a time). A local file: its size, modification and change times and inode (a write, a copy or a
    rename changes the change time or the inode, whatever the modification time was set back to); an
    object: its size and etag, version or generation. `dedup.job.fingerprint.fingerprint` adds the footer's hash."""
    import os

    import fsspec

    from dedup.storage.safety import is_url

    def version(path: str) -> dict[str, Any]:
        if not is_url(path):  # a local name as it is (`::` or `[` in it are part of the name)
            st = os.stat(path.removeprefix("file://"))
            return {"size": st.st_size, "mtime": str(st.st_mtime_ns), "ctime": str(st.st_ctime_ns),
                    "inode": f"{st.st_dev}:{st.st_ino}"}
        fs, p = fsspec.core.url_to_fs(path)
        info = fs.info(p)
        return {"size": int(info.get("size") or 0),
                **{k: str(info[k]) for k in VERSION_KEYS if info.get(k) is not None}}

    with ThreadPoolExecutor(max_workers=max(1, min(THREADS, len(paths)))) as pool:
        return list(pool.map(version, paths))
