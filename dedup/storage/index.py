"""`OUTPUT/_index/`: what a later run needs to compare new documents with the ones this run kept.

An on-disk LSH index, written by the workers while the job runs, read back by `--against`:

    _index/index.json           parameters' fingerprint, id type, layout, counts, earlier indexes
    _index/bands/part-M.parquet (key, doc) of this run's documents whose band key k falls in bucket
                                range M (k // step == M): the upper 32 bits of k (format 7; formats
                                3-6 held (band, key, doc, tkey, tkey2), the whole key and the text
                                hashes), sorted by key, then doc
    _index/docs/part-P.parquet  (doc, id, root, root_doc, tkey, tkey2, signature, file, row) of each
                                document this run kept and of each near duplicate it found (with
                                the band rows of its text), input partition P, sorted by doc: its
                                cluster's root id (its own id when kept) and, for a near duplicate,
                                its root's key (format 5: in this run's key space, where the
                                earlier indexes follow its own partitions in the order of
                                index.json's sources), its text hashes, its signature (format 6:
                                only when OUTPUT does not hold its text, else null), and where it
                                is in OUTPUT (null when it was dropped)
    _index/ids/part-M.parquet   (h, id) of every document this run read, kept or not, whose id
                                hash h (`dedup.core.hashing.id_hashes`) falls in range M, sorted by h
    _index/sizes/part-M.parquet (h, id, size, added, read_here) of every cluster of two or more documents
                                in the chain of releases, whose root id's hash falls in range M, sorted
                                by h then id (format 8): `size`, the documents of every release in the
                                chain carrying that cluster id, this run's included; `added`, this
                                run's; `read_here`, whether this run read the root itself. The newest
                                release's files are the table to rehydrate from: a document whose
                                `minhash_cluster` no row names is a cluster of one
                                (`dedup.storage.index_counts`)

`doc` is the run's own document key (partition << 32 | row). The band files are range
partitioned exactly like the bucket shuffle, so a later run joins each of its bucket partitions
with the index rows of the same key range, without shuffling the index. A later run treats an
indexed near duplicate as its root (whose id it takes): a new document like it joins that
cluster, as it would in one run over both. A band row whose document is not in the docs files
(a contaminated document, or a same-text copy) is never matched; nor is one whose prefix matches
but whose document's signature gives another key (`KEY_PREFIXES`). A run made with `--against`
references the earlier indexes in its index.json instead of copying them.
"""

from __future__ import annotations

import dataclasses
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
from dedup.storage import stamps
from dedup.storage.safety import MANIFEST, UsageError, is_url, read_json, read_manifest

if TYPE_CHECKING:
    pass

INDEX_DIR = "_index"
INDEX_META = "index.json"
BANDS, DOCS, IDS, SIZES = "bands", "docs", "ids", "sizes"
FORMAT = 8
FORMATS_READ = (1, 2, 3, 4, 5, 6, 7, 8)
"""Format 1 indexes hold kept documents only (no `root` column); formats 1 and 2 have no text hashes
in their band files (a later run fetches them from the docs files): both are read as they are."""
TKEYS_IN_BANDS = 3
"""The first format whose band rows carry their document's text hashes."""
VERIFIED = 4
"""The first format whose index.json records the stamp of every file it points at (`dedup.storage.stamps`)."""
ROOTS_LOCATED = 5
"""The first format whose docs files record where each near duplicate's root is (`root_doc`): what a
centred run needs to score a new document against the document actually kept in its place."""
SIGNATURES_FROM_TEXT = 6
"""The first format whose docs files hold a signature only for the documents whose text OUTPUT does not
hold (near duplicates the run dropped): a later run computes the others again from OUTPUT's text,
which the index's stamps verify, for the documents sharing a bucket with its own. Signatures were about
half the index's bytes (docs/operations.md)."""
KEY_PREFIXES = 7
"""The first format whose band files hold only the upper 32 bits of each band key and the document
(delta-encoded, a key costs about 2 bytes instead of 8, and no band or text hashes): a later run
takes every indexed document whose prefix equals one of its own keys', then keeps only the (band, key)
its signature gives, so what it matches is exactly what whole keys match. Band rows were three
quarters of the index's bytes (docs/operations.md)."""
COUNTS = 8
"""The first format with cluster counts across releases (`SIZES` files): a later run continues each
cluster's count from them without reading earlier shards."""
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


