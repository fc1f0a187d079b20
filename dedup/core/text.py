"""Words, shingles and Jaccard similarity (contract §1).

The per-document functions here are the reference definitions. `encode_batch` turns a whole
sequence of texts into one flat UTF-8 buffer with word boundaries, so the hashing kernels can
work on every shingle of a partition at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from dedup.config import SHINGLE_UNITS

_WORD = re.compile(r"\w+")

TEXT_DTYPE = pd.StringDtype("pyarrow")
"""The text column's dtype in the job's frames: Arrow-backed, so it is tokenised in place
(`encode_column_chunks`) and Dask's string conversion leaves it as it is."""



def words(text: str) -> list[str]:
    """Lower-cased word tokens: ``re.findall(r"\\w+", text.lower())`` (Unicode rules)."""
    return _WORD.findall(text.lower())


def shingles(text: str, shingle_size: int = 5, unit: str = "word") -> set[str]:
    """The set of `shingle_size` consecutive words joined by one space (unit "word"), or of
    `shingle_size` consecutive characters of `normalized(text)` (unit "char", for scripts
    written without spaces).

    A text with 1 to shingle_size-1 units is one shingle of all of them; a text with no words
    has no shingles.
    """
    _check_size("shingle_size", shingle_size)
    check_unit(unit)
    if unit == "char":
        s = normalized(text)
        if not s:
            return set()
        if len(s) < shingle_size:
            return {s}
        return {s[i : i + shingle_size] for i in range(len(s) - shingle_size + 1)}
    w = words(text)
    if not w:
        return set()
    if len(w) < shingle_size:
        return {" ".join(w)}
    return {" ".join(w[i : i + shingle_size]) for i in range(len(w) - shingle_size + 1)}


def word_ngrams(text: str, ngram_size: int = 13) -> set[str]:
    """Word n-grams joined by one space; a text shorter than `ngram_size` words has none."""
    _check_size("ngram_size", ngram_size)
    w = words(text)
    return {" ".join(w[i : i + ngram_size]) for i in range(len(w) - ngram_size + 1)}


def jaccard(a: AbstractSet[object], b: AbstractSet[object]) -> float:
    """|A ∩ B| / |A ∪ B|; 0.0 when either set is empty."""
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


UNSPACED = re.compile("[\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf"
                      "\u4e00-\u9fff\uf900-\ufaff]")
"""Letters of scripts written without spaces between words: Thai, Lao, Tibetan, Myanmar, Khmer, the
Japanese kana, and CJK ideographs (Chinese, Japanese kanji)."""


def unspaced(text: str | None) -> bool:
    """Whether most of a text's letters are of scripts written without spaces (`UNSPACED`): word
    shingles would see its long runs of letters as single words. An ASCII text has none of them."""
    if not text or text.isascii():
        return False
    letters = sum(map(str.isalpha, text))
    return letters > 0 and len(UNSPACED.findall(text)) > letters / 2


def check_unit(unit: str) -> None:
    """Raise unless `unit` is one of SHINGLE_UNITS."""
    if unit not in SHINGLE_UNITS:
        raise ValueError(f"The shingle unit must be one of {SHINGLE_UNITS}. Got {unit!r} instead.")


def _check_size(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"The {name!r} parameter must be an integer >= 1. Got {value!r} instead.")


