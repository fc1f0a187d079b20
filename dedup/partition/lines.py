"""Exact line dedup per partition (docs/contract.md, section 6b), on the documents near dedup and
decontamination keep (the survivors), in three steps around two moves:

1. `partition_firsts`: at each input partition, every key of a line of a surviving document once,
   with how often it occurs there and its first occurrence there (the smallest id, then the first
   line), its words, and the characters of its occurrences;
2. routed by key, `settle_keys`: each key's count over the corpus and its first occurrence over the
   corpus, sent (for the keys of at least `min_words` words with at least `min_copies` occurrences)
   to every partition holding it; `what_if` counts what other settings would remove, from the same rows;
3. at each input partition again, `removed_lines`: the occurrences of those keys other than the
   first, and the blank lines that go with them; `line_changes` rewrites the texts that lose a line,
   and drops those left without a word or, joined anew, holding a protected n-gram.

A key is two independent 64-bit hashes of the line's words (`dedup.core.lines`): two distinct keys
share both with probability about 2^-128 a pair, about 10^-17 among 10^11 distinct lines. A key
occurring in every document moves as one row a partition, so no task holds more than its
partition's lines, whatever a key's count.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from dedup.core.decontam import ProtectedNgrams
from dedup.core.lines import Lines, line_texts, split_lines, with_blank_neighbours, without_lines
from dedup.core.text import encode_arrow
from dedup.partition.decisions import row_decisions
from dedup.partition.features import AFTER_LINES, EMPTIED
from dedup.partition.keyspace import doc_keys
from dedup.partition.rows import rows_of

LINE_COLUMNS = {"h1": np.uint64, "h2": np.uint64, "count": np.int64, "doc": np.int64, "line": np.int32,
                "part": np.int64, "words": np.int64, "chars": np.int64, "first_chars": np.int64}
"""A key's row: its hashes, its count, its first occurrence (document key and line), for the
partition-level rows the partition it was counted in, its words, the characters of its
occurrences and those of its first occurrence."""

SHOWN_LINES = 20
"""The most repeated lines the manifest and the page name."""

SHARE_BINS = 10
"""Bins of the histogram of the share of a document's characters its lost lines held."""

WHAT_IF_COPIES = (2, 3, 10, 100)
WHAT_IF_WORDS = (1, 3, 5)
"""The page's what-if table of line dedup: the characters removed at each `--min-copies` x
`--min-line-words` (`what_if`)."""

KEPT, LEFT_WITHOUT_WORDS, CONTAMINATED_ANEW = 0, 1, 2
"""What became of a document a rewriting pass changed (`line_changes`' and span dedup's `fate`): kept
rewritten, dropped with no word left, or dropped because its new text holds a protected n-gram."""

CHANGES_META = pd.DataFrame({"doc": pd.Series(dtype=np.int64), "lines": pd.Series(dtype=np.int64),
                             "before": pd.Series(dtype=np.int64), "after": pd.Series(dtype=np.int64),
                             "fate": pd.Series(dtype=np.int8), "source": pd.Series(dtype=np.int32),
                             "source_gram": pd.Series(dtype=np.int64)})
"""A document that lost a line: its key, the lines it lost, its characters before and after, its fate,
and with `CONTAMINATED_ANEW` the protected record and n-gram its new text holds."""


def firsts_meta(id_dtype: Any) -> pd.DataFrame:
    return pd.DataFrame({**{c: pd.Series(dtype=t) for c, t in LINE_COLUMNS.items()}, "_id": pd.Series(dtype=id_dtype)})


def line_keys_meta(id_dtype: Any) -> pd.DataFrame:
    """A settled key's row: its count over the corpus, its first occurrence (and that document's id)
    and a partition holding it."""
    return firsts_meta(id_dtype)


def _texts(part: pd.DataFrame, text_column: str) -> pa.Array:
    return pa.array(part[text_column], type=pa.large_string(), from_pandas=True)


