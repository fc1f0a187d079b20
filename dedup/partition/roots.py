"""The roots stage, per partition: component labels given ids where their documents live, then each
component's root (its smallest id) and each member's matched document, where the component's
rows meet."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dedup.partition.features import KEEP, ROOT_DOC
from dedup.partition.keyspace import NO_INDEX
from dedup.partition.rows import concat_rows, rows_of


def own_documents(rows: pd.DataFrame, first_indexed: int = NO_INDEX) -> pd.DataFrame:
    """The rows whose `doc` is one of this run's documents: all of them without an earlier index."""
    if first_indexed >= NO_INDEX:
        return rows
    return rows[rows["doc"].to_numpy(np.int64) < first_indexed]

MEMBER_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "label": pd.Series(dtype=np.int64)})

OTHER = "other"
"""In `with_ids` rows for matches: -1 on a member's row; on a pair's row, the key of the document
that `doc` was confirmed against (a pair of different texts)."""


SURVIVOR_ESTIMATE, SURVIVOR_JACCARD = "survivor_estimate", "survivor_jaccard"
"""A member's similarity to its cluster's survivor (`dedup.job.survivors`): the signature estimate, and
exact Jaccard (NaN unless `--confirm exact`); NaN on the survivor's own row."""
TO_SURVIVOR = (SURVIVOR_ESTIMATE, SURVIVOR_JACCARD)


def component_rows_meta(id_meta: pd.Series, matches: bool, keep_meta: pd.Series | None = None,
                        to_survivor: bool = False, root_doc: bool = False) -> pd.DataFrame:
    """`with_ids` rows: (doc, label, _id), the `--keep-by` values (`KEEP`) when the features have them,
    the key kept in each one's place (`ROOT_DOC`, with `--against`), the similarities to the survivor
    when the labels carry them (`TO_SURVIVOR`), and for matches the text keys and the pair rows' columns."""
    meta = MEMBER_META.assign(_id=id_meta.iloc[:0])
    if keep_meta is not None:
        meta[KEEP] = keep_meta.iloc[:0]
    if root_doc:
        meta[ROOT_DOC] = pd.Series(dtype=np.int64)
    if to_survivor:
        meta = meta.assign(**{c: pd.Series(dtype=np.float32) for c in TO_SURVIVOR})
    if not matches:
        return meta
    return meta.assign(tkey=pd.Series(dtype=np.uint64), tkey2=pd.Series(dtype=np.uint64),
                       **{OTHER: pd.Series(dtype=np.int64)}, estimate=pd.Series(dtype=np.float32),
                       jaccard=pd.Series(dtype=np.float32))


