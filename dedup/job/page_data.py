"""What the report page shows of a run: cluster sizes, the largest clusters with a few members and
their similarities to the root, and an example document per protected record; small summaries
computed where the data is, gathered on the client."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dedup.config import Params
from dedup.core.decontam import ProtectedNgrams
from dedup.job.compute import active_client, compute
from dedup.job.stage import Settings, Step, View
from dedup.partition import keyspace
from dedup.partition.roots import SURVIVOR_ESTIMATE, SURVIVOR_JACCARD
from dedup.report import page as report_page
from dedup.report.shown import shorten
from dedup.storage import reads

TOP_CLUSTERS, MEMBERS_SHOWN = 5, 3
NEAR_PAIRS = 3
"""Candidate pairs shown on each side of the threshold (the nearest)."""


def largest(per_root: pd.Series) -> list[tuple[int, Any]]:
    """The TOP_CLUSTERS largest of (root -> size), ties by the root's text: the same order on every
    partition and on the client, so the page does not depend on how components are partitioned."""
    return sorted(zip(per_root.to_numpy().astype(int).tolist(), per_root.index.astype(object)),
                  key=lambda x: (-x[0], str(x[1])))[:TOP_CLUSTERS]


CLUSTERS_META = {"kind": object, "size": "int64", "count": "int64", "root": object, "doc": "int64", "_id": object}


def cluster_summary(d: pd.DataFrame) -> pd.DataFrame:
    """Per partition of (doc, root, _id) by component, in one frame: how many clusters of each size
    (kind "size": size, count), its largest clusters (kind "top": size, root; the largest overall
    are among the largest of some partition), and their root and first members (kind "member":
    root, doc, _id): the farthest from the root first (`SURVIVOR_JACCARD`, else `SURVIVOR_ESTIMATE`,
    when the rows carry them: different texts before copies), then by id. One task a partition,
    one count of members per root."""
    per_root = d.groupby("root").size()
    vc = per_root.value_counts()
    best = largest(per_root)
    tops = [r for _, r in best]
    m = d[d["root"].isin(tops)]
    if len(m):
        far = np.zeros(len(m))
        if SURVIVOR_ESTIMATE in m.columns:
            j = m[SURVIVOR_JACCARD].to_numpy(np.float64)
            far = np.where(np.isnan(j), m[SURVIVOR_ESTIMATE].to_numpy(np.float64), j)
        far = np.where(m["_id"].astype(object).to_numpy() == m["root"].astype(object).to_numpy(), -1.0,
                       np.nan_to_num(far, nan=2.0))  # the root first, then the farthest
        m = m.assign(_k=m["_id"].astype(object), _far=far).sort_values(["root", "_far", "_k"], kind="stable")
    m = m.groupby("root", sort=False).head(MEMBERS_SHOWN + 1)
    n_sizes, n_top, n_members = len(vc), len(best), len(m)
    return pd.DataFrame({
        "kind": ["size"] * n_sizes + ["top"] * n_top + ["member"] * n_members,
        "size": np.concatenate([vc.index.to_numpy(np.int64), np.asarray([s for s, _ in best], np.int64),
                                np.zeros(n_members, np.int64)]),
        "count": np.concatenate([vc.to_numpy(np.int64), np.zeros(n_top + n_members, np.int64)]),
        "root": pd.Series([None] * n_sizes + tops + m["root"].astype(object).tolist(), dtype=object),
        "doc": np.concatenate([np.full(n_sizes + n_top, -1, np.int64), m["doc"].to_numpy(np.int64)]),
        "_id": pd.Series([None] * (n_sizes + n_top) + m["_id"].astype(object).tolist(), dtype=object)})


def member_scores(pairs: list[tuple[str, str]], params: Params) -> list[tuple[float, float]]:
    """(MinHash estimate, exact Jaccard) of each (root text, member text), for the page. The Jaccard is
    of the shingles' 64-bit hashes, sorted in numpy (`shingle_sets`), as `--confirm exact` computes it:
    about 40 bytes a word, where Python sets of shingle strings took 50 times the text (a 40 MB
    document killed 2 GiB workers)."""
    from dedup.core import _kernels
    from dedup.core.minhash import estimate, signatures
    from dedup.partition.confirm import shingle_sets

    out = []
    for a, b in pairs:
        sigs = signatures([a, b], num_perm=params.num_perm, seed=params.seed, shingle_size=params.shingle_size,
                          shingle_unit=params.shingle_unit)
        values, offsets = shingle_sets([a, b], params.shingle_size, params.shingle_unit)
        jac = _kernels.sorted_jaccard(values, offsets[:1], offsets[1:2], values, offsets[1:2], offsets[2:3])
        out.append((float(estimate(sigs[0], sigs[1])), float(jac[0])))
    return out


@dataclass
class PageDocuments:
    """What the report page shows of the clusters and documents: how many clusters of each size, its
    largest clusters (size, root) with their first members (doc, root, _id), one contaminated
    document per protected record (source, doc, _id), and the keys of this run's documents among
    them, whose texts the write tasks return (`write_group`)."""

    sizes: dict[int, int]
    tops: list[tuple[int, Any]]
    members: pd.DataFrame | None
    examples: pd.DataFrame | None
    keys: NDArray[np.int64]
    near_pairs: pd.DataFrame | None = None
    """The candidate pairs nearest the threshold, with their documents' ids (left_id, right_id)."""

    def rows_by_partition(self) -> dict[int, list[int]]:
        """Partition -> the rows inside it of `keys` (the few documents each write task reads out)."""
        out: dict[int, list[int]] = {}
        for p, r in zip(keyspace.key_partition(self.keys).tolist(), keyspace.key_row(self.keys).tolist()):
            out.setdefault(p, []).append(r)
        return out


