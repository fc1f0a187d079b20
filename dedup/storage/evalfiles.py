"""Protected (eval) files as people keep them: records of texts, whatever the format.

- `.jsonl` / `.ndjson`: each line a record, labelled `line N`; its texts are every string value
  except those under label keys (`LABEL_KEYS`).
- `.json`: an array (records `[i]`) or an object (records `key K`), same string rule.
- `.parquet`: each row a record (`row N`); its texts are the values of the string columns
  (string, large_string, lists of them) whose names are not label keys.
- anything else given by name (`.txt`, `.md`, ...): the whole file is one record, `file`.
- a directory: the files of the kinds above below it, recursively, sorted; any other file there
  is named and refused; names starting with `.` or `_` are skipped.
Compressed files (`.gz`, `.bz2`, `.xz`, `.zst`, ... as fsspec infers them) are read through their
compression and judged by the suffix before it. Text is UTF-8 (a BOM is dropped) or, with a
byte-order mark, UTF-16; anything else is refused naming the file and the byte offset.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from typing import Any

import fsspec
from fsspec.utils import infer_compression

from dedup.storage.safety import UsageError

LABEL_KEYS = frozenset({"case_id", "id", "tags", "scorer_args"})
"""Keys (and Parquet columns) whose values are labels, not text a model is tested on."""

RECORD_KINDS = (".jsonl", ".ndjson", ".json", ".parquet")
TEXT_KINDS = (".txt", ".text", ".md")
"""Suffixes accepted inside a protected directory (besides RECORD_KINDS)."""


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value, skipping the values of label keys."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in LABEL_KEYS:
                yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def _kind(path: str) -> str:
    """The suffix that says the format, after any compression suffix (`a.jsonl.gz` -> `.jsonl`)."""
    name = path.rsplit("/", 1)[-1].lower()
    if infer_compression(name):
        name = name.rsplit(".", 1)[0]
    return "." + name.rsplit(".", 1)[-1] if "." in name else ""


def decode(data: bytes, path: str) -> str:
    """UTF-8 (BOM dropped), or UTF-16 with a byte-order mark; else a UsageError naming the byte offset."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise UsageError(f"Protected file {path}: invalid UTF-16 at byte {exc.start}.") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"Protected file {path} is not UTF-8 (byte {exc.start}); save it as UTF-8 or UTF-16 "
                         "with a byte-order mark.") from None


def _read_bytes(path: str) -> bytes:
    with fsspec.open(path, "rb", compression="infer") as fh:
        return fh.read()


def files_of(path: str) -> list[str]:
    """The protected files a path stands for: itself, or the accepted files below a directory."""
    fs, root = fsspec.core.url_to_fs(path)
    if not fs.exists(root):
        raise UsageError(f"Protected file {path!r} does not exist.")
    if not fs.isdir(root):
        return [path]
    found: list[str] = []
    refused: list[str] = []
    for f in sorted(fs.find(root)):
        rel = f[len(root.rstrip("/")) + 1:]
        if any(part.startswith((".", "_")) for part in rel.split("/")):
            continue
        full = os.path.join(path, rel) if "://" not in path else f"{path.rstrip('/')}/{rel}"
        (found if _kind(f) in RECORD_KINDS + TEXT_KINDS else refused).append(full)
    if refused:
        raise UsageError(f"Protected directory {path!r} holds files of no protected kind, e.g. {refused[:3]}; "
                         f"accepted: {', '.join(RECORD_KINDS + TEXT_KINDS)} (optionally compressed). "
                         "Move the others out or name the files one by one.")
    if not found:
        raise UsageError(f"Protected directory {path!r} holds no protected file.")
    return found


def records(path: str) -> Iterator[tuple[str, list[str]]]:
    """(record label, its texts) for every record of one protected file, in file order."""
    kind = _kind(path)
    if kind == ".parquet":
        yield from _parquet_records(path)
        return
    text = decode(_read_bytes(path), path)
    if kind in (".jsonl", ".ndjson"):
        for lineno, line in enumerate(io.StringIO(text), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}: line {lineno} is not valid JSON ({exc.msg}); fix or remove that line.") from None
            yield f"line {lineno}", list(strings(record))
    elif kind == ".json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not valid JSON at line {exc.lineno} ({exc.msg}).") from None
        if isinstance(doc, list):
            for i, record in enumerate(doc):
                yield f"[{i}]", list(strings(record))
        elif isinstance(doc, dict):
            for key, record in doc.items():
                if key not in LABEL_KEYS:
                    yield f"key {key}", list(strings(record))
        else:
            yield "file", list(strings(doc))
    else:
        yield "file", [text]


def _parquet_records(path: str) -> Iterator[tuple[str, list[str]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def texty(t: pa.DataType) -> bool:
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return texty(t.value_type)
        return pa.types.is_string(t) or pa.types.is_large_string(t) or t == pa.string_view()

    try:
        with fsspec.open(path, "rb") as fh:
            pf = pq.ParquetFile(fh)
            cols = [f.name for f in pf.schema_arrow if f.name not in LABEL_KEYS and texty(f.type)]
            table = pf.read(columns=cols)
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"Protected file {path} is not readable Parquet ({exc}).") from None
    if not cols:
        raise UsageError(f"Protected file {path} has no string column (label columns {sorted(LABEL_KEYS)} are skipped).")
    columns = [table.column(c).to_pylist() for c in cols]
    for row in range(table.num_rows):
        yield f"row {row}", list(strings([col[row] for col in columns]))

