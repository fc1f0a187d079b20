"""Decontamination by the GPT-3 13-gram rule (SPEC §6).

A document is contaminated when any of its word n-grams appears in a protected eval text.
`ProtectedNgrams` holds the protected set as a sorted uint64 hash array (cheap to ship to Dask
workers and to probe with `np.searchsorted`) plus the n-grams' bytes, so every hash hit is
confirmed against the real n-gram and a collision never costs a document.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np
from numpy.typing import NDArray

from dedup.docs import Doc
from dedup.hashing import span_hashes
from dedup.text import TextBatch, _check_size, encode_batch, word_ngrams, words

LABEL_KEYS = frozenset({"case_id", "id", "tags", "scorer_args"})
"""JSONL keys whose values are labels, not text a model is tested on."""

PathLike = Union[str, "os.PathLike[str]"]


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value, skipping the values of label keys."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k not in LABEL_KEYS:
                yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def protected_texts(path: PathLike) -> Iterator[str]:
    """The protected texts of one file: each string value of a .jsonl file, else the whole file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"Protected file {str(p)!r} does not exist or is not a file.")
    if p.suffix.lower() != ".jsonl":
        yield p.read_text(encoding="utf-8", errors="replace")
        return
    with p.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}: line {lineno} is not valid JSON ({exc.msg}); fix or remove that line.") from None
            yield from _strings(record)


def _as_paths(paths: PathLike | Iterable[PathLike]) -> list[PathLike]:
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)


def protected_ngrams(paths: PathLike | Iterable[PathLike], ngram_size: int = 13) -> set[str]:
    """The set of word n-grams of every protected text in `paths`."""
    _check_size("ngram_size", ngram_size)
    grams: set[str] = set()
    for path in _as_paths(paths):
        for text in protected_texts(path):
            grams |= word_ngrams(text, ngram_size)
    return grams


def contaminated(text: str | None, grams: set[str] | frozenset[str], ngram_size: int = 13) -> bool:
    """True when any word n-gram of `text` (last window included) is in `grams`."""
    _check_size("ngram_size", ngram_size)
    if not grams or text is None:
        return False
    w = words(text)
    return any(" ".join(w[i : i + ngram_size]) in grams for i in range(len(w) - ngram_size + 1))


def decontaminate(
    docs: Iterable[Doc], protected: set[str] | frozenset[str] | PathLike | Sequence[PathLike], ngram_size: int = 13
) -> Iterator[Doc]:
    """Yield the documents that are not contaminated, lazily, in order.

    `protected` is a set of n-grams (from `protected_ngrams`) or the protected file path(s).
    """
    grams = protected if isinstance(protected, (set, frozenset)) else protected_ngrams(protected, ngram_size)
    for doc in docs:
        if not contaminated(doc.text, grams, ngram_size):
            yield doc


@dataclass(frozen=True)
class ProtectedNgrams:
    """Protected n-grams, sorted by FNV-1a 64 hash, with their bytes for confirming hits.

    hashes: uint64 [m] sorted (repeats only on a hash collision); offsets: int64 [m + 1] into
    blob (uint8), the UTF-8 bytes of n-gram i; source: int32 [m], the index of the first file
    (in the order given) that holds n-gram i; files: the file names, for reports.
    """

    ngram_size: int
    hashes: NDArray[np.uint64]
    offsets: NDArray[np.int64]
    blob: NDArray[np.uint8]
    source: NDArray[np.int32]
    files: tuple[str, ...]

    @classmethod
    def from_paths(cls, paths: PathLike | Iterable[PathLike], ngram_size: int = 13) -> ProtectedNgrams:
        _check_size("ngram_size", ngram_size)
        first_source: dict[str, int] = {}
        files = tuple(str(p) for p in _as_paths(paths))
        for idx, path in enumerate(files):
            for text in protected_texts(path):
                for gram in word_ngrams(text, ngram_size):
                    first_source.setdefault(gram, idx)
        grams = list(first_source)
        encoded = [g.encode("utf-8") for g in grams]
        lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        hashes = span_hashes(blob, offsets[:-1], offsets[1:])
        source = np.fromiter((first_source[g] for g in grams), dtype=np.int32, count=len(grams))
        order = np.argsort(hashes, kind="stable")
        starts, ends = offsets[:-1][order], offsets[1:][order]
        new_offsets = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=new_offsets[1:])
        pieces = [blob[s:e] for s, e in zip(starts, ends)]
        new_blob = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
        return cls(ngram_size, hashes[order], new_offsets, new_blob, source[order], files)

    def __len__(self) -> int:
        return len(self.hashes)

    def gram_counts(self) -> list[int]:
        """How many distinct n-grams each file contributes first."""
        return np.bincount(self.source, minlength=len(self.files)).tolist()

    def first_hit(self, batch: TextBatch) -> NDArray[np.int32]:
        """Per document of `batch`: the source index of its first confirmed hit, or -1 if clean."""
        n_docs = len(batch.word_offsets) - 1
        out = np.full(n_docs, -1, dtype=np.int32)
        if len(self.hashes) == 0 or n_docs == 0:
            return out
        h, offsets = batch.window_hashes(self.ngram_size, short=False)
        if len(h) == 0:
            return out
        lo = np.searchsorted(self.hashes, h, side="left")
        hi = np.searchsorted(self.hashes, h, side="right")
        for w in np.flatnonzero(hi > lo):  # hash hits only: rare, so a Python loop is fine
            d = int(np.searchsorted(offsets, w, side="right")) - 1
            first_word = batch.word_offsets[d] + (w - offsets[d])
            gram = batch.buf[batch.word_start[first_word] : batch.word_end[first_word + self.ngram_size - 1]]
            for k in range(lo[w], hi[w]):
                if np.array_equal(gram, self.blob[self.offsets[k] : self.offsets[k + 1]]):
                    src = self.source[k]
                    if out[d] < 0 or src < out[d]:
                        out[d] = src
                    break
        return out

    def flags(self, texts: Sequence[str | None]) -> NDArray[np.bool_]:
        """True for each contaminated text."""
        return self.first_hit(encode_batch(texts)) >= 0