@dataclass(frozen=True)
class TextBatch:
    """A sequence of texts as one UTF-8 buffer of their words, each joined by one space.

    buf: uint8 [total bytes]; word_start: int64 [total words], byte offsets into buf;
    word_offsets: int64 [n_docs + 1], the words of doc d are word_offsets[d]:word_offsets[d+1].
    A word ends one byte before the next one starts (the last one at the end of buf), so the
    ends are derived (`word_ends`), not stored: 8 bytes a word less to allocate and write.
    """

    buf: NDArray[np.uint8]
    word_start: NDArray[np.int64]
    word_offsets: NDArray[np.int64]

    def word_ends(self, words: NDArray[np.int64]) -> NDArray[np.int64]:
        """Where each of the given words (indices) ends in buf: one byte before the next word starts."""
        words = np.asarray(words, dtype=np.int64)
        ends = np.full(len(words), len(self.buf), dtype=np.int64)  # the last word ends with the buffer
        inner = words < len(self.word_start) - 1
        ends[inner] = self.word_start[words[inner] + 1] - 1
        return ends

    @property
    def word_end(self) -> NDArray[np.int64]:
        """int64 [total words]: the end of every word (`word_ends` of all of them)."""
        return self.word_ends(np.arange(len(self.word_start), dtype=np.int64))

    @property
    def num_words(self) -> NDArray[np.int64]:
        return np.diff(self.word_offsets)

    def window_offsets(self, size: int, *, short: bool) -> NDArray[np.int64]:
        """int64 [n_docs + 1]: where each document's `size`-word windows start (see `spans`)."""
        _check_size("size", size)
        nw = self.num_words
        count = np.maximum(nw - size + 1, 0)
        if short:
            count = np.where(nw > 0, np.maximum(count, 1), 0)
        offsets = np.zeros(len(nw) + 1, dtype=np.int64)
        np.cumsum(count, out=offsets[1:])
        return offsets

    def window_hashes(self, size: int, *, short: bool) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        """FNV-1a 64 of every window's bytes, and the per-document offsets into them."""
        from dedup.core import _kernels

        offsets = self.window_offsets(size, short=short)
        return _kernels.window_hashes(self.buf, self.word_start, self.word_offsets, size, short, offsets), offsets

    def shingle_hashes(self, size: int, unit: str = "word") -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        """FNV-1a 64 of every shingle of every document (with repeats), and per-document offsets."""
        check_unit(unit)
        if unit == "word":
            return self.window_hashes(size, short=True)
        from dedup.core import _kernels

        _check_size("size", size)
        nw = self.num_words
        has = nw > 0
        first = self.word_offsets[:-1][has]
        last = self.word_offsets[1:][has] - 1
        start = np.zeros(len(nw), dtype=np.int64)
        end = np.zeros(len(nw), dtype=np.int64)
        start[has], end[has] = self.word_start[first], self.word_ends(last)
        h, offsets = _kernels.char_window_hashes(self.buf, start, end, size, True)
        return h, offsets

    def spans(self, size: int, *, short: bool) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
        """Byte spans of every `size`-word window, and per-document offsets into them.

        With short=True a document of 1 to size-1 words has one window of all its words
        (shingles); with short=False it has none (decontamination n-grams).
        Returns (start, end, offsets): int64 [n_windows], int64 [n_windows], int64 [n_docs + 1].
        """
        nw = self.num_words
        offsets = self.window_offsets(size, short=short)
        count = np.diff(offsets)
        doc = np.repeat(np.arange(len(nw), dtype=np.int64), count)
        j = np.arange(offsets[-1], dtype=np.int64) - offsets[doc]
        first = self.word_offsets[doc] + j
        last = self.word_offsets[doc] + np.minimum(j + size - 1, nw[doc] - 1)
        return self.word_start[first], self.word_ends(last), offsets


def normalized(text: str | None) -> str:
    """The text's words joined by one space ('' for None or a text without words)."""
    if text is None:
        return ""
    return " ".join(_WORD.findall(text.lower()))


_ASCII_WORD = np.zeros(256, dtype=np.uint8)
for _lo, _hi in ((48, 58), (65, 91), (97, 123)):
    _ASCII_WORD[_lo:_hi] = 1
_ASCII_WORD[ord("_")] = 1
_NOT_SPACE = np.ones(256, dtype=np.uint8)
_NOT_SPACE[ord(" ")] = 0
_ASCII_LOWER = np.arange(256, dtype=np.uint8)
_ASCII_LOWER[65:91] += 32


def encode_batch(texts: Iterable[str | None]) -> TextBatch:
    """Tokenise a batch of texts (None counts as a text without words) into a `TextBatch`.

    ASCII texts are tokenised by a compiled loop over their bytes (for ASCII, Python's \\w is
    exactly [A-Za-z0-9_] and lower() only maps A-Z); any other text goes through the reference
    `words` first. Both give the same words, byte for byte. The texts are first copied into one
    Arrow array (`encode_arrow`), faster than encoding them one by one in Python; a value Arrow
    refuses takes the Python path below.
    """
    texts = texts if isinstance(texts, (list, tuple)) else list(texts)
    try:
        array = pa.array(texts, type=pa.large_string())
    except (pa.ArrowException, TypeError, ValueError, UnicodeError):
        pass
    else:
        return encode_arrow(array)
    parts: list[bytes] = []
    pre: list[bool] = []
    for t in texts:
        if t is None:
            parts.append(b"")
            pre.append(True)
        elif t.isascii():
            parts.append(t.encode("ascii"))
            pre.append(False)
        else:
            parts.append(normalized(t).encode("utf-8"))
            pre.append(True)
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    doc_offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=doc_offsets[1:])
    raw = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return _tokenize(raw, doc_offsets[:-1], doc_offsets[1:], np.array(pre, dtype=np.bool_))


