"""Compiled inner loops (numba, cached on disk): tokenising, FNV-1a over byte spans, the MinHash
minimum, band keys, and the comparisons that confirm pairs.

These are the loops that touch every byte, every (shingle x permutation) or every band; the rest
of the package is numpy. Each kernel has a plain-Python reference in the tests. They release the
GIL (`nogil`), so `--threads` runs them in parallel, and index with unsigned integers where a
loop reads bytes (numba adds a negative-index check to every signed index).
"""

from __future__ import annotations

import numba
import numpy as np

_P = np.uint64((1 << 31) - 1)
_P32 = np.uint32(_P)
_OFFSET = np.uint64(0xCBF29CE484222325)
_PRIME = np.uint64(0x100000001B3)
_MIX_SEED = np.uint64(0x9E3779B97F4A7C15)  # the second text hash (`mix_spans`): seed and multiplier
_MIX_MUL = np.uint64(0xBF58476D1CE4E5B9)


@numba.njit(cache=True, nogil=True)
def fnv1a_spans(buf, start, end):  # pragma: no cover - compiled
    out = np.empty(start.shape[0], dtype=np.uint64)
    for i in range(start.shape[0]):
        h = _OFFSET
        for j in range(start[i], end[i]):
            h = (h ^ np.uint64(buf[j])) * _PRIME
        out[i] = h
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _mod_p(h):  # pragma: no cover - compiled
    """h mod P for any uint64 h: 2**31 = 1 mod P, so two folds of the high bits onto the low ones
    leave less than P + 6, and one conditional subtraction the residue."""
    h = (h & _P) + (h >> np.uint64(31))
    h = (h & _P) + (h >> np.uint64(31))
    return h - _P if h >= _P else h


@numba.njit(cache=True, nogil=True)
def minhash_rows(x, offsets, a, b, out):  # pragma: no cover - compiled
    """out[d, i] = min over x[offsets[d]:offsets[d+1]] of (a[i] * (x mod P) + b[i]) mod P.

    x: the shingles' 64-bit hashes (uint64; reduced mod P here, once a shingle, instead of numpy's
    `%` and a narrowing copy). a, b: uint32 arrays with 1 <= a < P and 0 <= b < P (contract §3).
    Then y = a*x + b < P*P < 2**62, a 32 x 32 -> 64-bit multiply (vpmuludq), and one Mersenne
    fold z = (y & P) + (y >> 31) leaves z < 2P < 2**32: z narrows to 32 bits exactly, and the
    residue is z or z - P, the smaller of the two as uint32 (z - P wraps round when z < P). The
    wrap and the running minimum are 32-bit operations (vpminud, twice the lanes of a 64-bit
    one, which AVX2 lacks and emulates in four instructions), four shingles a pass over the row:
    about twice as fast as the same fold in 64 bits (docs/performance.md). Rows of documents
    without shingles stay at P.
    """
    num_perm = a.shape[0]
    row = np.empty(num_perm, dtype=np.uint32)
    for d in range(offsets.shape[0] - 1):
        for i in range(num_perm):
            row[i] = _P32
        s, e = offsets[d], offsets[d + 1]
        while s + 4 <= e:
            x0, x1, x2, x3 = _shingle_x(x[s]), _shingle_x(x[s + 1]), _shingle_x(x[s + 2]), _shingle_x(x[s + 3])
            for i in range(num_perm):
                ai, bi = a[i], b[i]
                row[i] = min(min(row[i], min(_perm(ai, x0, bi), _perm(ai, x1, bi))),
                             min(_perm(ai, x2, bi), _perm(ai, x3, bi)))
            s += 4
        while s < e:
            x0 = _shingle_x(x[s])
            for i in range(num_perm):
                row[i] = min(row[i], _perm(a[i], x0, b[i]))
            s += 1
        for i in range(num_perm):
            out[d, i] = row[i]


@numba.njit(cache=True, nogil=True, inline="always")
def _shingle_x(h):  # pragma: no cover - compiled
    """x = h mod P, widened from 32 bits: the narrowing tells the compiler it is below 2**32."""
    return np.uint64(np.uint32(_mod_p(np.uint64(h))))


