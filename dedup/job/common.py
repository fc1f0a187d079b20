"""The frequency cap on Dask, with `--max-ngram-docs K` (docs/contract.md §6e): a protected n-gram
found in more than K documents is common text (a license notice, a form's wording), not a leak; it is
ignored. Each partition counts the documents holding each protected n-gram it holds
(`gram_documents`), a tally bounded by the protected set; Dask's group-by sums them, and the n-grams
over K are the `common` result, which the protected n-grams in force (`rule`) leave out."""

from __future__ import annotations

from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd

from dedup.core.minhash import SIGNATURE_CHUNK
from dedup.job.compute import compute, shared
from dedup.job.graphs import read_for
from dedup.job.stage import Settings, Step, View
from dedup.partition.contamination import GRAMS_META, gram_documents

MAX_COMMON_LISTED = 1000
"""The common n-grams the manifest lists (the most common first); the page shows fewer."""


def documents_per_gram(ddf: dd.DataFrame, protected: Any, text_column: str) -> pd.DataFrame:
    """(gram, documents): for each protected n-gram found in `ddf`, the documents holding it."""
    tallies = dd.map_partitions(gram_documents, read_for(ddf, "common"), shared(protected), text_column,
                                SIGNATURE_CHUNK, meta=GRAMS_META, align_dataframes=False)
    (summed,) = compute(tallies.groupby("gram")["documents"].sum(split_out=1))
    return pd.DataFrame({"gram": summed.index.to_numpy(np.int64), "documents": summed.to_numpy(np.int64)})


class Common(Step):
    """With `--max-ngram-docs K`: the protected n-grams found in more than K documents (`common`, with
    their counts), and the n-grams in force without them (`rule`)."""

    name = "common"
    reads = ("source",)
    gives = ("common", "rule")
    tables = ("common",)

    def wanted(self, s: Settings) -> bool:
        return s.protected is not None and s.max_ngram_docs is not None

    def run(self, job: View) -> str:
        s = job.settings
        assert s.protected is not None and s.max_ngram_docs is not None
        counts = documents_per_gram(job.source, s.protected, s.text_column)
        common = counts[counts["documents"] > s.max_ngram_docs]
        job.common = common.sort_values(["documents", "gram"], ascending=[False, True]).reset_index(drop=True)
        return (f"{len(common)} of the {len(counts)} protected n-grams found are in more than {s.max_ngram_docs} "
                "documents: ignored")

    def after(self, job: View) -> None:
        s, report, common = job.settings, job.report, job.common
        assert s.protected is not None
        grams = common["gram"].to_numpy(np.int64)
        job.rule = s.protected.without(grams) if len(grams) else s.protected
        report.common_ngram_count = len(common)
        report.common_ngrams = [{"ngram": s.protected.ngram_text(int(g)), "documents": int(d)}
                                for g, d in zip(grams[:MAX_COMMON_LISTED], common["documents"].to_numpy()[:MAX_COMMON_LISTED])]