def with_ids(members: pd.DataFrame, feat: pd.DataFrame, scored: pd.DataFrame | None = None) -> pd.DataFrame:
    """(doc, label) rows at their documents' partition, given each document's id.

    With `scored` (this partition's scored pairs: each pair's right document is here), for the
    report's matches: each member's text keys too, and a row per confirmed pair of different texts
    (doc = its right document, `OTHER` = its left one, its similarities, the right document's
    label), so that a component's pairs meet its members (`roots_of_components`)."""
    keys = members["doc"].to_numpy(np.int64)
    at = rows_of(feat, keys)
    out = members[["doc", "label"]].reset_index(drop=True).assign(_id=feat["_id"].to_numpy()[at])
    if KEEP in feat.columns:
        out[KEEP] = feat[KEEP].take(at).array
    if ROOT_DOC in feat.columns:
        out[ROOT_DOC] = feat[ROOT_DOC].to_numpy(np.int64)[at]
    for c in TO_SURVIVOR:
        if c in members.columns:
            out[c] = members[c].to_numpy(np.float32)
    if scored is None:
        return out
    out = out.assign(tkey=feat["tkey"].to_numpy(np.uint64)[at], tkey2=feat["tkey2"].to_numpy(np.uint64)[at],
                     **{OTHER: np.int64(-1)}, estimate=np.float32(np.nan), jaccard=np.float32(np.nan))
    pairs = scored[scored["confirmed"].to_numpy(bool) & ~scored["same"].to_numpy(bool)]
    if SURVIVOR_ESTIMATE in members.columns:  # centred clusters: a member may have been left alone
        pairs = pairs[np.isin(pairs["right"].to_numpy(np.int64), keys)]
    right = pairs["right"].to_numpy(np.int64)
    order = np.argsort(keys, kind="stable")
    pos = np.searchsorted(keys[order], right)
    if len(right) and (pos.max() >= len(keys) or not np.array_equal(keys[order][pos], right)):
        raise RuntimeError("A confirmed pair's document has no component label; please report this as a bug.")
    label = members["label"].to_numpy(np.int64)[order][pos]
    n = len(right)
    at = rows_of(feat, right)
    rows = pd.DataFrame({"doc": right, "label": label, "_id": feat["_id"].to_numpy()[at],
                         "tkey": np.zeros(n, np.uint64), "tkey2": np.zeros(n, np.uint64),
                         OTHER: pairs["left"].to_numpy(np.int64), "estimate": pairs["estimate"].to_numpy(np.float32),
                         "jaccard": pairs["jaccard"].to_numpy(np.float32)})
    if KEEP in feat.columns:
        rows.insert(3, KEEP, feat[KEEP].take(at).array)
    if ROOT_DOC in feat.columns:
        rows[ROOT_DOC] = feat[ROOT_DOC].to_numpy(np.int64)[at]
    for c in TO_SURVIVOR:
        if c in out.columns:
            rows[c] = np.float32(np.nan)
    return concat_rows([out, rows[list(out.columns)]])


def closest_matches(doc: NDArray[np.int64], rank: NDArray[np.int64], tkey: NDArray[np.uint64],
                    tkey2: NDArray[np.uint64], left: NDArray[np.int64], right: NDArray[np.int64],
                    estimate: NDArray[np.float32], jaccard: NDArray[np.float32], exact: bool
                    ) -> tuple[NDArray[np.int64], NDArray[np.float32], NDArray[np.float32]]:
    """Each member's matched document (its position among the members, -1 if none) and that pair's
    estimate and Jaccard, for one component's (or several whole components') members.

    Members with the same words (tkey, tkey2) are one text. A member's matched document is
    the one with the smallest `rank` among the other members of its text (similarity 1) and the
    smallest-ranked member of each text confirmed against its own by a pair (left, right) of
    different texts (that pair's similarities); of equal ranks (an earlier run's indexed near
    duplicate carries its root's id), the higher similarity. Texts, not documents: which copy of a text a pair
    joins depends on where the copies fall, the answer does not (docs/contract.md, report).
    """
    n = len(doc)
    text = pd.DataFrame({"a": tkey, "b": tkey2}).groupby(["a", "b"], sort=False).ngroup().to_numpy()
    order = np.lexsort((rank, text))
    starts = np.flatnonzero(np.r_[True, text[order][1:] != text[order][:-1]]) if n else np.zeros(0, np.int64)
    first = order[starts]  # per text (ngroup numbers them 0, 1, ...: sorted, text t starts at starts[t])
    sizes = np.diff(np.r_[starts, n])
    second = np.where(sizes > 1, order[np.minimum(starts + 1, max(n - 1, 0))], -1)  # its second best
    own = np.where(first[text] != np.arange(n), first[text], second[text])
    # pairs of different texts: each side's text gets the other text's best member
    sorted_doc = np.argsort(doc, kind="stable")
    a = sorted_doc[np.searchsorted(doc[sorted_doc], left)]
    b = sorted_doc[np.searchsorted(doc[sorted_doc], right)]
    apart = text[a] != text[b]
    a, b, est, jac = a[apart], b[apart], estimate[apart], jaccard[apart]
    cand_text = np.r_[text[a], text[b]]
    cand = np.r_[first[text[b]], first[text[a]]]
    cand_est, cand_jac = np.r_[est, est].astype(np.float32), np.r_[jac, jac].astype(np.float32)
    best = np.full(len(first), -1, np.int64)
    best_est = np.full(len(first), np.nan, np.float32)
    best_jac = np.full(len(first), np.nan, np.float32)
    if len(cand):
        # ties of rank: indexed near duplicates count with their root's id (docs/contract.md), so two
        # texts can offer the same id; the closer one is taken, whatever order the rows came in
        o = np.lexsort((-cand_jac, -cand_est, rank[cand], cand_text))
        top = o[np.r_[True, cand_text[o][1:] != cand_text[o][:-1]]]
        best[cand_text[top]], best_est[cand_text[top]], best_jac[cand_text[top]] = cand[top], cand_est[top], cand_jac[top]
    cross = best[text]
    big = np.iinfo(np.int64).max  # the rank of "none"
    use_cross = np.where(cross >= 0, rank[cross], big) < np.where(own >= 0, rank[own], big)
    matched = np.where(use_cross, cross, own)
    same = np.float32(1.0)
    out_est = np.where(use_cross, best_est[text], np.where(own >= 0, same, np.float32(np.nan))).astype(np.float32)
    out_jac = np.where(use_cross, best_jac[text],
                       np.where(own >= 0, same if exact else np.float32(np.nan), np.float32(np.nan))).astype(np.float32)
    return matched, out_est, out_jac


