"""Render the Helm chart with the pinned helm, and read what it rendered: shared by the chart's test files.

Offline and quick. The pinned helm (built by ``make helm``, see ``devtools/helmtool.py``) lints and
renders ``helm/ureplicator`` with every ``ci/*-values.yaml`` (``minimal`` is the defaults plus the
admin token the chart requires). The tests, by subject:

- ``test_helm_schemas.py``: helm itself, lint, the Kubernetes JSON schemas in strict mode for the
  oldest and newest Kubernetes the chart supports, and the ConfigMap's ``config.yaml`` loaded with
  ``common.config.load`` in the environment each pod gets;
- ``test_helm_runtime.py``: probes, ports, Services and ServiceMonitors against what the processes
  serve; shutdown, security contexts, selectors, autoscaling, the network policy;
- ``test_helm_verifier.py``: the verifier CronJob's arguments parse with the verifier's own parser;
  the warm verifier;
- ``test_helm_values.py``: bad values fail with the schema's or the chart's message; NOTES.txt;
- ``test_image.py``: no container engine runs here, so the Dockerfile is checked against the build
  context;
- ``test_helm_routes.py``: today's renders against the baseline of issue 27, stable worker ids,
  preflight, REST TLS, worker pools and routes.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "ureplicator"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
MINIMAL_VALUES = CHART / "ci" / "minimal-values.yaml"
VALUES_FILES: list[Path | None] = [*CI_VALUES]
VALUES_IDS = [p.name.removesuffix("-values.yaml") for p in CI_VALUES]

# Chart.yaml's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_MIN = "1.27.0"
KUBE_MAX = kubernetes_validate.latest_version()
# Custom resources have no schema in the Kubernetes OpenAPI; checked by their own tests
# (test_helm_runtime.py, test_operators_kit.py).
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}

RELEASE = "mirror"
# Workers are a StatefulSet by default (worker.kind): pod names are stable worker ids.
WORKER_KIND = "StatefulSet"
NAMESPACE = "replication"
CONFIG_PATH = "/etc/ureplicator/config.yaml"
STANDARD_LABELS = (
    "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by", "helm.sh/chart",
)


# --- rendering ---------------------------------------------------------------------------------


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)


@functools.cache
def _render(helm: str, values: Path | None, kube_version: str = KUBE_MIN, release: str = RELEASE,
            chart: Path = CHART) -> tuple[dict[str, Any], ...]:
    args = ["template", release, str(chart), "--namespace", NAMESPACE, "--kube-version", kube_version]
    if values is not None:
        args += ["-f", str(values)]
    done = run_helm(Path(helm), *args)
    assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render(helm: Path, values: Path | None, kube_version: str = KUBE_MIN, release: str = RELEASE,
           chart: Path = CHART) -> list[dict[str, Any]]:
    return list(_render(str(helm), values, kube_version, release, chart))


@functools.cache
def chart_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing: maps merge key by key, null deletes, anything else replaces."""
    merged = dict(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def values_of(values: Path | None) -> dict[str, Any]:
    if values is None:
        return chart_values()
    return _merge(chart_values(), yaml.safe_load(values.read_text()) or {})


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    found = [d for d in of_kind(docs, kind)
             if d["metadata"]["labels"].get("app.kubernetes.io/component") == component]
    assert len(found) == 1, f"expected one {kind} of component {component}, found {len(found)}"
    return found[0]


def pod_template(workload: dict[str, Any]) -> dict[str, Any]:
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]
    return workload["spec"]["template"]


