"""The tree is the architecture: each layer imports only the layers below it, only the job and
its edges touch Dask, and the public API stays where users import it from."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dedup

ROOT = Path(__file__).resolve().parent.parent / "dedup"

BELOW = {
    "core": {"core"},
    "partition": {"core", "partition"},
    "storage": {"core", "partition", "storage"},
    "report": {"core", "partition", "report"},
    "job": {"core", "partition", "storage", "report", "job"},
}
"""What each layer may import from dedup (besides `dedup.config`)."""
EXCEPTIONS: set[tuple[str, str]] = set()
"""(module, what it may import) that break the rule: none."""
DASK_FREE = ("core", "partition", "storage", "report")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("dedup.") and node.module.count(".") == 1:  # from dedup.storage import evalfiles
                found += [f"{node.module}.{a.name}" for a in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return found


@pytest.mark.parametrize("layer", sorted(BELOW))
def test_a_layer_imports_only_the_layers_below_it(layer: str) -> None:
    bad = []
    for path in sorted((ROOT / layer).glob("*.py")):
        rel = str(path.relative_to(ROOT))
        for module in _imports(path):
            parts = module.split(".")
            if parts[0] != "dedup" or len(parts) < 2 or parts[1] == "config":
                continue
            target = ".".join(parts[1:3])
            if parts[1] not in BELOW[layer] and (rel, target) not in EXCEPTIONS:
                bad.append(f"{rel} imports {module}")
    assert not bad, bad


@pytest.mark.parametrize("layer", DASK_FREE)
def test_only_the_job_and_its_edges_import_dask(layer: str) -> None:
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in sorted((ROOT / layer).glob("*.py"))
           for m in _imports(p) if m.split(".")[0] in ("dask", "distributed")]
    assert not bad, bad


def test_the_public_api_resolves() -> None:
    for name in dedup.__all__:
        assert getattr(dedup, name) is not None, name
    from dedup import pipeline

    assert callable(pipeline.run) and callable(pipeline.near_dedup_frame) and callable(pipeline.decontaminate_frame)
    assert dedup.minhash is __import__("dedup.core.minhash", fromlist=["minhash"]).minhash


def _module_graph() -> dict[str, set[str]]:
    """Each dedup module and the dedup modules it imports (at its top, inside functions or for type checking)."""
    modules = {".".join(p.relative_to(ROOT.parent).with_suffix("").parts): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for m in _imports(path):
            while m and m not in modules:  # `from dedup.job.plan import Report` names a module; a package's
                m = m.rpartition(".")[0]     # attribute falls back to the package
            if m and m != name and not modules[m].name == "__init__.py":
                found.add(m)
        graph[name] = found
    return graph


def test_no_module_imports_itself_through_others() -> None:
    """No import circle anywhere: each module can be understood (and tested) from the ones it imports."""
    graph = _module_graph()
    circles = []
    state: dict[str, int] = {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    assert not circles, circles


MAX_LINES = 500
MAX_PARAMETERS = 12
PUBLIC_WITH_OPTIONS = {("job/pipeline.py", "run")}
"""Public APIs whose keyword options mirror the CLI's flags (`dedup.job.plan.Options`)."""


def test_every_module_is_small() -> None:
    long = {str(p.relative_to(ROOT)): n for p in sorted(ROOT.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_internal_function_takes_more_than_twelve_parameters() -> None:
    wide = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or (rel, node.name) in PUBLIC_WITH_OPTIONS:
                continue
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [x.arg for x in (a.vararg, a.kwarg) if x]
            count = len([n for n in names if n not in ("self", "cls")])
            if count > MAX_PARAMETERS:
                wide.append(f"{rel}:{node.lineno} {node.name} takes {count}")
    assert not wide, wide


def _private(module: str) -> bool:
    """A module path of dask or distributed that is not their public API: a part of it private (`_x`),
    or dask's expression internals."""
    parts = module.split(".")
    return parts[0] in ("dask", "distributed") and (any(p.startswith("_") for p in parts) or "dask_expr" in parts)


def test_dasks_internal_names_are_taken_in_one_module() -> None:
    """`dedup.job.dask_internals` lists every name taken from dask beyond its public API, with why; no
    other module imports one, so a dask release that moves one fails at that module, by name."""
    taking = {str(p.relative_to(ROOT)): sorted({m for m in _imports(p) if _private(m)}) for p in ROOT.rglob("*.py")}
    taking = {name: found for name, found in taking.items() if found}
    assert set(taking) == {"job/dask_internals.py"}, taking
    from dedup.job import dask_internals

    documented = dask_internals.__doc__ or ""
    assert all(f"`{name}`" in documented for name in dask_internals.__all__)  # each name with why
