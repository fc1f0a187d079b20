"""The synthetic corpus of contract §7: made-up articles with planted near duplicates.

Deterministic for a seed; every document carries its `family` (the id of the original it was
copied from), so recall and precision can be scored against exact all-pairs Jaccard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SYLLABLES = ("ka to ri me su na lo ve di pa zo hu be fi gar len mor tis wen dal").split()
EDITS = ("replace3", "replace12", "drop_tail", "banner", "shout")
COPY_WEIGHTS = (50, 25, 15, 10)
BANNER_HEAD = "We use cookies to give you the best experience. Accept all cookies or manage your settings."
BANNER_FOOT = "Subscribe to our newsletter. Privacy policy. Terms of use. All rights reserved."


@dataclass(frozen=True)
class CorpusDoc:
    id: str
    text: str
    family: str


def vocabulary(rng: np.random.Generator, size: int = 3000) -> list[str]:
    """`size` distinct made-up words of 1 to 3 syllables."""
    seen: dict[str, None] = {}
    while len(seen) < size:
        k = int(rng.integers(1, 4))
        seen.setdefault("".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), k)), None)
    return list(seen)


class _Writer:
    def __init__(self, rng: np.random.Generator, vocab: list[str]) -> None:
        self.rng = rng
        self.vocab = vocab
        ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
        self.cdf = np.cumsum(1.0 / ranks)
        self.cdf /= self.cdf[-1]

    def draw(self, n: int) -> list[str]:
        idx = np.searchsorted(self.cdf, self.rng.random(n), side="right")
        return [self.vocab[min(i, len(self.vocab) - 1)] for i in idx]

    def article(self, sentences: int = 14) -> list[list[str]]:
        return [self.draw(int(self.rng.integers(9, 17))) for _ in range(sentences)]

    def replace(self, article: list[list[str]], fraction: float) -> list[list[str]]:
        flat = [w for s in article for w in s]
        n = max(1, round(fraction * len(flat)))
        positions = self.rng.choice(len(flat), size=n, replace=False)
        for pos, word in zip(positions, self.draw(n)):
            flat[pos] = word
        out, i = [], 0
        for s in article:
            out.append(flat[i : i + len(s)])
            i += len(s)
        return out


def render(article: list[list[str]]) -> str:
    return " ".join(" ".join(s).capitalize() + "." for s in article)


def generate(num_originals: int = 650, seed: int = 0) -> list[CorpusDoc]:
    """About 1.85 documents per original, in a shuffled order with ids d0000000, d0000001, ..."""
    rng = np.random.default_rng(seed)
    writer = _Writer(rng, vocabulary(rng))
    weights = np.array(COPY_WEIGHTS, dtype=np.float64) / sum(COPY_WEIGHTS)
    texts: list[str] = []
    family: list[int] = []
    for _ in range(num_originals):
        article = writer.article()
        origin = len(texts)
        texts.append(render(article))
        family.append(origin)
        for _ in range(int(rng.choice(4, p=weights))):
            edits = rng.choice(len(EDITS), size=int(rng.integers(1, 3)), replace=False)
            copy = [list(s) for s in article]
            header = False
            shout = False
            for e in sorted(EDITS[i] for i in edits):
                if e == "replace3":
                    copy = writer.replace(copy, 0.03)
                elif e == "replace12":
                    copy = writer.replace(copy, 0.12)
                elif e == "drop_tail":
                    copy = copy[:-2]
                elif e == "banner":
                    header = True
                else:
                    shout = True
            text = render(copy)
            if header:
                text = f"{BANNER_HEAD}\n\n{text}\n\n{BANNER_FOOT}"
            if shout:
                text = text.upper().replace(" ", "  ")
            texts.append(text)
            family.append(origin)
    # Shuffle documents so copies are not adjacent; family is the original's new id.
    perm = rng.permutation(len(texts))
    new_id = np.empty(len(texts), dtype=np.int64)
    new_id[perm] = np.arange(len(texts))
    docs = [CorpusDoc(f"d{new_id[i]:07d}", texts[i], f"d{new_id[family[i]]:07d}") for i in range(len(texts))]
    docs.sort(key=lambda d: d.id)
    return docs


def protected_example(docs: list[CorpusDoc], count: int = 3) -> list[dict[str, str]]:
    """Eval-style records that quote a 20-word passage from `count` documents (for demos and tests)."""
    out = []
    step = max(1, len(docs) // (count + 1))
    for k in range(count):
        words = docs[(k + 1) * step].text.split()
        out.append({"id": f"eval-{k}", "question": "Continue: " + " ".join(words[30:50]), "answer": "..."})
    return out