def survival_ranks(rows: pd.DataFrame, first_indexed: int = NO_INDEX, keep: str | None = None
                   ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[Any]]:
    """Each member's rank for survival (the smallest survives), its id's rank and the sorted ids:
    (rank, codes, uniques), `uniques[rank % len(uniques)]` being the member's id.

    Ids are ranked once (factorize sorts them: numeric or string order), so the smallest rank per
    label is found in numpy: a groupby min over Python strings runs a Python loop per component.
    Documents of an earlier output's index (keys >= first_indexed) rank first; with `keep` ("max" or
    "min") the `KEEP` value's rank comes before the id's, and a null ranks after every value."""
    ids = rows["_id"]
    if not pd.api.types.is_integer_dtype(ids.dtype):
        ids = ids.astype(object)
    doc = rows["doc"].to_numpy(np.int64)
    codes, uniques = pd.factorize(ids.to_numpy(), sort=True)
    n = max(len(uniques), 1)
    if keep is None:
        rank = codes.astype(np.int64) + np.where(doc < first_indexed, n, 0)  # indexed documents rank first
    else:  # the value's rank, then the id's; indexed documents first whatever their value
        values, kinds = pd.factorize(rows[KEEP].array, sort=True)  # nulls: -1
        k = len(kinds)
        by_value = np.where(values < 0, k, (k - 1 - values) if keep == "max" else values).astype(np.int64)
        rank = codes.astype(np.int64) + np.where(doc < first_indexed, n * (1 + by_value), 0)
    return rank, codes.astype(np.int64), np.asarray(uniques)


MIN_SIZE_WHAT_IF = (2, 3, 5, 10, 100)
"""The page's what-if for `--min-cluster-size`: the near duplicates removed at each of these sizes."""

SIZE = "size"
"""In `roots_of_components` rows with sizes: the input documents of the member's cluster (`cluster_sizes`)."""


WHOLE = "whole"
"""With `--min-cluster-size S` above 2: whether the member's cluster has fewer than S documents, so it is
kept whole (every member written, tagged), in the `roots_of_components` rows."""


def roots_meta(id_meta: pd.Series, matches: bool, sizes: bool = False, to_survivor: bool = False,
               whole: bool = False) -> pd.DataFrame:
    """`roots_of_components` rows: (doc, root, _id, the root's key `ROOT_DOC`), with sizes `SIZE`, with
    matches (matched, estimate, jaccard), and the similarities to the survivor (`TO_SURVIVOR`) when
    the labels carry them."""
    meta = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "root": id_meta.iloc[:0], "_id": id_meta.iloc[:0],
                         ROOT_DOC: pd.Series(dtype=np.int64)})
    if sizes:
        meta[SIZE] = pd.Series(dtype=np.int64)
    if whole:
        meta[WHOLE] = pd.Series(dtype=bool)
    if matches:
        meta = meta.assign(matched=id_meta.iloc[:0], estimate=pd.Series(dtype=np.float32),
                           jaccard=pd.Series(dtype=np.float32))
    if to_survivor:
        meta = meta.assign(**{c: pd.Series(dtype=np.float32) for c in TO_SURVIVOR})
    return meta


