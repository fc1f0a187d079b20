"""contract §5: union-find whose root is the smallest id, whatever the order of unions."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dedup import UnionFind, components

edges = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=60)


def _bfs_labels(pairs: list[tuple[int, int]]) -> dict[int, int]:
    adj: dict[int, set[int]] = {}
    for a, b in pairs:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    label: dict[int, int] = {}
    for start in adj:
        if start in label:
            continue
        seen, stack = {start}, [start]
        while stack:
            for nxt in adj[stack.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        for x in seen:
            label[x] = min(seen)
    return label


@given(edges, st.randoms())
def test_roots_are_minimum_for_every_order(pairs: list[tuple[int, int]], rnd) -> None:  # type: ignore[no-untyped-def]
    expected = _bfs_labels(pairs)
    shuffled = [(b, a) if rnd.random() < 0.5 else (a, b) for a, b in pairs]
    rnd.shuffle(shuffled)
    uf = UnionFind()
    for a, b in shuffled:
        uf.union(a, b)
    assert {x: uf.find(x) for x in expected} == expected
    left = np.array([a for a, _ in shuffled], dtype=np.int64)
    right = np.array([b for _, b in shuffled], dtype=np.int64)
    ids, roots = components(left, right)
    assert dict(zip(ids.tolist(), roots.tolist())) == expected


def test_string_ids_use_string_order() -> None:
    uf = UnionFind()
    uf.union("b10", "b9")
    uf.union("b9", "c")
    assert uf.find("c") == "b10"  # "b10" < "b9" as strings
    ids, roots = components(np.array(["c", "b9"]), np.array(["b9", "b10"]))
    assert ids.tolist() == ["b10", "b9", "c"] and set(roots.tolist()) == {"b10"}
    assert uf.groups() == [{"b10", "b9", "c"}]


def test_union_by_argument_order_is_not_used() -> None:
    """Pitfall: union by size or argument order."""
    uf = UnionFind()
    uf.union(5, 6)
    uf.union(7, 5)
    uf.union(9, 8)
    uf.union(9, 7)
    assert uf.find(9) == 5 and uf.find(8) == 5


def test_components_of_no_edges_is_empty() -> None:
    ids, roots = components(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert len(ids) == 0 and len(roots) == 0


def test_long_chain_collapses_to_minimum() -> None:
    n = 100_000
    perm = np.random.default_rng(0).permutation(n)
    ids, roots = components(perm[:-1], perm[1:])
    assert len(ids) == n and (roots == 0).all()
