"""Every compiled kernel loaded once, in the process that calls `warm_kernels`.

numba compiles a kernel at its first call in a process (from its on-disk cache after the first
run of an install: about 0.03 CPU-seconds a kernel; without it, about 4.5 CPU-seconds for all of
them). A worker that loads them as its tasks first need them pays that in its first tasks; worse,
on a fresh install every worker compiles every kernel at the same time. Called where processes are
made (the process local workers are forked from, a worker's preload), it does that once: the forks
start with the kernels in memory. Each call goes through the function the job uses, so that the
kernel is compiled for the argument types the job gives it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dedup.config import Params
from dedup.core.decontam import ProtectedNgrams
from dedup.core.hashing import id_hashes
from dedup.core.order import lex_order
from dedup.core.text import TEXT_DTYPE, encode_batch
from dedup.partition.buckets import long_form
from dedup.partition.confirm import blob_jaccard, shingle_sets
from dedup.partition.features import document_features
from dedup.partition.what_if import removed_at

_TEXT = "warm up every compiled kernel of dedup, once, before the first task needs one of them"


def warm_kernels() -> None:
    """Run each kernel once on a tiny input through the code that uses it: tokenising, shingle and
    band hashes (word and character shingles), exact Jaccard, the decontamination n-grams and the
    hashes that route string ids. Span dedup's two kernels (`dedup.core._span_kernels`) are left to
    its own tasks: only a run with spans calls them, and every process made pays what it warms."""
    texts = pd.Series([_TEXT, "naïve café " + _TEXT], dtype=TEXT_DTYPE)  # an ASCII text and one that is not
    feat = document_features(pd.DataFrame({"id": ["a", "b"], "text": texts}), "id", "text", Params(), None)
    long_form(feat, Params())  # the band keys
    lex_order([np.zeros(2, np.uint64), np.arange(2)])  # row orders (buckets, pairs, index files)
    shingle_sets(list(texts), 5, "char")
    values, offsets = shingle_sets(list(texts), 5, "word")
    first = np.zeros(1, dtype=np.int64)  # the first text's set against itself
    blob_jaccard([values[offsets[0]:offsets[1]].tobytes()], first, values, offsets, first)
    grams = ProtectedNgrams.from_records(["warm"], [(0, "warm", [_TEXT])], ngram_size=13)
    grams.hits(encode_batch([_TEXT]))
    id_hashes(np.array(["a", "b"], dtype=object))
    removed_at(pd.DataFrame({"left": np.zeros(1, np.int64), "right": np.ones(1, np.int64),
                             "score": np.full(1, 0.9, np.float32), "confirmed": [True]}), (0.8,), 0.8, 2)  # what-if
