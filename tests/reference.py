"""Plain-Python reference definitions of contract §1-3, written independently of the kernels."""

from __future__ import annotations

import functools
import re

P = 2**31 - 1


def ref_fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) % 2**64
    return h


def ref_mix(data: bytes) -> int:
    """The second text hash (`dedup.core._kernels.mix_spans`): xorshift-multiply per byte, seeded with the length."""
    h = 0x9E3779B97F4A7C15 ^ len(data)
    for byte in data:
        h = ((h ^ byte) * 0xBF58476D1CE4E5B9) % 2**64
        h ^= h >> 31
    return h


def ref_shingles(text: str, k: int) -> set[str]:
    w = re.findall(r"\w+", text.lower())
    if not w:
        return set()
    if len(w) < k:
        return {" ".join(w)}
    return {" ".join(w[i : i + k]) for i in range(len(w) - k + 1)}


def ref_char_shingles(text: str, k: int) -> set[str]:
    s = " ".join(re.findall(r"\w+", text.lower()))
    if not s:
        return set()
    if len(s) < k:
        return {s}
    return {s[i : i + k] for i in range(len(s) - k + 1)}


def ref_perm_params(num_perm: int, seed: int) -> list[tuple[int, int]]:
    return list(_perm_params(num_perm, seed))


@functools.lru_cache(maxsize=64)
def _perm_params(num_perm: int, seed: int) -> tuple[tuple[int, int], ...]:
    state, inc = 0, (54 << 1) | 1

    def nxt() -> int:
        nonlocal state
        old = state
        state = (old * 6364136223846793005 + inc) % 2**64
        xs = (((old >> 18) ^ old) >> 27) % 2**32
        rot = old >> 59
        return ((xs >> rot) | (xs << ((32 - rot) % 32))) % 2**32

    def below(bound: int) -> int:
        threshold = (2**32 - bound) % bound
        while True:
            r = nxt()
            if r >= threshold:
                return r % bound

    nxt()
    state = (state + seed) % 2**64
    nxt()
    out = []
    for _ in range(num_perm):
        a = 1 + below(P - 1)
        b = below(P)
        out.append((a, b))
    return tuple(out)


def ref_signature(text: str, k: int = 5, num_perm: int = 128, seed: int = 0, unit: str = "word") -> list[int]:
    return list(_signature(text, k, num_perm, seed, unit))


@functools.lru_cache(maxsize=65536)
def _signature(text: str, k: int, num_perm: int, seed: int, unit: str) -> tuple[int, ...]:
    """The reference signature, computed once per text and parameters (a pure function, and the
    reference's slowest step: the centred tests ask it for the same texts again and again)."""
    sets = ref_char_shingles(text, k) if unit == "char" else ref_shingles(text, k)
    xs = [ref_fnv1a64(s.encode("utf-8")) % P for s in sets]
    return tuple(min(((a * x + b) % P for x in xs), default=P) for a, b in _perm_params(num_perm, seed))


def ref_band_keys(signature: list[int], num_bands: int = 16, rows_per_band: int = 8) -> list[int]:
    """Contract §4: FNV-1a 64 of (band as uint32, its rows as uint32), little-endian; 0 becomes 1, and a
    signature of no shingles (every value P) has no keys (0)."""
    if all(v == P for v in signature):
        return [0] * num_bands
    out = []
    for b in range(num_bands):
        rows = signature[b * rows_per_band:(b + 1) * rows_per_band]
        data = b"".join(x.to_bytes(4, "little") for x in [b, *rows])
        out.append(ref_fnv1a64(data) or 1)
    return out


def ref_components(adjacent: dict[int, set[int]], nodes: set[int]) -> list[set[int]]:
    """The connected components of `nodes` under `adjacent` (edges to other nodes ignored), by search."""
    out, seen = [], set()
    for start in sorted(nodes):
        if start in seen:
            continue
        part, todo = set(), [start]
        while todo:
            x = todo.pop()
            if x not in part:
                part.add(x)
                todo.extend(adjacent[x] & nodes)
        seen |= part
        out.append(part)
    return out


