"""The index's files (`dedup.storage.index`): written sorted by the workers, read back by key range."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from dedup.core.order import lex_order
from dedup.partition.codec import fixed_binary
from dedup.storage.files import open_output
from dedup.storage.index import (
    BANDS,
    IDS,
    KEY_PREFIXES,
    KEY_SPACE,
    IndexPart,
    band_file,
    docs_file,
    ids_file,
    sizes_file,
)
from dedup.storage.io import RANDOM_COLUMNS

if TYPE_CHECKING:
    pass


BAND_SCHEMA = pa.schema([("key", pa.uint32()), ("doc", pa.int64())])
"""A band file's columns (`index.KEY_PREFIXES`): the upper 32 bits of a band key, the document's key."""
OLD_BAND_SCHEMA = pa.schema([("band", pa.uint8()), ("key", pa.uint64()), ("doc", pa.int64()), ("tkey", pa.uint64()),
                             ("tkey2", pa.uint64())])
"""A band file's columns in formats 3 to 6 (before format 3, without the text hashes)."""
PREFIX_SHIFT = np.uint64(32)
DOCS_ROW_GROUP = 2048
"""Rows per row group of a docs file: a later run reads only the groups holding documents it needs."""


DICTIONARY_COLUMNS = ("band", "file")
"""Index columns with few distinct values: dictionary-encoded. The rest are compressed with zstd."""
BAND_ENCODINGS = {"key": "DELTA_BINARY_PACKED", "doc": "BYTE_STREAM_SPLIT"}
"""How a band file stores its columns: the sorted key prefixes as differences between neighbours
(about 13 bits a row where the values take 32), the document keys byte plane by byte plane, which
zstd then shrinks far better (their upper bytes are mostly zero): about 2.4 bytes a row, not 3.0."""


def _write_sorted(table: pa.Table, keys: tuple[str, ...], path_url: str, row_group: int = 64 * 1024,
                  encodings: dict[str, str] | None = None) -> int:
    """Write `table` sorted by `keys` (the first one primary); they must make rows unique, so the file's
    bytes never depend on the order rows arrived in (the shuffle's, which differs between schedulers)."""
    import fsspec
    import pyarrow.parquet as pq

    order = lex_order([table.column(k).to_numpy() for k in keys])
    from dedup.storage.staging import check_live

    fs, path = fsspec.core.url_to_fs(path_url)
    check_live(fs, path)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    names = table.column_names
    with open_output(fs, path) as fh:
        pq.write_table(table.take(pa.array(order)), fh, row_group_size=row_group,
                       use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names] or False,
                       compression={c: "none" if c in RANDOM_COLUMNS else "zstd" for c in names},
                       column_encoding=encodings)
    return int(fs.size(path))


def write_docs(table: pa.Table, root: str, p: int) -> int:
    """Write one input partition's index documents (`docs_table`); bytes written."""
    return _write_sorted(table, ("doc",), docs_file(root, p), DOCS_ROW_GROUP)


def key_prefixes(keys: NDArray[np.uint64]) -> NDArray[np.uint32]:
    """The upper 32 bits of each band key: what a band file holds of it (`index.KEY_PREFIXES`)."""
    return (np.asarray(keys, dtype=np.uint64) >> PREFIX_SHIFT).astype(np.uint32)


def write_bands(rows: Any, root: str, m: int) -> int:
    """Write one bucket range's band rows as (key prefix, doc), sorted by both; bytes written."""
    table = pa.table({"key": key_prefixes(rows["key"].to_numpy(np.uint64)), "doc": rows["doc"].to_numpy(np.int64)},
                     schema=BAND_SCHEMA)
    return _write_sorted(table, ("key", "doc"), band_file(root, m), encodings=BAND_ENCODINGS)


def write_ids(h: NDArray[np.uint64], ids: Any, id_type: pa.DataType, root: str, m: int) -> int:
    """Write one id range's (h, id), sorted by h (then id: two ids may share a 64-bit hash); bytes written."""
    return _write_sorted(pa.table({"h": pa.array(h, pa.uint64()), "id": pa.array(ids, id_type)}), ("h", "id"),
                         ids_file(root, m))


def write_sizes(table: pa.Table, root: str, m: int) -> int:
    """Write one id range's cluster counts (`dedup.storage.index_counts`), sorted by h then id; bytes written."""
    return _write_sorted(table, ("h", "id"), sizes_file(root, m))


