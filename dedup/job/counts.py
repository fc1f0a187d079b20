"""What a run found, for the manifest and the page: its counts, which add up, its warnings, its
seconds per stage (`Report`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Report:
    """What a run found, for the manifest; counts add up."""

    input_rows: int = 0
    contaminated: int = 0
    unspaced: list[int] = field(default_factory=lambda: [0, 0])
    """Of the texts sampled before the run (word shingles only): those in scripts written without spaces, and all."""
    contaminated_by_file: dict[str, int] = field(default_factory=dict)
    contaminated_by_record: list[dict[str, Any]] = field(default_factory=list)
    contaminated_records: int = 0
    contamination_hit: int = 0
    """Documents sharing a protected n-gram (the rule's, common ones ignored), whatever the action:
    `contaminated` of them removed (all with drop, none with tag, those the cut drops with cut)."""
    common_ngrams: list[dict[str, Any]] = field(default_factory=list)
    """With `--max-ngram-docs K`: the protected n-grams found in more than K documents, ignored, with
    their counts (the most common first)."""
    common_ngram_count: int = 0
    within: list[dict[str, Any]] = field(default_factory=list)
    """With `--within`: per value, its documents and near duplicates, for the `MAX_WITHIN_VALUES` with the
    most documents (the most first)."""
    within_count: int = 0
    """With `--within`: how many values the input holds."""
    eval_what_if: list[dict[str, Any]] = field(default_factory=list)
    """The documents still hit with each `--max-ngram-docs` cap (`WHAT_IF_NGRAM_DOCS`)."""
    near_duplicates: int = 0
    near_duplicates_kept_whole: int = 0
    """Of `near_duplicates`, those kept: in clusters below `--min-cluster-size`."""
    min_size_what_if: list[dict[str, int]] = field(default_factory=list)
    """The near duplicates each `--min-cluster-size` of `MIN_SIZE_WHAT_IF` would remove."""
    clusters: int = 0
    largest_cluster: int = 0
    candidate_pairs: int = 0
    confirmed_pairs: int = 0
    same_text_pairs: int = 0
    approximated_buckets: int = 0
    largest_approximated_bucket: int = 0
    components: str = ""
    component_rounds: int = 0
    similarity_histogram: list[int] = field(default_factory=list)
    clusters_mode: str = "connected"
    survivor_rounds: int = 0
    survivor_scored: int = 0
    """This run's clustered documents scored against their connected component's survivor."""
    below_survivor: int = 0
    """This run's clustered documents below the threshold with their connected component's survivor."""
    survivor_histogram: list[int] = field(default_factory=list)
    """This run's clustered documents' similarity to their survivor (by the confirm rule), 50 bins of [0, 1]."""
    skipped_existing: int = 0
    indexed_documents: int = 0
    near_duplicates_of_indexed: int = 0
    near_duplicates_by_output: list[int] = field(default_factory=list)
    """`near_duplicates_of_indexed` by earlier output, in the order of the run's indexes (`Plan.against`)."""
    index_bytes: int = 0
    index_documents: int = 0
    index_near_duplicates: int = 0
    bucket_partitions: int = 0
    id_partitions: int = 0
    output_bytes: int = 0
    """The bytes of the shards written (what a dataset reader of OUTPUT reads; no index, no report)."""
    seconds: dict[str, float] = field(default_factory=dict)
    what_if: list[dict[str, Any]] = field(default_factory=list)
    """Documents that other thresholds would remove (`dedup.partition.what_if`), with the banding's
    chance of making a pair at each a candidate; empty when not computed."""
    emptied_by_lines: int = 0
    """Documents line dedup left without a word (dropped, `empty_after_lines`)."""
    contaminated_after_lines: int = 0
    """Documents whose new text, after line dedup, holds a protected n-gram (dropped,
    `contaminated_after_lines`)."""
    emptied_by_spans: int = 0
    """Documents span dedup left without a word (dropped, `empty_after_spans`)."""
    contaminated_after_spans: int = 0
    """Documents whose text, cut by span dedup, holds a protected n-gram (`contaminated_after_spans`)."""
    spans: dict[str, Any] = field(default_factory=dict)
    """With span dedup: spans, tokens and characters cut, documents changed and dropped, the share
    histogram and the most repeated spans (`dedup.job.spans`)."""
    lines: dict[str, Any] = field(default_factory=dict)
    """With line dedup: lines and characters removed, documents changed and left without a word, and
    the histogram of the share of a changed document's characters removed (`dedup.job.lines`)."""
    top_lines: list[dict[str, Any]] = field(default_factory=list)
    """With line dedup: the most repeated lines, their counts and first occurrences (and texts)."""
    warnings: list[str] = field(default_factory=list)
    """Every warning of the run, in the order found, each logged as it is found (`notices.warn`): the
    manifest's `warnings` and the page's read them here."""
