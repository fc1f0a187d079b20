"""Protected (eval) files as people keep them: records of texts, whatever the format.

- `.jsonl` / `.ndjson`: each line a record, labelled `line N`; its texts are every string value
  except those under label keys (`LABEL_KEYS`).
- `.json`: an array (records `[i]`) or an object (records `key K`), same string rule.
- `.parquet`: each row a record (`row N`); its texts are the values of the string columns
  (string, large_string, lists of them) whose names are not label keys.
- `.csv` / `.tsv`: each row a record (`row N`, from 0 after any header); its texts are all its cells,
  those past the header's width too (a passage with unquoted commas), of any length.
  A first row of column names (`HEADER_CELL`: every cell a short name, none repeated) is a header:
  not text, and the columns it names as label keys are skipped.
- anything else given by name (`.txt`, `.md`, ...): the whole file is one record, `file`.
A record with an `id` (or `case_id`) value of its own is labelled with it too: `line 26 (id q-17)`.
- a directory: the files of the kinds above below it, recursively, sorted; any other file there
  is named and refused; names starting with `.` or `_` are skipped, and so are dataset cards
  (`README.md` and the like, `DATASET_CARDS`), logged: they describe the evals, they are not
  evals (name one to protect it).
Compressed files (`.gz`, `.bz2`, `.xz`, `.zst`, ... as fsspec infers them) are read through their
compression and judged by the suffix before it. Text is UTF-8 (a BOM is dropped) or, with a
byte-order mark, UTF-16; anything else is refused naming the file and the byte offset.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

import fsspec
from fsspec.utils import infer_compression

from dedup.storage.safety import UsageError

LABEL_KEYS = frozenset({"case_id", "id", "tags", "scorer_args"})
"""Keys (and Parquet columns) whose values are labels, not text a model is tested on."""

log = logging.getLogger("dedup")

RECORD_KINDS = (".jsonl", ".ndjson", ".json", ".parquet", ".csv", ".tsv")
TEXT_KINDS = (".txt", ".text", ".md")
"""Suffixes accepted inside a protected directory (besides RECORD_KINDS)."""
DATASET_CARDS = re.compile(r"(readme|dataset_card|datacard)(\.(md|txt|rst))?", re.IGNORECASE)
"""File names skipped inside a protected directory: the cards that describe a dataset."""
HEADER_CELL = re.compile(r"[A-Za-z_][\w .-]{0,63}")
"""A cell of a CSV header row: a column name (starts with a letter or `_`, at most 64 characters)."""


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
    cards: list[str] = []
    for f in sorted(fs.find(root)):
        rel = f[len(root.rstrip("/")) + 1:]
        if any(part.startswith((".", "_")) for part in rel.split("/")):
            continue
        full = os.path.join(path, rel) if "://" not in path else f"{path.rstrip('/')}/{rel}"
        if DATASET_CARDS.fullmatch(rel.rsplit("/", 1)[-1]):
            cards.append(rel)
            continue
        (found if _kind(f) in RECORD_KINDS + TEXT_KINDS else refused).append(full)
    if cards:
        log.info("protected directory %s: skipped %d dataset card(s) (%s): they describe the evals; name a file "
                 "with --protected to protect it", path, len(cards), ", ".join(cards[:5]) + (", ..." if len(cards) > 5
                                                                                            else ""))
    if refused:
        raise UsageError(f"Protected directory {path!r} holds files of no protected kind, e.g. {refused[:3]}; "
                         f"accepted: {', '.join(RECORD_KINDS + TEXT_KINDS)} (optionally compressed). "
                         "Move the others out or name the files one by one.")
    if not found:
        raise UsageError(f"Protected directory {path!r} holds no protected file.")
    return found


ID_KEYS = ("id", "case_id")
"""Label keys (columns) whose value names a record: a record's label ends with it, `line 26 (id q-17)`,
the name a team uses for an eval record."""
ID_CHARS = 80
"""At most this many characters of a record's id go into its label."""


def _named(label: str, record: Any) -> str:
    """`label` with the record's own id (`ID_KEYS`; a string or an integer) when it has one."""
    if isinstance(record, dict):
        for key in ID_KEYS:
            value = record.get(key)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
                shown = " ".join(str(value).split())
                return f"{label} (id {shown[:ID_CHARS - 1] + '…' if len(shown) > ID_CHARS else shown})"
    return label


def records(path: str) -> Iterator[tuple[str, list[str]]]:
    """(record label, its texts) for every record of one protected file, in file order."""
    kind = _kind(path)
    if kind == ".parquet":
        yield from _parquet_records(path)
        return
    text = decode(_read_bytes(path), path)
    if kind in (".csv", ".tsv"):
        yield from _csv_records(text, "\t" if kind == ".tsv" else ",", path)
    elif kind in (".jsonl", ".ndjson"):
        for lineno, line in enumerate(io.StringIO(text), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{path}: line {lineno} is not valid JSON ({exc.msg}); fix or remove that line.") from None
            yield _named(f"line {lineno}", record), list(strings(record))
    elif kind == ".json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not valid JSON at line {exc.lineno} ({exc.msg}).") from None
        if isinstance(doc, list):
            for i, record in enumerate(doc):
                yield _named(f"[{i}]", record), list(strings(record))
        elif isinstance(doc, dict):
            for key, record in doc.items():
                if key not in LABEL_KEYS:
                    yield f"key {key}", list(strings(record))  # the key names it
        else:
            yield "file", list(strings(doc))
    else:
        yield "file", [text]


def _csv_records(text: str, delimiter: str, path: str) -> Iterator[tuple[str, list[str]]]:
    """The rows of a CSV (TSV) text as records: every cell, after a header row if it has one."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, len(text) + 1))  # a cell may be as long as the file (long-context evals)
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    except csv.Error as exc:
        raise UsageError(f"Protected file {path}: not readable as {'TSV' if delimiter == chr(9) else 'CSV'} "
                         f"({exc}).") from None
    finally:
        csv.field_size_limit(limit)
    labels: set[int] = set()
    names: dict[str, int] = {}
    if rows and all(HEADER_CELL.fullmatch(c.strip()) for c in rows[0]) and \
            len({c.strip().lower() for c in rows[0]}) == len(rows[0]):
        labels = {i for i, c in enumerate(rows[0]) if c.strip().lower() in LABEL_KEYS}
        names = {c.strip().lower(): i for i, c in enumerate(rows[0]) if c.strip().lower() in ID_KEYS}
        rows = rows[1:]
    for i, row in enumerate(rows):  # every cell, those past the header's width too (an unquoted comma)
        record = {k: row[j] for k, j in names.items() if j < len(row)}
        yield _named(f"row {i}", record), [c for j, c in enumerate(row) if c and j not in labels]


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
            named = [k for k in ID_KEYS if k in pf.schema_arrow.names]
            table = pf.read(columns=cols + named)
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"Protected file {path} is not readable Parquet ({exc}).") from None
    if not cols:
        raise UsageError(f"Protected file {path} has no string column (label columns {sorted(LABEL_KEYS)} are skipped).")
    columns = [table.column(c).to_pylist() for c in cols]
    ids = {k: table.column(k).to_pylist() for k in named}
    for row in range(table.num_rows):
        yield _named(f"row {row}", {k: v[row] for k, v in ids.items()}), list(strings([col[row] for col in columns]))

