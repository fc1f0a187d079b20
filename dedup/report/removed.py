"""`OUTPUT/_report/removed.parquet`: one row per document a run removed (or, keeping duplicates, would).

A directory of Parquet files, one per input file under its own name, so no single process ever
holds the list: id, reason (`near_duplicate`, `contaminated`, `already_indexed` with
`--skip-existing`, `empty_after_lines` with line dedup: no word left once its repeated lines
went, or `contaminated_after_lines`: its new text, lines joined anew, holds a protected n-gram;
`empty_after_spans` and `contaminated_after_spans` the same with span dedup; with the contamination
cut, `contaminated_too_often` and `contaminated_cut_to_nothing`);
for near duplicates the root id, the document it was matched to
(`dedup.partition.roots.closest_matches`: the smallest id among its other copies and the best copy of each text
confirmed against its own) and that pair's similarity (estimate, and exact Jaccard with
`--confirm exact`), and its similarity to the root by the confirm rule in force
(`survivor_similarity`); for contaminated ones the protected file, the record and the first
matching n-gram. Parquet readers skip `_`-prefixed paths, so the output dataset stays clean.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from dedup.config import CUT_MAX_WINDOWS
from dedup.core.decontam import ProtectedNgrams
from dedup.partition.features import AFTER_LINES, CLEAN, EMPTIED, WINDOWS
from dedup.partition.keyspace import key_row
from dedup.partition.roots import SURVIVOR_ESTIMATE, SURVIVOR_JACCARD
from dedup.partition.spans import AFTER_SPANS, EMPTIED_BY_SPANS

REPORT_DIR = "_report"
REMOVED = f"{REPORT_DIR}/removed.parquet"
REMOVED_LINES = f"{REPORT_DIR}/removed_lines.parquet"
"""With line dedup: a row a line removed (`dedup.partition.lines.removed_line_rows`), by input file."""
PAGE = f"{REPORT_DIR}/index.html"
EVAL_RECORDS = f"{REPORT_DIR}/eval_records.parquet"
"""With protected files: a row per protected record, the eval side (docs/contract.md §6e)."""
EVAL_RECORDS_SCHEMA = pa.schema([
    pa.field("file", pa.string(), nullable=False), pa.field("record", pa.string(), nullable=False),
    pa.field("ngrams", pa.int64(), nullable=False), pa.field("ignored", pa.int64(), nullable=False),
    pa.field("documents", pa.int64(), nullable=False), pa.field("found_share", pa.float64(), nullable=False),
    pa.field("longest_run", pa.int64(), nullable=False),
])
"""`EVAL_RECORDS`' columns: the record's file and label, its distinct n-grams, of them those the
frequency cap ignored, the documents sharing one in force, the share of its n-grams found in force,
and the longest run of consecutive words one document shares with it."""
NEAR, CONTAMINATED, SKIPPED_EXISTING, EMPTY_AFTER_LINES = "near_duplicate", "contaminated", "already_indexed", \
    "empty_after_lines"
CONTAMINATED_AFTER_LINES = "contaminated_after_lines"
EMPTY_AFTER_SPANS, CONTAMINATED_AFTER_SPANS = "empty_after_spans", "contaminated_after_spans"
CUT_TOO_OFTEN, CUT_TO_NOTHING = "contaminated_too_often", "contaminated_cut_to_nothing"
"""With `--contaminated cut`: more matching windows than the cut takes (`CUT_MAX_WINDOWS`), or no
word left once cut."""


def removed_schema(id_type: pa.DataType) -> pa.Schema:
    return pa.schema([
        pa.field("id", id_type, nullable=False), pa.field("reason", pa.string(), nullable=False),
        pa.field("root", id_type), pa.field("matched", id_type),
        pa.field("estimate", pa.float32()), pa.field("jaccard", pa.float32()),
        pa.field("survivor_similarity", pa.float32()),
        pa.field("protected_file", pa.string()), pa.field("record", pa.string()), pa.field("ngram", pa.string()),
    ])


def removed_rows(feat: pd.DataFrame, cluster: NDArray[Any], matches: pd.DataFrame | None,
                 protected: ProtectedNgrams | None, id_type: pa.DataType,
                 action: str = "drop", whole: NDArray[np.bool_] | None = None) -> tuple[pa.Table, NDArray[np.int64]]:
    """The removed rows of one features partition (all its rows, in order), and their row positions.

    cluster: each row's root id (its own id when alone); matches: (doc, matched, estimate, jaccard)
    of this partition's clustered documents; whole: the rows of clusters kept whole.
    """
    ids = feat["_id"].to_numpy(dtype=np.int64 if pd.api.types.is_integer_dtype(feat["_id"].dtype) else object)
    source = feat["source"].to_numpy()
    contaminated = source >= 0
    skipped = feat["skipped"].to_numpy(bool)
    near = (source == CLEAN) & ~skipped & (cluster != ids)
    if whole is not None:  # a cluster below --min-cluster-size is kept whole: none of it is removed
        near &= ~whole
    emptied = source == EMPTIED
    emptied_spans = source == EMPTIED_BY_SPANS
    take = np.flatnonzero(contaminated | near | skipped | emptied | emptied_spans)
    n = len(feat)
    matched = np.full(n, None, dtype=object)
    est = np.full(n, np.nan, dtype=np.float32)
    jac = np.full(n, np.nan, dtype=np.float32)
    to_root = np.full(n, np.nan, dtype=np.float32)
    if matches is not None and len(matches):
        rows = key_row(matches["doc"].to_numpy(np.int64))
        matched[rows] = matches["matched"].to_numpy(dtype=object)
        est[rows] = matches["estimate"].to_numpy(np.float32)
        jac[rows] = matches["jaccard"].to_numpy(np.float32)
        if SURVIVOR_ESTIMATE in matches.columns:  # by the confirm rule: exact Jaccard when it was scored
            j = matches[SURVIVOR_JACCARD].to_numpy(np.float32)
            to_root[rows] = np.where(np.isnan(j), matches[SURVIVOR_ESTIMATE].to_numpy(np.float32), j)
    files: list[str | None] = [None] * len(take)
    records: list[str | None] = [None] * len(take)
    grams: list[str | None] = [None] * len(take)
    if protected is not None:
        grams_of = feat["source_gram"].to_numpy()
        for j, r in enumerate(take):
            if contaminated[r]:
                rec = int(source[r])
                files[j] = protected.files[protected.record_file[rec]]
                records[j] = protected.record_labels[rec]
                grams[j] = protected.ngram_text(int(grams_of[r]))
    is_near = near[take]
    mask = ~is_near
    after = feat[AFTER_LINES].to_numpy(bool) if AFTER_LINES in feat.columns else np.zeros(n, bool)
    after_spans = feat[AFTER_SPANS].to_numpy(bool) if AFTER_SPANS in feat.columns else np.zeros(n, bool)
    cut = action == "cut"
    too_often = cut & (feat[WINDOWS].to_numpy() > CUT_MAX_WINDOWS)
    reason = np.select([is_near, skipped[take], emptied[take], emptied_spans[take], after[take], after_spans[take],
                        contaminated[take] & too_often[take], contaminated[take] & cut],
                       [NEAR, SKIPPED_EXISTING, EMPTY_AFTER_LINES, EMPTY_AFTER_SPANS, CONTAMINATED_AFTER_LINES,
                        CONTAMINATED_AFTER_SPANS, CUT_TOO_OFTEN, CUT_TO_NOTHING], CONTAMINATED)
    schema = removed_schema(id_type)
    return pa.table({
        "id": pa.array(ids[take].tolist(), id_type),
        "reason": pa.array(reason.tolist(), pa.string()),
        "root": pa.array(cluster[take].tolist(), id_type, mask=mask),
        "matched": pa.array(matched[take].tolist(), id_type, mask=mask),
        "estimate": pa.array(est[take], pa.float32(), mask=mask | np.isnan(est[take])),
        "jaccard": pa.array(jac[take], pa.float32(), mask=mask | np.isnan(jac[take])),
        "survivor_similarity": pa.array(to_root[take], pa.float32(), mask=mask | np.isnan(to_root[take])),
        "protected_file": pa.array(files, pa.string()), "record": pa.array(records, pa.string()),
        "ngram": pa.array(grams, pa.string()),
    }, schema=schema), take
