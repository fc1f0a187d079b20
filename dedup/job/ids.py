"""The features stage's check on Dask: ids unique in this run and new to the earlier outputs' indexes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.job.graphs import persist
from dedup.job.routing import ID_ROW_BYTES, range_part, route, route_by
from dedup.partition.features import mark_skipped
from dedup.report.shown import shown_repr
from dedup.storage import index, index_files
from dedup.storage.safety import UsageError
from dedup.storage.shards import POSITION_ID


@dataclass(frozen=True)
class IdCounts:
    """The ids' check: ids read twice, ids an earlier output already read, and the id ranges."""

    repeated: int
    existing: int
    id_partitions: int

CONFLICT_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "kind": pd.Series(dtype=np.int8)})


def id_conflicts(feat: dd.DataFrame, npartitions: int | None = None, *, against: Sequence[index.IndexPart] = (),
                 index_out: str | None = None, rows: int | None = None
                 ) -> tuple[dd.DataFrame, int, tuple[dd.DataFrame, dd.DataFrame]]:
    """Documents whose id occurs twice in this run (kind 0) or is in an earlier index (kind 1).

    The ids are routed to the range of their stable hash (`dedup.core.hashing.id_hashes`), where they
    are compared exactly; each range also reads the same range of the earlier indexes' id files
    and, with `index_out`, writes this run's. Returns the conflicts persisted on the workers, the
    number of ranges, and, lazy, their counts by kind and a few of each for messages (to compute
    with the features' counts, then `conflict_counts`). `rows`: the input's rows, when known
    (a small input's ids take one task, `route_small`, not a shuffle).
    """
    keys = feat[["doc", "_id"]]
    k = max([npartitions or keys.npartitions] + [p.id_parts for p in against])
    with_h = keys.map_partitions(_with_id_hash, meta=keys._meta.assign(_h=pd.Series(dtype=np.uint64)))
    ranged = route_by(with_h, partial(range_part, column="_h", npartitions=k), k, rows, ID_ROW_BYTES, ranges=True)
    id_type = id_arrow_type(keys._meta["_id"])
    meta = CONFLICT_META.assign(_id=keys._meta["_id"])[["doc", "_id", "kind"]]
    found = persist(ranged.map_partitions(index_files.id_conflicts, list(against), k, index_out, id_type, meta=meta))
    lazy = (found.map_partitions(_conflicts_by_kind, meta={"repeated": "int64", "existing": "int64"}),
            found.map_partitions(_conflict_sample, meta=meta))
    return found, k, lazy


def id_arrow_type(ids: pd.Series) -> pa.DataType:
    """The Arrow type of ids in the index's files: int64 for integer ids, else strings."""
    return pa.int64() if pd.api.types.is_integer_dtype(ids.dtype) else pa.string()


def _with_id_hash(d: pd.DataFrame) -> pd.DataFrame:
    from dedup.core.hashing import id_hashes

    return d.assign(_h=id_hashes(d["_id"].to_numpy()))


def _conflicts_by_kind(d: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"repeated": [int(d["_id"][d["kind"] == 0].nunique())], "existing": [int((d["kind"] == 1).sum())]})


def _conflict_sample(d: pd.DataFrame) -> pd.DataFrame:
    return d.groupby("kind").head(6)


def conflict_counts(k: int, c: pd.DataFrame, sample: pd.DataFrame) -> tuple[IdCounts, pd.DataFrame]:
    """The computed counts of `id_conflicts`: repeated (distinct ids occurring more than once; an
    id's rows are all in one range), existing (documents whose id an earlier index holds), and the
    sample sorted by key."""
    counts = IdCounts(repeated=int(c["repeated"].sum()), existing=int(c["existing"].sum()), id_partitions=k)
    return counts, sample.sort_values("doc")


def _located(rows: pd.DataFrame, locate: Callable[[int], tuple[str, int]] | None, shown: int | None = 6) -> str:
    """" (ID in FILE row R, ...)" for the first `shown` of `rows` (doc, _id; all when None); "" when keys
    cannot be located."""
    if locate is None:
        return ""
    head = rows if shown is None else rows.head(shown)
    return " (" + ", ".join(f"{shown_repr(i)} in {f} row {r}" for i, (f, r) in
                            zip(head["_id"], (locate(int(k)) for k in head["doc"]))) + ")"


def check_unique_ids(repeated: pd.DataFrame, id_column: str,
                     locate: Callable[[int], tuple[str, int]] | None = None, count: int | None = None) -> None:
    """Raise naming the repeated ids and where they occur (file and row, when `locate` maps keys);
    `repeated` may be a sample of them, `count` their number of distinct ids."""
    if repeated.empty:
        return
    repeated = repeated.sort_values("doc")
    names = sorted({str(i) for i in repeated["_id"]})
    where = _located(repeated, locate)
    number = count if count is not None else len(names)
    raise ValueError(f"{number} document id(s) in column {id_column!r} occur more than once, e.g. "
                     f"[{', '.join(shown_repr(n) for n in names[:5])}]{where}; ids must be unique. Nothing was written.")


def existing_ids(feat: dd.DataFrame, conflicts: dd.DataFrame, count: int, sample: pd.DataFrame, id_column: str,
                 locate: Callable[[int], tuple[str, int]] | None, skip: bool) -> dd.DataFrame:
    """Refuse (or, with `skip`, mark as skipped) the `count` documents whose id an earlier run's index
    already holds (`conflicts` of kind 1; `sample`: a few of them, for the message)."""
    if not count:
        return feat
    if not skip:
        where = _located(sample, locate, shown=None)
        named = ", ".join(shown_repr(str(i)) for i in sample["_id"].head(5))
        if id_column == POSITION_ID:
            raise UsageError(f"{count} document(s) have the position of a document an earlier run given with --against "
                             f"read, e.g. [{named}]: without an id column a document's id is FILE#ROW, and it repeats "
                             "when files keep their names from one run to the next. Put this run's files under a "
                             "directory of their own inside INPUT, or name a column of ids with --id-column. Nothing "
                             "was written.")
        raise ValueError(f"{count} document id(s) in column {id_column!r} were already read by an earlier run given "
                         f"with --against, e.g. [{named}]{where}. Pass "
                         "--skip-existing to leave them out, or give them new ids. Nothing was written.")
    found = conflicts[conflicts["kind"] == 1][["doc", "_id"]]
    routed = route(found, "doc", feat.npartitions, rows=count, row_bytes=ID_ROW_BYTES)
    return persist(dd.map_partitions(mark_skipped, feat, routed, meta=feat._meta, align_dataframes=False))
