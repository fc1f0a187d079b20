"""The Dask job: Parquet shards in, near-duplicates tagged or dropped, contaminated rows removed.

Stages (each a pure function in `dedup.frames`, orchestrated here):
features (signatures, text hashes, contamination) -> long form (band, key, doc) -> shuffle on
(band, key) -> bucket edges -> confirm on the client -> min-root union-find -> roots merged back
partition by partition (no reshuffle of documents, row order kept).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from dedup import frames, io
from dedup import shards as shards_mod
from dedup.config import Params
from dedup.decontam import PathLike, ProtectedNgrams
from dedup.near import confirm_pairs
from dedup.plan import DEFAULT_MAX_BUCKET, Plan, Report, Stage, prepare
from dedup.safety import MANIFEST
from dedup.staging import deferred_interrupts
from dedup.text import encode_batch
from dedup.unionfind import components

log = logging.getLogger("dedup")


def _compute(*collections: Any, retries: int = 2) -> Any:
    """dask.compute on the active client with retries (dask.annotate(retries=) is ignored); on the
    local scheduler when no client exists or `dask.config.set(scheduler="sync"|"threads")` asks for it."""
    if dask.config.get("scheduler", None) not in (None, "dask.distributed"):
        return dask.compute(*collections)
    try:
        from distributed import get_client

        client = get_client()
    except (ImportError, ValueError):
        return dask.compute(*collections)
    futures = client.compute(list(collections), retries=retries)
    from dedup.runtime import show_progress

    show_progress(futures)
    return client.gather(futures)


def _check_columns(ddf: dd.DataFrame, id_column: str, text_column: str) -> None:
    cols = list(ddf.columns)
    for role, name in (("id", id_column), ("text", text_column)):
        if name not in cols:
            raise ValueError(f"The {role} column {name!r} is not in the input; columns found: {cols}. "
                             f"Pass --{role}-column to name it.")
    tdtype = ddf._meta[text_column].dtype
    if not (pd.api.types.is_string_dtype(tdtype) or tdtype is np.dtype(object)):
        raise ValueError(f"The text column {text_column!r} has type {tdtype}; it must hold strings.")
    idtype = ddf._meta[id_column].dtype
    if not (pd.api.types.is_integer_dtype(idtype) or pd.api.types.is_string_dtype(idtype)):
        raise ValueError(f"The id column {id_column!r} has type {idtype}; ids must be strings or integers.")
    if "minhash_cluster" in cols:
        raise ValueError("The input already has a 'minhash_cluster' column; rename or drop it first.")


def _shared(value: Any) -> Any:
    """`value` as one graph node that every partition's task depends on.

    A delayed value, not a scattered future: the scheduler keeps it in the graph, so a worker
    killed mid-run loses nothing that cannot be recomputed (a scattered future would be gone).
    """
    return dask.delayed(value, pure=True, traverse=False)


def _edges_to_confirm(edges: pd.DataFrame) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    def unique_pairs(df: pd.DataFrame) -> NDArray[np.int64]:
        if df.empty:
            return np.zeros((0, 2), np.int64)
        return np.unique(df[["left", "right"]].to_numpy(dtype=np.int64), axis=0)

    same = unique_pairs(edges[edges["kind"] == frames.KIND_SAME_TEXT])
    cand = unique_pairs(edges[edges["kind"] != frames.KIND_SAME_TEXT])
    return same[:, 0], same[:, 1], cand[:, 0], cand[:, 1]


def _repeated_keys(feat: dd.DataFrame) -> dd.DataFrame:
    """Lazily: the (doc, _id) rows whose doc key occurs more than once."""
    keys = feat[["doc", "_id"]]
    return keys.shuffle(on="doc").map_partitions(lambda d: d[d["doc"].duplicated(keep=False)], meta=keys._meta)


def _check_unique_keys(found: pd.DataFrame, id_column: str, files: Sequence[str] = ()) -> None:
    """Raise, naming ids and where they occur, if an id repeats (or two ids share a 64-bit key)."""
    if found.empty:
        return
    per_key = found.assign(_id=found["_id"].astype(str)).groupby("doc")["_id"].nunique()
    names = sorted(set(found["_id"].astype(str)))
    if (per_key == 1).all():
        where = ""
        if files:
            located = io.id_locations(files, id_column, found["_id"].drop_duplicates().head(3).tolist())
            where = " (" + ", ".join(f"{i!r} in {f} row {r}" for f, r, i in located) + ")"
        raise ValueError(f"{len(per_key)} document id(s) occur more than once, e.g. {names[:5]}{where}; "
                         "ids must be unique. Nothing was written.")
    raise ValueError(f"Ids {names[:5]} hash to the same 64-bit key; rename one of them.")


def cluster_table(ddf: dd.DataFrame, feat: dd.DataFrame, *, id_column: str, text_column: str, params: Params,
                  max_bucket: int, npartitions: int | None, report: Report,
                  files: Sequence[str] = ()) -> tuple[NDArray[np.int64], NDArray[np.object_]]:
    """(doc keys, root ids) of every document in a cluster of two or more.

    The unique-id check runs in the same computation as the buckets (two shuffles at once) and
    raises before anything is written.
    """
    with Stage(report, "buckets") as stage:
        long = feat.map_partitions(frames.long_form, params, meta=frames.LONG_META)
        k = npartitions or max(1, long.npartitions)
        buckets = long.shuffle(on=["band", "key"], npartitions=k)
        edges = buckets.map_partitions(frames.bucket_edges, max_bucket, meta=frames.EDGE_META)
        local = feat.map_partitions(frames.same_text_edges, meta=frames.EDGE_META[["left", "right"]])
        edge_df, local_df, repeated = _compute(edges, local, _repeated_keys(feat))
        _check_unique_keys(repeated, id_column, files)
        local_df = local_df.assign(kind=np.uint8(frames.KIND_SAME_TEXT), band=np.uint8(0))
        all_edges = pd.concat([edge_df, local_df], ignore_index=True)
        approx = edge_df[edge_df["kind"] == frames.KIND_APPROX]
        if len(approx):
            sizes = approx.groupby(["band", "left"]).size() + 1
            report.approximated_buckets = len(sizes)
            report.largest_approximated_bucket = int(sizes.max())
            log.warning("%d bucket(s) had more than %d distinct texts (largest %d): joined by star edges, "
                        "not all pairs", len(sizes), max_bucket, sizes.max())
        same_l, same_r, cand_l, cand_r = _edges_to_confirm(all_edges)
        stage.summary = f"{len(cand_l)} candidate pairs, {len(same_l)} same-text pairs"
    with Stage(report, "confirm") as stage:
        wanted = np.unique(np.concatenate([same_l, same_r, cand_l, cand_r]))
        wanted_f = _shared(wanted)
        if params.confirm == "estimate":  # everything needed is in the persisted features
            cols = ["doc", "_id", *frames.sig_columns(params.num_perm)]
            picked = feat.map_partitions(frames.select_docs, wanted_f, cols, meta=feat._meta[cols])
        else:  # exact Jaccard needs the texts: read them again, for the wanted documents only

            def pick(part: pd.DataFrame, f: pd.DataFrame, w: NDArray[np.int64]) -> pd.DataFrame:
                return frames.select_docs(f.assign(_text=frames.texts_of(part[text_column])), w, ["doc", "_id", "_text"])

            meta = feat._meta.assign(_text=pd.Series(dtype=object))[["doc", "_id", "_text"]]
            picked = dd.map_partitions(pick, ddf, feat, wanted_f, meta=meta, align_dataframes=False)
        (table,) = _compute(picked)
        table = table.sort_values("doc", kind="stable").reset_index(drop=True)
        keys = table["doc"].to_numpy(np.int64)
        li, ri = np.searchsorted(keys, cand_l), np.searchsorted(keys, cand_r)
        if params.confirm == "estimate":
            ok = confirm_pairs(li, ri, params, sigs=table[frames.sig_columns(params.num_perm)].to_numpy())
        else:
            ok = confirm_pairs(li, ri, params, texts=table["_text"].tolist())
        report.candidate_pairs = len(cand_l)
        report.confirmed_pairs = int(ok.sum())
        report.same_text_pairs = len(same_l)
        stage.summary = f"{ok.sum()} of {len(ok)} candidate pairs reach {params.threshold:.3f} ({params.confirm})"
    with Stage(report, "union-find") as stage:
        members, root_keys = components(np.concatenate([same_l, cand_l[ok]]), np.concatenate([same_r, cand_r[ok]]))
        ids = table["_id"].to_numpy()[np.searchsorted(keys, members)]
        frame = pd.DataFrame({"root": root_keys, "id": ids})
        if pd.api.types.is_integer_dtype(frame["id"].dtype):
            root_id = frame.groupby("root")["id"].transform("min")
        else:
            root_id = frame.assign(id=frame["id"].astype(str)).groupby("root")["id"].transform("min")
        sizes = frame.groupby("root").size()
        report.clusters = len(sizes)
        report.largest_cluster = int(sizes.max()) if len(sizes) else 0
        report.near_duplicates = int(len(members) - len(sizes))
        stage.summary = (f"{report.clusters} clusters, largest {report.largest_cluster}, "
                         f"{report.near_duplicates} near duplicates")
    return members, root_id.to_numpy()


def _features(ddf: dd.DataFrame, id_column: str, text_column: str, params: Params,
              protected: ProtectedNgrams | None) -> dd.DataFrame:
    prot = _shared(protected) if protected is not None else None
    return ddf.map_partitions(frames.features, id_column, text_column, params, prot,
                              meta=frames.features_meta(params.num_perm, ddf._meta[id_column].dtype))


def _materialise(feat: dd.DataFrame, features_dir: str | None) -> dd.DataFrame:
    """Compute the features once: kept in worker memory, or written to `features_dir` as Parquet.

    On disk, each partition is one file read back as one partition (`from_map`), so the
    features stay aligned with the input's partitions while worker memory holds only what a
    task is working on.
    """
    if features_dir is None:
        return feat.persist()
    import fsspec

    n = feat.npartitions
    _compute(feat.to_parquet(features_dir, write_index=False, compute=False,
                             name_function=lambda i: f"features-{i:06d}.parquet"))
    fs, root = fsspec.core.url_to_fs(features_dir)
    proto = features_dir.split("://", 1)[0] + "://" if "://" in features_dir else ""
    paths = [f"{proto}{root}/features-{i:06d}.parquet" for i in range(n)]
    missing = [p for p in paths if not fs.exists(p.removeprefix(proto))]
    if missing:
        raise RuntimeError(f"Features were not written for {len(missing)} partition(s), e.g. {missing[0]}.")
    return dd.from_map(pd.read_parquet, paths, meta=feat._meta, enforce_metadata=False)


CONTAMINATION_WARN_SHARE = 0.01
"""A warning names any protected record that alone removes more than this share of the corpus."""
MAX_RECORDS_IN_MANIFEST = 1000


def _hit_counts(part: pd.DataFrame, feat: pd.DataFrame, protected: ProtectedNgrams, text_column: str) -> pd.DataFrame:
    rows = np.flatnonzero(feat["source"].to_numpy() >= 0)
    texts = frames.texts_of(part[text_column].iloc[rows]) if len(rows) else []
    return protected.hit_counts(encode_batch(texts))


def _contamination_report(ddf: dd.DataFrame, feat: dd.DataFrame, protected: ProtectedNgrams, text_column: str,
                          report: Report) -> None:
    """Documents removed per protected file and per record (re-reading only contaminated texts), and a
    warning for any record that alone removes a large share of the corpus."""
    if report.contaminated == 0:
        report.contaminated_by_file = dict.fromkeys(protected.files, 0)
        return
    meta = protected.hit_counts(encode_batch([]))
    detail = dd.map_partitions(_hit_counts, ddf, feat[["source"]], _shared(protected), text_column, meta=meta,
                               align_dataframes=False)
    (hc,) = _compute(detail)
    agg = hc.groupby(["kind", "index"]).agg(documents=("documents", "sum"), gram=("gram", "min")).reset_index()
    files = agg[agg["kind"] == 1]
    by_file = dict(zip(files["index"], files["documents"]))
    report.contaminated_by_file = {name: int(by_file.get(i, 0)) for i, name in enumerate(protected.files)}
    recs = agg[agg["kind"] == 0].sort_values(["documents", "index"], ascending=[False, True])
    entries: list[dict[str, Any]] = []
    for rec, docs, gram in zip(recs["index"], recs["documents"], recs["gram"]):
        entry = {"file": protected.files[protected.record_file[rec]], "record": protected.record_labels[rec],
                 "documents": int(docs), "ngram": protected.ngram_text(int(gram))}
        if len(entries) < MAX_RECORDS_IN_MANIFEST:
            entries.append(entry)
        if report.input_rows and docs > CONTAMINATION_WARN_SHARE * report.input_rows:
            log.warning("protected record %s of %s alone removes %d documents (%.1f%% of the corpus), e.g. by the "
                        "%d-gram %r; check that it is eval text and not boilerplate", entry["record"], entry["file"],
                        docs, 100 * docs / report.input_rows, protected.ngram_size, entry["ngram"])
    report.contaminated_by_record = entries
    report.contaminated_records = len(recs)


def analyse(ddf: dd.DataFrame, *, protected: ProtectedNgrams | None, near: bool, id_column: str, text_column: str,
            params: Params, max_bucket: int = DEFAULT_MAX_BUCKET, npartitions: int | None = None,
            report: Report, files: Sequence[str] = (),
            features_dir: str | None = None) -> tuple[dd.DataFrame, NDArray[np.int64], NDArray[Any]]:
    """The decisions of a job: persisted features, and (doc keys, root ids) of every clustered document.

    Features hold, per row and in input order, the doc key, the id and the contamination source.
    """
    with Stage(report, "features") as stage:
        feat = _materialise(_features(ddf, id_column, text_column, params, protected), features_dir)
        counts = feat.map_partitions(
            lambda f: pd.DataFrame({"rows": [len(f)], "contaminated": [int((f["source"] >= 0).sum())],
                                    "null_ids": [int(f["_id"].isna().sum())]}),
            meta={"rows": "int64", "contaminated": "int64", "null_ids": "int64"})
        (count_df,) = _compute(counts)
        null_ids = int(count_df["null_ids"].sum())
        if null_ids:
            located = io.null_id_rows(files, id_column) if files else []
            where = "; first at " + ", ".join(f"{f} row {r}" for f, r in located) if located else ""
            raise ValueError(f"{null_ids} document(s) have a null id in column {id_column!r}{where}. "
                             "Every document needs a unique id.")
        report.input_rows = int(count_df["rows"].sum())
        report.contaminated = int(count_df["contaminated"].sum())
        stage.summary = f"{report.input_rows} rows in {ddf.npartitions} partitions, {report.contaminated} contaminated"
    if protected is not None:
        _contamination_report(ddf, feat, protected, text_column, report)
    if near:
        members, roots = cluster_table(ddf, feat, id_column=id_column, text_column=text_column, params=params,
                                       max_bucket=max_bucket, npartitions=npartitions, report=report, files=files)
    else:
        (repeated,) = _compute(_repeated_keys(feat))
        _check_unique_keys(repeated, id_column, files)
        members, roots = np.zeros(0, np.int64), np.zeros(0, object)
    return feat, members, roots


def process(ddf: dd.DataFrame, *, protected: ProtectedNgrams | None = None, near: bool = True,
            id_column: str = "id", text_column: str = "text", params: Params | None = None, drop: bool = True,
            max_bucket: int = DEFAULT_MAX_BUCKET, npartitions: int | None = None,
            report: Report | None = None, files: Sequence[str] = (), features_dir: str | None = None) -> dd.DataFrame:
    """Decontaminate (if `protected`), then near-dedup (if `near`); a lazy frame with `minhash_cluster`.

    Runs the clustering eagerly (it needs every document) and returns the final frame lazily,
    with the input's partitions and row order; `minhash_cluster` has the id column's dtype.
    Signatures are kept in worker memory (about 4 * num_perm bytes a document) unless
    `features_dir` names a directory to write them to.
    """
    params = params or Params()
    report = report if report is not None else Report()
    _check_columns(ddf, id_column, text_column)
    feat, members, roots = analyse(ddf, protected=protected, near=near, id_column=id_column, text_column=text_column,
                                   params=params, max_bucket=max_bucket, npartitions=npartitions, report=report,
                                   files=files, features_dir=features_dir)
    members_f, roots_f = _shared(members), _shared(roots)
    meta = ddf._meta.assign(minhash_cluster=pd.Series(dtype=ddf._meta[id_column].dtype)) if near else ddf._meta
    return dd.map_partitions(frames.attach_roots, ddf, feat, id_column, members_f, roots_f, drop and near, near,
                             meta=meta, align_dataframes=False)


def near_dedup(ddf: dd.DataFrame, *, id_column: str = "id", text_column: str = "text", params: Params | None = None,
               drop: bool = True, **kwargs: Any) -> dd.DataFrame:
    """Tag near duplicates with `minhash_cluster` (the root id); with drop, keep roots only."""
    return process(ddf, near=True, id_column=id_column, text_column=text_column, params=params, drop=drop, **kwargs)


def decontaminate(ddf: dd.DataFrame, protected: ProtectedNgrams | PathLike | Sequence[PathLike], *,
                  id_column: str = "id", text_column: str = "text", ngram_size: int = 13, **kwargs: Any) -> dd.DataFrame:
    """Drop documents that share a word n-gram with the protected texts."""
    prot = protected if isinstance(protected, ProtectedNgrams) else ProtectedNgrams.from_paths(
        protected if not isinstance(protected, (str, bytes)) and isinstance(protected, Iterable) else [protected],
        ngram_size)
    params = Params(ngram_size=prot.ngram_size)
    return process(ddf, protected=prot, near=False, id_column=id_column, text_column=text_column, params=params,
                   drop=False, **kwargs)


def _explain_killed_worker(exc: BaseException, groups: Sequence[Sequence[str]], shared_mb: float = 0.0) -> None:
    """Turn a bare KilledWorker into a message that says what to look at.

    groups: the input files of each partition. Only a task that reads or featurises a partition
    names its files; a worker that dies in a shuffle, the write or on shared data is a memory
    problem of the cluster, not of an input file.
    """
    try:
        from distributed.scheduler import KilledWorker
    except ImportError:
        return
    if not isinstance(exc, KilledWorker):
        return
    key = exc.task
    name = str(key[0]) if isinstance(key, tuple) and key else str(key)
    part = key[1] if isinstance(key, tuple) and len(key) > 1 and isinstance(key[1], int) else None
    reads = any(tag in name for tag in ("read-shards", "features", "read_parquet"))
    shared = f" plus the shared protected n-grams ({shared_mb:.0f} MB)" if shared_mb >= 1 else ""
    if reads and part is not None and part < len(groups):
        files = list(groups[part])
        where = f"input file {files[0]!r} (partition {part})" if len(files) == 1 else \
            f"input partition {part} (files {files[:3]}{'...' if len(files) > 3 else ''})"
        raise RuntimeError(
            f"A worker died again and again while reading {where}: a document there may exhaust worker memory "
            f"or crash a library, or the workers' memory limit is below their baseline{shared}. Inspect that file, "
            "or give workers more memory. Nothing was written.") from exc
    raise RuntimeError(
        f"A worker died again and again while running {name!r}: the workers' memory limit is likely below what the "
        f"task needs (its partition{shared}). Give workers more memory or use more, smaller partitions. "
        "Nothing was written.") from exc


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("dedup", "numpy", "numba", "pandas", "pyarrow", "dask", "distributed"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "unknown"
    return out


def _read_group(group: list[shards_mod.Shard], id_column: str, text_column: str, id_type: pa.DataType) -> pd.DataFrame:
    return shards_mod.read_features_input(group, id_column, text_column, id_type)


def _write_group(feat: pd.DataFrame, layout: tuple[list[list[shards_mod.Shard]], pa.Schema], id_column: str,
                 members: NDArray[np.int64], roots: NDArray[Any], drop: bool, tag: bool, staging_url: str,
                 partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Write the output shards of one partition: each input file filtered, tagged, under its own name."""
    import fsspec

    assert partition_info is not None
    groups, schema = layout
    group = groups[partition_info["number"]]
    keep, cluster = frames.row_decisions(feat, members, roots, drop)
    fs, root = fsspec.core.url_to_fs(staging_url)
    cluster_field = pa.field(shards_mod.CLUSTER_COLUMN, cluster_type(schema, id_column), nullable=False)
    offset = written = 0
    for s in group:
        table = shards_mod.conform(shards_mod.read_table(s.path), schema)
        n = table.num_rows
        if offset + n > len(feat):
            raise RuntimeError(f"{s.path} has more rows than its features; was it changed during the run?")
        k = keep[offset:offset + n]
        table = table.filter(pa.array(k, type=pa.bool_()))
        if tag:
            table = table.append_column(cluster_field, pa.array(cluster[offset:offset + n][k], type=cluster_field.type))
        shards_mod.write_shard(table, fs, f"{root}/{s.name}")
        offset += n
        written += table.num_rows
    if offset != len(feat):
        raise RuntimeError(f"Input files {[s.path for s in group]} changed during the run (row counts differ).")
    return pd.DataFrame({"rows": [written]})