def sizes_file(root: str, m: int) -> str:
    return f"{root}/{SIZES}/part-{m:06d}.parquet"


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
    given: str | None = None
    """The output as the user named it with --against (None for one found through another's references)."""

    @property
    def shown(self) -> str:
        """The output as the user named it, else where it is: for messages and the page (the workers read
        `output`, an absolute path or a URL)."""
        return self.given if self.given is not None else self.output

    def as_source(self, at: str) -> dict[str, Any]:
        """How an index at `at` records this one: where it is, and (both local) the relative path."""
        out = {"url": self.url, "uid": self.uid, "documents": self.documents}
        if not is_url(self.url) and not is_url(at):
            out["relative"] = posixpath.relpath(self.url, at)
        return out

    def files_for(self, kind: str, m: int, parts: int) -> list[tuple[str, int, int, bool]]:
        """(file, lo, hi, whole): this index's band (id, or size) files that hold keys of range m of
        `parts`, with the key bounds, and whether every key of the file is inside them."""
        lo, hi = m * key_step(parts), min((m + 1) * key_step(parts), KEY_SPACE)
        count = self.bucket_parts if kind == BANDS else self.id_parts
        step = key_step(count)
        first, last = lo // step, min((hi - 1) // step, count - 1)
        name = {BANDS: band_file, IDS: ids_file, SIZES: sizes_file}[kind]
        return [(name(self.url, j), lo, hi, lo <= j * step and min((j + 1) * step, KEY_SPACE) <= hi)
                for j in range(first, last + 1)]


def _part(url: str, meta: dict[str, Any]) -> IndexPart:
    return IndexPart(url=url, uid=str(meta["uid"]), partitions=int(meta["partitions"]),
                     bucket_parts=int(meta["bucket_partitions"]), id_parts=int(meta["id_partitions"]),
                     documents=int(meta["documents"]),
                     output=posixpath.dirname(url.rstrip("/")), text_column=str(meta["text_column"]),
                     format=int(meta["format"]), sources=tuple(str(s["uid"]) for s in meta.get("sources", [])))


def _describe(p: dict[str, Any], keys: Sequence[str] = INDEX_PARAMS) -> str:
    return ", ".join(f"{k}={p.get(k)!r}" for k in keys)


FLAGS = {"num_perm": "--num-perm", "num_bands": "--num-bands", "rows_per_band": "--rows-per-band",
         "shingle_size": "--shingle-size", "shingle_unit": "--shingle-unit", "seed": "--seed"}
"""The command-line flag of each index parameter."""


def _mismatch(out: str, theirs: dict[str, Any], ours: dict[str, Any], threshold: float) -> str:
    """Why an earlier output's index cannot be compared with this run: the parameters that differ, and
    the flags that match them. A banding differing alone is most often the one that follows --threshold."""
    differ = [k for k in INDEX_PARAMS if theirs.get(k) != ours.get(k)]
    flags = " ".join(f"{FLAGS[k]} {theirs.get(k)}" for k in differ if k in FLAGS)
    said = (f"--against {out}: its index was made with {_describe(theirs, differ)}; this run has "
            f"{_describe(ours, differ)}. ")
    if set(differ) <= {"num_bands", "rows_per_band"}:
        return (said + f"Given neither --num-bands nor --rows-per-band, the banding follows --threshold ({threshold:g} "
                f"here, `dedup tune` shows it); to compare with that output, give its banding: {flags}.")
    return said + f"Run with the index's parameters ({flags}), or without --against."


def index_url(output: str) -> str:
    """Where OUTPUT's index is, as recorded by later runs: an absolute path or a URL."""
    base = output if is_url(output) else str(Path(output.removeprefix("file://")).expanduser().resolve())
    return f"{base.rstrip('/')}/{INDEX_DIR}"


DAMAGED = ("That output is no longer what its index describes: restore the file, or run that output again (with "
           "--overwrite) to rebuild it and its index, or leave it out of --against.")


def _verified(url: str, meta: dict[str, Any], what: str, notes: list[str]) -> None:
    """Raise `UsageError` unless the index at `url` (its index.json `meta`) and every file it points at
    are the versions it recorded (format 4 on); older indexes record nothing to check: a warning,
    added to `notes`."""
    if int(meta.get("format", 0)) < VERIFIED:
        notes.append(f"{what}: its index (format {meta.get('format')}, an older dedup) records no checksums, so its "
                     "files cannot be verified; run that output again to get a verified index")
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
    meta = _read_meta(part.url, f"--against {part.shown}") or {}
    return {f for f in meta.get("files", {}) if not f.startswith("_")}


