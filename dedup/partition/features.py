"""The features stage, per partition: each document's features (id, key, text hashes, contamination source,
MinHash signature) as one plain frame, and what is read back from it.

Every frame here has numpy dtypes and no list or array-of-object columns: those break p2p
shuffles and Parquet round trips in current pandas/pyarrow.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from dedup.config import Params
from dedup.core import _kernels
from dedup.core.cut import cut_texts
from dedup.core.decontam import ProtectedNgrams
from dedup.core.minhash import SIGNATURE_CHUNK, SIGNATURE_DTYPE, batch_signatures
from dedup.core.text import encode_column_chunks, texts_of
from dedup.partition.codec import payload_sigs, sig_payload
from dedup.partition.keyspace import doc_keys, key_row
from dedup.partition.rows import rows_of

CLEAN = -1
"""`source` of a document that overlaps no protected record (>= 0: the record it overlaps)."""

EMPTIED = -2
"""`source` of a surviving document that line dedup left without a word (set at the write,
`dedup.partition.lines.with_line_drops`): dropped, with reason `empty_after_lines`."""

HIT = "hit"
"""The features column of the first protected record a document shares an n-gram with, whatever the
contamination action (-1: none); `source` is the record a document is removed for."""

WINDOWS = "windows"
"""The features column of a document's matching windows (protected n-gram occurrences)."""

AFTER_LINES = "_after_lines"
"""The features column `dedup.partition.lines.with_line_drops` adds: the document's new text, after
line dedup, holds the protected n-gram its `source` names (reason `contaminated_after_lines`)."""


def mark_skipped(feat: pd.DataFrame, skipped: pd.DataFrame) -> pd.DataFrame:
    """Mark the documents keyed in `skipped` (this partition's) as skipped (--skip-existing: an earlier
    output's index holds their ids): they are left out of OUTPUT and take no part in near-dedup."""
    if skipped.empty:
        return feat
    rows = rows_of(feat, skipped["doc"].to_numpy(np.int64))
    out = feat.copy()
    for column, value in (("skipped", True), ("tkey", 0), ("tkey2", 0)):
        values = out[column].to_numpy().copy()
        values[rows] = value
        out[column] = values
    return out

SIG = "sig"
"""The features frame's signature column: each document's num_perm uint32 values as one binary
value (`sig_payload`; `signatures_of` reads them back as a 2-D array). One column instead of
num_perm: every task that builds, slices, measures (dask's sizeof) or pickles a features frame
handles one column, not a hundred and thirty."""


def signatures_of(feat: pd.DataFrame, num_perm: int, rows: NDArray[np.int64] | None = None) -> NDArray[np.uint32]:
    """The signatures of a features frame (of `rows` only, when given), uint32 [n, num_perm]."""
    return payload_sigs(feat[SIG], num_perm, None if rows is None else np.asarray(rows, dtype=np.int64))


ROOT_DOC = "root_doc"
"""With `--against`, in the features of the run and of the earlier indexes' documents: the key of the
document kept in each one's place, its own for this run's documents and for an earlier output's kept
ones, its root's for an earlier output's near duplicate (which carries its root's id as `_id`)."""

SCOPE = "_scope"
"""With `--within`: in the frame the features are computed from, each document's value of the scope
column as a string (null when it has none); in the features, a 64-bit hash of it (`scope_keys`):
documents whose values differ never share a bucket, nor collapse as one text."""

KEEP = "_keep"
"""The `--keep-by` column's value of each document (an Arrow-typed column; null never wins), in the
frame the features are computed from and in the features."""


