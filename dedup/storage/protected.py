"""The protected (eval) texts read from their files: the 13-gram rule's inputs (contract §6).

`dedup.core.decontam` holds the rule on texts and n-grams; this module gives it the texts of the
eval files as people keep them (`dedup.storage.evalfiles`), so the core reads no file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Union

from dedup.core import decontam
from dedup.core.decontam import ProtectedNgrams
from dedup.core.docs import Doc
from dedup.core.text import _check_size, word_ngrams
from dedup.storage import evalfiles

PathLike = Union[str, "os.PathLike[str]"]


def _as_paths(paths: PathLike | Iterable[PathLike]) -> list[PathLike]:
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)


def protected_texts(path: PathLike) -> Iterator[str]:
    """Every protected text of a file or directory, in order (see `dedup.storage.evalfiles` for the formats)."""
    for f in evalfiles.files_of(str(path)):
        for _label, texts in evalfiles.records(f):
            yield from texts


def protected_ngrams(paths: PathLike | Iterable[PathLike], ngram_size: int = 13) -> set[str]:
    """The set of word n-grams of every protected text in `paths`."""
    _check_size("ngram_size", ngram_size)
    grams: set[str] = set()
    for path in _as_paths(paths):
        for text in protected_texts(path):
            grams |= word_ngrams(text, ngram_size)
    return grams


def read_protected(paths: PathLike | Iterable[PathLike], ngram_size: int = 13) -> ProtectedNgrams:
    """Every record of every eval file in `paths` (directories expanded), indexed for the workers."""
    _check_size("ngram_size", ngram_size)
    files: list[str] = []
    for p in _as_paths(paths):
        files += evalfiles.files_of(str(p))
    records = ((fi, label, texts) for fi, f in enumerate(files) for label, texts in evalfiles.records(f))
    return ProtectedNgrams.from_records(files, records, ngram_size)


def decontaminate(docs: Iterable[Doc], protected: set[str] | frozenset[str] | PathLike | Sequence[PathLike],
                  ngram_size: int = 13) -> Iterator[Doc]:
    """Yield the documents that are not contaminated, lazily, in order.

    `protected` is a set of n-grams (from `protected_ngrams`) or the protected file path(s).
    """
    grams = protected if isinstance(protected, (set, frozenset)) else protected_ngrams(protected, ngram_size)
    return decontam.decontaminate(docs, grams, ngram_size)