def component(doc: dict[str, Any]) -> str | None:
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def worker_pools(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The worker workloads: one, or one per ``workerPools`` entry."""
    pools = [d for d in of_kind(docs, WORKER_KIND) if component(d) == "worker"]
    assert pools, "no worker workload"
    return pools


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "CronJob")]


def container_port(container: dict[str, Any], port: int | str) -> int:
    """The number a probe's or Service's (possibly named) port resolves to in ``container``."""
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert named, f"container {container['name']} has no port named {port!r}"
    return named[0]


def config_text(docs: list[dict[str, Any]]) -> str:
    maps = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d.get("data", {})]
    assert len(maps) == 1, "expected exactly one ConfigMap with config.yaml"
    return maps[0]["data"]["config.yaml"]


def rendered_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(config_text(docs))


def secret_value(name: str, key: str) -> str:
    return f"secret:{name}/{key}"


def pod_environment(container: dict[str, Any], pod_name: str) -> dict[str, str]:
    """The environment the kubelet would give ``container``, with stand-ins for Secrets."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        source = var["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[var["name"]] = secret_value(ref["name"], ref["key"])
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[var["name"]] = pod_name
        elif source.get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[var["name"]] = "10.1.2.3"
        else:
            raise AssertionError(f"no stand-in for {var['name']}: {source}")
    return env




# --- checks and readers shared by several of the chart's test files ----------------------------


def assert_secrets_arrive(cluster: dict[str, Any], properties: dict[str, str]) -> None:
    auth = cluster.get("authentication", {})
    if auth.get("type") in ("plain", "scram-sha-256", "scram-sha-512"):
        ref = auth["passwordSecret"]
        assert properties["sasl.password"] == secret_value(ref["secretName"], ref["password"])
        assert properties["sasl.username"] == auth["username"]
    for prop, ref in cluster.get("secretProperties", {}).items():
        assert properties[prop] == secret_value(ref["secretName"], ref["key"])
    for prop, value in cluster.get("properties", {}).items():
        assert properties[prop] == (str(value).lower() if isinstance(value, bool) else str(value))


def assert_files_are_mounted(properties: dict[str, str], container: dict[str, Any],
                              volumes: dict[str, dict[str, Any]]) -> None:
    """Every ``*.location`` property names a file in a Secret mounted at that folder."""
    for prop, location in properties.items():
        if not prop.endswith(".location"):
            continue
        folder = str(Path(location).parent)
        mounts = [m for m in container["volumeMounts"] if m["mountPath"] == folder]
        assert mounts, f"{prop}={location}: nothing is mounted at {folder}"
        assert "secret" in volumes[mounts[0]["name"]], f"{prop}: {folder} is not a Secret"


def served_by_worker(path: str, pooled: bool = False) -> bool:
    """The worker's probe app answers ``path`` with a probe document (not the metrics page).

    ``pooled``: the shared-pool worker's app, unbound (registered in the pool, serving no route).
    """
    from prometheus_client import CollectorRegistry

    from ureplicator.worker import probes

    class Healthy:
        last_turn = 0.0
        ready = True

    class IdleInPool:
        session = "CONNECTED"
        member = True
        serving = None

    app = (probes.pool_app(IdleInPool(), CollectorRegistry(), stall_s=1e9, clock=lambda: 0.0) if pooled
           else probes.app(Healthy(), CollectorRegistry(), stall_s=1e9, clock=lambda: 0.0))
    seen: dict[str, str] = {}
    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET"},
                        lambda status, headers: seen.update(status=status)))
    return seen["status"].startswith("200") and body.startswith(b"{")


def image_user() -> int:
    users = [i.args for i in dockerfile_stages()["base"] if i.keyword == "USER"]
    return int(users[-1].split(":")[0])


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class Instruction(SimpleNamespace):
    keyword: str
    args: str


@functools.cache
def dockerfile_stages() -> dict[str, list[Instruction]]:
    """Instructions per stage name of the Dockerfile (continuations joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    stages: dict[str, list[Instruction]] = {"": []}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        instruction = Instruction(keyword=keyword.upper(), args=args.strip())
        if instruction.keyword == "FROM":
            match = re.search(r"\bAS\s+(\S+)$", args, re.IGNORECASE)
            current = match.group(1) if match else f"stage{len(stages)}"
            stages[current] = []
        stages[current].append(instruction)
    return stages