def scope_keys(values: pd.Series) -> NDArray[np.uint64]:
    """Each document's `--within` value (a string, or null: a value of its own) as a nonzero 64-bit key,
    the same in every process (BLAKE2b of the value)."""
    import hashlib

    arr = pa.array(values.array)
    codes = (arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr).dictionary_encode()
    keys = []
    for v in codes.dictionary.to_pylist():
        raw = b"\x00" if v is None else b"\x01" + v.encode("utf-8")
        keys.append(int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") or 1)
    table = np.asarray(keys + [int.from_bytes(hashlib.blake2b(b"\x00", digest_size=8).digest(), "little") or 1],
                       np.uint64)
    idx = codes.indices.to_numpy(zero_copy_only=False)
    idx = np.where(codes.indices.is_null().to_numpy(zero_copy_only=False), len(keys), idx).astype(np.int64)
    return table[idx]


SCOPE_TALLY_META = pd.DataFrame({"scope": pd.Series(dtype=np.uint64), "value": pd.Series(dtype=object),
                                 "documents": pd.Series(dtype=np.int64)})


def scope_tally(part: pd.DataFrame) -> pd.DataFrame:
    """(scope, value, documents): the documents of one input partition with each `--within` value, and
    the value's key (`scope_keys`)."""
    if not len(part):
        return SCOPE_TALLY_META.copy()
    keys = scope_keys(part[SCOPE])
    arr = pa.array(part[SCOPE].array)
    frame = pd.DataFrame({"scope": keys, "value": pd.Series(arr.to_pylist(), dtype=object)})
    counts = frame.groupby("scope", sort=True).agg(value=("value", "first"), documents=("value", "size")).reset_index()
    return counts.astype({"scope": np.uint64, "documents": np.int64})


def scope_duplicates(roots: pd.DataFrame, feat: pd.DataFrame) -> pd.DataFrame:
    """(scope, duplicates): of one partition's clustered documents (`roots`: doc, root), those that are not
    their cluster's root, by `--within` value key."""
    own = feat["_id"].to_numpy(dtype=np.int64 if pd.api.types.is_integer_dtype(feat["_id"].dtype) else object)
    rows = key_row(roots["doc"].to_numpy(np.int64)) if len(roots) else np.zeros(0, np.int64)
    dup = roots["root"].to_numpy() != own[rows]
    counts = pd.Series(feat[SCOPE].to_numpy(np.uint64)[rows[dup]]).value_counts()
    return pd.DataFrame({"scope": counts.index.to_numpy(np.uint64), "duplicates": counts.to_numpy(np.int64)})


def features_meta(num_perm: int, id_dtype: Any, keep_dtype: Any = None, scope: bool = False) -> pd.DataFrame:
    cols: dict[str, Any] = {
        "_id": pd.Series(dtype=id_dtype),
        "doc": pd.Series(dtype=np.int64),
        "tkey": pd.Series(dtype=np.uint64),
        "tkey2": pd.Series(dtype=np.uint64),
        "source": pd.Series(dtype=np.int32),
        "source_gram": pd.Series(dtype=np.int64),
        "skipped": pd.Series(dtype=bool),
        HIT: pd.Series(dtype=np.int32),
        WINDOWS: pd.Series(dtype=np.int32),
    }
    cols[SIG] = sig_payload(np.zeros((0, num_perm), dtype=np.uint32))
    if keep_dtype is not None:
        cols[KEEP] = pd.Series(dtype=keep_dtype)
    if scope:
        cols[SCOPE] = pd.Series(dtype=np.uint64)
    return pd.DataFrame(cols)


def document_features(part: pd.DataFrame, id_column: str, text_column: str, params: Params,
             protected: ProtectedNgrams | None, near: bool = True, action: str = "drop",
             partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Per document: id, key (partition, row), two text hashes, contamination source and MinHash signature.

    tkey/tkey2: two independent 64-bit hashes of the document's words (0 for a document with
    no words or a contaminated one: such documents take no part in near-dedup).
    hit: the smallest index of a protected record it overlaps, -1 when clean; windows: its matching
    windows; source: the record it is removed for by the contamination `action` (drop: `hit`; tag:
    -1; cut: `hit` when the cut drops it), -1 when kept; source_gram: the smallest index of an
    n-gram of that record it holds (for reports), -1 when kept; skipped: False
    (`mark_skipped` sets it). Without `near` (a run that finds no near duplicates) every signature is
    empty: nothing reads them, and the features of such a run are kept without 4 * num_perm bytes a
    document.
    """
    n = len(part)
    if protected is not None and len(protected) and params.ngram_size != protected.ngram_size:
        raise ValueError(f"Protected n-grams were built with ngram_size={protected.ngram_size}, "
                         f"but the job runs with ngram_size={params.ngram_size}.")
    sigs = np.empty((n, params.num_perm if near else 0), dtype=SIGNATURE_DTYPE)
    source, source_gram = np.full(n, -1, dtype=np.int32), np.full(n, -1, dtype=np.int64)
    windows = np.zeros(n, dtype=np.int32)
    tkey = np.zeros(n, dtype=np.uint64)
    tkey2 = np.zeros(n, dtype=np.uint64)
    for lo, batch in encode_column_chunks(part[text_column], SIGNATURE_CHUNK):  # each document on its own
        hi = lo + len(batch.word_offsets) - 1
        if near:
            sigs[lo:hi] = batch_signatures(batch, num_perm=params.num_perm, seed=params.seed,
                                           shingle_size=params.shingle_size, shingle_unit=params.shingle_unit)
        if protected is not None and len(protected):
            found = protected.hits(batch)
            source[lo:hi], source_gram[lo:hi] = protected.first_hits(batch, found)
            windows[lo:hi] = np.bincount(found[0], minlength=hi - lo)
        tkey[lo:hi], tkey2[lo:hi] = text_keys(batch)
    hit = source.copy()
    if protected is not None and len(protected):
        source, source_gram = settle_actions(part[text_column], source, source_gram, protected, action)
    inactive = source != CLEAN  # contaminated documents, like those without words (key 0), take no part
    tkey[inactive] = 0
    tkey2[inactive] = 0
    number = partition_info["number"] if partition_info else 0
    out = pd.DataFrame({"_id": part[id_column].to_numpy(), "doc": doc_keys(number, n), "tkey": tkey,
                        "tkey2": tkey2, "source": source.astype(np.int32), "source_gram": source_gram,
                        "skipped": np.zeros(n, bool), HIT: hit, WINDOWS: windows, SIG: sig_payload(sigs).array},
                       index=range(n))
    if KEEP in part.columns:
        out[KEEP] = part[KEEP].array
    if SCOPE in part.columns:
        out[SCOPE] = scope_keys(part[SCOPE])
    return out


def text_keys(batch: Any) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """Two independent 64-bit hashes of each document's words (xorshift-multiply and FNV-1a), for a
    `TextBatch`: equal word sequences share them; 0 for a document without words ("takes no part")."""
    n = len(batch.word_offsets) - 1
    tkey, tkey2 = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64)
    has_words = np.flatnonzero(batch.num_words > 0)
    first = batch.word_offsets[:-1][has_words]
    last = batch.word_offsets[1:][has_words] - 1
    mix, fnv = _kernels.text_keys(batch.buf, np.ascontiguousarray(batch.word_start[first], np.int64),
                                  np.ascontiguousarray(batch.word_ends(last), np.int64))
    tkey[has_words] = np.where(mix == 0, 1, mix)
    tkey2[has_words] = np.where(fnv == 0, 1, fnv)
    return tkey, tkey2


def first_examples(found: pd.DataFrame) -> pd.DataFrame:
    """Of (source, gram, doc, _id) rows (`dedup.partition.contamination.hit_examples`), one per record:
    its smallest gram, then the smallest id."""
    order = found.assign(_k=found["_id"].astype(object)).sort_values(["source", "gram", "_k"], kind="stable")
    return order.drop_duplicates("source")[["source", "gram", "doc", "_id"]].reset_index(drop=True)


def settle_actions(column: pd.Series, source: NDArray[np.int32], source_gram: NDArray[np.int64],
                   rule: ProtectedNgrams, action: str) -> tuple[NDArray[np.int32], NDArray[np.int64]]:
    """`source`/`source_gram` (the first record and n-gram each document of a partition shares, -1
    when clean) as the action leaves them: the documents removed. Drop: every one hit; tag: none;
    cut: those the cut drops (more than 10 windows, or no word left)."""
    if action == "drop":
        return source, source_gram
    source, source_gram = source.copy(), source_gram.copy()
    rows = np.flatnonzero(source != CLEAN)
    if action == "cut" and len(rows):
        new = cut_texts(texts_of(column.iloc[rows]), rule)
        rows = rows[np.asarray([t is not None for t in new], bool)]
    source[rows], source_gram[rows] = CLEAN, -1
    return source, source_gram