def page_documents(feat: Any, clusters: pd.DataFrame | None, examples: pd.DataFrame | None,
                   near: pd.DataFrame | None) -> PageDocuments:
    """Which clusters and documents the page shows, from the summaries the stages computed: the roots
    stage's of the clusters (`cluster_summary`), the contamination stage's examples, and the confirm
    stage's pairs nearest the threshold."""
    sizes: dict[int, int] = {}
    tops: list[tuple[int, Any]] = []
    members = None
    wanted: list[int] = []
    if clusters is not None and len(clusters):
        g = clusters
        counts = g[g["kind"] == "size"].groupby("size")["count"].sum()
        sizes = {int(k): int(v) for k, v in counts.items()}
        t = g[g["kind"] == "top"]
        tops = largest(pd.Series(t["size"].to_numpy(), index=t["root"].astype(object)))
        members = g[g["kind"] == "member"][["doc", "root", "_id"]]
        members = members[members["root"].astype(object).isin([r for _, r in tops])]
        wanted += members["doc"].astype(np.int64).tolist()
    if examples is not None:  # one a record (`dedup.job.contamination`)
        wanted += examples["doc"].astype(np.int64).tolist()
    if near is not None and len(near):
        wanted += near["left"].astype(np.int64).tolist() + near["right"].astype(np.int64).tolist()
        ids = ids_of(feat, np.unique(np.r_[near["left"].to_numpy(np.int64), near["right"].to_numpy(np.int64)]))
        near = near.assign(left_id=[ids[k] for k in near["left"].tolist()],
                           right_id=[ids[k] for k in near["right"].tolist()])
    keys = np.unique(np.asarray(wanted, dtype=np.int64))
    # an earlier output's documents (--against) are not read again
    return PageDocuments(sizes, tops, members, examples, keys[keyspace.key_partition(keys) < feat.npartitions],
                         near)


def ids_of(feat: Any, keys: NDArray[np.int64]) -> dict[int, Any]:
    """The ids of a few documents (keys of this run's), read from the persisted features: a task for
    each partition holding some."""
    import dask

    parts = keyspace.key_partition(keys)
    wanted = sorted(set(parts.tolist()))
    got = compute(*[dask.delayed(_ids_at)(feat.partitions[p], keys[parts == p]) for p in wanted])
    return {int(k): i for found in got for k, i in found}


def _ids_at(part: pd.DataFrame, keys: NDArray[np.int64]) -> list[tuple[int, Any]]:
    from dedup.partition.rows import rows_of

    return list(zip(keys.tolist(), part["_id"].to_numpy()[rows_of(part, keys)].tolist()))


def read_texts(keys: NDArray[np.int64], locate: Callable[[int], tuple[str, int]], text_column: str) -> dict[int, str]:
    """The texts of a few documents, read file by file (only their row groups' text column): for a
    run that writes no shards (--dry-run), whose write tasks would otherwise return them."""
    by_file: dict[str, list[tuple[int, int]]] = {}
    for key in keys.tolist():
        path, row = locate(key)
        by_file.setdefault(path, []).append((row, key))
    if not by_file:
        return {}
    import dask

    texts = compute(*[dask.delayed(reads.read_rows, pure=True)(path, [r for r, _ in rows], text_column)
                      for path, rows in by_file.items()])
    return {key: t for rows, got in zip(by_file.values(), texts) for (_, key), t in zip(rows, got)}