def survivors(feat: pd.DataFrame, roots: pd.DataFrame | None, drop: bool) -> NDArray[np.bool_]:
    """Which documents of a features partition the output keeps (clean, not skipped, and with `drop`
    their cluster's root): only their lines are counted and removed."""
    return row_decisions(feat, roots, drop)[0]


def partition_firsts(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, id_column: str,
                     text_column: str, drop: bool, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every key of the lines with words of this partition's surviving documents once: its count here,
    its first occurrence here (the document with the smallest id, then its first line with the key),
    that document's id, this partition's number, its words, and the characters of its occurrences
    here and of that first one."""
    number = partition_info["number"] if partition_info else 0
    lines = split_lines(_texts(part, text_column))
    take = lines.keyed & survivors(feat, roots, drop)[lines.doc]
    on = take[lines.keyed]
    doc, line, h1, h2 = lines.doc[take], lines.line[take], lines.h1[on], lines.h2[on]
    words, chars = lines.words[take], lines.chars[take]
    ids = part[id_column].to_numpy()
    rank = np.empty(len(ids), np.int64)
    rank[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    order = np.lexsort((line, rank[doc], h2, h1))
    h1, h2, doc, line, words, chars = h1[order], h2[order], doc[order], line[order], words[order], chars[order]
    new = np.ones(len(h1), bool)
    new[1:] = (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])
    starts = np.flatnonzero(new)
    count = np.diff(np.append(starts, len(h1)))
    out = pd.DataFrame({"h1": h1[starts], "h2": h2[starts], "count": count.astype(np.int64),
                        "doc": doc_keys(number, len(part))[doc[starts]], "line": line[starts].astype(np.int32),
                        "part": np.full(len(starts), number, np.int64), "words": words[starts],
                        "chars": np.add.reduceat(chars, starts) if len(starts) else np.zeros(0, np.int64),
                        "first_chars": chars[starts]})
    out["_id"] = pd.Series(ids[doc[starts]], dtype=part[id_column].dtype).to_numpy() if len(starts) else \
        part[id_column].iloc[:0].to_numpy()
    return out


def key_part(frame: pd.DataFrame, npartitions: int) -> NDArray[np.int64]:
    """The range of `npartitions` equal ranges of h1 each key row goes to."""
    return ((frame["h1"].to_numpy(np.uint64) >> np.uint64(32)) * np.uint64(npartitions) >> np.uint64(32)).astype(np.int64)


def _by_key(rows: pd.DataFrame) -> tuple[pd.DataFrame, NDArray[np.int64], NDArray[np.int64]]:
    """Partition-level key rows in key order, each key's occurrences by (id, line): the rows, the start
    of each key's rows, and each row's key number."""
    by = rows.sort_values(["h1", "h2", "_id", "line"], kind="stable").reset_index(drop=True)
    h1, h2 = by["h1"].to_numpy(np.uint64), by["h2"].to_numpy(np.uint64)
    new = np.ones(len(by), bool)
    new[1:] = (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])
    return by, np.flatnonzero(new), np.cumsum(new) - 1


def settle_keys(rows: pd.DataFrame, min_copies: int, min_words: int = 1) -> pd.DataFrame:
    """Of the partition-level rows of a range of keys: for each key of at least `min_words` words with
    at least `min_copies` occurrences over the corpus, one row for each partition holding it, with
    the key's count and its first occurrence over the corpus (the smallest id, then the first line),
    to be sent there."""
    if rows.empty:
        return rows.iloc[:0][list(rows.columns)]
    by, starts, group = _by_key(rows)
    total = np.add.reduceat(by["count"].to_numpy(np.int64), starts)
    wanted = ((total >= min_copies) & (by["words"].to_numpy(np.int64)[starts] >= min_words))[group]
    first = starts[group]
    out = {c: by[c].to_numpy()[first][wanted] for c in ("doc", "line", "_id", "first_chars")}
    return pd.DataFrame({"h1": by["h1"].to_numpy(np.uint64)[wanted], "h2": by["h2"].to_numpy(np.uint64)[wanted],
                         "count": total[group][wanted], "doc": out["doc"].astype(np.int64),
                         "line": out["line"].astype(np.int32), "part": by["part"].to_numpy(np.int64)[wanted],
                         "words": by["words"].to_numpy(np.int64)[wanted], "chars": by["chars"].to_numpy(np.int64)[wanted],
                         "first_chars": out["first_chars"].astype(np.int64), "_id": out["_id"]})


WHAT_IF_META = {"removed": object}


def what_if(rows: pd.DataFrame) -> pd.DataFrame:
    """Of the partition-level rows of a range of keys: the characters each `--min-copies` in
    `WHAT_IF_COPIES` x `--min-line-words` in `WHAT_IF_WORDS` would remove, as a `len(WHAT_IF_COPIES)` x
    `len(WHAT_IF_WORDS)` array (one row): every occurrence of a key but the first, its characters and
    its line break. Lines with words only: the blank lines that go with them are not counted."""
    cells = np.zeros((len(WHAT_IF_COPIES), len(WHAT_IF_WORDS)), np.int64)
    if not rows.empty:
        by, starts, _ = _by_key(rows)
        total = np.add.reduceat(by["count"].to_numpy(np.int64), starts)
        chars = np.add.reduceat(by["chars"].to_numpy(np.int64), starts)
        words = by["words"].to_numpy(np.int64)[starts]
        gone = chars - by["first_chars"].to_numpy(np.int64)[starts] + (total - 1)  # and a line break each
        for i, c in enumerate(WHAT_IF_COPIES):
            for j, w in enumerate(WHAT_IF_WORDS):
                cells[i, j] = int(gone[(total >= c) & (words >= w)].sum())
    return pd.DataFrame({"removed": pd.Series([cells], dtype=object)})


def to_partition(frame: pd.DataFrame) -> NDArray[np.int64]:
    """Where a settled key's row goes: the partition that counted it."""
    return frame["part"].to_numpy(np.int64)


def removed_lines(lines: Lines, keys: NDArray[np.int64], line_keys: pd.DataFrame,
                  survive: NDArray[np.bool_] | None = None) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """Per line of `lines` (of texts keyed `keys`): whether the rule removes it, and for a line with
    words removed for its key, that key's row in `line_keys` (this partition's rows of `settle_keys`),
    else -1. A line with words goes when its key is settled and it is not that key's first
    occurrence; a blank line goes with its removed neighbours (`with_blank_neighbours`).
    `survive`: only these texts lose lines (the others are not written)."""
    n = len(lines.doc)
    gone = np.zeros(n, bool)
    first_row = np.full(n, -1, np.int64)
    if line_keys.empty or not n:
        return gone, first_row
    keyed = np.flatnonzero(lines.keyed)
    at = _settled_row(lines.h1, lines.h2, line_keys)
    doc = lines.doc[keyed]
    hit = at >= 0
    if survive is not None:
        hit &= survive[doc]
    i = np.flatnonzero(hit)
    first = (keys[doc[i]] == line_keys["doc"].to_numpy(np.int64)[at[i]]) & \
        (lines.line[keyed[i]].astype(np.int64) == line_keys["line"].to_numpy(np.int64)[at[i]])
    i = i[~first]
    gone[keyed[i]] = True
    first_row[keyed[i]] = at[i]
    return with_blank_neighbours(lines, gone), first_row


class KeyLookup:
    """The rows of a frame of keys (`h1`, `h2`, one row a key, as a partition's settled keys are),
    looked up by key: by a hash lookup of h1, h2 confirming; when two keys share an h1 (about one pair
    in 10^7 among 10^6 keys), by binary search, those looked up one by one. Built once, looked up
    as often as wanted (span dedup looks up a partition's windows a run of documents at a time)."""

    def __init__(self, keys: pd.DataFrame) -> None:
        self.frame = keys
        self.h1, self.h2 = keys["h1"].to_numpy(np.uint64), keys["h2"].to_numpy(np.uint64)
        self.index = pd.Index(self.h1)
        self.unique = self.index.is_unique
        if not self.unique:
            self.order = np.lexsort((self.h2, self.h1))
            self.d1, self.d2 = self.h1[self.order], self.h2[self.order]

    def rows(self, h1: NDArray[np.uint64], h2: NDArray[np.uint64]) -> NDArray[np.int64]:
        """For each key (h1, h2): its row in the frame, or -1."""
        if self.unique:
            at = self.index.get_indexer(h1).astype(np.int64)
            found = at >= 0
            found[found] = self.h2[at[found]] == h2[found]
            return np.where(found, at, -1)
        lo, hi = np.searchsorted(self.d1, h1, "left"), np.searchsorted(self.d1, h1, "right")
        at = np.full(len(h1), -1, np.int64)
        one = (hi - lo == 1)
        one[one] = self.d2[lo[one]] == h2[one]
        at[one] = self.order[lo[one]]
        for k in np.flatnonzero(hi - lo > 1):
            same = np.flatnonzero(self.d2[lo[k]:hi[k]] == h2[k])
            if len(same):
                at[k] = self.order[lo[k] + same[0]]
        return at


def _settled_row(h1: NDArray[np.uint64], h2: NDArray[np.uint64], line_keys: pd.DataFrame) -> NDArray[np.int64]:
    """For each key (h1, h2): its row in `line_keys` (`KeyLookup`), or -1."""
    return KeyLookup(line_keys).rows(h1, h2)


def rewrite(texts: pa.Array, lines: Lines, gone: NDArray[np.bool_]) -> tuple[pa.Array, NDArray[np.bool_]]:
    """The texts without the lines `gone` marks (`removed_lines`), and which texts lost a line and have
    no word left (dropped: `empty_after_lines`)."""
    where = np.flatnonzero(gone)
    doc, line = lines.doc[where], lines.line[where].astype(np.int64)
    new = without_lines(texts, doc, line)
    emptied = np.zeros(len(texts), bool)
    if len(doc):
        lost = np.unique(doc)
        # a text with words keeps at least one (a line with words is removed only for its key; blank
        # ones only beside removed ones): it has none left when every line with words went
        with_words = np.bincount(lines.doc[lines.keyed], minlength=len(texts))
        removed_words = np.bincount(lines.doc[gone & lines.keyed], minlength=len(texts))
        emptied[lost] = (with_words == removed_words)[lost]
    return new, emptied


def line_changes(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, line_keys: pd.DataFrame,
                 text_column: str, drop: bool, protected: ProtectedNgrams | None,
                 partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    """Every surviving document of this partition that loses a line (`CHANGES_META`): the lines it
    loses, its characters before and after, and its fate: kept rewritten, dropped with no word left,
    or dropped because its new text holds a protected n-gram (the lines left are joined anew, so
    words once apart may now make one: the contract checks the new texts again)."""
    number = partition_info["number"] if partition_info else 0
    texts = _texts(part, text_column)
    lines = split_lines(texts)
    gone, _ = removed_lines(lines, doc_keys(number, len(part)), line_keys, survivors(feat, roots, drop))
    if not gone.any():
        return CHANGES_META.copy()
    new, emptied = rewrite(texts, lines, gone)
    lost = np.unique(lines.doc[gone])
    fate = np.where(emptied[lost], LEFT_WITHOUT_WORDS, KEPT).astype(np.int8)
    source = np.full(len(lost), -1, np.int32)
    gram = np.full(len(lost), -1, np.int64)
    if protected is not None and len(protected):
        left = np.flatnonzero(fate == KEPT)
        rec, hit = protected.first_hits(encode_arrow(new.take(pa.array(lost[left]))))
        found = rec >= 0
        fate[left[found]] = CONTAMINATED_ANEW
        source[left[found]], gram[left[found]] = rec[found], hit[found]
    length = pc.utf8_length
    return pd.DataFrame({
        "doc": doc_keys(number, len(part))[lost], "lines": np.bincount(lines.doc[gone], minlength=len(part))[lost],
        "before": np.asarray(length(texts.take(pa.array(lost))).to_numpy(zero_copy_only=False), np.int64),
        "after": np.asarray(length(new.take(pa.array(lost))).to_numpy(zero_copy_only=False), np.int64),
        "fate": fate, "source": source, "source_gram": gram})


def surviving_chars(part: pd.DataFrame, feat: pd.DataFrame, roots: pd.DataFrame | None, text_column: str,
                    drop: bool) -> pd.DataFrame:
    """The characters of this partition's surviving documents: what line dedup reads, the whole its
    guard measures a share of."""
    keep = survivors(feat, roots, drop)
    chars = pc.utf8_length(_texts(part, text_column).filter(pa.array(keep)))
    return pd.DataFrame({"chars": [int(pc.sum(chars).as_py() or 0)], "documents": [int(keep.sum())]})


COUNTS_META = {"lines": "int64", "chars": "int64", "documents": "int64", "emptied": "int64",
               "contaminated": "int64", "hist": object}


def change_counts(changes: pd.DataFrame) -> pd.DataFrame:
    """Of one partition's `line_changes`: the lines removed, the characters removed (of a document
    kept, those its lost lines held; of one dropped, all of them), the documents changed, emptied and
    contaminated anew, and the histogram (`SHARE_BINS`) of the share of a changed document's
    characters its lost lines held."""
    before, after = changes["before"].to_numpy(np.int64), changes["after"].to_numpy(np.int64)
    share = (before - after).astype(np.float64) / np.maximum(before, 1)
    hist = np.bincount(np.minimum((share * SHARE_BINS).astype(np.int64), SHARE_BINS - 1), minlength=SHARE_BINS)
    fate = changes["fate"].to_numpy()
    return pd.DataFrame({"lines": [int(changes["lines"].sum())],
                         "chars": [int(np.where(fate == KEPT, before - after, before).sum())],
                         "documents": [len(changes)], "emptied": [int((fate == LEFT_WITHOUT_WORDS).sum())],
                         "contaminated": [int((fate == CONTAMINATED_ANEW).sum())],
                         "hist": pd.Series([hist.tolist()], dtype=object)})


REMOVED_LINE_CHARS = 300
"""A removed line is listed (`removed_line_rows`) shortened past this many characters."""


def removed_lines_schema(id_type: pa.DataType) -> pa.Schema:
    """`_report/removed_lines.parquet`'s columns (`removed_line_rows`)."""
    return pa.schema([pa.field("id", id_type, nullable=False), pa.field("line", pa.int32(), nullable=False),
                      pa.field("text", pa.string(), nullable=False), pa.field("first_id", id_type),
                      pa.field("first_line", pa.int32())])


def removed_lines_table(id_type: pa.DataType) -> pa.Table:
    """An empty `removed_lines_schema` table."""
    return removed_lines_schema(id_type).empty_table()


def removed_line_rows(texts: pa.Array | pa.ChunkedArray, ids: NDArray[Any], keys: NDArray[np.int64], line_keys: pd.DataFrame,
                      survive: NDArray[np.bool_], id_type: pa.DataType) -> pa.Table:
    """One row a line these texts lose, in text and line order: the document's `id`, the `line`'s
    number, its `text` as it was (shortened past `REMOVED_LINE_CHARS`), and where its key stays,
    `first_id` and `first_line` (null for a blank line that went with its neighbours)."""
    lines = split_lines(texts)
    gone, first_row = removed_lines(lines, keys, line_keys, survive)
    where = np.flatnonzero(gone)
    text = line_texts(texts, lines, where).cast(pa.large_string())
    long = np.asarray(pc.utf8_length(text).to_numpy(zero_copy_only=False), np.int64) > REMOVED_LINE_CHARS
    if long.any():  # the start, and a mark that more followed
        cut = pc.binary_join_element_wise(pc.utf8_slice_codeunits(text, 0, REMOVED_LINE_CHARS),
                                          pa.scalar("…", pa.large_string()), pa.scalar("", pa.large_string()))
        text = pc.if_else(pa.array(long), cut, text)
    at = first_row[where]
    blank = at < 0
    first_ids = line_keys["_id"].to_numpy()[np.maximum(at, 0)] if len(line_keys) else np.full(len(at), None)
    first_lines = line_keys["line"].to_numpy(np.int64)[np.maximum(at, 0)] if len(line_keys) else np.zeros(len(at))
    return pa.table({"id": pa.array(ids[lines.doc[where]].tolist(), id_type),
                     "line": pa.array(lines.line[where], pa.int32()),
                     "text": text.cast(pa.string()),
                     "first_id": pa.array(np.asarray(first_ids, dtype=object).tolist(), id_type, mask=blank),
                     "first_line": pa.array(np.asarray(first_lines, np.int64), pa.int32(), mask=blank)},
                    schema=removed_lines_schema(id_type))


def key_count(settled: pd.DataFrame) -> pd.DataFrame:
    """How many distinct keys these settled rows hold (the repeated lines' keys of a key range)."""
    return pd.DataFrame({"n": [len(settled.drop_duplicates(["h1", "h2"]))]})


def top_keys(line_keys: pd.DataFrame, n: int = SHOWN_LINES) -> pd.DataFrame:
    """The `n` most repeated settled keys of these rows, once each: by count, then by their first
    occurrence's id and line, then by key (never by position: the same whatever the partitioning)."""
    one = line_keys.drop_duplicates(["h1", "h2"])
    return one.sort_values(["count", "_id", "line", "h1", "h2"], ascending=[False, True, True, True, True],
                           kind="stable").head(n)




def with_line_drops(feat: pd.DataFrame, changes: pd.DataFrame | None) -> pd.DataFrame:
    """A features partition with line dedup's drops made (`line_changes`' fates): a document left
    without a word marked `EMPTIED`, one whose new text holds a protected n-gram marked contaminated
    by it (`source`, `source_gram`, `AFTER_LINES`); so every decision read from it (`row_decisions`,
    the removed list) counts them."""
    return with_drops(feat, changes, EMPTIED, AFTER_LINES)


def with_drops(feat: pd.DataFrame, changes: pd.DataFrame | None, emptied_source: int, flag: str) -> pd.DataFrame:
    """A features partition with a rewriting pass's drops made (`changes`: its changed documents and
    their fates, as `line_changes` gives them): `source` `emptied_source` for a document left without
    a word; for one whose new text holds a protected n-gram, that n-gram's record and gram, and the
    column `flag` set."""
    if changes is None:
        return feat
    out = feat.assign(**{flag: np.zeros(len(feat), bool)})
    dropped = changes[changes["fate"].to_numpy() != KEPT]
    if dropped.empty:
        return out
    rows = rows_of(feat, dropped["doc"].to_numpy(np.int64))
    emptied = dropped["fate"].to_numpy() == LEFT_WITHOUT_WORDS
    source, gram, after = (out[c].to_numpy().copy() for c in ("source", "source_gram", flag))
    source[rows] = np.where(emptied, emptied_source, dropped["source"].to_numpy(np.int32))
    gram[rows[~emptied]] = dropped["source_gram"].to_numpy(np.int64)[~emptied]
    after[rows[~emptied]] = True
    out["source"], out["source_gram"], out[flag] = source, gram, after
    return out


def without_removed_lines(texts: pa.Array | pa.ChunkedArray, keys: NDArray[np.int64], line_keys: pd.DataFrame,
                          survive: NDArray[np.bool_]) -> pa.Array:
    """`texts` (of documents keyed `keys`) as line dedup leaves them: the survivors' without the
    lines they lose, the rest as they are; of the input's Arrow type (dictionary and view included)."""
    lines = split_lines(texts)
    gone, _ = removed_lines(lines, keys, line_keys, survive)
    new, _ = rewrite(texts, lines, gone)
    return new
