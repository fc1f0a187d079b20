"""Contamination actions and the eval side, per partition (docs/contract.md §6e).

What a document sharing a protected n-gram becomes is decided with its features
(`dedup.partition.features.settle_actions`: dropped, tagged or cut). Here: the cut texts for the
steps that read texts after the features (`with_cuts`, `cut_column`), the `contaminated_by` lists
(`tag_lists`), and the tallies the eval side and the frequency cap are summed from: documents per
n-gram (`gram_documents`), and per record the documents, n-grams found and the longest run of
matched words (`record_tallies`). Every tally is one row per n-gram or record found in the
partition, so their sums are bounded by the protected set, not the corpus.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from dedup.config import WHAT_IF_NGRAM_DOCS
from dedup.core.cut import cut_texts
from dedup.core.decontam import ProtectedNgrams
from dedup.core.text import encode_batch, encode_column_chunks, texts_of
from dedup.partition.features import CLEAN, HIT, first_examples
from dedup.partition.keyspace import key_row

GRAMS_META = pd.DataFrame({"gram": pd.Series(dtype=np.int64), "documents": pd.Series(dtype=np.int64)})
HITS_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "gram": pd.Series(dtype=np.int64),
                          "word": pd.Series(dtype=np.int64)})
RECORDS_META = pd.DataFrame({"record": pd.Series(dtype=np.int64), "documents": pd.Series(dtype=np.int64),
                             "longest_run": pd.Series(dtype=np.int64), "gram": pd.Series(dtype=np.int64)})
FILES_META = pd.DataFrame({"file": pd.Series(dtype=np.int64), "documents": pd.Series(dtype=np.int64)})
WHAT_IF_META = pd.DataFrame({"max_ngram_docs": pd.Series(dtype=np.int64), "documents": pd.Series(dtype=np.int64)})


def cut_rows(feat: pd.DataFrame) -> NDArray[np.int64]:
    """The rows of a features partition the cut changes: hit, and not removed."""
    return np.flatnonzero((feat[HIT].to_numpy() >= 0) & (feat["source"].to_numpy() == CLEAN))


def with_cuts(part: pd.DataFrame, feat: pd.DataFrame, rule: ProtectedNgrams, text_column: str) -> pd.DataFrame:
    """The input partition with the texts the cut changes cut (for the steps that read texts after
    the features: line and span dedup); the text column's dtype as it was."""
    rows = cut_rows(feat)
    if not len(rows):
        return part
    out = part.copy()
    values = out[text_column].astype(object).to_numpy().copy()
    values[rows] = cut_texts(texts_of(part[text_column].iloc[rows]), rule)
    out[text_column] = pd.array(values, dtype=part[text_column].dtype)
    return out


def replaced(column: pa.ChunkedArray | pa.Array, rows: NDArray[np.int64], texts: Sequence[str | None]) -> pa.Array:
    """`column` with `texts` at `rows` (ascending), the other values (and the type) as they were."""
    mask = np.zeros(len(column), bool)
    mask[rows] = True
    typ = column.type
    wide = pa.large_string() if pa.types.is_string_view(typ) else typ
    values = column.cast(wide) if wide != typ else column
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    out = pc.replace_with_mask(values, pa.array(mask), pa.array(list(texts), wide))
    return out.cast(typ) if wide != typ else out


def cut_column(column: pa.ChunkedArray | pa.Array, feat: pd.DataFrame, offset: int,
               rule: ProtectedNgrams) -> pa.Array | pa.ChunkedArray:
    """The text column of rows offset.. of a features partition, cut where the cut changes it."""
    rows = cut_rows(feat.iloc[offset:offset + len(column)])
    if not len(rows):
        return column
    texts = column.take(pa.array(rows, pa.int64())).to_pylist()
    return replaced(column, rows, cut_texts(texts, rule))


def tag_lists(texts: Sequence[str | None], rule: ProtectedNgrams) -> list[list[str]]:
    """Per text: every protected record it shares an n-gram with, as `FILE#RECORD`, in record order."""
    pairs = rule.record_hits(encode_batch(texts)).drop_duplicates(["doc", "record"]).sort_values(["doc", "record"])
    out: list[list[str]] = [[] for _ in texts]
    for d, r in zip(pairs["doc"].tolist(), pairs["record"].tolist()):
        out[d].append(rule.label(r))
    return out


def tag_column(n: int, rows: NDArray[np.int64], texts: Sequence[str | None], rule: ProtectedNgrams) -> pa.Array:
    """`contaminated_by` for `n` rows: the records each of `rows` (with `texts`) shares an n-gram
    with, an empty list for every other row."""
    lists = tag_lists(texts, rule)
    counts = np.zeros(n, np.int32)
    counts[rows] = [len(labels) for labels in lists]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array([x for labels in lists for x in labels], pa.string()))


