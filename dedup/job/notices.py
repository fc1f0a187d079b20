"""What a run tells its user beside its counts: the banding and how often it finds a pair at the
threshold, a corpus of unspaced scripts under word shingles, and any warning kept for the manifest."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from dedup.config import Params
from dedup.job.counts import Report
from dedup.storage import reads
from dedup.storage import shards as shards_mod

log = logging.getLogger("dedup")


UNSPACED_WARN_SHARE = 0.1
"""Under word shingles, a warning when at least this share of a sample of texts (`reads.sample_texts`)
is of scripts written without spaces (`dedup.core.text.unspaced`): a mixed corpus too."""


def warn(report: Report, text: str | None) -> None:
    """Log a warning (if any) and keep it for the manifest's `warnings` and the page (`Report.warnings`):
    the one way a warning is said."""
    if text:
        log.warning("%s", text)
        report.warnings.append(text)


def banding(params: Params) -> dict[str, Any]:
    """The banding and how often it makes a pair at the threshold a candidate, beside the banding
    `dedup tune` recommends for that threshold (`recall_banding`; what `dedup run` uses unless
    --num-bands and --rows-per-band are given): the manifest's `banding`."""
    from dedup.core.lsh import probability, recall_banding

    t = params.threshold
    out: dict[str, Any] = {"num_bands": params.num_bands, "rows_per_band": params.rows_per_band,
                           "candidate_at_threshold": round(float(probability(t, params.num_bands, params.rows_per_band)), 4)}
    if 0.0 < t <= 1.0:
        b, r = recall_banding(t, params.num_perm)
        out["recommended"] = {"num_bands": b, "rows_per_band": r,
                              "candidate_at_threshold": round(float(probability(t, b, r)), 4)}
    return out


def banding_warning(params: Params) -> str | None:
    """The warning for a banding that makes a pair at the threshold a candidate less often than
    `dedup tune`'s rule asks (`RECALL_AT_THRESHOLD`): near duplicates close to it are missed."""
    from dedup.core.lsh import RECALL_AT_THRESHOLD

    b = banding(params)
    best = b.get("recommended")
    if best is None or b["candidate_at_threshold"] >= RECALL_AT_THRESHOLD:
        return None
    t = params.threshold
    return (f"The banding {b['num_bands']} x {b['rows_per_band']} makes a pair at the threshold {t} a candidate only "
            f"{b['candidate_at_threshold']:.0%} of the time, so near duplicates close to it are missed; "
            f"{best['num_bands']} x {best['rows_per_band']} (`dedup tune --threshold {t}`) finds "
            f"{best['candidate_at_threshold']:.0%}: leave out --num-bands and --rows-per-band to use it.")


def unspaced_warning(hits: int, sampled: int) -> str | None:
    """The warning for a corpus of which a meaningful share is Chinese, Japanese, Thai or the like,
    under word shingles (`hits` of `sampled` texts)."""
    if not sampled or hits < UNSPACED_WARN_SHARE * sampled:
        return None
    return (f"{hits} of {sampled} sampled texts ({100 * hits / sampled:.0f}%) are mostly in scripts written without "
            "spaces (Chinese, Japanese, Thai, ...): word shingles see each run of them as one word and miss their near "
            "duplicates; use --shingle-unit char (or run those texts apart from the rest with it)")


def log_banding(params: Params, report: Report) -> None:
    """One line on the banding: the one the threshold's rule gives, or a warning for one given that
    misses pairs at the threshold (`banding_warning`, also in the manifest and on the page)."""
    if warning := banding_warning(params):
        warn(report, warning)
        return
    b = banding(params)
    best = b.get("recommended") or {}
    rule = (best.get("num_bands"), best.get("rows_per_band")) == (b["num_bands"], b["rows_per_band"])
    log.info("banding %d x %d: a pair at the threshold %s is a candidate %.1f%% of the time%s", b["num_bands"],
             b["rows_per_band"], params.threshold, 100 * b["candidate_at_threshold"],
             " (the banding `dedup tune` recommends for it)" if rule else "")


def warn_unspaced(shards: Sequence[shards_mod.Shard], text_column: str, report: Report) -> None:
    """Sample the corpus; one line when a meaningful share of it is unspaced text under word shingles
    (also in the manifest's warnings and on the page, from `report.unspaced`)."""
    from dedup.core.text import unspaced

    sample = reads.sample_texts(shards, text_column)
    report.unspaced = [sum(map(unspaced, sample)), len(sample)]
    warn(report, unspaced_warning(*report.unspaced))
