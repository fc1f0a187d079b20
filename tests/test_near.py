"""contract §5 end to end in memory: confirm, cluster, tag; planted clusters; pitfalls of §8."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dedup import Doc, clusters, jaccard, near_dedup, shingles, signatures
from dedup.core.lsh import band_keys, bucket_pairs


def _vocab_text(rng: np.random.Generator, n: int, tag: str) -> list[str]:
    return [f"{tag}{int(i)}" for i in rng.integers(0, 5000, n)]


def _edit(words: list[str], positions: list[int], tag: str) -> list[str]:
    out = list(words)
    for p in positions:
        out[p] = f"{tag}{p}"
    return out


def test_chain_is_one_cluster_kept_as_smallest() -> None:
    rng = np.random.default_rng(0)
    x = _vocab_text(rng, 200, "w")
    y = _edit(x, [20, 60, 100], "y")
    z = _edit(y, [140, 170, 190], "z")
    docs = {"x": " ".join(x), "y": " ".join(y), "z": " ".join(z)}
    sh = {k: shingles(v) for k, v in docs.items()}
    assert jaccard(sh["x"], sh["y"]) >= 0.8 and jaccard(sh["y"], sh["z"]) >= 0.8
    assert jaccard(sh["x"], sh["z"]) < 0.8  # near duplication is not transitive
    assert clusters(docs, confirm="exact") == [{"x", "y", "z"}]
    kept = list(near_dedup([Doc(k, v) for k, v in docs.items()], confirm="exact"))
    assert [d.id for d in kept] == ["x"]  # pitfall: "drop if it resembles a kept document"


def test_candidates_below_threshold_are_not_merged() -> None:
    """Pitfall: merging LSH candidates without the confirm step."""
    rng = np.random.default_rng(1)
    base = _vocab_text(rng, 300, "w")
    for attempt in range(50):
        positions = sorted(rng.choice(300, 13, replace=False).tolist())
        other = _edit(base, positions, f"e{attempt}_")
        texts = [" ".join(base), " ".join(other)]
        j = jaccard(shingles(texts[0]), shingles(texts[1]))
        left, _ = bucket_pairs(band_keys(signatures(texts)))
        if len(left) and j < 0.8:
            break
    else:
        pytest.fail("no candidate pair below the threshold was found")
    assert clusters({"a": texts[0], "b": texts[1]}, confirm="exact") == []


def _planted(seed: int) -> tuple[dict[str, str], list[set[str]], list[tuple[str, str]]]:
    rng = np.random.default_rng(seed)
    docs: dict[str, str] = {}
    planted: list[set[str]] = []
    borderline: list[tuple[str, str]] = []
    for f in range(30):
        base = _vocab_text(rng, 150, "w")
        fam = {f"f{f:02d}"}
        docs[f"f{f:02d}"] = " ".join(base)
        for c in range(int(rng.integers(0, 3))):
            pos = sorted(rng.choice(150, 1, replace=False).tolist())
            docs[f"f{f:02d}c{c}"] = " ".join(_edit(base, pos, f"c{c}_"))
            fam.add(f"f{f:02d}c{c}")
        if len(fam) > 1:
            planted.append(fam)
    for b in range(10):  # pairs at Jaccard 0.5-0.6: must stay apart
        base = _vocab_text(rng, 150, "w")
        other = _edit(base, list(range(0, 150, 16))[:9], f"b{b}_")
        docs[f"g{b:02d}a"], docs[f"g{b:02d}b"] = " ".join(base), " ".join(other)
        borderline.append((f"g{b:02d}a", f"g{b:02d}b"))
    return docs, planted, borderline


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_clusters_found_exactly(seed: int) -> None:
    docs, planted, borderline = _planted(seed)
    for a, b in borderline:
        assert 0.5 <= jaccard(shingles(docs[a]), shingles(docs[b])) <= 0.6
    for confirm in ("estimate", "exact"):
        found = clusters(docs, confirm=confirm, seed=seed)
        assert sorted(map(sorted, found)) == sorted(map(sorted, planted))


def test_input_order_does_not_change_clusters() -> None:
    docs, _, _ = _planted(4)
    items = list(docs.items())
    random.Random(0).shuffle(items)
    assert clusters(dict(items)) == clusters(docs)
    tagged_a = {d.id: d.meta["minhash_cluster"] for d in near_dedup((Doc(k, v) for k, v in items), drop=False)}
    tagged_b = {d.id: d.meta["minhash_cluster"] for d in near_dedup((Doc(k, v) for k, v in docs.items()), drop=False)}
    assert tagged_a == tagged_b


def test_near_dedup_tags_keeps_order_and_meta() -> None:
    text = "one two three four five six seven eight nine ten eleven twelve"
    docs = [Doc("b", text, {"src": 1}), Doc("a", text.upper(), {"src": 2}), Doc("c", "something else entirely")]
    tagged = list(near_dedup(docs, drop=False))
    assert [(d.id, d.meta["minhash_cluster"], d.meta.get("src", None)) for d in tagged] == [
        ("b", "a", 1), ("a", "a", 2), ("c", "c", None)]
    assert [d.id for d in near_dedup([Doc(d.id, d.text) for d in docs])] == ["a", "c"]


def test_repeated_ids_raise() -> None:
    with pytest.raises(ValueError, match="'a' occurs more than once"):
        list(near_dedup([Doc("a", "x y z"), Doc("a", "x y z")]))


def test_wordless_texts_are_nobodys_duplicate() -> None:
    assert clusters({"a": "", "b": "", "c": "!!!", "d": "  "}) == []


def test_templated_boilerplate_does_not_make_pages_identical() -> None:
    """Pitfall: a shared header and footer on unrelated pages."""
    rng = np.random.default_rng(5)
    head = "Welcome to our site. We use cookies. Accept all. Manage settings. Sign in. Register now."
    foot = "Privacy policy. Terms of use. Contact us. All rights reserved. Follow us on social media."
    docs = {f"p{i}": f"{head} {' '.join(_vocab_text(rng, 120, 'w'))} {foot}" for i in range(20)}
    assert clusters(docs) == []


def test_excerpt_inside_long_article_is_not_a_near_duplicate() -> None:
    rng = np.random.default_rng(6)
    article = _vocab_text(rng, 1000, "w")
    assert clusters({"full": " ".join(article), "excerpt": " ".join(article[400:500])}) == []


def test_parameters_are_validated_with_names() -> None:
    with pytest.raises(ValueError, match="'threshold' parameter must be a float in \\[0, 1\\]. Got 1.5"):
        clusters({"a": "x"}, threshold=1.5)
    with pytest.raises(ValueError, match="'shingle_size' parameter"):
        clusters({"a": "x"}, shingle_size=0)
    with pytest.raises(ValueError, match="'confirm' parameter"):
        clusters({"a": "x"}, confirm="maybe")