def ref_clusters(ids: list[str], texts: list[str], *, mode: str, threshold: float, confirm: str, k: int = 5,
                 num_perm: int = 128, num_bands: int = 16, rows_per_band: int = 8, seed: int = 0,
                 rank: dict[str, object] | None = None) -> dict[str, tuple[str, float | None]]:
    """Each document's survivor and its similarity to it (None for a survivor or a document alone), by
    the contract's definitions: candidates share a band, pairs reaching `threshold` (signature
    agreement, or exact shingle Jaccard) are edges; `connected` clusters are the graph's components,
    `centred` ones keep the members that reach the threshold with their survivor and cluster the rest
    again among themselves, by the graph's edges between them, until none is left. The survivor is
    the member with the smallest `rank` (default: its id)."""
    rank = rank if rank is not None else {i: i for i in ids}
    sigs = [ref_signature(t, k, num_perm, seed) for t in texts]
    sets = [ref_shingles(t, k) for t in texts]
    n = len(ids)

    def sim(a: int, b: int) -> float:
        if confirm == "exact":
            return len(sets[a] & sets[b]) / len(sets[a] | sets[b])
        return sum(x == y for x, y in zip(sigs[a], sigs[b])) / num_perm

    buckets: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for i, s in enumerate(sigs):
        for b in range(num_bands):
            buckets.setdefault((b, tuple(s[b * rows_per_band:(b + 1) * rows_per_band])), []).append(i)
    adjacent: dict[int, set[int]] = {i: set() for i in range(n)}
    for members in buckets.values():
        for x in members:
            for y in members:
                if x < y and y not in adjacent[x] and sim(x, y) >= threshold:
                    adjacent[x].add(y)
                    adjacent[y].add(x)

    def parts(nodes: set[int]) -> list[set[int]]:
        return ref_components(adjacent, nodes)

    result: dict[str, tuple[str, float | None]] = {i: (i, None) for i in ids}
    todo = [p for p in parts(set(range(n))) if len(p) > 1]
    while todo:
        part = todo.pop()
        s = min(part, key=lambda x: (rank[ids[x]], ids[x]))
        failed = set()
        for m in part - {s}:
            v = sim(s, m)
            if mode == "connected" or v >= threshold:
                result[ids[m]] = (ids[s], v)
            else:
                failed.add(m)
        todo.extend(p for p in parts(failed) if len(p) > 1)
    return result


DROPPED = object()
"""`ref_lines`' value for a document line dedup drops (it lost a line and has no word left)."""


def _line_key(line: str) -> str:
    return " ".join(re.findall(r"\w+", line.lower()))


def ref_removed_lines(ids: list, texts: list[str | None], min_copies: int = 2, min_words: int = 1) -> set[tuple]:
    """Contract §6b in plain Python: the (id, line number) of every line removed. A key is the line's
    words joined by one space; a key of at least `min_words` words occurring at least `min_copies`
    times (every (document, line)) keeps its occurrence with the smallest (id, line) and loses every
    other. In a document that lost a line, a line without words goes when the closest line with
    words above it and the closest below it are each removed or absent."""
    where: dict[str, list[tuple]] = {}
    for i, t in zip(ids, texts):
        for j, line in enumerate(t.split("\n") if t is not None else []):
            if _line_key(line):
                where.setdefault(_line_key(line), []).append((i, j))
    removed = set()
    for key, occurrences in where.items():
        if len(occurrences) >= min_copies and len(key.split(" ")) >= min_words:
            removed |= set(occurrences) - {min(occurrences)}
    blanks = set()
    for i, t in zip(ids, texts):
        lines = t.split("\n") if t is not None else []
        if not any((i, j) in removed for j in range(len(lines))):
            continue
        worded = [j for j, line in enumerate(lines) if _line_key(line)]
        for j, line in enumerate(lines):
            if _line_key(line):
                continue
            above = [w for w in worded if w < j]
            below = [w for w in worded if w > j]
            if (not above or (i, above[-1]) in removed) and (not below or (i, below[0]) in removed):
                blanks.add((i, j))
    return removed | blanks


def ref_lines(ids: list, texts: list[str | None], min_copies: int = 2, min_words: int = 1) -> dict:
    """Each id's new text by contract §6b (`ref_removed_lines`), `DROPPED` for a document that lost a
    line and has no word left, or None for a null text."""
    removed = ref_removed_lines(ids, texts, min_copies, min_words)
    out = {}
    for i, t in zip(ids, texts):
        if t is None:
            out[i] = None
            continue
        lines = t.split("\n")
        kept = [line for j, line in enumerate(lines) if (i, j) not in removed]
        new = "\n".join(kept)
        out[i] = DROPPED if len(kept) < len(lines) and not _line_key(new) else new
    return out


def _span_tokens(text: str | None, unit: str) -> list[tuple[int, str]]:
    if not text:
        return []
    return [(m.start(), m.group().lower()) for m in re.finditer(r"\w+" if unit == "word" else r"\w", text)]


def ref_span_removed(ids: list, texts: list[str | None], k: int, keep: str = "first",
                     unit: str = "word") -> dict:
    """Contract §6c in plain Python: per id, which of its tokens are removed. A window is k
    consecutive tokens of one document, its key their lowercase forms; occurrences ordered by (id,
    position); keep "first": every occurrence but the first is repeated; "none": every occurrence of
    a key seen twice or more. A token is removed when a repeated window covers it."""
    where: dict[tuple, list[tuple]] = {}
    toks = {i: _span_tokens(t, unit) for i, t in zip(ids, texts)}
    for i in ids:
        keys = [w for _, w in toks[i]]
        for p in range(len(keys) - k + 1):
            where.setdefault(tuple(keys[p:p + k]), []).append((i, p))
    removed = {i: [False] * len(toks[i]) for i in ids}
    for occurrences in where.values():
        if len(occurrences) < 2:
            continue
        for i, p in (occurrences if keep == "none" else sorted(occurrences)[1:]):
            for q in range(p, p + k):
                removed[i][q] = True
    return removed


