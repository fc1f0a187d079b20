"""What a run's results depend on (`fingerprint`): a later run with the same one resumes from its stages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dedup.config import Params
from dedup.storage import shards as shards_mod

if TYPE_CHECKING:
    from dedup.core.decontam import ProtectedNgrams
    from dedup.storage.index import IndexPart


def fingerprint(shards: Sequence[shards_mod.Shard], params: Params, options: dict[str, Any],
                protected: ProtectedNgrams | None, against: Sequence[IndexPart]) -> dict[str, Any]:
    """What a run's results depend on: dedup's version and code, the parameters and options, the protected
    text (`ProtectedNgrams.digest`), the earlier indexes, and each input file's version (its file
    system's identity of it, `stamps.file_versions`, and its footer's hash). Two runs with equal
    fingerprints compute the same stage results."""
    from dedup.job.versions import code_digest, versions
    from dedup.storage.stamps import file_versions

    return {"version": versions(), "code": code_digest(), "parameters": params.as_dict(), "options": options,
            "protected": protected.digest() if protected is not None else None,
            "against": [p.uid for p in against],
            "input": {s.name: {**v, "footer": s.footer} for s, v in zip(shards, file_versions([s.path for s in shards]))}}
