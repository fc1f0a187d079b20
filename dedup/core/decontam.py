"""Decontamination by the GPT-3 13-gram rule (contract §6).

A document is contaminated when any of its word n-grams appears in a protected eval text.
`ProtectedNgrams` holds the protected set as a sorted uint64 hash array (cheap to ship to Dask
workers and to probe with `np.searchsorted`) plus the n-grams' bytes, so every hash hit is
confirmed against the real n-gram and a collision never costs a document.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dedup.core import _kernels
from dedup.core.docs import Doc
from dedup.core.text import TextBatch, _check_size, encode_batch, words


def contaminated(text: str | None, grams: set[str] | frozenset[str], ngram_size: int = 13) -> bool:
    """True when any word n-gram of `text` (last window included) is in `grams`."""
    _check_size("ngram_size", ngram_size)
    if not grams or text is None:
        return False
    w = words(text)
    return any(" ".join(w[i : i + ngram_size]) in grams for i in range(len(w) - ngram_size + 1))


def decontaminate(docs: Iterable[Doc], grams: set[str] | frozenset[str], ngram_size: int = 13) -> Iterator[Doc]:
    """Yield the documents that share no word n-gram with `grams`, lazily, in order
    (`dedup.decontaminate` also takes the protected files' paths)."""
    for doc in docs:
        if not contaminated(doc.text, grams, ngram_size):
            yield doc


@dataclass(frozen=True)
class ProtectedNgrams:
    """The protected n-grams of some eval files, held compactly for shipping to workers.

    hashes: uint64 [m], FNV-1a 64 of each distinct n-gram, sorted; start/end: int64 [m], the
    byte span of one occurrence in buf (uint8, the normalised protected texts), so every hash
    hit is confirmed against the real bytes and a collision never costs a document.
    rec_offsets: int64 [m + 1] into rec_ids (int32): the records holding n-gram i, sorted;
    min_record: int32 [m], the first of them. Records are numbered in file order;
    record_file: int32 [R], the file of each; record_labels: `line 3`, `row 7`, `[2]`, ...;
    files: the protected files (directories expanded).
    """

    ngram_size: int
    hashes: NDArray[np.uint64]
    start: NDArray[np.int64]
    end: NDArray[np.int64]
    buf: NDArray[np.uint8]
    rec_offsets: NDArray[np.int64]
    rec_ids: NDArray[np.int32]
    min_record: NDArray[np.int32]
    record_file: NDArray[np.int32]
    record_labels: tuple[str, ...]
    files: tuple[str, ...]

    @classmethod
    def from_records(cls, files: Sequence[str], records: Iterable[tuple[int, str, Sequence[str]]],
                     ngram_size: int = 13) -> ProtectedNgrams:
        """Index the n-grams of protected records: (file index, label, texts) in file order
        (`dedup.storage.protected.read_protected` reads them from eval files). No Python object
        per n-gram, so a 20 MB line costs about 40 bytes per word."""
        _check_size("ngram_size", ngram_size)
        texts: list[str] = []
        text_record: list[int] = []
        record_file: list[int] = []
        labels: list[str] = []
        for fi, label, rec_texts in records:
            rid = len(labels)
            labels.append(label)
            record_file.append(fi)
            texts += rec_texts
            text_record += [rid] * len(rec_texts)
        batch = encode_batch(texts)
        h, offsets = batch.window_hashes(ngram_size, short=False)
        start, end, _ = batch.spans(ngram_size, short=False)
        h2 = _kernels.mix_spans(batch.buf, start, end)
        rec = np.repeat(np.asarray(text_record, dtype=np.int32), np.diff(offsets))
        order = np.lexsort((rec, h2, h))
        h, h2, rec, start, end = h[order], h2[order], rec[order], start[order], end[order]
        new_gram = np.ones(len(h), dtype=bool)
        new_gram[1:] = (h[1:] != h[:-1]) | (h2[1:] != h2[:-1])
        new_pair = new_gram.copy()
        new_pair[1:] |= rec[1:] != rec[:-1]
        first = np.flatnonzero(new_gram)
        gram_of_pair = np.cumsum(new_gram)[new_pair] - 1
        rec_offsets = np.zeros(len(first) + 1, dtype=np.int64)
        np.cumsum(np.bincount(gram_of_pair, minlength=len(first)), out=rec_offsets[1:])
        return cls(ngram_size, h[first], start[first].astype(np.int64), end[first].astype(np.int64), batch.buf,
                   rec_offsets, rec[new_pair].astype(np.int32), rec[first].astype(np.int32),
                   np.asarray(record_file, dtype=np.int32), tuple(labels), tuple(files))

    def digest(self) -> str:
        """A hash of everything the rule reads (n-grams, their bytes, records, labels, files): two
        runs with the same digest protect the same text the same way."""
        import hashlib

        h = hashlib.blake2b(digest_size=16)
        for a in (self.hashes, self.start, self.end, self.buf, self.rec_offsets, self.rec_ids, self.min_record,
                  self.record_file):
            h.update(np.ascontiguousarray(a).tobytes())
        h.update("\0".join((str(self.ngram_size), *self.record_labels, "\0", *self.files)).encode())
        return h.hexdigest()

    def __len__(self) -> int:
        return len(self.hashes)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays shipped to every worker."""
        return sum(a.nbytes for a in (self.hashes, self.start, self.end, self.buf, self.rec_offsets, self.rec_ids,
                                      self.min_record, self.record_file))

    def gram_counts(self) -> list[int]:
        """How many distinct n-grams each file holds (independent of the files' order)."""
        gram = np.repeat(np.arange(len(self.hashes)), np.diff(self.rec_offsets))
        pairs = np.unique(np.stack([gram, self.record_file[self.rec_ids]]), axis=1) if len(gram) else np.zeros((2, 0), int)
        return np.bincount(pairs[1], minlength=len(self.files)).tolist()

    def ngram_text(self, gram: int) -> str:
        """The n-gram's words, for messages."""
        return bytes(self.buf[self.start[gram]:self.end[gram]]).decode("utf-8", errors="replace")

    def hits(self, batch: TextBatch) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Every confirmed hit in `batch`: (document index, n-gram index), one per matching window."""
        doc, gram, _ = self.hits_at(batch)
        return doc, gram

    def hits_at(self, batch: TextBatch) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
        """Every confirmed hit in `batch`: (document index, n-gram index, the window's first word in
        its document), one per matching window (a window holds one n-gram), by window."""
        empty = np.zeros(0, np.int64)
        n_docs = len(batch.word_offsets) - 1
        if len(self.hashes) == 0 or n_docs == 0:
            return empty, empty, empty
        h, offsets = batch.window_hashes(self.ngram_size, short=False)
        lo = np.searchsorted(self.hashes, h, side="left")
        hi = np.searchsorted(self.hashes, h, side="right")
        w = np.flatnonzero(hi > lo)
        if len(w) == 0:
            return empty, empty, empty
        span = (hi - lo)[w]
        win = np.repeat(w, span)
        gram = np.repeat(lo[w], span) + (np.arange(span.sum()) - np.repeat(np.cumsum(span) - span, span))
        doc = np.searchsorted(offsets, win, side="right") - 1
        first_word = batch.word_offsets[doc] + (win - offsets[doc])
        ws, we = batch.word_start[first_word], batch.word_ends(first_word + self.ngram_size - 1)
        ok = _kernels.spans_equal(batch.buf, ws, we, self.buf, self.start[gram], self.end[gram])
        return doc[ok].astype(np.int64), gram[ok].astype(np.int64), (win - offsets[doc])[ok].astype(np.int64)

    def without(self, grams: NDArray[np.int64]) -> ProtectedNgrams:
        """The same records without the n-grams `grams` (indices into this set): `--max-ngram-docs`'
        rule, which ignores common ones. Records keep their numbers; n-grams are numbered anew."""
        keep = np.ones(len(self.hashes), bool)
        keep[np.asarray(grams, np.int64)] = False
        counts = np.diff(self.rec_offsets)[keep]
        rec_keep = np.repeat(keep, np.diff(self.rec_offsets))
        rec_offsets = np.zeros(int(keep.sum()) + 1, np.int64)
        np.cumsum(counts, out=rec_offsets[1:])
        return dataclasses.replace(self, hashes=self.hashes[keep], start=self.start[keep], end=self.end[keep],
                                   rec_offsets=rec_offsets, rec_ids=self.rec_ids[rec_keep],
                                   min_record=self.min_record[keep])

    def records_of(self, gram: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Each (n-gram, record) pair of the n-grams `gram`: (position in `gram`, record), n-gram by n-gram."""
        gram = np.asarray(gram, np.int64)
        span = self.rec_offsets[gram + 1] - self.rec_offsets[gram]
        first = np.repeat(np.cumsum(span) - span, span)
        pos = np.repeat(self.rec_offsets[gram], span) + (np.arange(span.sum()) - first)
        return np.repeat(np.arange(len(gram)), span), self.rec_ids[pos].astype(np.int64)

    def record_ngrams(self) -> NDArray[np.int64]:
        """How many distinct n-grams of this set each record holds."""
        return np.bincount(self.rec_ids, minlength=len(self.record_labels)).astype(np.int64)

    def label(self, record: int) -> str:
        """`FILE#RECORD`, as `contaminated_by` and the eval side name a record."""
        return f"{self.files[self.record_file[record]]}#{self.record_labels[record]}"

    def first_hits(self, batch: TextBatch,
                   found: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None) -> tuple[NDArray[np.int32], NDArray[np.int64]]:
        """Per document of `batch`: the smallest record index among its confirmed hits (-1 if clean),
        and the smallest n-gram index among its hits of that record (-1 if clean). `found`: the
        batch's `hits`, when already found."""
        n_docs = len(batch.word_offsets) - 1
        big = np.iinfo(np.int64).max
        record = np.full(n_docs, big, dtype=np.int64)
        gram_of = np.full(n_docs, -1, dtype=np.int64)
        doc, gram = found if found is not None else self.hits(batch)
        if len(doc):
            rec = self.min_record[gram].astype(np.int64)
            np.minimum.at(record, doc, rec)
            best = rec == record[doc]
            g = np.full(n_docs, big, dtype=np.int64)
            np.minimum.at(g, doc[best], gram[best])
            hit = record != big
            gram_of[hit] = g[hit]
        record[record == big] = -1
        return record.astype(np.int32), gram_of

    def first_hit(self, batch: TextBatch) -> NDArray[np.int32]:
        """Per document of `batch`: the smallest record index among its confirmed hits, or -1 if clean."""
        return self.first_hits(batch)[0]

    def record_hits(self, batch: TextBatch) -> pd.DataFrame:
        """(doc, record, gram): each document of `batch` (its row in the batch), each record one of its
        n-grams belongs to, and that n-gram; one row per (document, n-gram, record)."""
        doc, gram = self.hits(batch)
        at, record = self.records_of(gram)
        return pd.DataFrame({"doc": doc[at], "record": record, "gram": gram[at]})

    def flags(self, texts: Sequence[str | None]) -> NDArray[np.bool_]:
        """True for each contaminated text."""
        return self.first_hit(encode_batch(texts)) >= 0
