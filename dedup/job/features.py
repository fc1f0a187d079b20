"""Stage 1 on Dask: every document's features, computed once and kept (worker memory or disk)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import dask.dataframe as dd
import pandas as pd

from dedup.config import Params
from dedup.core.decontam import ProtectedNgrams
from dedup.job.checkpoints import read_part
from dedup.job.compute import compute, shared
from dedup.job.graphs import persist
from dedup.partition.features import KEEP, document_features, features_meta


@dataclass(frozen=True)
class FeatureCounts:
    """What the features stage counted: rows read, contaminated documents, null ids."""

    rows: int
    contaminated: int
    null_ids: int


def features(ddf: dd.DataFrame, *, id_column: str, text_column: str, params: Params,
             protected: ProtectedNgrams | None, features_dir: str | None) -> tuple[dd.DataFrame, dd.DataFrame]:
    """Signatures, text hashes, keys and contamination per document, computed once (worker memory or
    disk), and their counts per partition (rows, contaminated, null_ids), lazy: computed with the
    next stage's (`FEATURE_COUNTS` sums them)."""
    prot = shared(protected) if protected is not None else None
    keep = ddf._meta[KEEP].dtype if KEEP in ddf.columns else None
    feat = ddf.map_partitions(document_features, id_column, text_column, params, prot,
                              meta=features_meta(params.num_perm, ddf._meta[id_column].dtype, keep))
    feat = _materialise(feat, features_dir)
    counts = feat.map_partitions(_feature_counts, meta={"rows": "int64", "contaminated": "int64", "null_ids": "int64"})
    return feat, counts


def _feature_counts(f: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"rows": [len(f)], "contaminated": [int((f["source"] >= 0).sum())],
                         "null_ids": [int(f["_id"].isna().sum())]})


def feature_counts(c: pd.DataFrame) -> FeatureCounts:
    """The computed counts of `features`, summed."""
    return FeatureCounts(**{k: int(c[k].sum()) for k in ("rows", "contaminated", "null_ids")})


def _materialise(feat: dd.DataFrame, features_dir: str | None) -> dd.DataFrame:
    """Compute the features once: kept in worker memory, or written to `features_dir` as Parquet.

    On disk, each partition is one file read back as one partition (`from_map`), so the
    features stay aligned with the input's partitions while worker memory holds only what a
    task is working on.
    """
    if features_dir is None:
        return persist(feat)
    import fsspec

    n = feat.npartitions
    compute(feat.to_parquet(features_dir, write_index=False, compute=False,
                            name_function=lambda i: f"part-{i:06d}.parquet"))
    fs, root = fsspec.core.url_to_fs(features_dir)
    proto = features_dir.split("://", 1)[0] + "://" if "://" in features_dir else ""
    paths = [f"{proto}{root}/part-{i:06d}.parquet" for i in range(n)]
    missing = [p for p in paths if not fs.exists(p.removeprefix(proto))]
    if missing:
        raise RuntimeError(f"Features were not written for {len(missing)} partition(s), e.g. {missing[0]}.")
    return dd.from_map(partial(read_part, like=feat._meta), paths, meta=feat._meta, enforce_metadata=False)