@numba.njit(cache=True, nogil=True, inline="always")
def _perm(a, x, b):  # pragma: no cover - compiled
    """(a*x + b) mod P as uint32, for a, b (uint32) and x below P: one Mersenne fold in 64 bits, then
    a wrap-around minimum in 32."""
    y = np.uint64(a) * x + np.uint64(b)
    z = np.uint32((y & _P) + (y >> np.uint64(31)))
    return min(z, np.uint32(z - _P32))


_U1 = np.uint64(1)
_SPACE = np.uint8(32)


@numba.njit(cache=True, nogil=True)
def tokenize(buf, doc_start, doc_end, prenormalized, word_byte, not_space, lower):  # pragma: no cover - compiled
    """Words of each document as one compact buffer: words joined by single spaces.

    buf: uint8, the documents' bytes; document d is buf[doc_start[d]:doc_end[d]] (an Arrow string
    array's data buffer and offsets can be passed as they are); prenormalized: bool [n], True
    where the document is already "w1 w2 ..." (not_space, a 256-entry 0/1 table, decides), else
    ASCII text where word_byte (a 256-entry 0/1 table) decides; lower: a 256-entry lower-casing
    table (it must map word bytes to bytes other than the space). Returns (compact, word_start,
    word_count); a word ends one byte before the next word starts (the last one at the end of
    the buffer), so its ends are not stored (`TextBatch.word_ends`). A first pass counts words and
    bytes, so memory is exact: a huge document costs its size plus 8 bytes a word.

    Every loop is branch-free (a word boundary is data, not a jump: branching on each byte
    mispredicts at every word end, which costs more than the work): each byte writes its
    lower-cased self or a space at `pos`, which moves on for word bytes and for the first byte
    after a word, so every word is followed by exactly one space; and it writes `pos` into the
    current word-start slot, which moves on at the first byte of a word. Indices are unsigned, so
    numba adds no wraparound.
    """
    n = doc_start.shape[0]
    emit_word = np.empty(256, dtype=np.uint8)  # the byte written for each input byte, per table
    emit_pre = np.empty(256, dtype=np.uint8)
    for c in range(256):
        emit_word[c] = lower[c] if word_byte[c] else _SPACE
        emit_pre[c] = lower[c] if not_space[c] else _SPACE
    counts = np.zeros(n, dtype=np.int64)
    total_words = np.uint64(0)
    total_bytes = np.uint64(0)
    for d in range(n):
        table = not_space if prenormalized[d] else word_byte
        prev = np.uint64(0)
        words = np.uint64(0)
        nbytes = np.uint64(0)
        for i in range(np.uint64(doc_start[d]), np.uint64(doc_end[d])):
            w = np.uint64(table[buf[i]])
            nbytes += w
            words += w & (prev ^ _U1)
            prev = w
        counts[d] = words
        total_words += words
        total_bytes += nbytes
    out = np.empty(total_bytes + total_words + _U1, dtype=np.uint8)  # each word and its space, one spare
    starts = np.empty(total_words + _U1, dtype=np.int64)  # one spare: the slot after the last word
    pos = np.uint64(0)
    nw = np.uint64(0)
    for d in range(n):
        table = not_space if prenormalized[d] else word_byte
        emit = emit_pre if prenormalized[d] else emit_word
        prev = np.uint64(0)
        for i in range(np.uint64(doc_start[d]), np.uint64(doc_end[d])):
            c = buf[i]
            w = np.uint64(table[c])
            out[pos] = emit[c]
            starts[nw] = pos  # kept only where a word starts: the slot moves on just there
            nw += w & (prev ^ _U1)
            pos += w | prev
            prev = w
        out[pos] = _SPACE  # after the document's last word (kept only if it ends in one)
        pos += prev
    size = np.int64(pos) - 1 if pos > 0 else 0
    return out[:size], starts[:np.int64(total_words)], counts


@numba.njit(cache=True, nogil=True)
def non_ascii(buf, start, end):  # pragma: no cover - compiled
    """bool [n]: whether buf[start[d]:end[d]] holds a byte >= 128."""
    n = start.shape[0]
    out = np.zeros(n, dtype=np.bool_)
    for d in range(n):
        acc = np.uint8(0)
        for i in range(np.uint64(start[d]), np.uint64(end[d])):  # an OR over the bytes vectorises
            acc |= buf[i]
        out[d] = acc >= 128
    return out