def read_range(part: IndexPart, kind: str, m: int, parts: int, column: str) -> pa.Table:
    """The rows of `part`'s band (id, or size) files whose `column` is in range m of `parts`."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    tables = []
    for path, lo, hi, whole in part.files_for(kind, m, parts):
        try:
            dataset = ds.dataset(path, format="parquet")
        except (FileNotFoundError, OSError) as exc:
            raise RuntimeError(f"The index {part.url} is damaged: {path} cannot be read ({exc}).") from exc
        if whole:  # the usual case: this run's ranges are the index's (no filter to evaluate)
            tables.append(dataset.to_table())
            continue
        if kind == BANDS and part.format >= KEY_PREFIXES:  # every prefix the range's keys can have
            shift = int(PREFIX_SHIFT)
            flt = (pc.field(column) >= pa.scalar(lo >> shift, pa.uint32())) & \
                  (pc.field(column) <= pa.scalar((hi - 1) >> shift, pa.uint32()))
        else:
            flt = pc.field(column) >= pa.scalar(lo, pa.uint64())
            if hi < KEY_SPACE:
                flt = flt & (pc.field(column) < pa.scalar(hi, pa.uint64()))
        tables.append(dataset.to_table(filter=flt))
    if tables:
        return pa.concat_tables(tables)
    if kind == BANDS:
        return (BAND_SCHEMA if part.format >= KEY_PREFIXES else OLD_BAND_SCHEMA).empty_table()
    return pa.table({"h": pa.array([], pa.uint64())})


def read_bands(part: IndexPart, m: int, parts: int) -> pa.Table:
    """The index rows of `part` whose band key is in bucket range m of `parts` (format 7 on: whose key
    prefix can be one of that range's)."""
    return read_range(part, BANDS, m, parts, "key")


ID_CONFLICTS = ("repeated", "existing")


def id_conflicts(rows: Any, parts: Sequence[IndexPart], k: int, write_root: str | None, id_type: pa.DataType,
                 partition_info: dict[str, Any] | None = None) -> Any:
    """In one id-hash range: this run's (doc, _id) whose id occurs twice (kind 0) or is in an earlier
    index (kind 1); with `write_root`, this range's ids file is written there."""
    import pandas as pd

    assert partition_info is not None
    m = partition_info["number"]
    ids = rows["_id"]
    if write_root is not None:
        write_ids(rows["_h"].to_numpy(np.uint64), ids.tolist(), id_type, write_root, m)
    repeated = rows[ids.duplicated(keep=False).to_numpy()]
    found = [repeated[["doc", "_id"]].assign(kind=np.int8(0))]
    if parts and len(rows):
        hs = np.unique(rows["_h"].to_numpy(np.uint64))
        for part in parts:
            old = read_range(part, IDS, m, k, "h")
            if old.num_rows == 0:
                continue
            old = old.filter(pa.array(np.isin(old.column("h").to_numpy(), hs)))
            if old.num_rows:
                seen = pd.Series(old.column("id").to_numpy(zero_copy_only=False), dtype=object)
                hit = ids.astype(object).isin(seen).to_numpy()
                found.append(rows[hit][["doc", "_id"]].assign(kind=np.int8(1)))
    out = pd.concat(found, ignore_index=True)
    return out.drop_duplicates(["doc", "kind"]).reset_index(drop=True)



def docs_table(ids: Any, roots: Any, keys: NDArray[np.int64], tkeys: tuple[NDArray[np.uint64], NDArray[np.uint64]],
               sigs: NDArray[np.uint32], files: list[str | None], rows: NDArray[np.int64], id_type: pa.DataType,
               root_docs: NDArray[np.int64] | None = None) -> pa.Table:
    """The index rows of one partition's documents: key, id, its cluster's root id and (for a near
    duplicate) its root's key, text hashes, signature, and where it is in OUTPUT (file None: not
    written there). `sigs` holds the signatures of the documents not written there only, in order:
    a document whose text OUTPUT holds has a null signature (`index.SIGNATURES_FROM_TEXT`)."""
    written = np.array([f is not None for f in files], dtype=bool)
    full = np.zeros((len(keys), sigs.shape[1] if sigs.ndim == 2 else 0), dtype=np.uint32)
    full[~written] = sigs
    root_docs = keys if root_docs is None else root_docs
    return pa.table({"doc": pa.array(keys, pa.int64()), "id": pa.array(ids, id_type), "root": pa.array(roots, id_type),
                     "root_doc": pa.array(root_docs, pa.int64(), mask=root_docs == keys),
                     "tkey": pa.array(tkeys[0], pa.uint64()), "tkey2": pa.array(tkeys[1], pa.uint64()),
                     "signature": fixed_binary(full, ~written),
                     "file": pa.array(files, pa.string()).dictionary_encode(),
                     "row": pa.array(rows, pa.int64(), mask=~written)})
