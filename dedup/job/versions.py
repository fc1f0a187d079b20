"""The versions of dedup and the libraries its results depend on, and a digest of dedup's own code:
part of a run's fingerprint (`dedup.job.fingerprint.fingerprint`) and of its manifest."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
"""The `dedup` package directory whose sources `code_digest` reads."""


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("dedup", "numpy", "numba", "pandas", "pyarrow", "dask", "distributed"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "unknown"
    return out


@functools.cache
def code_digest(package: Path = PACKAGE) -> str:
    """SHA-256 of every source file of the package (`.py` and the page's templates), by relative path:
    the package version stays 0.1.0 across changes of code, so a resumed run compares this instead and
    never reuses stages an older code computed."""
    h = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.suffix in (".py", ".j2") and p.is_file()):
        h.update(str(path.relative_to(package)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()