@numba.njit(cache=True, nogil=True)
def mix_spans(buf, start, end):  # pragma: no cover - compiled
    """A second 64-bit hash of byte spans (xorshift-multiply per byte), independent of FNV-1a."""
    out = np.empty(start.shape[0], dtype=np.uint64)
    for i in range(start.shape[0]):
        h = _MIX_SEED ^ np.uint64(end[i] - start[i])
        for j in range(start[i], end[i]):
            h = (h ^ np.uint64(buf[j])) * _MIX_MUL
            h ^= h >> np.uint64(31)
        out[i] = h
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _text_keys_tail(buf, h, f, lo, hi):  # pragma: no cover - compiled
    for j in range(lo, hi):
        c = np.uint64(buf[j])
        h = (h ^ c) * _MIX_MUL
        h ^= h >> np.uint64(31)
        f = (f ^ c) * _PRIME
    return h, f


@numba.njit(cache=True, nogil=True)
def text_keys(buf, start, end):  # pragma: no cover - compiled
    """(mix_spans, fnv1a_spans) of the same byte spans in one pass: a document's text is read once,
    not twice. Two documents are hashed in lockstep over their common length (then each one's
    tail), so four independent multiply chains overlap instead of two. Byte positions are unsigned,
    as in the other byte loops."""
    n = start.shape[0]
    mix = np.empty(n, dtype=np.uint64)
    fnv = np.empty(n, dtype=np.uint64)
    i = 0
    while i + 2 <= n:
        s0, e0 = np.uint64(start[i]), np.uint64(end[i])
        s1, e1 = np.uint64(start[i + 1]), np.uint64(end[i + 1])
        h0, f0 = _MIX_SEED ^ (e0 - s0), _OFFSET
        h1, f1 = _MIX_SEED ^ (e1 - s1), _OFFSET
        length = min(e0 - s0, e1 - s1)
        for j in range(length):
            c0 = np.uint64(buf[s0 + j])
            c1 = np.uint64(buf[s1 + j])
            h0 = (h0 ^ c0) * _MIX_MUL
            h1 = (h1 ^ c1) * _MIX_MUL
            h0 ^= h0 >> np.uint64(31)
            h1 ^= h1 >> np.uint64(31)
            f0 = (f0 ^ c0) * _PRIME
            f1 = (f1 ^ c1) * _PRIME
        mix[i], fnv[i] = _text_keys_tail(buf, h0, f0, s0 + length, e0)
        mix[i + 1], fnv[i + 1] = _text_keys_tail(buf, h1, f1, s1 + length, e1)
        i += 2
    if i < n:
        s0, e0 = np.uint64(start[i]), np.uint64(end[i])
        mix[i], fnv[i] = _text_keys_tail(buf, _MIX_SEED ^ (e0 - s0), _OFFSET, s0, e0)
    return mix, fnv


@numba.njit(cache=True, nogil=True, inline="always")
def _fnv_tail(buf, h, lo, hi):  # pragma: no cover - compiled
    for j in range(lo, hi):
        h = (h ^ np.uint64(buf[j])) * _PRIME
    return h


@numba.njit(cache=True, nogil=True, inline="always")
def _word_end(word_start, j, last, nbuf):  # pragma: no cover - compiled
    """Where word j of a compact buffer ends: one byte before word j+1 starts, the buffer's end for the last."""
    return np.uint64(word_start[j + 1] - 1) if j < last else nbuf


