"""The versions of dedup and the libraries its results depend on: part of a run's fingerprint
(`dedup.job.plan.fingerprint`) and of its manifest."""

from __future__ import annotations


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("dedup", "numpy", "numba", "pandas", "pyarrow", "dask", "distributed"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "unknown"
    return out
