"""An `--against` run's reading of earlier indexes: the band rows sharing a bucket with the new documents,
and those documents' features (where they sit in the run's key space: `dedup.storage.index_layout`; their
texts: `dedup.storage.output_texts`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from dedup.config import Params
from dedup.core.minhash import arrow_signatures
from dedup.core.text import TEXT_DTYPE
from dedup.partition.codec import from_fixed_binary
from dedup.storage.index import KEY_PREFIXES, TKEYS_IN_BANDS, IndexPart, docs_file
from dedup.storage.index_files import key_prefixes, read_bands
from dedup.storage.index_layout import Layout
from dedup.storage.output_texts import check_texts, output_texts


def matched_rows(new: Any, layout: Layout, parts: int, partition_info: dict[str, Any] | None = None) -> Any:
    """The index band rows of this bucket range that share a (band, key) with this run's rows `new`,
    with global document keys and their text hashes (0 for indexes older than `TKEYS_IN_BANDS`). From
    an index of format `KEY_PREFIXES` on, those that share a key prefix: each as a row (band, key, doc)
    for every (band, key) of this run with that prefix, which the document's signature confirms or
    not where it is read (`verified`)."""
    import pandas as pd

    from dedup.partition.buckets import LONG_META
    from dedup.partition.keyspace import ROW_BITS

    if new.empty or partition_info is None:
        return LONG_META.copy()
    m = partition_info["number"]
    keys, which = np.unique(new["key"].to_numpy(np.uint64), return_inverse=True)
    buckets = np.sort(_bucket_codes(which, new["band"].to_numpy()))  # this run's (band, key), as codes
    found = []
    for part, start in zip(layout.parts, layout.starts):
        table = read_bands(part, m, parts)
        if table.num_rows == 0:
            continue
        if part.format >= KEY_PREFIXES:
            found.append(_prefix_matches(table, keys, buckets, np.int64(start << ROW_BITS)))
            continue
        at = _positions_of(table.column("key").to_numpy(), keys)
        if not len(at):
            continue
        taken = table.take(pa.array(at))  # rows whose key this run has: keep those of the same band too
        codes = _bucket_codes(np.searchsorted(keys, taken.column("key").to_numpy()), taken.column("band").to_numpy())
        i = np.minimum(np.searchsorted(buckets, codes), len(buckets) - 1)
        rows = taken.filter(pa.array(buckets[i] == codes)).to_pandas()
        rows["doc"] = rows["doc"].to_numpy(np.int64) + np.int64(start << ROW_BITS)
        if part.format < TKEYS_IN_BANDS:  # fetched from the docs file, at the document's partition
            rows["tkey"] = rows["tkey2"] = np.uint64(0)
        found.append(rows[list(LONG_META.columns)])
    if not found:
        return LONG_META.copy()
    return pd.concat(found, ignore_index=True).astype(LONG_META.dtypes.to_dict())


def _prefix_matches(table: pa.Table, keys: NDArray[np.uint64], buckets: NDArray[np.int64], offset: np.int64) -> Any:
    """Of a band file's (key prefix, doc) rows, those whose prefix is one of this run's (band, key)
    (`buckets`, codes over the sorted distinct `keys`): one row (band, key, doc) for each such pair,
    doc as a global key, no text hashes."""
    import pandas as pd

    from dedup.partition.buckets import LONG_META

    codes = _sorted_unique(buckets)
    bkey, bband = keys[codes // 256], (codes % 256).astype(np.uint8)
    bpre = key_prefixes(bkey)  # ascending, as the keys are
    column = table.column("key").to_numpy()
    at = _positions_of(column, _sorted_unique(bpre))
    pre, doc = column[at], table.column("doc").to_numpy()[at]
    lo, hi = np.searchsorted(bpre, pre, "left"), np.searchsorted(bpre, pre, "right")
    n = hi - lo
    which = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(n.sum(), dtype=np.int64)
    zero = np.zeros(len(which), np.uint64)
    out = pd.DataFrame({"band": bband[which], "key": bkey[which], "doc": np.repeat(doc, n) + offset,
                        "tkey": zero, "tkey2": zero})  # a document with one prefix in two bands: twice
    return out.drop_duplicates(["band", "key", "doc"])[list(LONG_META.columns)]


def verified(rows: Any, docs: NDArray[np.int64], sigs: NDArray[np.uint32], params: Params) -> NDArray[np.bool_]:
    """Which matched band rows (band, key, doc) their document's signature gives: `docs` sorted, `sigs`
    theirs. A row read by its key prefix (`index.KEY_PREFIXES`) may name another key; a row whose
    document is not among `docs` (not in the docs files, or without text for exact Jaccard) takes no part."""
    from dedup.core.lsh import band_keys

    doc = rows["doc"].to_numpy(np.int64)
    if not len(docs):
        return np.zeros(len(doc), bool)
    pos = np.minimum(np.searchsorted(docs, doc), len(docs) - 1)
    ok = docs[pos] == doc
    keys = band_keys(sigs, num_bands=params.num_bands, rows_per_band=params.rows_per_band)
    band = rows["band"].to_numpy(np.int64)
    ok[ok] = keys[pos[ok], band[ok]] == rows["key"].to_numpy(np.uint64)[ok]
    return ok


def _sorted_unique(a: NDArray[Any]) -> NDArray[Any]:
    """The distinct values of the sorted array `a` (`np.unique` without its sort)."""
    return a[np.concatenate([[True], a[1:] != a[:-1]])] if len(a) else a


def _bucket_codes(key_index: NDArray[np.int64], band: NDArray[Any]) -> NDArray[np.int64]:
    """One int64 per (band, key): the key's position among the sorted distinct keys, then the band
    (a uint8 of the band files)."""
    return key_index.astype(np.int64) * 256 + band.astype(np.int64)


def _positions_of(column: NDArray[np.uint64], keys: NDArray[np.uint64]) -> NDArray[np.int64]:
    """Positions in `column` of the values in the sorted unique `keys`: by binary search for each key
    when `column` is sorted (a band file is, unless a range spans several files), else by a scan."""
    if len(column) and not (column[1:] >= column[:-1]).all():
        return np.flatnonzero(np.isin(column, keys))
    lo = np.searchsorted(column, keys, "left")
    hi = np.searchsorted(column, keys, "right")
    n = hi - lo
    has = n > 0
    lo, n = lo[has], n[has]
    return np.repeat(lo - np.cumsum(n) + n, n) + np.arange(n.sum(), dtype=np.int64)


def features_meta(num_perm: int, id_dtype: Any) -> Any:
    """An index partition's features (`dedup.partition.features.features_meta`) plus `_text`, the document's text
    in the earlier output (read only for --confirm exact)."""
    import pandas as pd

    from dedup.partition.features import ROOT_DOC
    from dedup.partition.features import features_meta as base

    return base(num_perm, id_dtype).assign(_text=pd.Series(dtype=TEXT_DTYPE), **{ROOT_DOC: pd.Series(dtype=np.int64)})


def named_roots(rows: Any, layout: Layout, exact: bool, partition_info: dict[str, Any] | None = None) -> Any:
    """At a gathered index partition: the roots (as keys of this run) that the near duplicates among
    the documents the matched band rows `rows` name stand for (their docs files' `root_doc`), to be
    read beside them (`index_features`), so that the earlier output's texts are read once. A superset:
    a row read by its key prefix is not verified here (a near duplicate an earlier output kept has no
    signature in its docs file), and a root read for nothing is only looked up by key. With `exact`,
    only a near duplicate whose text its output holds (it was kept with --keep-duplicates) takes part,
    so only such a one names its root."""
    import pandas as pd

    from dedup.partition.keyspace import ROW_BITS
    from dedup.partition.stand_ins import KEYS_META

    if partition_info is None or partition_info["number"] < layout.first or rows.empty:
        return KEYS_META.copy()
    keys = np.unique(rows["doc"].to_numpy(np.int64))
    found = []
    for q in layout.gathered(partition_info["number"]):
        need = keys[(keys >> ROW_BITS) == q]
        if not len(need):
            continue
        part, p, start = layout.locate(q)
        ok, pos, table = _docs_file_rows(part, p, need - np.int64(start << ROW_BITS), ["doc", "root_doc", "file"])
        if "root_doc" not in table.column_names:  # older than ROOTS_LOCATED: no near duplicate names its root
            continue
        written = table.column("root_doc").take(pa.array(pos[ok]))
        has = written.is_valid().to_numpy(zero_copy_only=False)
        if exact:  # a near duplicate its output dropped has no text to compare with: it takes no part
            has &= table.column("file").take(pa.array(pos[ok])).is_valid().to_numpy(zero_copy_only=False)
        if has.any():
            found.append(layout.translate(part, written.fill_null(0).to_numpy()[has].astype(np.int64)))
    return pd.DataFrame({"doc": np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)})


def index_features(rows: Any, roots: Any, layout: Layout, params: Params, exact: bool, id_dtype: Any,
                   partition_info: dict[str, Any] | None = None) -> Any:
    """At a gathered index partition: the features of the indexed documents named by `rows` (matched
    band rows) and of the roots `roots` (`named_roots`, routed here; or None), read from the docs
    files of the index partitions it gathers (and, for the signatures those do not hold and for
    exact Jaccard, their texts from the earlier output, each file once), in key order, each document
    once. An indexed near duplicate carries its root's id as `_id`: it stands for that cluster, and
    its root is read with it, so that survivors scores a new member against the document an earlier
    output kept. Without its text in the earlier output (it was dropped), exact Jaccard leaves it out."""
    import pandas as pd

    from dedup.partition.codec import sig_payload
    from dedup.partition.features import CLEAN, ROOT_DOC, SIG
    from dedup.partition.keyspace import ROW_BITS

    root_keys = np.zeros(0, np.int64) if roots is None else roots["doc"].to_numpy(np.int64)
    if partition_info is None or partition_info["number"] < layout.first or (rows.empty and not len(root_keys)):
        return features_meta(params.num_perm, id_dtype)  # a root may be here with no matched row naming it
    named = rows["doc"].to_numpy(np.int64)
    keys = np.unique(np.concatenate([named, root_keys]))
    parts = [(q, need) for q in layout.gathered(partition_info["number"]) if len(need := keys[(keys >> ROW_BITS) == q])]
    found = [_partition_rows(need, q, layout, exact, params) for q, need in parts]
    if not found:
        return features_meta(params.num_perm, id_dtype)
    docs = np.concatenate([d for d, _, _, _ in found])
    taken = pa.concat_tables([t for _, t, _, _ in found])
    sigs = np.concatenate([s for _, _, s, _ in found])
    texts = [t for _, _, _, ts in found for t in ts]
    n = len(docs)
    ids = taken.column("root")
    root_doc = docs.copy()  # a kept document is its own root; a near duplicate names its root's key
    at = 0
    for (q, _), (d, t, _, _) in zip(parts, found):
        written = t.column("root_doc")
        has = written.is_valid().to_numpy(zero_copy_only=False)
        if has.any():
            part = layout.locate(q)[0]
            values = written.fill_null(0).to_numpy()
            root_doc[at:at + len(d)][has] = layout.translate(part, values[has].astype(np.int64))
        at += len(d)
    # the documents a matched band row names truly (`verified`), and the roots
    held = np.isin(docs, named[verified(rows, docs, sigs, params)]) | np.isin(docs, root_keys)
    if not held.all():
        docs, sigs, taken, root_doc = docs[held], sigs[held], taken.filter(pa.array(held)), root_doc[held]
        texts = [t for t, h in zip(texts, held) if h]
        ids, n = taken.column("root"), len(docs)
    return pd.DataFrame({"_id": pd.Series(ids.to_numpy(zero_copy_only=False), dtype=id_dtype), "doc": docs,
                         "tkey": taken.column("tkey").to_numpy(), "tkey2": taken.column("tkey2").to_numpy(),
                         "source": np.full(n, CLEAN, np.int32), "source_gram": np.full(n, -1, np.int64),
                         "skipped": np.zeros(n, bool), "hit": np.full(n, CLEAN, np.int32),
                         "windows": np.zeros(n, np.int32), SIG: sig_payload(sigs).array,
                         "_text": pd.Series(texts, dtype=TEXT_DTYPE), ROOT_DOC: root_doc})


def matched_count(rows: Any, feat: Any, params: Params) -> Any:
    """How many of an index partition's documents (`index_features`: in key order) the matched band
    rows `rows` name truly (`verified`): the indexed documents sharing a bucket with this input,
    not the roots read beside them."""
    import pandas as pd

    from dedup.partition.features import signatures_of

    if rows.empty or feat.empty:
        return pd.DataFrame({"n": [0]})
    docs = feat["doc"].to_numpy(np.int64)
    ok = verified(rows, docs, signatures_of(feat, params.num_perm), params)
    return pd.DataFrame({"n": [len(np.unique(rows["doc"].to_numpy(np.int64)[ok]))]})


def _docs_file_rows(part: IndexPart, p: int, need: NDArray[np.int64], columns: list[str]
                    ) -> tuple[NDArray[np.bool_], NDArray[np.int64], pa.Table]:
    """Of docs-file partition p of `part`, the `columns` it has of the row groups holding one of the
    sorted local keys `need`: which keys it holds, and where (`ok`, `pos`), and the rows read."""
    import fsspec
    import pyarrow.parquet as pq

    fs, path = fsspec.core.url_to_fs(docs_file(part.url, p))
    with fs.open(path, "rb") as fh:
        pf = pq.ParquetFile(fh)
        columns = [c for c in columns if c in pf.schema_arrow.names]
        groups = _groups_holding(pf, need)
        table = pf.read_row_groups(groups, columns=columns) if groups else pf.schema_arrow.empty_table().select(columns)
    docs = table.column("doc").to_numpy()
    pos = np.minimum(np.searchsorted(docs, need), max(len(docs) - 1, 0))
    ok = (docs[pos] == need) if len(docs) else np.zeros(len(need), dtype=bool)
    return ok, pos, table


def _partition_rows(need: NDArray[np.int64], q: int, layout: Layout, exact: bool, params: Params
                    ) -> tuple[NDArray[np.int64], pa.Table, NDArray[np.uint32], list[Any]]:
    """Of the sorted keys `need`, all of global index partition q: the keys found, their docs-file
    rows (doc, id, root, root_doc, tkey, tkey2, file, row), their signatures and, with `exact`, their
    texts. A signature the docs file does not hold (`index.SIGNATURES_FROM_TEXT`) is computed from the
    document's text in the earlier OUTPUT, as that run computed it."""
    from dedup.partition.keyspace import ROW_BITS

    part, p, start = layout.locate(q)
    offset = np.int64(start << ROW_BITS)
    need = need - offset
    ok, pos, table = _docs_file_rows(part, p, need, ["doc", "id", "tkey", "tkey2", "signature", "file", "row",
                                                     "root", "root_doc"])
    if exact and table.num_rows:  # a duplicate the earlier run dropped has no text to compare with
        ok &= table.column("file").is_valid().to_numpy(zero_copy_only=False)[pos]
    taken = table.take(pa.array(pos[ok]))
    if "root" not in taken.column_names:  # an index older than roots: every document is its own
        taken = taken.append_column("root", taken.column("id"))
    if "root_doc" not in taken.column_names:  # older than ROOTS_LOCATED: a near duplicate stands for its root
        taken = taken.append_column("root_doc", pa.nulls(taken.num_rows, pa.int64()))
    column = taken.column("signature").combine_chunks()
    held = column.is_valid().to_numpy(zero_copy_only=False)
    sigs = from_fixed_binary(column, params.num_perm) if len(column) else np.zeros((0, params.num_perm), np.uint32)
    texts: list[Any] = [None] * taken.num_rows
    read = np.ones(taken.num_rows, bool) if exact else ~held
    if read.any():
        at = np.flatnonzero(read)
        files = taken.column("file").take(pa.array(at)).to_pylist()
        got = output_texts(part, files, taken.column("row").take(pa.array(at)).to_numpy())
        check_texts(part, taken.take(pa.array(at)), got)
        if not held.all():
            rebuilt = np.flatnonzero(~held[at])
            sigs[at[rebuilt]] = arrow_signatures(got.take(pa.array(rebuilt)), num_perm=params.num_perm,
                                                 seed=params.seed, shingle_size=params.shingle_size,
                                                 shingle_unit=params.shingle_unit)
        if exact:
            texts = got.to_pylist()
    taken = taken.select(["doc", "id", "root", "root_doc", "tkey", "tkey2", "file", "row"])
    return need[ok] + offset, taken, sigs, texts


def _groups_holding(pf: Any, need: NDArray[np.int64]) -> list[int]:
    """Row groups of a docs file (sorted by doc) whose doc range holds one of the sorted keys `need`."""
    md = pf.metadata
    col = md.schema.to_arrow_schema().get_field_index("doc")
    out = []
    for g in range(md.num_row_groups):
        st = md.row_group(g).column(col).statistics
        if st is None or not st.has_min_max:
            out.append(g)
            continue
        i = np.searchsorted(need, st.min)
        if i < len(need) and need[i] <= st.max:
            out.append(g)
    return out


def kept_rows(rows: Any, feat: Any, params: Params) -> Any:
    """The matched band rows whose document is in the index partition's features (one a run kept)
    and whose (band, key) its signature gives (`verified`), with its text hashes."""
    from dedup.partition.buckets import LONG_META
    from dedup.partition.features import signatures_of

    if rows.empty or feat.empty:
        return LONG_META.copy()
    docs = feat["doc"].to_numpy(np.int64)  # in key order (`index_features`)
    rows = rows[verified(rows, docs, signatures_of(feat, params.num_perm), params)]
    out = rows[["band", "key", "doc"]].merge(feat[["doc", "tkey", "tkey2"]], on="doc", how="inner")
    return out[list(LONG_META.columns)].reset_index(drop=True)
