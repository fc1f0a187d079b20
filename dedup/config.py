"""Algorithm parameters: one frozen, validated dataclass with the defaults of docs/contract.md."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

CONFIRM_MODES = ("estimate", "exact")
SHINGLE_UNITS = ("word", "char")
"""What a shingle is made of: consecutive words, or consecutive characters of the normalised text."""
DEFAULT_SHINGLE_SIZE = {"word": 5, "char": 5}
"""shingle_size when none is given, per shingle unit."""
PARTITION_ROWS = 100_000
"""Consecutive small shards are read together until a partition holds this many rows (or
`dedup.storage.grouping.PARTITION_BYTES`); `--partition-rows` chooses another bound. Fewer, larger
partitions make fewer tasks and fewer shuffle pieces (n x n between n partitions): on two workers of
2 GiB, shards of 50,000 documents, 100,000 rows took 220.0 s at 10,000,000 documents against 294.8 s
at 65,536 (one shard a partition), the workers' peaks 1.5 GiB against 1.0, none spilling; 18.5 s
against 22.1 s at 1,000,000. At 25,000, a shard of 50,000 rows was two partitions written as parts
and joined (docs/performance.md, Partition size)."""
MIN_PARTITIONS = 4
"""An input above one partition's bounds that makes fewer partitions than this is grouped under a bound of
its rows divided by this when that makes more (`dedup.storage.grouping.grouped`): 204,000 documents in
16 shards made three partitions of 100,000 rows on two workers, one of them then idle for a third of
each stage (8.6 s against 8.1 s of wall at four)."""
SPAN_PARTITION_ROWS = 32_768
"""The partition bound of a run with span dedup, unless `--partition-rows` is given: a partition's
window keys take about ten times its text. Measured with `dedup spans` on 1,000,000 documents of
the §7 corpus on 2 workers (row groups of 62,500 rows): a worker's peak 1.4 GiB at 16,384 rows, 1.8
GiB at 32,768 and 2.8 GiB at `PARTITION_ROWS`; the wall 143 s, 127 s and 125 s."""
COMPONENT_MODES = ("auto", "client", "distributed")
CLIENT_COMPONENT_EDGES = 20_000_000
"""`components="auto"` joins the confirmed edges on the client up to this many (16 bytes each there,
about 50 while the union-find runs), on the cluster beyond."""
WHAT_IF_TASK_PAIRS = 500_000
"""The page's what-if table is counted in one task up to this many weighed pairs (21 bytes each there,
about 80 more while counted: under 50 MiB whatever the corpus), by components on the cluster beyond
(`dedup.job.what_if`); the pairs never come to the client."""
MAX_CONTAMINATED = 0.1
"""`--max-contaminated`: a run whose decontamination would remove more than this share of its input
stops before publishing (a dry run only warns): an eval record that quotes boilerplate guts a corpus."""
CONTAMINATION_ACTIONS = ("drop", "tag", "cut")
"""`--contaminated`: what happens to a document sharing a protected n-gram (docs/contract.md §6e): dropped
(the default, §6), kept with the records it shares n-grams with (`contaminated_by`), or the leaked
passages cut out of it."""
CUT_MARGIN = 200
"""The cut: characters removed on each side of a matched n-gram (GPT-3's and lm-eval's Janitor's)."""
CUT_MIN_PIECE = 200
"""The cut: a piece left of this many characters or fewer is dropped too."""
CUT_MAX_WINDOWS = 10
"""The cut: a document with more matching windows (n-gram occurrences) than this is dropped whole."""
WHAT_IF_NGRAM_DOCS = (1, 2, 5, 10, 100, 1000)
"""The page's what-if for `--max-ngram-docs`: the documents each of these caps would leave hit."""
MAX_WITHIN_VALUES = 1000
"""The `--within` values the manifest lists, those with the most documents (ties: the smallest key);
it counts them all."""
MIN_COPIES = 2
"""`--min-copies`: the occurrences in the corpus that make a line's key repeated (line dedup)."""
MIN_LINE_WORDS = 1
"""`--min-line-words`: a line with fewer words is never removed for its own key (line dedup)."""
MAX_LINES_REMOVED = 0.5
"""`--max-lines-removed`: a run whose line dedup would remove more than this share of the surviving
documents' characters stops before publishing (a dry run only warns): a repeated line that is
content, not boilerplate (a hard-wrapped sentence's piece, a heading), guts a corpus."""
CLUSTER_MODES = ("connected", "centred")
"""`--clusters`: connected components of the confirmed graph (the contract's union-find), or
clusters whose every member reaches the threshold with its survivor (docs/contract.md)."""


def check_banding(num_bands: int, rows_per_band: int, num_perm: int) -> None:
    """Raise unless num_bands and rows_per_band are >= 1 and num_bands * rows_per_band <= num_perm."""
    for name, value in (("num_bands", num_bands), ("rows_per_band", rows_per_band), ("num_perm", num_perm)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"The {name!r} parameter must be an integer >= 1. Got {value!r} instead.")
    if num_bands * rows_per_band > num_perm:
        raise ValueError(
            f"num_bands * rows_per_band must be <= num_perm. Got {num_bands} * {rows_per_band} = "
            f"{num_bands * rows_per_band} > {num_perm}: lower one of them or raise num_perm."
        )


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not ok:
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"The {name!r} parameter must be an integer {bound}. Got {value!r} instead.")


