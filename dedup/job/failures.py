"""What a failure of the cluster means for the user, in words that say what to look at."""

from __future__ import annotations

from collections.abc import Sequence


def explain_killed_worker(exc: BaseException, groups: Sequence[Sequence[str]], shared_mb: float = 0.0) -> None:
    """Turn a bare KilledWorker into a message that says what to look at.

    groups: the input files of each partition. Only a task that reads or featurises a partition
    names its files; a worker that dies in a shuffle, the write or on shared data is a memory
    problem of the cluster, not of an input file.
    """
    try:
        from distributed.scheduler import KilledWorker
    except ImportError:
        return
    if not isinstance(exc, KilledWorker):
        return
    key = exc.task
    name = str(key[0]) if isinstance(key, tuple) and key else str(key)
    part = key[1] if isinstance(key, tuple) and len(key) > 1 and isinstance(key[1], int) else None
    reads = any(tag in name for tag in ("read-shards", "features", "read_parquet"))
    shared = f" plus the shared protected n-grams ({shared_mb:.0f} MB)" if shared_mb >= 1 else ""
    if reads and part is not None and part < len(groups):
        files = list(groups[part])
        where = f"input file {files[0]!r} (partition {part})" if len(files) == 1 else \
            f"input partition {part} (files {files[:3]}{'...' if len(files) > 3 else ''})"
        raise RuntimeError(
            f"A worker died again and again while reading {where}: a document there may exhaust worker memory "
            f"or crash a library, or the workers' memory limit is below their baseline{shared}. Inspect that file, "
            "or give workers more memory. Nothing was written.") from exc
    raise RuntimeError(
        f"A worker died again and again while running {name!r}: the workers' memory limit is likely below what the "
        f"task needs (its partition{shared}). Give workers more memory or use more, smaller partitions. "
        "Nothing was written.") from exc