def load(previous: Sequence[str], params: Params, id_type: pa.DataType, notes: list[str] | None = None
         ) -> list[IndexPart]:
    """The indexes of earlier outputs (and every index they reference), checked against this run; a
    warning for each that cannot be verified is added to `notes` (logged, without them).

    Raises `UsageError` naming the output when one is not a dedup output with an index, was made
    with other parameters or another id type, references an index that is gone or replaced, or
    when a file an index points at is not the version it recorded (`dedup.storage.stamps`). An earlier
    index that moved is found beside the index that references it (the same relative path) or
    among the outputs given.
    """
    found: dict[str, IndexPart] = {}
    metas: dict[str, tuple[str, dict[str, Any]]] = {}
    found_notes: list[str] = []
    want = index_params(params)
    for out in previous:
        fs, root = fsspec_root(out)
        manifest = read_manifest(fs, root)
        if manifest is None:
            raise UsageError(f"--against {out}: not a dedup output (no {MANIFEST}); give the OUTPUT of an earlier run.")
        url = index_url(out)
        meta = _read_meta(url, f"--against {out}")
        if meta is None:
            raise UsageError(f"--against {out}: it has no {INDEX_DIR}/{INDEX_META}: {_why_no_index(manifest)}.")
        if meta.get("format") not in FORMATS_READ:
            raise UsageError(f"--against {out}: index format {meta.get('format')!r}, this dedup reads "
                             f"{' and '.join(map(str, FORMATS_READ))}.")
        if meta.get("fingerprint") != index_fingerprint(params):
            raise UsageError(_mismatch(out, meta.get("params", {}), want, params.threshold))
        if meta.get("id_kind") != id_kind(id_type):
            raise UsageError(f"--against {out}: its ids are {meta.get('id_kind')}s ({meta.get('id_type')}), this "
                             f"input's are {id_kind(id_type)}s ({id_type}); ids must be of one kind to be compared.")
        _verified(url, meta, f"--against {out}", found_notes)
        same = next((o for o, (u, m) in metas.items() if m.get("uid") == meta.get("uid")), None)
        if same is not None:  # the same output twice, or a copy of it: its documents count once
            if index_url(same) != url:
                found_notes.append(f"--against {out} is a copy of {same} (the same release): read once")
            continue
        metas[out] = (url, meta)
        found.setdefault(url, dataclasses.replace(_part(url, meta), given=out))
    given = {p.uid: p for p in found.values()}
    for out, (url, meta) in metas.items():
        for src in meta.get("sources", []):
            if src["uid"] in given:  # given with --against itself, wherever it is now
                continue
            place, smeta = _source(url, src, f"--against {out}", found_notes)
            given[src["uid"]] = found.setdefault(place, _part(place, smeta))
    if notes is None:
        for note in found_notes:
            log.warning("%s", note)
    else:
        notes.extend(found_notes)
    return list(found.values())


def _source(url: str, src: dict[str, Any], what: str, notes: list[str]) -> tuple[str, dict[str, Any]]:
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
        _verified(place, meta, f"{what} (the earlier index it builds on, {place})", notes)
        return place, meta
    output = posixpath.dirname(src["url"].rstrip("/"))
    raise UsageError(f"{what}: the earlier index it builds on, {src['url']}, {state}. If that output moved, give its "
                     f"new place with --against too (e.g. --against NEW_PLACE_OF_{posixpath.basename(output)}); "
                     "otherwise run without --against.")


def _why_no_index(manifest: dict[str, Any]) -> str:
    """Why an earlier output has no index, from its manifest, and what to give instead."""
    if manifest.get("dry_run"):
        return "it is a --dry-run's output (a manifest and a page, no shards); give the output of the run without --dry-run"
    if not manifest.get("near_dedup", True):
        made = "`dedup lines`" if manifest.get("lines") else "`dedup decontaminate`"
        return (f"it was made by {made}, which finds no near duplicates and writes no index; near-dedup it first "
                "(`dedup near` on it) and give that output")
    if manifest.get("index") is None:
        return "it was made with --no-index; run it again without --no-index to build one"
    return "it was made by an older dedup; run it again to build one"


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
