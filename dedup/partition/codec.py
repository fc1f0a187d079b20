"""Signatures as bytes: one binary value a document, in the features frames the job moves between
partitions (large binary, whose type survives a p2p shuffle) and in the index's docs files
(fixed-size binary). One codec, little-endian uint32, for both."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray


def sig_payload(sigs: NDArray[np.uint32], present: NDArray[np.bool_] | None = None) -> pd.Series:
    """Signatures [n, num_perm] as one Arrow binary column (large_binary: p2p shuffles rebuild
    column types from their names, which fixed-size binary has none of): a shuffle moves one
    column of n values instead of num_perm columns (see benchmarks/stage_profile.py). With
    `present`, only those rows carry their signature (the others an empty value)."""
    n, width = sigs.shape[0], 4 * (sigs.shape[1] if sigs.ndim == 2 else 0)
    if present is None or present.all():  # the array's own memory, not a copy: a features partition's is 30 MB
        blob = pa.py_buffer(np.ascontiguousarray(sigs, dtype="<u4"))
        offsets = pa.py_buffer(np.arange(0, (n + 1) * width, width, dtype=np.int64)) if width else \
            pa.py_buffer(np.zeros(n + 1, dtype=np.int64))
    else:
        blob = pa.py_buffer(np.ascontiguousarray(sigs[present], dtype="<u4"))
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(present * width, out=offsets[1:])
        offsets = pa.py_buffer(offsets)
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, offsets, blob])
    return pd.Series(pd.arrays.ArrowExtensionArray(arr))


def payload_sigs(column: pd.Series, num_perm: int, rows: NDArray[np.int64] | None = None) -> NDArray[np.uint32]:
    """The signatures of a `sig_payload` column (of its `rows` only, when given), uint32 [n, num_perm].
    Rows are taken from the values' bytes, where every value is a whole signature, not by a take of
    the binary column (which copies every value taken twice)."""
    arr = pa.array(column.array, type=pa.large_binary())
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if len(arr) == 0:
        if rows is not None and len(rows):
            raise IndexError(f"rows {rows[:3].tolist()} of an empty signature column")
        return np.zeros((0, num_perm), dtype=np.uint32)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    if data.size != len(arr) * 4 * num_perm:
        if rows is not None:  # empty values among them (`present`): take the rows first
            return payload_sigs(pd.Series(pd.arrays.ArrowExtensionArray(arr.take(pa.array(rows)))), num_perm)
        raise ValueError(f"signature payload of {data.size} bytes for {len(arr)} signatures of {num_perm}")
    sigs = data.view("<u4").reshape(len(arr), num_perm)
    return sigs.astype(np.uint32) if rows is None else sigs[rows].astype(np.uint32, copy=False)


def fixed_binary(sigs: NDArray[np.uint32], valid: NDArray[np.bool_] | None = None) -> pa.FixedSizeBinaryArray:
    """Signatures [n, num_perm] as a fixed-size binary array (the index's docs files); `valid`: which
    rows hold one (the others are nulls, which a Parquet file does not store)."""
    width = 4 * sigs.shape[1] if sigs.ndim == 2 else 0
    blob = np.ascontiguousarray(sigs, dtype="<u4")  # the array's own memory when it is one already
    bitmap = None if valid is None or valid.all() else pa.array(valid, pa.bool_()).buffers()[1]
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(sigs), [bitmap, pa.py_buffer(blob)])


def from_fixed_binary(column: pa.Array | pa.ChunkedArray, num_perm: int) -> NDArray[np.uint32]:
    """The signatures of a `fixed_binary` column, uint32 [n, num_perm]."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    width = 4 * num_perm
    data = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[arr.offset * width:(arr.offset + len(arr)) * width]
    return data.view("<u4").reshape(len(arr), num_perm).astype(np.uint32)