def gram_documents(part: pd.DataFrame, rule: ProtectedNgrams, text_column: str, chunk: int) -> pd.DataFrame:
    """(gram, documents): the documents of one partition holding each n-gram of `rule` found in it."""
    found = []
    for lo, batch in encode_column_chunks(part[text_column], chunk):
        doc, gram = rule.hits(batch)
        found.append(np.unique(np.stack([doc + lo, gram]), axis=1)[1] if len(doc) else np.zeros(0, np.int64))
    grams = np.concatenate(found) if found else np.zeros(0, np.int64)
    g, counts = np.unique(grams, return_counts=True)
    return pd.DataFrame({"gram": g.astype(np.int64), "documents": counts.astype(np.int64)})


def partition_hits(part: pd.DataFrame, feat: pd.DataFrame, rule: ProtectedNgrams, text_column: str) -> pd.DataFrame:
    """(doc, gram, word) of every matching window of the partition's documents hit (`HIT`), doc the
    document's key, word the window's first word: what the eval side is counted from."""
    rows = np.flatnonzero(feat[HIT].to_numpy() >= 0)
    if not len(rows):
        return HITS_META.copy()
    doc, gram, word = rule.hits_at(encode_batch(texts_of(part[text_column].iloc[rows])))
    keys = feat["doc"].to_numpy(np.int64)[rows]
    return pd.DataFrame({"doc": keys[doc], "gram": gram, "word": word})


def hit_grams(hits: pd.DataFrame) -> pd.DataFrame:
    """(gram, documents) of a partition's hits."""
    pairs = hits.drop_duplicates(["doc", "gram"])
    counts = pairs["gram"].value_counts()
    return pd.DataFrame({"gram": counts.index.to_numpy(np.int64), "documents": counts.to_numpy(np.int64)})


def record_tallies(hits: pd.DataFrame, rule: ProtectedNgrams) -> pd.DataFrame:
    """(record, documents, longest_run, gram) of a partition's hits: the documents sharing an n-gram
    with each record, the longest run of consecutive words one of them shares with it (windows of
    the record's n-grams that overlap or touch make one run), and its smallest n-gram found."""
    if hits.empty:
        return RECORDS_META.copy()
    at, record = rule.records_of(hits["gram"].to_numpy(np.int64))
    doc, word = hits["doc"].to_numpy(np.int64)[at], hits["word"].to_numpy(np.int64)[at]
    gram = hits["gram"].to_numpy(np.int64)[at]
    order = np.lexsort((word, doc, record))
    record, doc, word, gram = record[order], doc[order], word[order], gram[order]
    n = rule.ngram_size
    new = np.r_[True, (record[1:] != record[:-1]) | (doc[1:] != doc[:-1]) | (word[1:] > word[:-1] + n)]
    first = word[new]
    length = np.maximum.reduceat(word, np.flatnonzero(new)) + n - first
    runs = pd.DataFrame({"record": record[new], "doc": doc[new], "length": length})
    by = runs.groupby("record").agg(documents=("doc", "nunique"), longest_run=("length", "max")).reset_index()
    by["gram"] = pd.Series(gram).groupby(record).min().to_numpy()
    return by.astype(np.int64)


def hit_examples(hits: pd.DataFrame, feat: pd.DataFrame, rule: ProtectedNgrams) -> pd.DataFrame:
    """(source, gram, doc, _id) per protected record of a partition's hits: its smallest n-gram found,
    and the document with the smallest id holding it, the page's example (which holds the n-gram the
    page shows). Over partitions, `first_examples` of them gives the corpus's."""
    at, record = rule.records_of(hits["gram"].to_numpy(np.int64))
    doc = hits["doc"].to_numpy(np.int64)[at]
    found = pd.DataFrame({"source": record.astype(np.int32), "gram": hits["gram"].to_numpy(np.int64)[at], "doc": doc,
                          "_id": feat["_id"].to_numpy()[key_row(doc)]})
    return first_examples(found)


def file_tallies(hits: pd.DataFrame, rule: ProtectedNgrams) -> pd.DataFrame:
    """(file, documents) of a partition's hits: the documents sharing an n-gram with a record of each file."""
    if hits.empty:
        return FILES_META.copy()
    at, record = rule.records_of(hits["gram"].to_numpy(np.int64))
    pairs = pd.DataFrame({"file": rule.record_file[record].astype(np.int64), "doc": hits["doc"].to_numpy(np.int64)[at]})
    counts = pairs.drop_duplicates().groupby("file")["doc"].count()
    return pd.DataFrame({"file": counts.index.to_numpy(np.int64), "documents": counts.to_numpy(np.int64)})


def what_if(hits: pd.DataFrame, gram_docs: NDArray[np.int64], caps: Sequence[int] = WHAT_IF_NGRAM_DOCS) -> pd.DataFrame:
    """(max_ngram_docs, documents): of a partition's documents hit, those still hit with each cap
    (an n-gram in more documents than the cap ignored); `gram_docs`: the corpus's documents per n-gram."""
    if hits.empty:
        least = np.zeros(0, np.int64)
    else:
        least = pd.Series(gram_docs[hits["gram"].to_numpy(np.int64)]).groupby(hits["doc"].to_numpy()).min().to_numpy()
    return pd.DataFrame({"max_ngram_docs": np.asarray(caps, np.int64),
                         "documents": np.asarray([(least <= k).sum() for k in caps], np.int64)})