@numba.njit(cache=True, nogil=True)
def window_hashes(buf, word_start, word_offsets, size, short, out_offsets):  # pragma: no cover - compiled
    """FNV-1a 64 of every `size`-word window of every document (contract shingles or n-grams).

    The same spans as `TextBatch.spans`, hashed without materialising them; four windows are
    hashed in lockstep so the multiplies of independent chains overlap. Byte positions are
    unsigned, so numba adds no negative-index wraparound to each load (1.45x faster; eight
    windows in lockstep gained only 7% more).
    out_offsets: int64 [n + 1], the windows of document d are out_offsets[d]:out_offsets[d+1].
    A word ends one byte before the next one starts (`_word_end`).
    """
    out = np.empty(out_offsets[-1], dtype=np.uint64)
    n = word_offsets.shape[0] - 1
    last = word_start.shape[0] - 1
    nbuf = np.uint64(buf.shape[0])
    for d in range(n):
        w0 = word_offsets[d]
        nw = word_offsets[d + 1] - w0
        count = out_offsets[d + 1] - out_offsets[d]
        base = out_offsets[d]
        k = 0
        while k + 4 <= count:
            s0 = np.uint64(word_start[w0 + k])
            s1 = np.uint64(word_start[w0 + k + 1])
            s2 = np.uint64(word_start[w0 + k + 2])
            s3 = np.uint64(word_start[w0 + k + 3])
            e0 = _word_end(word_start, w0 + min(k + size - 1, nw - 1), last, nbuf)
            e1 = _word_end(word_start, w0 + min(k + size, nw - 1), last, nbuf)
            e2 = _word_end(word_start, w0 + min(k + size + 1, nw - 1), last, nbuf)
            e3 = _word_end(word_start, w0 + min(k + size + 2, nw - 1), last, nbuf)
            length = min(min(e0 - s0, e1 - s1), min(e2 - s2, e3 - s3))
            h0 = _OFFSET
            h1 = _OFFSET
            h2 = _OFFSET
            h3 = _OFFSET
            for j in range(length):
                h0 = (h0 ^ np.uint64(buf[s0 + j])) * _PRIME
                h1 = (h1 ^ np.uint64(buf[s1 + j])) * _PRIME
                h2 = (h2 ^ np.uint64(buf[s2 + j])) * _PRIME
                h3 = (h3 ^ np.uint64(buf[s3 + j])) * _PRIME
            out[base + k] = _fnv_tail(buf, h0, s0 + length, e0)
            out[base + k + 1] = _fnv_tail(buf, h1, s1 + length, e1)
            out[base + k + 2] = _fnv_tail(buf, h2, s2 + length, e2)
            out[base + k + 3] = _fnv_tail(buf, h3, s3 + length, e3)
            k += 4
        while k < count:
            s = np.uint64(word_start[w0 + k])
            e = _word_end(word_start, w0 + min(k + size - 1, nw - 1), last, nbuf)
            out[base + k] = _fnv_tail(buf, _OFFSET, s, e)
            k += 1
    return out


@numba.njit(cache=True, nogil=True)
def band_keys(sigs, num_bands, rows_per_band):  # pragma: no cover - compiled
    """out[d, b] = FNV-1a 64 over the little-endian bytes of (b as uint32, sigs[d, b*r:(b+1)*r] as
    uint32). The bands are independent chains, advanced byte by byte side by side (the band loop
    innermost vectorises): 3 to 4x faster than the same hash as 36 numpy passes."""
    n = sigs.shape[0]
    out = np.empty((n, num_bands), dtype=np.uint64)
    h = np.empty(num_bands, dtype=np.uint64)
    for d in range(n):
        for b in range(num_bands):
            v = np.uint64(b)
            x = _OFFSET
            for q in range(4):
                x = (x ^ ((v >> np.uint64(8 * q)) & np.uint64(255))) * _PRIME
            h[b] = x
        for r in range(rows_per_band):
            for q in range(4):
                shift = np.uint64(8 * q)
                for b in range(num_bands):
                    v = np.uint64(sigs[d, b * rows_per_band + r])
                    h[b] = (h[b] ^ ((v >> shift) & np.uint64(255))) * _PRIME
        for b in range(num_bands):
            out[d, b] = h[b]
    return out


@numba.njit(cache=True, nogil=True)
def spans_equal(buf_a, start_a, end_a, buf_b, start_b, end_b):  # pragma: no cover - compiled
    """out[i] = bytes buf_a[start_a[i]:end_a[i]] equal buf_b[start_b[i]:end_b[i]] (confirms hash hits)."""
    out = np.zeros(start_a.shape[0], dtype=np.bool_)
    for i in range(start_a.shape[0]):
        n = end_a[i] - start_a[i]
        if n != end_b[i] - start_b[i]:
            continue
        same = True
        for j in range(n):
            if buf_a[start_a[i] + j] != buf_b[start_b[i] + j]:
                same = False
                break
        out[i] = same
    return out


