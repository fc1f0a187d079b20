"""`OUTPUT/_index/`: what a later run needs to compare new documents with the ones this run kept.

An on-disk LSH index, written by the workers while the job runs, read back by `--against`:

    _index/index.json           parameters' fingerprint, id type, layout, counts, earlier indexes
    _index/bands/part-M.parquet (band, key, doc, tkey, tkey2) of this run's documents whose band key
                                k falls in bucket range M (k // step == M), sorted by key, with
                                their text hashes (format 3)
    _index/docs/part-P.parquet  (doc, id, root, root_doc, tkey, tkey2, signature, file, row) of each
                                document this run kept and of each near duplicate it found (with
                                the band rows of its text), input partition P, sorted by doc: its
                                cluster's root id (its own id when kept) and, for a near duplicate,
                                its root's key (format 5: in this run's key space, where the
                                earlier indexes follow its own partitions in the order of
                                index.json's sources), its text hashes, its signature, and where it
                                is in OUTPUT (null when it was dropped)
    _index/ids/part-M.parquet   (h, id) of every document this run read, kept or not, whose id
                                hash h (`dedup.core.hashing.id_hashes`) falls in range M, sorted by h

`doc` is the run's own document key (partition << 32 | row). The band files are range
partitioned exactly like the bucket shuffle, so a later run joins each of its bucket partitions
with the index rows of the same key range, without shuffling the index. A later run treats an
indexed near duplicate as its root (whose id it takes): a new document like it joins that
cluster, as it would in one run over both. A band row whose document is not in the docs files
(a contaminated document, or a same-text copy) is never matched. A run made with `--against`
references the earlier indexes in its index.json instead of copying them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from dedup.config import Params
from dedup.core.text import TEXT_DTYPE
from dedup.partition.codec import fixed_binary, from_fixed_binary
from dedup.storage import stamps
from dedup.storage.safety import MANIFEST, UsageError, is_url, read_json, read_manifest

if TYPE_CHECKING:
    from dedup.partition.keyspace import Placement

INDEX_DIR = "_index"
INDEX_META = "index.json"
BANDS, DOCS, IDS = "bands", "docs", "ids"
FORMAT = 5
FORMATS_READ = (1, 2, 3, 4, 5)
"""Format 1 indexes hold kept documents only (no `root` column); formats 1 and 2 have no text hashes
in their band files (a later run fetches them from the docs files): both are read as they are."""
TKEYS_IN_BANDS = 3
"""The first format whose band rows carry their document's text hashes."""
VERIFIED = 4
"""The first format whose index.json records the stamp of every file it points at (`dedup.storage.stamps`)."""
ROOTS_LOCATED = 5
"""The first format whose docs files record where each near duplicate's root is (`root_doc`): what a
centred run needs to score a new document against the document actually kept in its place."""
INDEX_PARAMS = ("num_perm", "num_bands", "rows_per_band", "shingle_size", "shingle_unit", "seed")
"""The parameters a signature and its band keys depend on: an index is usable only when they match."""
KEY_SPACE = 1 << 64

log = logging.getLogger("dedup")


def index_params(params: Params) -> dict[str, Any]:
    return {k: getattr(params, k) for k in INDEX_PARAMS}


def index_fingerprint(params: Params) -> str:
    blob = json.dumps(index_params(params), sort_keys=True).encode()
    return hashlib.blake2b(blob, digest_size=8).hexdigest()


