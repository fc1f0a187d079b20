"""The code base stays clean: ruff and mypy, as configured in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff() -> None:
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "dedup", "tests", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy() -> None:
    res = subprocess.run([sys.executable, "-m", "mypy", "dedup"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


TASK_CALLS = {"map_partitions", "route_by", "route_small", "from_map", "from_delayed", "delayed", "submit", "partial"}


def test_task_functions_are_module_level() -> None:
    """Tasks run module-level functions: a lambda or a nested function given to Dask is pickled by
    value, once per task, by the client and again by the scheduler (`dedup.job.routing`)."""
    import ast

    bad = []
    for path in sorted((ROOT / "dedup").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        nested = {n.name for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f) if n is not f and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if name not in TASK_CALLS:
                continue
            for arg in [*call.args, *(k.value for k in call.keywords if k.arg != "name_function")]:
                if isinstance(arg, ast.Lambda) or (isinstance(arg, ast.Name) and arg.id in nested):
                    bad.append(f"{path.name}:{arg.lineno} passes {ast.unparse(arg)[:40]!r} to {name}")
    assert not bad, bad