@dataclass(frozen=True, kw_only=True)
class Params:
    """Near-dedup and decontamination parameters (defaults of docs/contract.md).

    num_perm: permutations per signature; num_bands x rows_per_band: LSH banding
    (num_bands * rows_per_band <= num_perm); threshold: Jaccard a confirmed pair must reach;
    shingle_size: words (or characters) per shingle; shingle_unit: "word" or "char" (runs of
    characters of the normalised text, for scripts written without spaces); seed: PCG32 seed of
    the permutations; confirm: "estimate"
    (signature agreement) or "exact" (exact shingle-set Jaccard); ngram_size: words per
    decontamination n-gram; max_bucket: distinct texts in one LSH bucket above which its texts
    are joined by star edges instead of all pairs (counted in the manifest).
    """

    num_perm: int = 128
    num_bands: int = 16
    rows_per_band: int = 8
    threshold: float = 0.8
    shingle_size: int = DEFAULT_SHINGLE_SIZE["word"]
    shingle_unit: str = "word"
    seed: int = 0
    confirm: str = "estimate"
    ngram_size: int = 13
    max_bucket: int = 256

    def __post_init__(self) -> None:
        _check_int("num_perm", self.num_perm, 1, 65536)
        _check_int("num_bands", self.num_bands, 1, 255)
        _check_int("rows_per_band", self.rows_per_band, 1)
        _check_int("shingle_size", self.shingle_size, 1)
        _check_int("ngram_size", self.ngram_size, 1)
        _check_int("seed", self.seed, 0, 2**64 - 1)
        _check_int("max_bucket", self.max_bucket, 2)
        check_banding(self.num_bands, self.rows_per_band, self.num_perm)
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 1.0:
            raise ValueError(f"The 'threshold' parameter must be a float in [0, 1]. Got {t!r} instead.")
        if self.shingle_unit not in SHINGLE_UNITS:
            raise ValueError(f"The 'shingle_unit' parameter must be one of {SHINGLE_UNITS}. "
                             f"Got {self.shingle_unit!r} instead.")
        if self.confirm not in CONFIRM_MODES:
            raise ValueError(f"The 'confirm' parameter must be one of {CONFIRM_MODES}. Got {self.confirm!r} instead.")

    @classmethod
    def of(cls, **given: Any) -> Params:
        """Params from the values given, None meaning the default; the shingle size's default is the
        shingle unit's (`DEFAULT_SHINGLE_SIZE`)."""
        fields = {k: v for k, v in given.items() if v is not None}
        if "shingle_size" not in fields and "shingle_unit" in fields:
            fields["shingle_size"] = DEFAULT_SHINGLE_SIZE.get(fields["shingle_unit"], DEFAULT_SHINGLE_SIZE["word"])
        return cls(**fields)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """A short stable hash of every parameter, for manifests and intermediate names."""
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return hashlib.blake2b(blob, digest_size=8).hexdigest()
