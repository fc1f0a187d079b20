"""The write tasks: each input file back through Arrow with its rows' decisions, under its own name
in the staging directory (with its index docs file), and `_report/removed.parquet` beside them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from dedup.core.decontam import ProtectedNgrams
from dedup.partition import keyspace
from dedup.partition.buckets import band_documents
from dedup.partition.decisions import row_decisions
from dedup.partition.features import signatures_of
from dedup.report import removed
from dedup.storage import index
from dedup.storage import shards as shards_mod

Inputs = tuple[list[list[shards_mod.Shard]], pa.Schema]
"""The input files of each partition, and the schema every output shard is written with."""


def read_group(group: list[shards_mod.Shard], id_column: str, text_column: str, id_type: pa.DataType) -> pd.DataFrame:
    return shards_mod.read_features_input(group, id_column, text_column, id_type)


def write_group(feat: pd.DataFrame, roots: pd.DataFrame | None, inputs: Inputs,
                 id_column: str, drop: bool, tag: bool, staging_url: str, num_perm: int | None = None,
                 shown: tuple[str, dict[int, list[int]]] | None = None,
                 partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Write the output shards of one partition: each input file filtered, tagged, under its own name;
    with `num_perm`, also this partition's index docs file (every document kept as its cluster's root).
    `shown`: (text column, partition -> rows): the texts of those rows come back, as (key, text)
    pairs in the "texts" column, for the report page (read here with every other column)."""
    import fsspec

    assert partition_info is not None
    groups, schema = inputs
    group = groups[partition_info["number"]]
    keep, cluster = row_decisions(feat, roots, drop)
    fs, root = fsspec.core.url_to_fs(staging_url)
    cluster_field = pa.field(shards_mod.CLUSTER_COLUMN, cluster_type(schema, id_column), nullable=False)
    out_row = np.cumsum(keep) - 1  # row of each kept document in its output file, once offset per file
    out_file = np.empty(len(feat), dtype=object)
    text_column, rows = shown if shown is not None else ("", {})
    wanted = np.asarray(rows.get(partition_info["number"], []), dtype=np.int64)
    texts: list[tuple[int, Any]] = []
    offset = written = 0
    for s in group:
        table = shards_mod.conform(shards_mod.read_table(s.path), schema)
        n = table.num_rows
        if offset + n > len(feat):
            raise RuntimeError(f"{s.path} has more rows than its features; was it changed during the run?")
        here = wanted[(wanted >= offset) & (wanted < offset + n)]
        if len(here):
            got = table.column(text_column).take(pa.array(here - offset, pa.int64())).to_pylist()
            texts += zip(feat["doc"].to_numpy(np.int64)[here].tolist(), got)
        k = keep[offset:offset + n]
        out_row[offset:offset + n] -= written
        out_file[offset:offset + n] = s.name
        table = table.filter(pa.array(k, type=pa.bool_()))
        if tag:
            table = table.append_column(cluster_field, pa.array(cluster[offset:offset + n][k], type=cluster_field.type))
        shards_mod.write_shard(table, fs, f"{root}/{s.name}")
        offset += n
        written += table.num_rows
    if offset != len(feat):
        raise RuntimeError(f"Input files {[s.path for s in group]} changed during the run (row counts differ).")
    indexed = absorbed = nbytes = 0
    if num_perm is not None:
        own = feat["_id"].to_numpy(dtype=cluster.dtype)
        root = keep & (cluster == own)
        # the kept documents, and the near duplicates found (those with band rows): a later run
        # that finds a document like one of them puts it in the same cluster
        take = np.flatnonzero(root | (np.isin(feat["doc"].to_numpy(np.int64), band_documents(feat)) & ~root))
        sigs = signatures_of(feat, num_perm, take)
        tkeys = (feat["tkey"].to_numpy(np.uint64)[take], feat["tkey2"].to_numpy(np.uint64)[take])
        files = [f if k else None for f, k in zip(out_file[take].tolist(), keep[take])]
        table = index.docs_table(own[take].tolist(), cluster[take].tolist(), feat["doc"].to_numpy(np.int64)[take], tkeys,
                                 sigs, files, out_row[take], cluster_type(schema, id_column))
        nbytes = index.write_docs(table, f"{staging_url}/{index.INDEX_DIR}", partition_info["number"])
        indexed = int(root.sum())
        absorbed = table.num_rows - indexed
    return pd.DataFrame({"rows": [written], "indexed": [indexed], "absorbed": [absorbed], "bytes": [nbytes],
                         "texts": pd.Series([texts], dtype=object)})


def locator(groups: list[list[shards_mod.Shard]]) -> Callable[[int], tuple[str, int]]:
    """Maps a document key (partition, row) to its input file and the row inside it."""
    def locate(key: int) -> tuple[str, int]:
        part, row = key >> keyspace.ROW_BITS, key & ((1 << keyspace.ROW_BITS) - 1)
        for s in groups[part]:
            if row < s.rows:
                return s.path, row
            row -= s.rows
        return groups[part][-1].path, row
    return locate


def write_removed(feat: pd.DataFrame, roots: pd.DataFrame | None, found: pd.DataFrame | None,
                   inputs: Inputs, id_column: str,
                   protected: ProtectedNgrams | None, staging_url: str,
                   partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Write `_report/removed.parquet/<input file name>` for each input file of one partition."""
    import fsspec

    assert partition_info is not None
    groups, schema = inputs
    _, cluster = row_decisions(feat, roots, drop=False)
    table, rows = removed.removed_rows(feat, cluster, found, protected, cluster_type(schema, id_column))
    fs, root = fsspec.core.url_to_fs(staging_url)
    offset = written = 0
    for s in groups[partition_info["number"]]:
        lo, hi = np.searchsorted(rows, [offset, offset + s.rows])
        part = table.slice(lo, hi - lo)
        shards_mod.write_shard(part, fs, f"{root}/{removed.REMOVED}/{s.name}")
        offset += s.rows
        written += part.num_rows
    return pd.DataFrame({"rows": [written]})


def cluster_type(schema: pa.Schema, id_column: str) -> pa.DataType:
    """The type of `minhash_cluster`: the id column's (its value type when dictionary-encoded)."""
    t = schema.field(id_column).type
    return t.value_type if pa.types.is_dictionary(t) else t
