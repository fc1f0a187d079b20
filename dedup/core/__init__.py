"""The rule itself, exact to docs/contract.md: words and shingles, hashes, MinHash signatures, LSH
bands, union-find and the 13-gram decontamination rule, in numpy and numba (`_kernels`). Nothing
here knows about Dask, partitions or files.

`_kernels` is imported lazily: numba loads on the first read of a kernel, not on import. A client
that only plans and submits the job (the workers run the kernels) then starts without numba's half
second of imports."""

import importlib.util
import sys
import threading
import types
from typing import Any

_LOADING = threading.Lock()


class _Lazy(types.ModuleType):
    """Stands for a module until one of its attributes is first read, then loads it, once, whichever
    thread reads first; the others wait for it. The standard library's `importlib.util.LazyLoader`
    did this before, but before Python 3.12 it is not safe under threads: a thread that read the
    module while another was still running it got an AttributeError (four threads reading
    `_kernels` at once failed every time; `--threads` and multi-threaded workers read it so)."""

    def __getattr__(self, attr: str) -> Any:
        with _LOADING:
            real = sys.modules[self.__name__]
            if real is self:
                real = _load(self)
        return getattr(real, attr)


def _load(proxy: _Lazy) -> types.ModuleType:
    """The module `proxy` stands for, run; then in its place (in `sys.modules`, as this package's
    attribute, and every name of it copied into `proxy` for the modules that hold the proxy)."""
    assert proxy.__spec__ is not None and proxy.__spec__.loader is not None
    module = importlib.util.module_from_spec(proxy.__spec__)
    sys.modules[proxy.__name__] = module
    try:
        proxy.__spec__.loader.exec_module(module)
    except BaseException:
        sys.modules[proxy.__name__] = proxy
        raise
    setattr(sys.modules[__name__], proxy.__name__.rsplit(".", 1)[1], module)
    proxy.__dict__.update(module.__dict__)
    return module


def _lazy(name: str) -> None:
    """Register module `name` to load on its first attribute read (`_Lazy`), as this package's
    attribute too (else `from dedup.core import _kernels` would import it)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:  # pragma: no cover - a broken install
        return
    proxy = _Lazy(name)
    proxy.__spec__ = spec
    sys.modules[name] = proxy
    setattr(sys.modules[__name__], name.rsplit(".", 1)[1], proxy)


_lazy(f"{__name__}._kernels")
