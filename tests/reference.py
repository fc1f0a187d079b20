"""Plain-Python reference definitions of contract §1-3, written independently of the kernels."""

from __future__ import annotations

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
    return out


def ref_signature(text: str, k: int = 5, num_perm: int = 128, seed: int = 0, unit: str = "word") -> list[int]:
    sets = ref_char_shingles(text, k) if unit == "char" else ref_shingles(text, k)
    xs = [ref_fnv1a64(s.encode("utf-8")) % P for s in sets]
    return [min(((a * x + b) % P for x in xs), default=P) for a, b in ref_perm_params(num_perm, seed)]