def string_array(array: pa.Array | pa.ChunkedArray, caller: str) -> pa.Array:
    """One Arrow string (or large_string) array of `array`'s values: chunks combined, a dictionary
    decoded, a string_view made a large_string; anything but strings is a TypeError naming `caller`."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    if pa.types.is_string_view(array.type):
        array = array.cast(pa.large_string())
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        raise TypeError(f"{caller} takes a string array, not {array.type}")
    return array


def encode_arrow(array: pa.Array | pa.ChunkedArray) -> TextBatch:
    """`encode_batch` of an Arrow string array (nulls count as texts without words), read in place.

    ASCII texts are tokenised straight from the array's data buffer; only the others are turned
    into Python strings, for the reference `words`. Gives `encode_batch(array.to_pylist())`.
    """
    array = string_array(array, "encode_arrow")
    n = len(array)
    _, off_buf, data_buf = array.buffers()
    width = np.int64 if pa.types.is_large_string(array.type) else np.int32
    offsets = np.frombuffer(off_buf, dtype=width, count=array.offset + n + 1)[array.offset:].astype(np.int64) \
        if off_buf is not None else np.zeros(n + 1, np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    start, end = offsets[:-1].copy(), offsets[1:].copy()
    if array.null_count:
        null = array.is_null().to_numpy(zero_copy_only=False)
        end[null] = start[null]
    from dedup.core import _kernels

    other = np.flatnonzero(_kernels.non_ascii(data, start, end))
    pre = np.zeros(n, dtype=np.bool_)
    if len(other):  # the reference path for non-ASCII texts, appended after the data buffer
        extra = [normalized(t).encode("utf-8") for t in array.take(pa.array(other)).to_pylist()]
        lengths = np.fromiter((len(e) for e in extra), dtype=np.int64, count=len(extra))
        start[other] = len(data) + np.concatenate([[0], np.cumsum(lengths)[:-1]])
        end[other] = start[other] + lengths
        data = np.concatenate([data, np.frombuffer(b"".join(extra), dtype=np.uint8)])
        pre[other] = True
    return _tokenize(data, start, end, pre)


def _arrow_text(column: pd.Series) -> bool:
    """Whether the column's strings are held by Arrow (read in place by `encode_arrow`)."""
    dtype = column.dtype
    return (isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow") or (
        isinstance(dtype, pd.ArrowDtype) and (pa.types.is_string(dtype.pyarrow_dtype)
                                              or pa.types.is_large_string(dtype.pyarrow_dtype)))


def encode_column(column: pd.Series) -> TextBatch:
    """`encode_batch` of a text column: read in place when it is Arrow-backed (`encode_arrow`),
    else value by value (any value that is not a string or missing is an error naming the column)."""
    if _arrow_text(column):
        return encode_arrow(pa.array(column))
    return encode_batch(texts_of(column))


def encode_column_chunks(column: pd.Series, chunk: int) -> Iterator[tuple[int, TextBatch]]:
    """`encode_column` `chunk` rows at a time: (first row, its batch) for each run of rows. Working a
    chunk at a time keeps a batch's buffers in cache and lets the allocator reuse them."""
    if _arrow_text(column):
        array = pa.array(column)
        for lo in range(0, len(array), chunk):
            yield lo, encode_arrow(array.slice(lo, chunk))
        return
    texts = texts_of(column)
    for lo in range(0, len(texts), chunk):
        yield lo, encode_batch(texts[lo:lo + chunk])


def texts_of(column: pd.Series) -> list[str | None]:
    """A text column as Python strings, missing values as None; any other value is an error."""
    out: list[str | None] = []
    for t in column.tolist():
        if isinstance(t, str):
            out.append(t)
        elif t is None or t is pd.NA or (isinstance(t, float) and t != t):
            out.append(None)
        else:
            raise ValueError(f"The text column {column.name!r} holds a {type(t).__name__} value ({t!r:.60}); "
                             "it must hold strings or nulls.")
    return out


def _tokenize(raw: NDArray[np.uint8], start: NDArray[np.int64], end: NDArray[np.int64],
              pre: NDArray[np.bool_]) -> TextBatch:
    from dedup.core import _kernels

    buf, word_start, counts = _kernels.tokenize(raw, start, end, pre, _ASCII_WORD, _NOT_SPACE, _ASCII_LOWER)
    word_offsets = np.zeros(len(start) + 1, dtype=np.int64)
    np.cumsum(counts, out=word_offsets[1:])
    return TextBatch(buf=buf, word_start=word_start, word_offsets=word_offsets)