def report_extras(shown: PageDocuments, text_of: dict[int, Any], params: Params,
                   protected: ProtectedNgrams | None) -> report_page.Extras:
    """The small summaries the report page needs: cluster sizes, the largest clusters with a few members
    (their texts and similarities to the root), and one example document per top protected record."""
    extras = report_page.Extras(cluster_sizes=shown.sizes)
    if not len(shown.keys):  # nothing of this run's to show (the largest clusters are earlier outputs')
        return extras
    members = shown.members
    if members is not None:
        listed: list[tuple[report_page.ClusterView, Any, str]] = []
        for size, root in shown.tops:
            rows = members[members["root"] == root]
            root_rows = rows[rows["_id"].astype(object) == root]
            root_text = (text_of.get(int(root_rows["doc"].iloc[0]), "") if len(root_rows) else "") or ""
            view = report_page.ClusterView(root, int(size), root_text)
            others = rows[rows["_id"].astype(object) != root].head(MEMBERS_SHOWN)
            listed += [(view, ident, text_of.get(int(doc), "") or "")
                       for doc, ident in zip(others["doc"].astype(np.int64), others["_id"])]
            extras.clusters.append(view)
        # scored where the kernels are loaded already (a client would load them for a dozen pairs)
        client = active_client()
        pairs = [(view.root_text, t) for view, _, t in listed]
        try:
            scores = (client.submit(member_scores, pairs, params, pure=False).result() if client is not None and pairs
                      else member_scores(pairs, params))
        except Exception as exc:
            _explain_scoring(exc, listed)
            raise
        for (view, ident, t), (est, jac) in zip(listed, scores):
            view.members.append({"id": ident, "text": t, "estimate": est, "jaccard": jac})
    if shown.near_pairs is not None:
        for row in shown.near_pairs.itertuples(index=False):
            extras.near_pairs.append({
                "side": "merged" if row.confirmed else "not merged", "left_id": row.left_id, "right_id": row.right_id,
                "left_text": text_of.get(int(row.left), "") or "", "right_text": text_of.get(int(row.right), "") or "",
                "estimate": float(row.estimate), "jaccard": float(row.jaccard)})
    if shown.examples is not None and protected is not None:
        for rec, doc in zip(shown.examples["source"].astype(int), shown.examples["doc"].astype(np.int64)):
            key = (protected.files[protected.record_file[rec]], protected.record_labels[rec])
            ident = shown.examples["_id"][shown.examples["doc"].astype(np.int64) == doc].iloc[0]
            extras.record_examples[key] = (ident, text_of.get(int(doc), "") or "")
    return extras


def _explain_scoring(exc: BaseException, listed: list[tuple[report_page.ClusterView, Any, str]]) -> None:
    """A worker that died scoring the page's members: the documents it scored, never a Dask key."""
    try:
        from distributed.scheduler import KilledWorker
    except ImportError:
        return
    if not isinstance(exc, KilledWorker):
        return
    longest = max(listed, key=lambda m: max(len(m[0].root_text), len(m[2])))
    view, ident, text = longest
    which, size = (view.root, len(view.root_text)) if len(view.root_text) >= len(text) else (ident, len(text))
    raise RuntimeError(f"A worker died again and again scoring the page's largest clusters against their survivors; "
                       f"the longest document there is {shorten(which)} ({size:,} characters). Give the workers more "
                       "memory than that document needs (the same command then resumes from the shards written), "
                       "or run without the page (--no-report).") from exc


class Shown(Step):
    """With the page, in a run on files: which clusters and documents it shows (`shown`), so that the
    write collects their texts as it writes them."""

    name = "shown"
    reads = ("feat", "summary", "examples", "near_pairs")
    gives = ("shown",)
    kept = False
    timed = False

    def wanted(self, s: Settings) -> bool:
        return s.files and s.details

    def needs(self, s: Settings) -> tuple[str, ...]:
        return ("feat", *(("summary", "near_pairs") if s.near else ()), *(("examples",) if s.protected else ()))

    def run(self, job: View) -> str:
        s = job.settings
        job.shown = page_documents(job.feat, job.summary if s.near else None,
                                   job.examples if s.protected is not None else None,
                                   job.near_pairs if s.near else None)
        return ""


class Page(Step):
    """With the page, in a run on files: the largest clusters and the examples it shows, with their
    texts (those the write collected, else read from the input). Never kept: run again whenever the
    write was reused."""

    name = "report"
    reads = ("shown", "written")
    gives = ("extras",)
    kept = False

    def wanted(self, s: Settings) -> bool:
        return s.files and s.details

    def run(self, job: View) -> str:
        s, written, shown = job.settings, job.written, job.shown
        job.kept.reused(self.name)  # the first stage a resumed run computes, when the write was reused
        text_of = ({k: t for pairs in written["shards"]["texts"] for k, t in pairs} if "shards" in written
                   else read_texts(shown.keys, s.locate, s.text_column) if s.locate is not None else {})
        job.extras = report_extras(shown, text_of, s.params, s.protected)
        return "the largest clusters and examples for the page"