def roots_of_components(rows: pd.DataFrame, first_indexed: int = NO_INDEX, exact: bool = False,
                        sizes: bool = False, keep: str | None = None, min_size: int = 2) -> pd.DataFrame:
    """(doc, root) for every member, where root is the smallest id of its component (all of a
    component's rows are in this partition): numeric order for integer ids, string order otherwise.
    With `keep` ("max" or "min", `--keep-by`), the member with the largest (smallest) `KEEP` value
    instead; ties and nulls fall to the smallest id, and a null never beats a value.

    Documents of an earlier output's index (keys >= first_indexed) always survive: a component
    holding one has the smallest indexed id as its root, whatever the new ids are. Rows from
    `with_ids` with pairs also give each member its matched document (`closest_matches`) and
    that pair's similarities (Jaccard 1 for identical words when `exact`, else NaN). With `sizes`,
    each member's cluster size too (`SIZE`): this run's documents in it, and its root when that is
    an earlier output's document; with `min_size` above 2 (it needs `sizes`), whether that is below it
    (`WHOLE`: the cluster is kept whole).
    """
    matches, to_survivor, located = OTHER in rows.columns, SURVIVOR_ESTIMATE in rows.columns, ROOT_DOC in rows.columns
    whole = min_size > 2
    if rows.empty:
        return roots_meta(rows["_id"], matches, sizes, to_survivor, whole)
    pairs = None
    if matches:
        other = rows[OTHER].to_numpy(np.int64)
        pairs, rows = rows[other >= 0], rows[other < 0]
    rows = rows.drop_duplicates("doc")
    if to_survivor:  # a centred round's survivor whose members all fell below the threshold is alone
        rows = rows[rows.groupby("label")["doc"].transform("size").to_numpy() > 1]
        if pairs is not None:  # and a pair whose ends ended in different clusters joins nothing
            pairs = _pairs_inside(pairs, rows)
        if rows.empty:
            return roots_meta(rows["_id"], matches, sizes, to_survivor, whole)
    ids = rows["_id"]
    if not pd.api.types.is_integer_dtype(ids.dtype):
        ids = ids.astype(object)
    doc = rows["doc"].to_numpy(np.int64)
    rank, codes, uniques = survival_ranks(rows, first_indexed, keep)
    n = max(len(uniques), 1)
    labels, group = np.unique(rows["label"].to_numpy(np.int64), return_inverse=True)
    best = np.full(len(labels), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(best, group, rank)
    root = uniques[best[group] % n]
    # the key of the document kept in the root's place (of the best member: a stand-in's is its root's)
    first = np.lexsort((doc, rank, group))
    head = first[np.r_[True, group[first][1:] != group[first][:-1]]]  # the best member of each label
    kept = rows[ROOT_DOC].to_numpy(np.int64) if located else doc
    out = pd.DataFrame({"doc": doc, "root": root, "_id": ids.to_numpy(), ROOT_DOC: kept[head][group]})
    if sizes:  # this run's documents, and an earlier output's root (ranked first: below n)
        own = np.bincount(group, weights=doc < first_indexed, minlength=len(labels)).astype(np.int64)
        out[SIZE] = (own + (best < n))[group]
        if whole:
            out[WHOLE] = out[SIZE].to_numpy() < min_size
    to_root = {c: rows[c].to_numpy(np.float32) for c in TO_SURVIVOR} if to_survivor else {}
    if pairs is None:
        return out.assign(**to_root)
    matched, est, jac = closest_matches(doc, codes, rows["tkey"].to_numpy(np.uint64),
                                        rows["tkey2"].to_numpy(np.uint64), pairs[OTHER].to_numpy(np.int64),
                                        pairs["doc"].to_numpy(np.int64), pairs["estimate"].to_numpy(np.float32),
                                        pairs["jaccard"].to_numpy(np.float32), exact)
    alone = matched < 0
    if alone.any() and not to_survivor:
        raise RuntimeError("A clustered document has no matched document; please report this as a bug.")
    # centred: a member joined to its survivor by no confirmed pair of its cluster is matched to the survivor
    matched_id = np.where(alone, root, ids.to_numpy()[np.maximum(matched, 0)])
    if alone.any():
        est = np.where(alone, to_root[SURVIVOR_ESTIMATE], est)
        jac = np.where(alone, to_root[SURVIVOR_JACCARD], jac)
    return out.assign(matched=matched_id, estimate=est, jaccard=jac, **to_root)


def _pairs_inside(pairs: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The pair rows (`OTHER` = left, doc = right) whose two documents are members of one cluster."""
    doc = rows["doc"].to_numpy(np.int64)
    label = rows["label"].to_numpy(np.int64)
    order = np.argsort(doc, kind="stable")
    sdoc, slabel = doc[order], label[order]

    def label_of(keys: np.ndarray) -> np.ndarray:
        pos = np.minimum(np.searchsorted(sdoc, keys), max(len(sdoc) - 1, 0))
        found = (sdoc[pos] == keys) if len(sdoc) else np.zeros(len(keys), bool)
        return np.where(found, slabel[pos] if len(sdoc) else -1, -1)

    left, right = label_of(pairs[OTHER].to_numpy(np.int64)), label_of(pairs["doc"].to_numpy(np.int64))
    return pairs[(left >= 0) & (left == right)]


def component_counts(roots: pd.DataFrame, first_indexed: int = NO_INDEX, part_firsts: tuple[int, ...] = ()
                     ) -> pd.DataFrame:
    """In one partition of `roots_of_components` output: members and duplicates (this run's documents
    in a cluster, and those that are not its root), clusters, the largest, and duplicates of indexed
    documents, in all and (`of_part`) by earlier output: `part_firsts`, each one's first document key,
    ascending. A duplicate counts with the output that kept its root (`ROOT_DOC`: for a near
    duplicate an earlier output indexed, standing for its root, the root's key). `whole`: the
    duplicates kept in clusters below `--min-cluster-size`; `by_size`: the duplicates in clusters of at
    least each size of `MIN_SIZE_WHAT_IF` (the page's what-if)."""
    sizes = roots.groupby("root").size() if len(roots) else pd.Series(dtype=np.int64)
    doc = roots["doc"].to_numpy(np.int64)
    new = roots[doc < first_indexed]
    dup = new["root"].astype(object).to_numpy() != new["_id"].astype(object).to_numpy()
    whole = new[WHOLE].to_numpy(bool) if WHOLE in new.columns else np.zeros(len(new), bool)
    if SIZE in new.columns:  # counted over the chain of releases, when it was
        size_of = new[SIZE].to_numpy(np.int64)
    else:
        size_of = new["root"].astype(object).map(sizes).to_numpy(np.int64) if len(new) else np.zeros(0, np.int64)
    by_size = np.asarray([int((dup & (size_of >= k)).sum()) for k in MIN_SIZE_WHAT_IF], np.int64)
    indexed = roots[doc >= first_indexed]
    indexed_roots = set(indexed["root"].astype(object))
    joined = new["root"].astype(object).isin(indexed_roots).to_numpy() if indexed_roots else np.zeros(len(new), bool)
    of_part = np.zeros(len(part_firsts), np.int64)
    if part_firsts and joined.any():  # the output whose document is kept in the root's place
        kept = new[ROOT_DOC].to_numpy(np.int64)[joined]
        np.add.at(of_part, np.searchsorted(np.asarray(part_firsts, np.int64), kept, "right") - 1, 1)
    return pd.DataFrame({"members": [len(new)], "duplicates": [int(dup.sum())], "clusters": [len(sizes)],
                         "largest": [int(sizes.max()) if len(sizes) else 0], "of_indexed": [int(joined.sum())],
                         "of_part": [of_part], "whole": [int((dup & whole).sum())], "by_size": [by_size]})
