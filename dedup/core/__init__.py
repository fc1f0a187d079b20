"""The rule itself, exact to docs/contract.md: words and shingles, hashes, MinHash signatures, LSH
bands, union-find and the 13-gram decontamination rule, in numpy and numba (`_kernels`). Nothing
here knows about Dask, partitions or files.

`_kernels` is imported lazily (the standard library's `importlib.util.LazyLoader`): numba loads on
the first call of a kernel, not on import. A client that only plans and submits the job (the
workers run the kernels) then starts without numba's half second of imports."""

import importlib.util
import sys


def _lazy(name: str) -> None:
    """Register module `name` to load on its first attribute access, as this package's attribute
    too (else `from dedup.core import _kernels` looks it up in `sys.modules`, which loads it)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:  # pragma: no cover - a broken install
        return
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    setattr(sys.modules[__name__], name.rsplit(".", 1)[1], module)


_lazy(f"{__name__}._kernels")
