"""cluster.yaml, validated offline against the CRD schema shipped in the dask-kubernetes wheel."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _crd_schema(kind: str) -> dict[str, Any]:
    import dask_kubernetes

    crds = Path(dask_kubernetes.__file__).parent / "operator/deployment/helm/dask-kubernetes-operator/crds"
    crd = yaml.safe_load((crds / f"{kind.lower()}.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def _prune_none(obj: Any) -> Any:
    """Drop null values, as the API server does."""
    if isinstance(obj, dict):
        return {k: _prune_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_prune_none(v) for v in obj]
    return obj


def unknown_keys(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Keys the schema does not define (the CRD has no additionalProperties: false, so typos pass)."""
    out: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in obj.items():
            if props is not None and k in props:
                out += unknown_keys(v, props[k], f"{path}.{k}")
            elif isinstance(extra, dict):
                out += unknown_keys(v, extra, f"{path}.{k}")
            elif props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                out.append(f"{path}.{k}")
    elif isinstance(obj, list) and "items" in schema:
        for i, v in enumerate(obj):
            out += unknown_keys(v, schema["items"], f"{path}[{i}]")
    return out


@pytest.fixture(scope="module")
def cluster() -> dict[str, Any]:
    return _prune_none(yaml.safe_load((ROOT / "cluster.yaml").read_text()))


def test_cluster_yaml_matches_the_crd(cluster: dict[str, Any]) -> None:
    assert cluster["apiVersion"] == "kubernetes.dask.org/v1" and cluster["kind"] == "DaskCluster"
    schema = _crd_schema("DaskCluster")
    body = {k: v for k, v in cluster.items() if k not in ("apiVersion", "kind", "metadata")}
    jsonschema.Draft4Validator(schema).validate(body)
    assert unknown_keys(body, schema) == []


def test_unknown_key_walker_catches_typos(cluster: dict[str, Any]) -> None:
    schema = _crd_schema("DaskCluster")
    body = copy.deepcopy({k: v for k, v in cluster.items() if k not in ("apiVersion", "kind", "metadata")})
    body["spec"]["worker"]["replicsa"] = 2
    body["spec"]["worker"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    jsonschema.Draft4Validator(schema).validate(body)  # the schema alone lets both typos through
    assert sorted(unknown_keys(body, schema)) == [".spec.worker.replicsa", ".spec.worker.spec.containers[0].imagePullPolcy"]


def _gib(quantity: str) -> float:
    units = {"Gi": 1.0, "GiB": 1.0, "Mi": 1 / 1024, "MiB": 1 / 1024}
    for unit, factor in sorted(units.items(), key=lambda kv: -len(kv[0])):
        if quantity.endswith(unit):
            return float(quantity[: -len(unit)]) * factor
    raise ValueError(quantity)


def test_workers_are_configured_for_the_pipeline(cluster: dict[str, Any]) -> None:
    from dask_kubernetes.operator.validation import validate_cluster_name

    validate_cluster_name(cluster["metadata"]["name"])
    worker_pod = cluster["spec"]["worker"]["spec"]
    [worker] = [c for c in worker_pod["containers"] if c["name"] == "worker"]
    args = worker["args"]
    assert args[:2] == ["dask", "worker"] and "$(DASK_WORKER_NAME)" in args and "--nthreads" in args
    assert args[args.index("--preload") + 1] == "dedup.runtime"  # kernels loaded and Arrow memory set at start
    from dedup import runtime

    assert callable(runtime.dask_setup)
    limit = _gib(worker["resources"]["limits"]["memory"])
    assert _gib(args[args.index("--memory-limit") + 1]) < limit
    assert worker["resources"]["requests"] == worker["resources"]["limits"]
    local_dir = args[args.index("--local-directory") + 1]
    [mount] = [m for m in worker["volumeMounts"] if m["mountPath"] == local_dir]
    [volume] = [v for v in worker_pod["volumes"] if v["name"] == mount["name"]]
    assert "emptyDir" in volume
    [sched] = cluster["spec"]["scheduler"]["spec"]["containers"]
    assert sched["args"][:2] == ["dask", "scheduler"]
    assert {p["name"]: p["containerPort"] for p in sched["ports"]} == {"tcp-comm": 8786, "http-dashboard": 8787}
    assert sched["readinessProbe"]["httpGet"]["path"] == "/health" == sched["livenessProbe"]["httpGet"]["path"]
    assert cluster["spec"]["scheduler"]["service"]["selector"]["dask.org/component"] == "scheduler"
    # the object store's credentials reach the workers from a Secret (docs/operations.md)
    assert {"secretRef": {"name": "dedup-object-store", "optional": True}} in worker["envFrom"]


def test_workers_get_the_malloc_settings_of_local_workers(cluster: dict[str, Any]) -> None:
    import dask
    import distributed  # noqa: F401  (its defaults: the pre-spawn environment the variable is merged into)

    from dedup.runtime import MALLOC_ENVIRON

    [worker] = [c for c in cluster["spec"]["worker"]["spec"]["containers"] if c["name"] == "worker"]
    env = {e["name"]: e["value"] for e in worker["env"] if e["name"].startswith("DASK_")}
    merged = dask.config.merge(dask.config.config, dask.config.collect_env(env))  # as Dask reads it in the pod
    environ = merged["distributed"]["nanny"]["pre-spawn-environ"]
    assert {k: environ[k] for k in MALLOC_ENVIRON} == MALLOC_ENVIRON
    assert environ["OMP_NUM_THREADS"] == 1  # Dask's own settings stay


def test_the_commands_for_a_cluster_by_hand_are_what_dedup_gives_its_own_workers() -> None:
    """docs/operations.md's scheduler and worker commands parse as Dask's own CLI parses them, preload
    dedup.runtime, and give the workers `MALLOC_ENVIRON`, in bytes."""
    import ast
    import re
    import shlex

    from distributed.cli.dask_scheduler import main as scheduler_cli
    from distributed.cli.dask_worker import main as worker_cli

    from dedup.runtime import MALLOC_ENVIRON

    doc = (ROOT / "docs" / "operations.md").read_text()
    section = doc.split("## A cluster of your own, by hand", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    lines = [shlex.split(line) for line in block.strip().splitlines()]
    scheduler = next(words for words in lines if words[:2] == ["dask", "scheduler"])
    assert "dedup.runtime" in scheduler_cli.make_context("dask scheduler", scheduler[2:]).params["preload"]
    worker = next(words for words in lines if "worker" in words)
    at = worker.index("dask")
    env = dict(w.split("=", 1) for w in worker[:at])
    assert ast.literal_eval(env["DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON"]) == MALLOC_ENVIRON
    parsed = worker_cli.make_context("dask worker", worker[at + 2:]).params
    assert "dedup.runtime" in parsed["preload"] and parsed["scheduler_file"] == scheduler[scheduler.index("--scheduler-file") + 1]
    assert any(words[:2] == ["dedup", "run"] and "--scheduler-file" in words for words in lines)