def key_step(parts: int) -> int:
    """Width of one bucket range: band key k belongs to range k // step, for `parts` ranges."""
    return -(-KEY_SPACE // max(1, parts))


def key_range_of(keys: NDArray[np.uint64], parts: int) -> NDArray[np.int64]:
    """The bucket range (0..parts-1) of each band key."""
    if parts <= 1:
        return np.zeros(len(keys), dtype=np.int64)
    return (keys // np.uint64(key_step(parts))).astype(np.int64)


def band_file(root: str, m: int) -> str:
    return f"{root}/{BANDS}/part-{m:06d}.parquet"


def ids_file(root: str, m: int) -> str:
    return f"{root}/{IDS}/part-{m:06d}.parquet"


def docs_file(root: str, p: int) -> str:
    return f"{root}/{DOCS}/part-{p:06d}.parquet"


@dataclass(frozen=True)
class IndexPart:
    """One run's index: where it is and how it is laid out."""

    url: str
    uid: str
    partitions: int
    bucket_parts: int
    id_parts: int
    documents: int
    output: str
    text_column: str
    format: int = FORMAT
    sources: tuple[str, ...] = ()
    """The uids of the earlier indexes this one references, in the order its run laid them out."""

    def as_source(self, at: str) -> dict[str, Any]:
        """How an index at `at` records this one: where it is, and (both local) the relative path."""
        out = {"url": self.url, "uid": self.uid, "documents": self.documents}
        if not is_url(self.url) and not is_url(at):
            out["relative"] = posixpath.relpath(self.url, at)
        return out

    def files_for(self, kind: str, m: int, parts: int) -> list[tuple[str, int, int, bool]]:
        """(file, lo, hi, whole): this index's band (or id) files that hold keys of range m of
        `parts`, with the key bounds, and whether every key of the file is inside them."""
        lo, hi = m * key_step(parts), min((m + 1) * key_step(parts), KEY_SPACE)
        count = self.bucket_parts if kind == BANDS else self.id_parts
        step = key_step(count)
        first, last = lo // step, min((hi - 1) // step, count - 1)
        name = band_file if kind == BANDS else ids_file
        return [(name(self.url, j), lo, hi, lo <= j * step and min((j + 1) * step, KEY_SPACE) <= hi)
                for j in range(first, last + 1)]


def _part(url: str, meta: dict[str, Any]) -> IndexPart:
    return IndexPart(url=url, uid=str(meta["uid"]), partitions=int(meta["partitions"]),
                     bucket_parts=int(meta["bucket_partitions"]), id_parts=int(meta["id_partitions"]),
                     documents=int(meta["documents"]),
                     output=posixpath.dirname(url.rstrip("/")), text_column=str(meta["text_column"]),
                     format=int(meta["format"]), sources=tuple(str(s["uid"]) for s in meta.get("sources", [])))


def _describe(p: dict[str, Any]) -> str:
    return ", ".join(f"{k}={p.get(k)!r}" for k in INDEX_PARAMS)


def index_url(output: str) -> str:
    """Where OUTPUT's index is, as recorded by later runs: an absolute path or a URL."""
    base = output if is_url(output) else str(Path(output.removeprefix("file://")).expanduser().resolve())
    return f"{base.rstrip('/')}/{INDEX_DIR}"


DAMAGED = ("That output is no longer what its index describes: restore the file, or run that output again (with "
           "--overwrite) to rebuild it and its index, or leave it out of --against.")


def _verified(url: str, meta: dict[str, Any], what: str) -> None:
    """Raise `UsageError` unless the index at `url` (its index.json `meta`) and every file it points at
    are the versions it recorded (format 4 on); older indexes record nothing to check: a warning."""
    if int(meta.get("format", 0)) < VERIFIED:
        log.warning("%s: its index (format %s, an older dedup) records no checksums, so its files cannot be verified; "
                    "run that output again to get a verified index", what, meta.get("format"))
        return
    if not stamps.sealed(meta) or not isinstance(meta.get("files"), dict):
        raise UsageError(f"{what}: {url}/{INDEX_META} was edited since dedup wrote it (its checksum differs). {DAMAGED}")
    fs, root = fsspec_root(url)
    try:
        stamps.verify(fs, posixpath.dirname(root), meta["files"])
    except stamps.Damaged as exc:
        raise UsageError(f"{what}: {exc}. {DAMAGED}") from None


def fsspec_root(url: str) -> tuple[Any, str]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    return fs, root.rstrip("/")


def _read_meta(url: str, what: str) -> dict[str, Any] | None:
    fs, root = fsspec_root(url)
    try:
        return read_json(fs, f"{root}/{INDEX_META}")
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}. {DAMAGED}") from None


def shard_names(part: IndexPart) -> set[str]:
    """The shards of the output `part` indexes, as named in it (relative to that OUTPUT), from its index.json."""
    meta = _read_meta(part.url, f"--against {part.output}") or {}
    return {f for f in meta.get("files", {}) if not f.startswith("_")}


def load(previous: Sequence[str], params: Params, id_type: pa.DataType) -> list[IndexPart]:
    """The indexes of earlier outputs (and every index they reference), checked against this run.

    Raises `UsageError` naming the output when one is not a dedup output with an index, was made
    with other parameters or another id type, references an index that is gone or replaced, or
    when a file an index points at is not the version it recorded (`dedup.storage.stamps`). An earlier
    index that moved is found beside the index that references it (the same relative path) or
    among the outputs given.
    """
    found: dict[str, IndexPart] = {}
    metas: dict[str, tuple[str, dict[str, Any]]] = {}
    want = index_params(params)
    for out in previous:
        fs, root = fsspec_root(out)
        if read_manifest(fs, root) is None:
            raise UsageError(f"--against {out}: not a dedup output (no {MANIFEST}); give the OUTPUT of an earlier run.")
        url = index_url(out)
        meta = _read_meta(url, f"--against {out}")
        if meta is None:
            raise UsageError(f"--against {out}: it has no {INDEX_DIR}/{INDEX_META} (made with --no-index, with "
                             "decontaminate only, or by an older dedup); run it again to build one.")
        if meta.get("format") not in FORMATS_READ:
            raise UsageError(f"--against {out}: index format {meta.get('format')!r}, this dedup reads "
                             f"{' and '.join(map(str, FORMATS_READ))}.")
        if meta.get("fingerprint") != index_fingerprint(params):
            raise UsageError(f"--against {out}: its index was made with {_describe(meta.get('params', {}))}; this run "
                             f"has {_describe(want)}. Run with the index's parameters, or without --against.")
        if meta.get("id_kind") != id_kind(id_type):
            raise UsageError(f"--against {out}: its ids are {meta.get('id_kind')}s ({meta.get('id_type')}), this "
                             f"input's are {id_kind(id_type)}s ({id_type}); ids must be of one kind to be compared.")
        _verified(url, meta, f"--against {out}")
        metas[out] = (url, meta)
        found.setdefault(url, _part(url, meta))
    given = {p.uid: p for p in found.values()}
    for out, (url, meta) in metas.items():
        for src in meta.get("sources", []):
            if src["uid"] in given:  # given with --against itself, wherever it is now
                continue
            place, smeta = _source(url, src, f"--against {out}")
            given[src["uid"]] = found.setdefault(place, _part(place, smeta))
    return list(found.values())


def _source(url: str, src: dict[str, Any], what: str) -> tuple[str, dict[str, Any]]:
    """Where the earlier index `src` (recorded by the index at `url`) is now: its recorded place, else
    the same relative path from `url` (a tree of releases moved together); verified."""
    tried = [src["url"]]
    if src.get("relative") and not is_url(url):
        tried.append(posixpath.normpath(posixpath.join(url, src["relative"])))
    state = "is gone"
    for place in dict.fromkeys(tried):
        meta = _read_meta(place, what)
        if meta is None:
            continue
        if meta.get("uid") != src["uid"]:
            state = "was replaced since"
            continue
        _verified(place, meta, f"{what} (the earlier index it builds on, {place})")
        return place, meta
    output = posixpath.dirname(src["url"].rstrip("/"))
    raise UsageError(f"{what}: the earlier index it builds on, {src['url']}, {state}. If that output moved, give its "
                     f"new place with --against too (e.g. --against NEW_PLACE_OF_{posixpath.basename(output)}); "
                     "otherwise run without --against.")


def id_kind(id_type: pa.DataType) -> str:
    """Ids compare across runs when both are integers or both strings."""
    return "integer" if pa.types.is_integer(id_type) else "string"


def new_uid() -> str:
    return uuid.uuid4().hex


def index_meta(params: Params, *, uid: str, id_type: pa.DataType, partitions: int, bucket_parts: int,
               id_parts: int, documents: int, nbytes: int, text_column: str,
               sources: Sequence[IndexPart], output: str, files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """index.json of OUTPUT's index: `files` holds the stamp of every file it points at (relative to
    OUTPUT: its shards and the index's own files), and a checksum seals the whole."""
    at = index_url(output)
    return stamps.seal({
        "format": FORMAT, "files": files, "uid": uid, "fingerprint": index_fingerprint(params),
        "params": index_params(params), "id_type": str(id_type), "id_kind": id_kind(id_type), "text_column": text_column,
        "partitions": partitions, "bucket_partitions": bucket_parts, "id_partitions": id_parts, "documents": documents,
        "bytes": nbytes, "sources": [s.as_source(at) for s in sources]})


# -- per-partition work (workers) -------------------------------------------------------------------

BAND_SCHEMA = pa.schema([("band", pa.uint8()), ("key", pa.uint64()), ("doc", pa.int64()), ("tkey", pa.uint64()),
                         ("tkey2", pa.uint64())])
DOCS_ROW_GROUP = 2048
"""Rows per row group of a docs file: a later run reads only the groups holding documents it needs."""


RANDOM_COLUMNS = frozenset({"key", "tkey", "tkey2", "signature", "h"})
"""Index columns of hashes: random bits, which neither a dictionary nor compression shrinks; trying
both only costs time when writing and reading."""
DICTIONARY_COLUMNS = ("band", "file")
"""Index columns with few distinct values: dictionary-encoded. The rest are compressed with zstd."""


def _sort_order(columns: list[NDArray[Any]]) -> NDArray[np.intp]:
    """The row order sorting by columns[0], then the others: one argsort of the first, and a lexsort
    of only the rows whose first value repeats (with few repeats, much cheaper than a lexsort of
    every row). The columns make rows unique, so the order is fully decided and the first argsort
    need not be stable: numpy's default, a vectorised quicksort, is the fastest."""
    order = np.argsort(columns[0])
    if len(columns) == 1 or len(order) < 2:
        return order
    first = columns[0][order]
    same = first[1:] == first[:-1]
    if not same.any():
        return order
    tied = np.zeros(len(order), dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    at = np.flatnonzero(tied)  # runs of equal first values, in order: sorting them keeps the runs in place
    rows = order[at]
    order[at] = rows[np.lexsort([c[rows] for c in reversed(columns)])]
    return order


def _write_sorted(table: pa.Table, keys: tuple[str, ...], path_url: str, row_group: int = 64 * 1024) -> int:
    """Write `table` sorted by `keys` (the first one primary); they must make rows unique, so the file's
    bytes never depend on the order rows arrived in (the shuffle's, which differs between schedulers)."""
    import fsspec
    import pyarrow.parquet as pq

    order = _sort_order([table.column(k).to_numpy() for k in keys])
    from dedup.storage.staging import check_live

    fs, path = fsspec.core.url_to_fs(path_url)
    check_live(fs, path)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    names = table.column_names
    with fs.open(path, "wb") as fh:
        pq.write_table(table.take(pa.array(order)), fh, row_group_size=row_group,
                       use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names] or False,
                       compression={c: "none" if c in RANDOM_COLUMNS else "zstd" for c in names})
    return int(fs.size(path))


def write_docs(table: pa.Table, root: str, p: int) -> int:
    """Write one input partition's index documents (`docs_table`); bytes written."""
    return _write_sorted(table, ("doc",), docs_file(root, p), DOCS_ROW_GROUP)


def write_bands(rows: Any, root: str, m: int) -> int:
    """Write one bucket range's rows (band, key, doc, tkey, tkey2), sorted by key, band and doc; bytes written."""
    table = pa.table({c: rows[c].to_numpy() for c in BAND_SCHEMA.names}, schema=BAND_SCHEMA)
    return _write_sorted(table, ("key", "band", "doc"), band_file(root, m))


def write_ids(h: NDArray[np.uint64], ids: Any, id_type: pa.DataType, root: str, m: int) -> int:
    """Write one id range's (h, id), sorted by h (then id: two ids may share a 64-bit hash); bytes written."""
    return _write_sorted(pa.table({"h": pa.array(h, pa.uint64()), "id": pa.array(ids, id_type)}), ("h", "id"),
                         ids_file(root, m))


def read_range(part: IndexPart, kind: str, m: int, parts: int, column: str) -> pa.Table:
    """The rows of `part`'s band (or id) files whose `column` is in range m of `parts`."""
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
        flt = pc.field(column) >= pa.scalar(lo, pa.uint64())
        if hi < KEY_SPACE:
            flt = flt & (pc.field(column) < pa.scalar(hi, pa.uint64()))
        tables.append(dataset.to_table(filter=flt))
    if tables:
        return pa.concat_tables(tables)
    return BAND_SCHEMA.empty_table() if kind == BANDS else pa.table({"h": pa.array([], pa.uint64())})


def read_bands(part: IndexPart, m: int, parts: int) -> pa.Table:
    """The index rows of `part` whose band key is in bucket range m of `parts`."""
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


@dataclass(frozen=True)
class Layout:
    """Where the documents of earlier indexes sit in this run's key space: index part i holds global
    partitions starts[i] .. starts[i] + parts[i].partitions - 1, after this run's `first` ones.
    A document's key names its global partition; the run gathers the index partitions `group` at a
    time (`placement`), so it works on `total` partitions: its own, then the gathered ones."""

    parts: tuple[IndexPart, ...]
    first: int
    group: int = 1

    @classmethod
    def gathering(cls, parts: Sequence[IndexPart], first: int) -> Layout:
        """As many gathered index partitions as the run has its own: an index partition holds only
        the documents sharing a bucket with this run's, about as many as the run's."""
        held = cls(tuple(parts), first).index_partitions
        return cls(tuple(parts), first, max(1, -(-held // max(1, first))))

    @property
    def starts(self) -> list[int]:
        out, at = [], self.first
        for p in self.parts:
            out.append(at)
            at += p.partitions
        return out

    @property
    def index_partitions(self) -> int:
        return sum(p.partitions for p in self.parts)

    @property
    def total(self) -> int:
        return self.first + -(-self.index_partitions // self.group)

    @property
    def placement(self) -> Placement:
        from dedup.partition.keyspace import Placement

        return Placement(self.first, self.group)

    def direct(self, exact: bool) -> bool:
        """Whether matched band rows can join the buckets as read: they carry their text hashes, and
        every document they name is in a docs file (with `exact`, only those whose text is in their
        output take part, which the docs files tell)."""
        return not exact and all(p.format >= TKEYS_IN_BANDS for p in self.parts)

    @property
    def first_key(self) -> int:
        from dedup.partition.keyspace import ROW_BITS

        return self.first << ROW_BITS

    def locate(self, q: int) -> tuple[IndexPart, int, int]:
        """(index part, its partition, the part's first global partition) of global partition q."""
        for part, start in zip(self.parts, self.starts):
            if start <= q < start + part.partitions:
                return part, q - start, start
        raise IndexError(f"partition {q} is not an index partition")

    def translate(self, part: IndexPart, keys: NDArray[np.int64]) -> NDArray[np.int64]:
        """Keys of the run that wrote `part` (its own partitions first, then its sources' in order) as
        keys of this run (`starts`): where the roots its docs files name are now."""
        from dedup.partition.keyspace import ROW_BITS

        by_uid = {p.uid: (p, s) for p, s in zip(self.parts, self.starts)}
        bounds, moved = [part.partitions], [by_uid[part.uid][1]]
        for uid in part.sources:
            src, start = by_uid[uid]
            bounds.append(bounds[-1] + src.partitions)
            moved.append(start)
        q = keys >> ROW_BITS
        which = np.searchsorted(np.asarray(bounds, np.int64), q, "right")
        first = np.asarray([0, *bounds[:-1]], np.int64)
        moved_to = np.asarray(moved, np.int64)[which] + q - first[which]
        return (moved_to << ROW_BITS) | (keys & ((1 << ROW_BITS) - 1))

    def gathered(self, g: int) -> list[int]:
        """The global index partitions that this run's partition g (>= first) gathers."""
        lo = self.first + (g - self.first) * self.group
        return list(range(lo, min(lo + self.group, self.first + self.index_partitions)))


def matched_rows(new: Any, layout: Layout, parts: int, partition_info: dict[str, Any] | None = None) -> Any:
    """The index band rows of this bucket range that share a (band, key) with this run's rows `new`,
    with global document keys and their text hashes (0 for indexes older than `TKEYS_IN_BANDS`)."""
    import pandas as pd

    from dedup.partition.buckets import LONG_META
    from dedup.partition.keyspace import ROW_BITS

    if new.empty or partition_info is None:
        return LONG_META.copy()
    m = partition_info["number"]
    keys, which = np.unique(new["key"].to_numpy(np.uint64), return_inverse=True)
    buckets = np.sort(_bucket_codes(which, new["band"].to_numpy()))  # this run's (band, key), as codes
    found = []
    for part, start in zip(layout.parts, layout.starts):
        table = read_bands(part, m, parts)
        if table.num_rows == 0:
            continue
        at = _positions_of(table.column("key").to_numpy(), keys)
        if not len(at):
            continue
        taken = table.take(pa.array(at))  # rows whose key this run has: keep those of the same band too
        codes = _bucket_codes(np.searchsorted(keys, taken.column("key").to_numpy()), taken.column("band").to_numpy())
        i = np.minimum(np.searchsorted(buckets, codes), len(buckets) - 1)
        rows = taken.filter(pa.array(buckets[i] == codes)).to_pandas()
        rows["doc"] = rows["doc"].to_numpy(np.int64) + np.int64(start << ROW_BITS)
        if part.format < TKEYS_IN_BANDS:  # fetched from the docs file, at the document's partition
            rows["tkey"] = rows["tkey2"] = np.uint64(0)
        found.append(rows[list(LONG_META.columns)])
    if not found:
        return LONG_META.copy()
    return pd.concat(found, ignore_index=True).astype(LONG_META.dtypes.to_dict())


def _bucket_codes(key_index: NDArray[np.int64], band: NDArray[Any]) -> NDArray[np.int64]:
    """One int64 per (band, key): the key's position among the sorted distinct keys, then the band
    (a uint8 of the band files)."""
    return key_index.astype(np.int64) * 256 + band.astype(np.int64)


def _positions_of(column: NDArray[np.uint64], keys: NDArray[np.uint64]) -> NDArray[np.int64]:
    """Positions in `column` of the values in the sorted unique `keys`: by binary search for each key
    when `column` is sorted (a band file is, unless a range spans several files), else by a scan."""
    if len(column) and not (column[1:] >= column[:-1]).all():
        return np.flatnonzero(np.isin(column, keys))
    lo = np.searchsorted(column, keys, "left")
    hi = np.searchsorted(column, keys, "right")
    n = hi - lo
    has = n > 0
    lo, n = lo[has], n[has]
    return np.repeat(lo - np.cumsum(n) + n, n) + np.arange(n.sum(), dtype=np.int64)


def features_meta(num_perm: int, id_dtype: Any) -> Any:
    """An index partition's features (`dedup.partition.features.features_meta`) plus `_text`, the document's text
    in the earlier output (read only for --confirm exact)."""
    import pandas as pd

    from dedup.partition.features import ROOT_DOC
    from dedup.partition.features import features_meta as base

    return base(num_perm, id_dtype).assign(_text=pd.Series(dtype=TEXT_DTYPE), **{ROOT_DOC: pd.Series(dtype=np.int64)})


def index_features(rows: Any, layout: Layout, params: Params, exact: bool, id_dtype: Any,
                   partition_info: dict[str, Any] | None = None) -> Any:
    """At a gathered index partition: the features of the indexed documents named by `rows` (matched
    band rows), read from the docs files of the index partitions it gathers (and, for exact Jaccard,
    their texts from the earlier output), in key order. An indexed near duplicate carries its root's
    id as `_id`: it stands for that cluster. Without its text in the earlier output (it was dropped),
    exact Jaccard leaves it out."""
    import pandas as pd

    from dedup.partition.codec import sig_payload
    from dedup.partition.features import CLEAN, ROOT_DOC, SIG
    from dedup.partition.keyspace import ROW_BITS

    if partition_info is None or partition_info["number"] < layout.first or rows.empty:
        return features_meta(params.num_perm, id_dtype)
    keys = np.unique(rows["doc"].to_numpy(np.int64))
    parts = [(q, need) for q in layout.gathered(partition_info["number"]) if len(need := keys[(keys >> ROW_BITS) == q])]
    found = [_partition_rows(need, q, layout, exact) for q, need in parts]
    if not found:
        return features_meta(params.num_perm, id_dtype)
    docs = np.concatenate([d for d, _, _ in found])
    taken = pa.concat_tables([t for _, t, _ in found])
    texts = [t for _, _, ts in found for t in ts]
    n = len(docs)
    ids = taken.column("root")
    root_doc = docs.copy()  # a kept document is its own root; a near duplicate names its root's key
    at = 0
    for (q, _), (d, t, _) in zip(parts, found):
        written = t.column("root_doc")
        has = written.is_valid().to_numpy(zero_copy_only=False)
        if has.any():
            part = layout.locate(q)[0]
            values = written.fill_null(0).to_numpy()
            root_doc[at:at + len(d)][has] = layout.translate(part, values[has].astype(np.int64))
        at += len(d)
    return pd.DataFrame({"_id": pd.Series(ids.to_numpy(zero_copy_only=False), dtype=id_dtype), "doc": docs,
                         "tkey": taken.column("tkey").to_numpy(), "tkey2": taken.column("tkey2").to_numpy(),
                         "source": np.full(n, CLEAN, np.int32), "source_gram": np.full(n, -1, np.int64),
                         "skipped": np.zeros(n, bool),
                         SIG: sig_payload(from_fixed_binary(taken.column("signature"), params.num_perm)).array,
                         "_text": pd.Series(texts, dtype=TEXT_DTYPE), ROOT_DOC: root_doc})


def _partition_rows(need: NDArray[np.int64], q: int, layout: Layout, exact: bool) -> tuple[NDArray[np.int64], pa.Table,
                                                                                            list[Any]]:
    """Of the sorted keys `need`, all of global index partition q: the keys found, their docs-file
    rows (doc, id, root, root_doc, tkey, tkey2, signature, file, row) and, with `exact`, their texts."""
    import fsspec
    import pyarrow.parquet as pq

    from dedup.partition.keyspace import ROW_BITS

    part, p, start = layout.locate(q)
    offset = np.int64(start << ROW_BITS)
    need = need - offset
    fs, path = fsspec.core.url_to_fs(docs_file(part.url, p))
    with fs.open(path, "rb") as fh:
        pf = pq.ParquetFile(fh)
        columns = ["doc", "id", "tkey", "tkey2", "signature", "file", "row"]
        columns += [c for c in ("root", "root_doc") if c in pf.schema_arrow.names]
        groups = _groups_holding(pf, need)
        table = pf.read_row_groups(groups, columns=columns) if groups else pf.schema_arrow.empty_table().select(columns)
    docs = table.column("doc").to_numpy()
    pos = np.minimum(np.searchsorted(docs, need), max(len(docs) - 1, 0))
    ok = (docs[pos] == need) if len(docs) else np.zeros(len(need), dtype=bool)
    if exact and len(docs):  # a duplicate the earlier run dropped has no text to compare with
        ok &= table.column("file").is_valid().to_numpy(zero_copy_only=False)[pos]
    taken = table.take(pa.array(pos[ok]))
    if "root" not in taken.column_names:  # an index older than roots: every document is its own
        taken = taken.append_column("root", taken.column("id"))
    if "root_doc" not in taken.column_names:  # older than ROOTS_LOCATED: a near duplicate stands for its root
        taken = taken.append_column("root_doc", pa.nulls(taken.num_rows, pa.int64()))
    taken = taken.select(["doc", "id", "root", "root_doc", "tkey", "tkey2", "signature", "file", "row"])
    texts: list[Any] = [None] * taken.num_rows
    if exact and taken.num_rows:
        files = taken.column("file").to_pylist()
        at = taken.column("row").to_numpy()
        for name in sorted(set(files)):
            which = [i for i, f in enumerate(files) if f == name]
            sfs, spath = fsspec.core.url_to_fs(f"{part.output}/{name}")
            with sfs.open(spath, "rb") as fh:
                col = pq.read_table(fh, columns=[part.text_column]).column(0)
            for i, t in zip(which, col.take(pa.array(at[which])).to_pylist()):
                texts[i] = t
    return need[ok] + offset, taken, texts


def _groups_holding(pf: Any, need: NDArray[np.int64]) -> list[int]:
    """Row groups of a docs file (sorted by doc) whose doc range holds one of the sorted keys `need`."""
    md = pf.metadata
    col = md.schema.to_arrow_schema().get_field_index("doc")
    out = []
    for g in range(md.num_row_groups):
        st = md.row_group(g).column(col).statistics
        if st is None or not st.has_min_max:
            out.append(g)
            continue
        i = np.searchsorted(need, st.min)
        if i < len(need) and need[i] <= st.max:
            out.append(g)
    return out


def kept_rows(rows: Any, feat: Any) -> Any:
    """The matched band rows whose document is in the index partition's features (one a run kept),
    with its text hashes."""
    from dedup.partition.buckets import LONG_META

    if rows.empty:
        return LONG_META.copy()
    at = feat[["doc", "tkey", "tkey2"]]
    out = rows[["band", "key", "doc"]].merge(at, on="doc", how="inner")
    return out[list(LONG_META.columns)].reset_index(drop=True)


def docs_table(ids: Any, roots: Any, keys: NDArray[np.int64], tkeys: tuple[NDArray[np.uint64], NDArray[np.uint64]],
               sigs: NDArray[np.uint32], files: list[str | None], rows: NDArray[np.int64], id_type: pa.DataType,
               root_docs: NDArray[np.int64] | None = None) -> pa.Table:
    """The index rows of one partition's documents: key, id, its cluster's root id and (for a near
    duplicate) its root's key, text hashes, signature, and where it is in OUTPUT (file None: not
    written there)."""
    sig = fixed_binary(sigs)
    written = pa.array([f is not None for f in files], pa.bool_())
    root_docs = keys if root_docs is None else root_docs
    return pa.table({"doc": pa.array(keys, pa.int64()), "id": pa.array(ids, id_type), "root": pa.array(roots, id_type),
                     "root_doc": pa.array(root_docs, pa.int64(), mask=root_docs == keys),
                     "tkey": pa.array(tkeys[0], pa.uint64()), "tkey2": pa.array(tkeys[1], pa.uint64()), "signature": sig,
                     "file": pa.array(files, pa.string()).dictionary_encode(),
                     "row": pa.array(rows, pa.int64(), mask=~written.to_numpy(zero_copy_only=False))})