@numba.njit(cache=True, nogil=True)
def sorted_jaccard(a_vals, a_start, a_end, b_vals, b_start, b_end):  # pragma: no cover - compiled
    """out[i] = |A ∩ B| / |A ∪ B| of the sorted, distinct runs a_vals[a_start[i]:a_end[i]] and
    b_vals[b_start[i]:b_end[i]]; 0.0 when either is empty (two-pointer merge)."""
    n = a_start.shape[0]
    out = np.zeros(n, dtype=np.float64)
    for i in range(n):
        p, pe, q, qe = a_start[i], a_end[i], b_start[i], b_end[i]
        na, nb = pe - p, qe - q
        if na == 0 or nb == 0:
            continue
        inter = 0
        while p < pe and q < qe:
            x, y = a_vals[p], b_vals[q]
            if x == y:
                inter += 1
                p += 1
                q += 1
            elif x < y:
                p += 1
            else:
                q += 1
        out[i] = inter / (na + nb - inter)
    return out


@numba.njit(cache=True, nogil=True)
def sorted_unique_segments(values, offsets):  # pragma: no cover - compiled
    """Each segment values[offsets[i]:offsets[i+1]] sorted with repeats removed: (values, offsets)."""
    out = np.empty_like(values)
    out_offsets = np.zeros_like(offsets)
    k = 0
    for i in range(offsets.shape[0] - 1):
        seg = np.sort(values[offsets[i]:offsets[i + 1]])
        for j in range(seg.shape[0]):
            if j == 0 or seg[j] != seg[j - 1]:
                out[k] = seg[j]
                k += 1
        out_offsets[i + 1] = k
    return out[:k], out_offsets


@numba.njit(cache=True, nogil=True)
def char_window_hashes(buf, doc_start, doc_end, size, short):  # pragma: no cover - compiled
    """FNV-1a 64 of every run of `size` characters (code points) of each document's bytes
    buf[doc_start[d]:doc_end[d]] (valid UTF-8). With short, a document of 1 to size-1
    characters has one window of all of them. Returns (hashes, offsets [n + 1])."""
    n = doc_start.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int64)
    for d in range(n):
        chars = 0
        for j in range(doc_start[d], doc_end[d]):
            if (buf[j] & 0xC0) != 0x80:
                chars += 1
        count = chars - size + 1 if chars >= size else (1 if short and chars > 0 else 0)
        offsets[d + 1] = offsets[d] + count
    out = np.empty(offsets[n], dtype=np.uint64)
    for d in range(n):
        count = offsets[d + 1] - offsets[d]
        if count == 0:
            continue
        lo, hi = doc_start[d], doc_end[d]
        starts = np.empty(hi - lo + 1, dtype=np.int64)
        chars = 0
        for j in range(lo, hi):
            if (buf[j] & 0xC0) != 0x80:
                starts[chars] = j
                chars += 1
        starts[chars] = hi
        base = offsets[d]
        for k in range(count):
            end = starts[min(k + size, chars)]
            out[base + k] = _fnv_tail(buf, _OFFSET, starts[k], end)
    return out, offsets


@numba.njit(cache=True, nogil=True, inline="always")
def _find(parent, x):  # pragma: no cover - compiled
    """The root of x, halving the path on the way."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@numba.njit(cache=True, nogil=True)
def removed_by_unions(left, right, use, indexed, n_nodes):  # pragma: no cover - compiled
    """What the connected components of the edges (left[i], right[i]) with use[i] remove: every node
    of a component holding an `indexed` node but those, all but one of any other. Each union of two
    components adds one, unless both hold an indexed node (left, right: node codes below n_nodes)."""
    parent = np.arange(n_nodes)
    flag = indexed.copy()
    removed = 0
    for i in range(left.shape[0]):
        if not use[i]:
            continue
        a, b = _find(parent, left[i]), _find(parent, right[i])
        if a == b:
            continue
        if not (flag[a] and flag[b]):
            removed += 1
        parent[b] = a
        flag[a] = flag[a] or flag[b]
    return removed