def cluster_type(schema: pa.Schema, id_column: str) -> pa.DataType:
    """The type of `minhash_cluster`: the id column's (its value type when dictionary-encoded)."""
    t = schema.field(id_column).type
    return t.value_type if pa.types.is_dictionary(t) else t


def execute(plan: Plan) -> dict[str, Any]:
    """Run a prepared job on the active client (or the local scheduler) and commit OUTPUT; the manifest."""
    report, params, staging = plan.report, plan.params, plan.staging
    try:
        if plan.shards:
            groups = [[plan.shards[i] for i in g] for g in plan.groups]
            id_type = plan.schema.field(plan.id_column).type
            is_int = pa.types.is_integer(id_type)
            meta = pd.DataFrame({plan.id_column: pd.Series(dtype=np.int64 if is_int else object),
                                 plan.text_column: pd.Series(dtype=object)})
            ddf = dd.from_map(_read_group, groups, id_column=plan.id_column, text_column=plan.text_column,
                              id_type=id_type, meta=meta, enforce_metadata=False, label="read-shards")
            try:
                feat, members, roots = analyse(
                    ddf, protected=plan.protected, near=plan.near, id_column=plan.id_column,
                    text_column=plan.text_column, params=params, max_bucket=plan.max_bucket, report=report,
                    files=[s.path for s in plan.shards],
                    features_dir=staging.url + "/_features" if plan.features_on_disk else None)
                with Stage(report, "write") as stage:
                    shared = _shared((groups, plan.schema))
                    writes = feat[["doc", "source", "_id"]].map_partitions(
                        _write_group, shared, plan.id_column, _shared(members), _shared(roots), plan.drop and plan.near, plan.near,
                        staging.url, meta={"rows": "int64"})
                    _compute(writes, retries=plan.retries)
                    stage.summary = f"{len(plan.shards)} Parquet shards to the staging directory"
                staging.remove("_features")
            except Exception as exc:
                _explain_killed_worker(exc, [[s.path for s in g] for g in groups],
                                       plan.protected.nbytes / 1e6 if plan.protected else 0.0)
                raise
        else:
            log.warning("input %s holds no files: writing an empty output", plan.input)
        output_rows = io.parquet_rows(staging.fs, staging.tmp)
        dropped_near = report.near_duplicates if (plan.near and plan.drop) else 0
        expected = report.input_rows - report.contaminated - dropped_near
        if output_rows != expected:
            raise RuntimeError(f"Accounting mismatch: wrote {output_rows} rows, expected {expected} "
                               f"({report.input_rows} in - {report.contaminated} contaminated - {dropped_near} "
                               "near duplicates). Nothing was replaced; please report this as a bug.")
        report.seconds["total"] = round(time.perf_counter() - plan.start, 3)
        prot = plan.protected
        manifest = {
            "tool": "dedup", "input": plan.input, "input_files": len(plan.shards), "output": plan.output,
            "partitions": len(plan.groups),
            "input_rows": report.input_rows, "output_rows": output_rows,
            "near_duplicates_dropped": dropped_near, "near_duplicates_found": report.near_duplicates,
            "contaminated_dropped": report.contaminated, "contaminated_by_file": report.contaminated_by_file,
            "contaminated_by_record": report.contaminated_by_record,
            "contaminated_records": report.contaminated_records,
            "clusters": report.clusters, "largest_cluster": report.largest_cluster,
            "candidate_pairs": report.candidate_pairs, "confirmed_pairs": report.confirmed_pairs,
            "same_text_pairs": report.same_text_pairs,
            "approximated_buckets": report.approximated_buckets,
            "largest_approximated_bucket": report.largest_approximated_bucket,
            "max_bucket": plan.max_bucket, "near_dedup": plan.near, "drop_duplicates": plan.drop,
            "features_on_disk": plan.features_on_disk,
            "id_column": plan.id_column, "text_column": plan.text_column,
            "parameters": params.as_dict(), "fingerprint": params.fingerprint(),
            "protected_files": list(prot.files) if prot else [],
            "versions": _versions(), "seconds": report.seconds,
        }
        staging.write_json(MANIFEST, manifest)  # written last: the manifest marks the output complete
        with deferred_interrupts() as deferred:
            try:
                staging.commit()
            except BaseException as exc:
                if staging.remote and not staging.committed:
                    raise RuntimeError(f"Publishing to {plan.output} failed midway ({exc}); OUTPUT has no {MANIFEST} and "
                                       f"is incomplete. The complete new output is in {staging.url}.") from exc
                raise
            log.info("wrote %d of %d rows to %s in %.1f s", output_rows, report.input_rows, plan.output,
                     report.seconds["total"])
        if deferred.received:
            log.warning("interrupt received after OUTPUT was replaced: %s holds the complete new output", plan.output)
    except BaseException:
        if not staging.committed and not staging.remote:
            staging.discard()
        elif not staging.committed and staging.remote and not staging.fs.exists(f"{staging.tmp}/{MANIFEST}"):
            staging.discard()
        raise
    finally:
        plan.close()
    return manifest


def run(input: str, output: str, *, protected: Sequence[PathLike] = (), near: bool = True, id_column: str = "id",
        text_column: str = "text", params: Params | None = None, drop: bool = True, overwrite: bool = False,
        max_bucket: int = DEFAULT_MAX_BUCKET, retries: int = 2, features_on_disk: bool = False,
        partition_rows: int = shards_mod.PARTITION_ROWS) -> dict[str, Any]:
    """Parquet to Parquet: decontaminate against `protected`, near-dedup, write OUTPUT atomically.

    Runs on the active distributed client (or the local scheduler without one). OUTPUT mirrors
    the input files (same relative names, same schema plus `minhash_cluster`) and holds
    `_dedup.json`, the manifest, which is returned and which marks OUTPUT complete.
    `partition_rows` bounds how many rows of small consecutive shards are read as one partition.
    """
    plan = prepare(input, output, protected=protected, near=near, id_column=id_column, text_column=text_column,
                   params=params, drop=drop, overwrite=overwrite, max_bucket=max_bucket, retries=retries,
                   features_on_disk=features_on_disk, partition_rows=partition_rows)
    return execute(plan)