def ref_spans(ids: list, texts: list[str | None], k: int, keep: str = "first", unit: str = "word") -> dict:
    """Each id's new text by contract §6c: each maximal run of removed tokens cut from its first
    token's first character to the next kept token's first character (or the end); `DROPPED` for a
    document that lost a span and has no word left."""
    removed = ref_span_removed(ids, texts, k, keep, unit)
    out = {}
    for i, t in zip(ids, texts):
        toks = _span_tokens(t, unit)
        gone = removed[i]
        if not any(gone):
            out[i] = t
            continue
        assert t is not None
        new, at, j = "", 0, 0
        while j < len(toks):
            if not gone[j]:
                j += 1
                continue
            e = j
            while e < len(toks) and gone[e]:
                e += 1
            new += t[at:toks[j][0]]
            at = toks[e][0] if e < len(toks) else len(t)
            j = e
        new += t[at:]
        out[i] = DROPPED if not re.search(r"\w", new) else new
    return out


def _ref_words_at(text: str) -> list[tuple[str, int, int]]:
    """§1 words with their character spans in `text` (texts whose lower case keeps their length)."""
    low = text.lower()
    assert len(low) == len(text)
    return [(m.group(), m.start(), m.end()) for m in re.finditer(r"\w+", low)]


def ref_record_grams(records: list[str], n: int = 13) -> list[set[str]]:
    """Each protected record's word n-grams (§6)."""
    out = []
    for r in records:
        w = re.findall(r"\w+", r.lower())
        out.append({" ".join(w[i:i + n]) for i in range(len(w) - n + 1)})
    return out


def ref_matches(text: str, grams: set[str], n: int = 13) -> list[int]:
    """The first word of every window of `text` whose n-gram is in `grams` (the last window included)."""
    w = [t for t, _, _ in _ref_words_at(text)]
    return [i for i in range(len(w) - n + 1) if " ".join(w[i:i + n]) in grams]


def ref_cut(text: str, grams: set[str], n: int = 13) -> str | None:
    """§6e's cut, character by character: each matched window's span widened by 200 characters a
    side and removed; pieces of 200 characters or fewer dropped; None when more than 10 windows
    match or no word is left. A text without a match as it is."""
    words = _ref_words_at(text)
    hits = ref_matches(text, grams, n)
    if not hits:
        return text
    if len(hits) > 10:
        return None
    removed = [False] * len(text)
    for i in hits:
        for c in range(max(0, words[i][1] - 200), min(len(text), words[i + n - 1][2] + 200)):
            removed[c] = True
    pieces, current = [], []
    for c, gone in zip(text, removed):
        if gone:
            if current:
                pieces.append("".join(current))
            current = []
        else:
            current.append(c)
    if current:
        pieces.append("".join(current))
    kept = [p for p in pieces if len(p) > 200]
    if not any(re.search(r"\w", p) for p in kept):
        return None
    return "\n".join(kept)


def ref_eval_side(texts: list[str], records: list[str], n: int = 13, max_docs: int | None = None) -> dict:
    """The eval side (§6e) of a corpus against protected records, and the frequency cap: per record
    (ngrams, ignored, documents, found_share, longest_run); the n-grams ignored; the n-grams in force."""
    rec_grams = ref_record_grams(records, n)
    every = set().union(*rec_grams) if rec_grams else set()
    docs_of = {g: 0 for g in every}
    for t in texts:
        w = [x for x, _, _ in _ref_words_at(t)]
        for g in {" ".join(w[i:i + n]) for i in range(len(w) - n + 1)} & every:
            docs_of[g] += 1
    ignored = {g for g, c in docs_of.items() if max_docs is not None and c > max_docs}
    force = every - ignored
    rows = []
    for grams in rec_grams:
        mine = grams & force
        documents, found, longest = 0, set(), 0
        for t in texts:
            w = [x for x, _, _ in _ref_words_at(t)]
            starts = [i for i in range(len(w) - n + 1) if " ".join(w[i:i + n]) in mine]
            if not starts:
                continue
            documents += 1
            found |= {" ".join(w[i:i + n]) for i in starts}
            covered = [False] * len(w)
            for i in starts:
                covered[i:i + n] = [True] * n
            run = 0
            for c in covered:
                run = run + 1 if c else 0
                longest = max(longest, run)
        rows.append({"ngrams": len(grams), "ignored": len(grams & ignored), "documents": documents,
                     "found_share": len(found) / len(grams) if grams else 0.0, "longest_run": longest})
    return {"records": rows, "ignored": {g: docs_of[g] for g in ignored}, "force": force}
