"""The Helm chart renders valid Kubernetes objects that run ureplicator the way its code expects.

Offline and quick. The pinned helm (built by ``make install``, see ``common/helmtool.py``) lints
and renders ``helm/ureplicator`` with every ``ci/*-values.yaml`` (``minimal`` is the defaults plus the
admin token the chart requires).
Then: every object passes the Kubernetes JSON schemas in strict mode (``kubernetes-validate``
bundles them) for the oldest and the newest Kubernetes the chart supports; the ConfigMap's
``config.yaml`` loads with ``common.config.load`` given the environment each pod gets; the
probes hit what the processes serve; the verifier's arguments parse with the verifier's own
parser; bad values fail with the schema's or the chart's message.

No container engine runs here, so the image is not built: the Dockerfile is checked against the
build context, and the wheel it installs is built from exactly that context.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shlex
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import pytest
import yaml

from devtools import helmtool, jvm
from ureplicator.cli import main as cli
from ureplicator.common import config
from ureplicator.verifier import connector

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "ureplicator"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
MINIMAL_VALUES = CHART / "ci" / "minimal-values.yaml"
VALUES_FILES: list[Path | None] = [*CI_VALUES]
VALUES_IDS = [p.name.removesuffix("-values.yaml") for p in CI_VALUES]

# Chart.yaml's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_MIN = "1.27.0"
KUBE_MAX = kubernetes_validate.latest_version()
# Custom resources have no schema in the Kubernetes OpenAPI; checked by their own test below.
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


def _run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)


@functools.cache
def _render(helm: str, values: Path | None, kube_version: str = KUBE_MIN, release: str = RELEASE,
            chart: Path = CHART) -> tuple[dict[str, Any], ...]:
    args = ["template", release, str(chart), "--namespace", NAMESPACE, "--kube-version", kube_version]
    if values is not None:
        args += ["-f", str(values)]
    done = _run_helm(Path(helm), *args)
    assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render(helm: Path, values: Path | None, kube_version: str = KUBE_MIN, release: str = RELEASE,
           chart: Path = CHART) -> list[dict[str, Any]]:
    return list(_render(str(helm), values, kube_version, release, chart))


@functools.cache
def _chart_values() -> dict[str, Any]:
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
        return _chart_values()
    return _merge(_chart_values(), yaml.safe_load(values.read_text()) or {})


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


def _component(doc: dict[str, Any]) -> str | None:
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def worker_pools(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The worker workloads: one, or one per ``workerPools`` entry."""
    pools = [d for d in of_kind(docs, WORKER_KIND) if _component(d) == "worker"]
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


def _config_text(docs: list[dict[str, Any]]) -> str:
    maps = [d for d in of_kind(docs, "ConfigMap") if "config.yaml" in d.get("data", {})]
    assert len(maps) == 1, "expected exactly one ConfigMap with config.yaml"
    return maps[0]["data"]["config.yaml"]


def rendered_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(_config_text(docs))


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


# --- helm itself -------------------------------------------------------------------------------


def test_helm_is_the_pinned_build(helm: Path) -> None:
    assert helmtool.installed_version(helm) == helmtool.HELM_VERSION
    assert helm == jvm.CACHE_DIR / "bin" / "helm"


def test_helms_default_kubernetes_version_comes_from_its_client_go() -> None:
    go_mod = "module helm.sh/helm/v3\n\nrequire (\n\tk8s.io/api v0.36.2\n\tk8s.io/client-go v0.36.2\n)\n"
    assert helmtool.kube_version(go_mod) == ("1", "36")
    flags = helmtool.ldflags("v3.21.4", "1", "36")
    assert "-X helm.sh/helm/v3/internal/version.version=v3.21.4" in flags
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=36" in flags
    with pytest.raises(helmtool.HelmToolError):
        helmtool.kube_version("module x\n")


# --- lint and Kubernetes schemas ---------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_lint_is_clean_in_strict_mode(helm: Path, values: Path | None) -> None:
    args = ["lint", str(CHART), "--strict", "--kube-version", KUBE_MIN]
    if values is not None:
        args += ["-f", str(values)]
    done = _run_helm(helm, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("kube_version", [KUBE_MIN, KUBE_MAX])
@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_every_object_is_valid_kubernetes(helm: Path, values: Path | None, kube_version: str) -> None:
    docs = render(helm, values, kube_version)
    errors = []
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(exc.message)
    assert not errors, "\n".join(errors)
    kinds = {d["kind"] for d in docs}
    assert {"ConfigMap", "Deployment", "Service"} <= kinds


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_every_volume_has_one_source_and_every_mount_a_volume(helm: Path, values: Path | None) -> None:
    # The schemas allow `emptyDir: null`, which the API server rejects as a volume without source.
    docs = render(helm, values)
    config_maps = {d["metadata"]["name"] for d in of_kind(docs, "ConfigMap")}
    claims = {d["metadata"]["name"] for d in of_kind(docs, "PersistentVolumeClaim")}
    v = values_of(values)
    existing_claim = v["verifier"]["reports"]["persistence"]["existingClaim"]
    for workload in workloads(docs):
        spec = pod_template(workload)["spec"]
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        users = {vol["name"] for vol in v[component]["extraVolumes"]}  # the user's own references
        volumes = {}
        for volume in spec["volumes"]:
            sources = {key: source for key, source in volume.items() if key != "name"}
            assert len(sources) == 1 and isinstance(next(iter(sources.values())), dict), volume
            volumes[volume["name"]] = sources
        for container in spec["containers"]:
            for mount in container["volumeMounts"]:
                assert mount["name"] in volumes, f"{container['name']} mounts unknown {mount['name']}"
        for name, sources in volumes.items():
            if name in users:
                continue
            if "configMap" in sources:
                assert sources["configMap"]["name"] in config_maps
            if "persistentVolumeClaim" in sources:
                assert sources["persistentVolumeClaim"]["claimName"] in claims | {existing_claim}


# --- the config file, as each process loads it ---------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_every_process_loads_the_rendered_config(helm: Path, values: Path | None, tmp_path: Path) -> None:
    docs = render(helm, values)
    path = tmp_path / "config.yaml"
    path.write_text(_config_text(docs))
    v = values_of(values)
    for workload in workloads(docs):
        spec = pod_template(workload)["spec"]
        mounts_by_volume = {vol["name"]: vol for vol in spec["volumes"]}
        for container in spec["containers"]:
            assert CONFIG_PATH in container["args"], "every process must get the mounted config"
            env = pod_environment(container, pod_name="mirror-worker-7d9f-abcde")
            cfg = config.load(path, env=env)

            assert cfg.pipeline == v["pipeline"]
            assert cfg.zookeeper.connect == v["zookeeper"]["connect"]
            for section, key in (("source", "sourceCluster"), ("destination", "targetCluster")):
                cluster = v["clusters"][v[key]]
                loaded = getattr(cfg, section)
                assert loaded.alias == cluster.get("alias", v[key])
                assert loaded.bootstrap_servers == cluster["bootstrapServers"]
                _assert_secrets_arrive(cluster, loaded.properties)
                _assert_files_are_mounted(loaded.properties, container, mounts_by_volume)

            component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
            zk_auth = v.get("zookeeperAuth", {})
            expected_auth = (secret_value(zk_auth["existingSecret"], zk_auth["key"])
                             if zk_auth.get("existingSecret") else None)
            assert cfg.zookeeper.auth == expected_auth
            if component == "controller":
                assert cfg.controller.rest_port == container_port(container, "http")
                token = v["controller"]["adminToken"]
                expected = secret_value(token["existingSecret"], token["key"]) if token["existingSecret"] else None
                assert cfg.controller.admin_token == expected
                config.check_rest_exposure(cfg)  # the controller starts instead of refusing
            if component == "worker":
                # UREPLICATOR_WORKER_ID from metadata.name: the pod name is the worker id.
                assert config.worker_id(cfg) == "mirror-worker-7d9f-abcde"
                assert cfg.worker.metrics_port == container_port(container, "metrics")
                for key, value in v["worker"]["config"].items():
                    assert getattr(cfg.worker, key) == value


def test_chart_config_keys_are_exactly_the_loaders() -> None:
    """Each values `config` block offers every key of its config section and nothing else,
    except the keys the chart sets itself."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    chart_set = {
        # ports, Secret, reports mount, controller.tls Secret
        "controller": {"rest_port", "admin_token", "verification_dir", "rest_tls_certfile", "rest_tls_keyfile"},
        "worker": {"id", "metrics_port", "route"},  # pod name, containerPorts.metrics, the pool's route
    }
    loader = {"controller": config.ControllerConfig, "worker": config.WorkerConfig}
    for component, section in loader.items():
        offered = set(schema[component]["properties"]["config"]["properties"])
        fields = {f.name for f in dataclasses.fields(section)}
        assert offered <= fields, f"{component}.config offers keys the loader rejects: {offered - fields}"
        missing = fields - offered - chart_set[component]
        assert not missing, f"add {sorted(missing)} to {component}.config in values.schema.json and values.yaml"
        assert set(values_of(None)[component]["config"]) <= offered
    zookeeper = {f.name for f in dataclasses.fields(config.ZooKeeperConfig)} - {"auth"}  # zookeeperAuth Secret
    assert set(schema["zookeeper"]["properties"]) == zookeeper


def test_controllers_serve_the_verifiers_reports_from_its_claim(helm: Path) -> None:
    docs = render(helm, CHART / "ci" / "auto-whitelist-values.yaml")
    spec = pod_template(one(docs, "Deployment", "controller"))["spec"]
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "reports"]
    assert mount["readOnly"] is True
    assert rendered_config(docs)["controller"]["verification_dir"] == mount["mountPath"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "reports"]
    cron_volumes = pod_template(one(docs, "CronJob", "verifier"))["spec"]["volumes"]
    (written,) = [v for v in cron_volumes if v["name"] == "reports"]
    assert volume["persistentVolumeClaim"]["claimName"] == written["persistentVolumeClaim"]["claimName"]
    assert one(docs, "PersistentVolumeClaim", "verifier")["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "verification_dir" not in rendered_config(render(helm, MINIMAL_VALUES))["controller"]


def _assert_secrets_arrive(cluster: dict[str, Any], properties: dict[str, str]) -> None:
    auth = cluster.get("authentication", {})
    if auth.get("type") in ("plain", "scram-sha-256", "scram-sha-512"):
        ref = auth["passwordSecret"]
        assert properties["sasl.password"] == secret_value(ref["secretName"], ref["password"])
        assert properties["sasl.username"] == auth["username"]
    for prop, ref in cluster.get("secretProperties", {}).items():
        assert properties[prop] == secret_value(ref["secretName"], ref["key"])
    for prop, value in cluster.get("properties", {}).items():
        assert properties[prop] == (str(value).lower() if isinstance(value, bool) else str(value))


def _assert_files_are_mounted(properties: dict[str, str], container: dict[str, Any],
                              volumes: dict[str, dict[str, Any]]) -> None:
    """Every ``*.location`` property names a file in a Secret mounted at that folder."""
    for prop, location in properties.items():
        if not prop.endswith(".location"):
            continue
        folder = str(Path(location).parent)
        mounts = [m for m in container["volumeMounts"] if m["mountPath"] == folder]
        assert mounts, f"{prop}={location}: nothing is mounted at {folder}"
        assert "secret" in volumes[mounts[0]["name"]], f"{prop}: {folder} is not a Secret"


def test_tls_files_come_from_the_named_secret_keys(helm: Path) -> None:
    values = CHART / "ci" / "all-options-values.yaml"
    docs = render(helm, values)
    source = rendered_config(docs)["source"]["properties"]
    assert source["ssl.ca.location"] == "/etc/ureplicator/tls/source/ca/bundle.pem"
    assert source["ssl.certificate.location"] == "/etc/ureplicator/tls/source/client/user.crt"
    assert source["ssl.key.location"] == "/etc/ureplicator/tls/source/client/user.key"
    assert source["security.protocol"] == "SSL"
    volumes = {v["name"]: v for v in pod_template(one(docs, WORKER_KIND, "worker"))["spec"]["volumes"]}
    assert volumes["tls-source-ca"]["secret"]["secretName"] == "primary-ca"
    assert volumes["tls-source-client"]["secret"]["secretName"] == "primary-client"


# --- probes, ports and metrics -----------------------------------------------------------------


@functools.cache
def _served_by_controller() -> frozenset[str]:
    """GET routes of the controller's REST app (building it needs no ZooKeeper or Kafka)."""
    from ureplicator.controller.api import Controller, create_app

    stub = Controller(config=None, zk=None, leadership=None, source_admin=None, destination_admin=None)  # type: ignore[arg-type]
    app = create_app(stub)
    return frozenset(rule.rule for rule in app.url_map.iter_rules() if "GET" in (rule.methods or ()))


def _served_by_worker(path: str, pooled: bool = False) -> bool:
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


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_controller_probes_and_service_reach_the_rest_api(helm: Path, values: Path | None) -> None:
    docs = render(helm, values)
    rest_port = rendered_config(docs)["controller"]["rest_port"]
    container = pod_template(one(docs, "Deployment", "controller"))["spec"]["containers"][0]
    v = values_of(values)["controller"]

    if v["readinessProbe"]["enabled"]:
        probe = container["readinessProbe"]["httpGet"]
        assert probe["path"] == "/health" and "/health" in _served_by_controller()
        assert container_port(container, probe["port"]) == rest_port
    else:
        assert "readinessProbe" not in container
    if v["livenessProbe"]["enabled"]:
        # /healthz, not /health: /health is 503 while ZooKeeper is away, and restarts do not fix that.
        probe = container["livenessProbe"]["httpGet"]
        assert probe["path"] == "/healthz" and "/healthz" in _served_by_controller()
        assert container_port(container, probe["port"]) == rest_port
    else:
        assert "livenessProbe" not in container
    service = one(docs, "Service", "controller")
    assert [container_port(container, p["targetPort"]) for p in service["spec"]["ports"]] == [rest_port]
    assert service["spec"]["ports"][0]["port"] == v["service"]["ports"]["http"]


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_worker_probes_and_scrapes_reach_metrics(helm: Path, values: Path | None) -> None:
    docs = render(helm, values)
    metrics_port = rendered_config(docs)["worker"]["metrics_port"]
    service = [s for s in of_kind(docs, "Service") if s["metadata"]["name"].endswith("-worker-metrics")]
    assert len(service) == 1 and service[0]["spec"]["clusterIP"] == "None"
    (port,) = service[0]["spec"]["ports"]
    for pool in worker_pools(docs):
        container = pod_template(pool)["spec"]["containers"][0]
        pooled = any(e["name"] == "UREPLICATOR_WORKER_POOL" for e in container["env"])
        for name, path in (("readinessProbe", "/ready"), ("livenessProbe", "/healthz")):
            if values_of(values)["worker"][name]["enabled"]:  # a shared-pool worker too, bound or not
                probe = container[name]["httpGet"]
                assert probe["path"] == path and _served_by_worker(path, pooled)
                assert container_port(container, probe["port"]) == metrics_port
        assert container_port(container, port["targetPort"]) == metrics_port


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_service_monitors_scrape_metrics_where_each_process_serves_it(helm: Path, values: Path | None) -> None:
    docs = render(helm, values)
    monitors = of_kind(docs, "ServiceMonitor")
    if not values_of(values)["metrics"]["serviceMonitor"]["enabled"]:
        assert not monitors
        return
    assert "/metrics" in _served_by_controller()  # workers: prometheus_client serves it (below)
    assert {m["metadata"]["labels"]["app.kubernetes.io/component"] for m in monitors} == {"controller", "worker"}
    rendered = rendered_config(docs)
    ports = {"controller": rendered["controller"]["rest_port"], "worker": rendered["worker"]["metrics_port"]}
    for monitor in monitors:
        component = monitor["metadata"]["labels"]["app.kubernetes.io/component"]
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert NAMESPACE in monitor["spec"]["namespaceSelector"]["matchNames"]
        services = [s for s in of_kind(docs, "Service") if _selects(monitor["spec"]["selector"]["matchLabels"],
                                                                      s["metadata"]["labels"])]
        assert len(services) == 1, f"{component}: the monitor must select one Service"
        kind = WORKER_KIND if component == "worker" else "Deployment"
        container = pod_template(one(docs, kind, component))["spec"]["containers"][0]
        (port,) = [p for p in services[0]["spec"]["ports"] if p["name"] == endpoint["port"]]
        assert container_port(container, port["targetPort"]) == ports[component]


def test_the_metrics_docs_deploy_names_are_served() -> None:
    from prometheus_client import generate_latest, start_http_server

    from ureplicator.controller.metrics import ControllerMetrics
    from ureplicator.worker.metrics import WorkerMetrics

    worker = WorkerMetrics()
    # Labelled families only appear once they have a child.
    for family in (worker.records, worker.bytes, worker.skipped, worker.produce_errors):
        family.labels("orders").inc()
    worker.lag.labels("orders", "0").set(3)
    worker.commits.labels("ok").inc()
    worker.latency.observe(0.2)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=worker.registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            exposition = response.read().decode()
    finally:
        server.shutdown()
        thread.join(timeout=10)
    # The controller's /metrics route renders its registry with the same generate_latest.
    controller = ControllerMetrics()
    controller.handoff.labels("default").observe(0.2)  # per route: a child per route, like the worker's
    controller.rebalances.labels("default").inc()
    exposition += generate_latest(controller.registry).decode()

    # Sample names (…_total, …_bucket) and family names (# TYPE lines) both count.
    served = set(re.findall(r"^(?:# TYPE )?(ureplicator_(?:worker|controller)_\w+)", exposition, re.MULTILINE))
    docs = (REPO / "docs" / "deploy.md").read_text()
    documented = set(re.findall(r"\bureplicator_(?:worker|controller)_\w+", docs))
    assert any(n.startswith("ureplicator_worker_") for n in documented), "docs/deploy.md names no worker metric"
    assert documented <= served, f"documented but not served: {sorted(documented - served)}"


# --- shutdown, security, selectors -------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_workers_get_longer_to_stop_than_their_shutdown_timeout(helm: Path, values: Path | None) -> None:
    docs = render(helm, values)
    shutdown = rendered_config(docs)["worker"]["stop_timeout_s"]
    for pool in worker_pools(docs):
        assert pod_template(pool)["spec"]["terminationGracePeriodSeconds"] > shutdown


def _image_user() -> int:
    users = [i.args for i in _dockerfile_stages()["base"] if i.keyword == "USER"]
    return int(users[-1].split(":")[0])


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_pods_run_unprivileged_on_a_read_only_root(helm: Path, values: Path | None) -> None:
    docs = render(helm, values)
    for workload in workloads(docs):
        spec = pod_template(workload)["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        # Spark's Hadoop login needs a user in /etc/passwd: the image's, not a random one.
        assert spec["securityContext"]["runAsUser"] == _image_user()
        assert spec["automountServiceAccountToken"] is False
        empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            writable = {m["mountPath"] for m in container["volumeMounts"] if m["name"] in empty_dirs}
            assert "/tmp" in writable
            if "workingDir" in container:
                assert container["workingDir"] in writable


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_labels_and_selectors_pick_exactly_one_component(helm: Path, values: Path | None) -> None:
    docs = render(helm, values)
    pods = {w["metadata"]["name"]: pod_template(w)["metadata"]["labels"] for w in workloads(docs)}
    for doc in docs:
        name = doc["metadata"]["name"]
        assert len(name) <= (52 if doc["kind"] == "CronJob" else 63), name
        missing = [label for label in STANDARD_LABELS if label not in doc["metadata"]["labels"]]
        assert not missing, f"{doc['kind']}/{name} lacks {missing}"
        selector = _selector_of(doc)
        if selector is not None:
            picked = [w for w, labels in pods.items() if _selects(selector, labels)]
            if doc["kind"] in ("PodDisruptionBudget", "Service") and _component(doc) == "worker":
                # the workers' PDB and metrics Service span every worker pool, and nothing else
                assert picked == sorted(p["metadata"]["name"] for p in worker_pools(docs)), picked
                continue
            assert len(picked) == 1, f"{doc['kind']}/{name} selects {picked}"
    for workload in of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet"):
        assert _selects(workload["spec"]["selector"]["matchLabels"], pod_template(workload)["metadata"]["labels"])
    for hpa in of_kind(docs, "HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"]["name"] == one(docs, WORKER_KIND, "worker")["metadata"]["name"]


def _selector_of(doc: dict[str, Any]) -> dict[str, str] | None:
    if doc["kind"] == "Service":
        return doc["spec"]["selector"]
    if doc["kind"] == "PodDisruptionBudget":
        return doc["spec"]["selector"]["matchLabels"]
    if doc["kind"] == "NetworkPolicy":
        return doc["spec"]["podSelector"]["matchLabels"]
    return None


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def test_autoscaled_workers_leave_the_replica_count_to_the_hpa(helm: Path) -> None:
    scaled = render(helm, CHART / "ci" / "many-workers-values.yaml")
    assert "replicas" not in one(scaled, WORKER_KIND, "worker")["spec"]
    hpa = one(scaled, "HorizontalPodAutoscaler", "worker")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (12, 48)
    assert {m["resource"]["name"] for m in hpa["spec"]["metrics"]} == {"cpu", "memory"}

    fixed = render(helm, MINIMAL_VALUES)
    assert one(fixed, WORKER_KIND, "worker")["spec"]["replicas"] == 3
    assert one(fixed, "Deployment", "controller")["spec"]["replicas"] == 2
    assert not of_kind(fixed, "HorizontalPodAutoscaler")


def test_restricted_network_policy_admits_only_named_peers(helm: Path) -> None:
    docs = render(helm, CHART / "ci" / "external-spark-values.yaml")
    policies = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p for p in of_kind(docs, "NetworkPolicy")}
    assert set(policies) == {"controller", "worker", "verifier"}
    (driver_rule,) = policies["verifier"]["spec"]["ingress"]
    assert {p["port"] for p in driver_rule["ports"]} == {40000, 40001}
    assert driver_rule["from"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}]
    (metrics_rule,) = policies["worker"]["spec"]["ingress"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in metrics_rule["from"]
    # A verifier with a local master accepts no connections at all.
    local = render(helm, CHART / "ci" / "all-options-values.yaml")
    verifier = [p for p in of_kind(local, "NetworkPolicy") if p["metadata"]["name"].endswith("-verifier")][0]
    assert verifier["spec"]["ingress"] == []
    assert "Egress" in verifier["spec"]["policyTypes"]


# --- the verifier CronJob ----------------------------------------------------------------------


def _verifier_parser() -> Any:
    import argparse

    from ureplicator.verifier import cli as verifier_cli

    parser = argparse.ArgumentParser(prog="ureplicator verify")
    verifier_cli.add_arguments(parser)
    return parser


def verifier_workload(docs: list[dict[str, Any]], values: Path | None) -> dict[str, Any]:
    """The verifier's CronJob, or with verifier.mode warm its Deployment; the other kind is absent."""
    warm = values_of(values)["verifier"]["mode"] == "warm"
    kind, other = ("Deployment", "CronJob") if warm else ("CronJob", "Deployment")
    labels = [d["metadata"]["labels"] for d in of_kind(docs, other)]
    assert not [d for d in labels if d.get("app.kubernetes.io/component") == "verifier"]
    return one(docs, kind, "verifier")


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_verifier_arguments_parse_with_the_verifier_cli(helm: Path, values: Path | None) -> None:
    from ureplicator.verifier import cli as verifier_cli

    docs = render(helm, values)
    workload = verifier_workload(docs, values)
    spec = pod_template(workload)["spec"]
    (container,) = spec["containers"]
    assert container["args"][0] == "verify"
    args = _verifier_parser().parse_args(container["args"][1:])
    verifier = values_of(values)["verifier"]
    spark = verifier["spark"]
    if workload["kind"] == "CronJob":
        assert args.every is None and spec["restartPolicy"] == "Never"
    else:
        # The warm verifier: one driver, a pass every warm.every, restarted by its Deployment.
        assert args.every == verifier_cli.parse_interval(str(verifier["warm"]["every"]))
        assert spec.get("restartPolicy", "Always") == "Always"

    assert args.config == CONFIG_PATH
    assert args.output == Path("/reports")
    assert args.master == spark["master"]
    conf = dict(args.conf)
    for key, value in spark["conf"].items():
        assert conf[key] == str(value)
    scratch = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "spark-scratch"]
    assert conf["spark.local.dir"] in scratch
    assert "/reports" in {m["mountPath"] for m in container["volumeMounts"]}
    if spark["master"].startswith("local"):
        assert "ports" not in container and "spark.driver.port" not in conf
    else:
        assert int(conf["spark.driver.port"]) == container_port(container, "spark-driver")
        assert int(conf["spark.blockManager.port"]) == container_port(container, "spark-blockmgr")


def test_verifier_extra_args_follow_the_chart_arguments(helm: Path) -> None:
    done = _run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_MIN, "-f", str(MINIMAL_VALUES),
                     "--set-json", 'verifier.extraArgs=["--topic","orders","--bucket-size","5000"]',
                     "--set-json", 'verifier.spark.conf={"spark.sql.shuffle.partitions":1000000}')
    assert done.returncode == 0, done.stderr
    cron = one([d for d in yaml.safe_load_all(done.stdout) if d], "CronJob", "verifier")
    args = _verifier_parser().parse_args(pod_template(cron)["spec"]["containers"][0]["args"][1:])
    assert args.topic == ["orders"] and args.bucket_size == 5000
    # A whole number stays whole: Go would print 1e+06, which Spark cannot parse.
    assert dict(args.conf)["spark.sql.shuffle.partitions"] == "1000000"


def test_disabled_verifier_renders_nothing_of_it(helm: Path) -> None:
    done = _run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_MIN, "-f", str(MINIMAL_VALUES),
                     "--set", "verifier.enabled=false")
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert not [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "verifier"]



# --- the warm verifier (verifier.mode warm, issue 28) --------------------------------------------

WARM_VALUES = CHART / "ci" / "warm-verifier-values.yaml"


def _render_with(helm: Path, *args: str) -> list[dict[str, Any]]:
    done = _run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_MIN,
                     *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_warm_verifier_is_one_recreated_pod_that_outlives_a_pass_on_the_reports_claim(helm: Path) -> None:
    # Given the warm verifier's values
    docs = render(helm, WARM_VALUES)
    warm = values_of(WARM_VALUES)["verifier"]["warm"]
    # Then it is a Deployment of one pod, and no CronJob shares its checkpoint
    deployment = verifier_workload(docs, WARM_VALUES)
    assert deployment["kind"] == "Deployment" and deployment["spec"]["replicas"] == 1
    # And the old pod is gone before the new one starts (the checkpoint's lock admits one verifier)
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = pod_template(deployment)["spec"]
    # And the first SIGTERM has the configured time to finish the running pass
    assert spec["terminationGracePeriodSeconds"] == warm["terminationGracePeriodSeconds"]
    # And /reports (where the checkpoint lives) is the claim the chart creates
    (container,) = spec["containers"]
    claim = one(docs, "PersistentVolumeClaim", "verifier")["metadata"]["name"]
    reports = next(v for v in spec["volumes"] if v["name"] == "reports")
    assert reports["persistentVolumeClaim"]["claimName"] == claim
    assert {"name": "reports", "mountPath": "/reports"} in container["volumeMounts"]
    args = _verifier_parser().parse_args(container["args"][1:])
    assert args.checkpoint is None and args.output == Path("/reports")  # default: /reports/checkpoint.json
    assert args.full_every == 7 * 86400  # extraArgs follow the chart's
    # And the Deployment's selector picks its pods only
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "verifier"


def test_warm_verifier_runs_the_cronjobs_container_and_volumes_but_for_every_and_the_probe(helm: Path) -> None:
    # Given the same values rendered as a CronJob and as the warm verifier
    extra = ["-f", str(CHART / "ci" / "external-spark-values.yaml"), "--set", "verifier.warm.every=1h30m"]
    cron = pod_template(one(_render_with(helm, *extra), "CronJob", "verifier"))["spec"]
    warm_docs = _render_with(helm, *extra, "--set", "verifier.mode=warm")
    warm = pod_template(one(warm_docs, "Deployment", "verifier"))["spec"]
    (cron_container,), (warm_container,) = cron["containers"], warm["containers"]
    # Then the warm container is the CronJob's with `--every` after `verify` and a liveness probe
    assert warm_container["args"][:3] == ["verify", "--every", "1h30m"]
    assert warm_container["args"][3:] == cron_container["args"][1:]
    assert "livenessProbe" in warm_container
    assert {k: v for k, v in warm_container.items() if k not in ("args", "livenessProbe")} == \
        {k: v for k, v in cron_container.items() if k != "args"}
    # And the pod has the same volumes, security context and service account
    assert warm["volumes"] == cron["volumes"]
    for key in ("securityContext", "serviceAccountName", "automountServiceAccountToken"):
        assert warm[key] == cron[key]


def test_default_values_render_the_cronjob_and_no_verifier_deployment(helm: Path) -> None:
    for values in [v for v in CI_VALUES if v != WARM_VALUES]:
        docs = render(helm, values)
        assert values_of(values)["verifier"]["mode"] == "cronjob"
        assert not [d for d in of_kind(docs, "Deployment")
                    if d["metadata"]["labels"]["app.kubernetes.io/component"] == "verifier"]
        one(docs, "CronJob", "verifier")
    assert _chart_values()["verifier"]["mode"] == "cronjob"


def test_warm_verifier_without_a_probe_or_verifier_renders_none(helm: Path) -> None:
    docs = _render_with(helm, "-f", str(WARM_VALUES), "--set", "verifier.warm.livenessProbe.enabled=false")
    (container,) = pod_template(one(docs, "Deployment", "verifier"))["spec"]["containers"]
    assert "livenessProbe" not in container
    docs = _render_with(helm, "-f", str(WARM_VALUES), "--set", "verifier.enabled=false",
                        "--set", "controller.verificationReports.enabled=false")
    assert not [d for d in docs if d["metadata"]["labels"].get("app.kubernetes.io/component") == "verifier"]


def _process_one_started_s_ago() -> float:
    import os

    ticks = int(Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[19])
    return float(Path("/proc/uptime").read_text().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")


def test_warm_liveness_probe_fails_only_when_no_pass_ended_for_max_age(helm: Path, tmp_path: Path) -> None:
    import os
    import time

    from ureplicator.reports.store import HISTORY

    # Given the rendered probe command, run here against a history file of our own
    (container,) = pod_template(one(render(helm, WARM_VALUES), "Deployment", "verifier"))["spec"]["containers"]
    probe = container["livenessProbe"]
    command = probe["exec"]["command"]
    assert command[-2] == f"/reports/{HISTORY}"  # every pass appends to it, even one that could not run
    assert int(command[-1]) == values_of(WARM_VALUES)["verifier"]["warm"]["livenessProbe"]["maxAgeSeconds"]
    assert probe["failureThreshold"] == 1 and probe["timeoutSeconds"] >= 10
    # And its interpreter is the image's (the verifier stage builds on base, whose PATH starts at the venv)
    assert command[0] == "python"
    assert any(i.keyword == "ENV" and "PATH=/opt/ureplicator/venv/bin:" in i.args for i in _dockerfile_stages()["base"])
    assert _dockerfile_stages()["verifier"][0].args.split()[0] == "base"
    # The probe compares ages with the container's (process 1's) own; scale them to it.
    age = _process_one_started_s_ago()
    max_age = age / 2
    history = tmp_path / HISTORY

    def alive(max_age: float) -> bool:
        done = subprocess.run([sys.executable, *command[1:-2], str(history), str(max_age)], timeout=30)
        return done.returncode == 0

    # When no pass has ended yet and the container has run longer than max age: stuck
    assert not alive(max_age)
    # When a pass just ended: alive
    history.write_text("{}\n")
    assert alive(max_age)
    # When the last pass ended long before max age: stuck
    old = time.time() - max_age - 7200
    os.utime(history, (old, old))
    assert not alive(max_age)
    # Unless the container itself started less than max age ago (its first pass may be a full one)
    assert alive(age + 3600)


def test_warm_verifier_notes_show_its_log(helm: Path, tmp_path: Path) -> None:
    chart = tmp_path / "ureplicator"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n'
    )
    done = _run_helm(helm, "template", RELEASE, str(chart), "--namespace", NAMESPACE, "--kube-version", KUBE_MIN,
                     "--show-only", "templates/zz-notes.yaml", "-f", str(WARM_VALUES))
    assert done.returncode == 0, done.stderr
    notes = yaml.safe_load(done.stdout)["data"]["notes"]
    name = one(render(helm, WARM_VALUES), "Deployment", "verifier")["metadata"]["name"]
    assert f"logs -f deployment/{name}" in notes and "cronjob/" not in notes

# --- bad values --------------------------------------------------------------------------------


BAD_VALUES = [
    ("negative-replicas", {"worker": {"replicas": -1}}, "at '/worker/replicas': minimum"),
    ("missing-source-cluster", {"sourceCluster": None}, "missing property 'sourceCluster'"),
    ("unknown-source-cluster", {"sourceCluster": "dc9"}, 'sourceCluster: "dc9" is not a key of clusters'),
    ("same-clusters", {"targetCluster": "source"}, "targetCluster: must differ from sourceCluster"),
    ("same-aliases", {"clusters": {"target": {"alias": "source"}}}, "they must differ"),
    ("unknown-config-key", {"worker": {"config": {"auto_whitelist": True}}},
     "at '/worker/config': additional properties 'auto_whitelist' not allowed"),
    ("chart-managed-config-key", {"worker": {"config": {"metrics_port": 9100}}},
     "additional properties 'metrics_port' not allowed"),
    ("typo-in-a-block", {"controller": {"replica": 3}}, "additional properties 'replica' not allowed"),
    ("bad-pipeline", {"pipeline": "dc1 to dc2"}, "at '/pipeline'"),
    ("bad-offset-reset", {"worker": {"config": {"auto_offset_reset": "newest"}}}, "auto_offset_reset"),
    ("short-grace-period", {"worker": {"terminationGracePeriodSeconds": 30}},
     "worker.terminationGracePeriodSeconds: 30 must be larger than worker.config.stop_timeout_s"),
    ("yarn-master", {"verifier": {"spark": {"master": "yarn"}}}, "at '/verifier/spark/master'"),
    ("password-in-properties", {"clusters": {"source": {"properties": {"sasl.password": "hunter2"}}}},
     "clusters.source.properties.sasl.password: looks like a secret"),
    ("sasl-without-secret", {"clusters": {"source": {"authentication": {"type": "scram-sha-512", "username": "u"}}}},
     "clusters.source.authentication.passwordSecret.secretName: required"),
    ("secret-property-with-uppercase", {"clusters": {"source": {"secretProperties": {
        "SSL_KEY_PASSWORD": {"secretName": "s", "key": "k"}}}}}, "SSL_KEY_PASSWORD"),
    ("both-pdb-bounds", {"worker": {"pdb": {"minAvailable": 1}}},
     "worker.pdb: set minAvailable or maxUnavailable, not both"),
    ("zero-metrics-port", {"worker": {"containerPorts": {"metrics": 0}}}, "at '/worker/containerPorts/metrics'"),
    ("reports-on-a-single-node-claim", {"controller": {"verificationReports": {"enabled": True}}},
     "set verifier.reports.persistence.accessModes to [ReadWriteMany]"),
    ("bad-topic-naming", {"controller": {"config": {"topic_naming": "suffix"}}},
     "at '/controller/config/topic_naming'"),
    ("no-admin-token", {"controller": {"adminToken": {"existingSecret": ""}}},
     "controller.adminToken.existingSecret: required, or anyone who reaches the REST port can add and remove"),
    ("zookeeper-auth-without-key", {"zookeeperAuth": {"existingSecret": "zk", "key": ""}},
     "at '/zookeeperAuth/key'"),
    ("unknown-verifier-mode", {"verifier": {"mode": "daemon"}}, "at '/verifier/mode'"),
    ("every-in-words", {"verifier": {"mode": "warm", "warm": {"every": "10 minutes"}}}, "at '/verifier/warm/every'"),
    ("every-zero", {"verifier": {"mode": "warm", "warm": {"every": "0s"}}},
     "verifier.warm.every: 0s is not a positive duration"),
    ("warm-typo", {"verifier": {"warm": {"interval": "10m"}}}, "additional properties 'interval' not allowed"),
    ("no-grace-for-the-warm-verifier", {"verifier": {"warm": {"terminationGracePeriodSeconds": 0}}},
     "at '/verifier/warm/terminationGracePeriodSeconds'"),
    ("liveness-shorter-than-the-interval",
     {"verifier": {"mode": "warm", "warm": {"every": "6h", "livenessProbe": {"maxAgeSeconds": 3600}}}},
     "verifier.warm.livenessProbe.maxAgeSeconds: 3600 must be larger than verifier.warm.every (6h = 21600s)"),
]


@pytest.mark.parametrize(("bad", "message"), [(b, m) for _, b, m in BAD_VALUES], ids=[n for n, _, _ in BAD_VALUES])
def test_bad_values_fail_with_a_clear_message(helm: Path, tmp_path: Path, bad: dict[str, Any], message: str) -> None:
    values = tmp_path / "bad-values.yaml"
    values.write_text(yaml.safe_dump(bad))
    done = _run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_MIN,
                     "-f", str(MINIMAL_VALUES), "-f", str(values))
    assert done.returncode != 0, f"rendered despite {bad}"
    assert message in done.stderr, done.stderr


def test_chart_defaults_alone_refuse_an_open_rest_api(helm: Path) -> None:
    """`helm install` with no values fails and says which Secret to create, or how to opt out."""
    done = _run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_MIN)
    assert done.returncode != 0
    assert "controller.adminToken.existingSecret: required" in done.stderr, done.stderr
    assert "controller.config.allow_anonymous=true" in done.stderr


def test_allow_anonymous_is_an_explicit_opt_out_that_the_controller_accepts(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "anonymous-values.yaml"
    values.write_text(yaml.safe_dump({"controller": {"config": {"allow_anonymous": True}}}))
    docs = render(helm, values)
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(_config_text(docs))
    container = pod_template(one(docs, "Deployment", "controller"))["spec"]["containers"][0]
    env = pod_environment(container, pod_name="mirror-controller-0")
    assert "UREPLICATOR_CONTROLLER_ADMIN_TOKEN" not in env and "UREPLICATOR_ZOOKEEPER_AUTH" not in env
    cfg = config.load(cfg_path, env=env)
    assert cfg.controller.allow_anonymous is True and cfg.controller.admin_token is None
    config.check_rest_exposure(cfg)


# --- NOTES.txt ---------------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_notes_show_commands_the_cli_accepts(helm: Path, values: Path | None, tmp_path: Path) -> None:
    # `helm template` leaves NOTES.txt out; render it through tpl in a copy of the chart.
    chart = tmp_path / "ureplicator"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n'
    )
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE, "--kube-version", KUBE_MIN,
            "--show-only", "templates/zz-notes.yaml"]
    done = _run_helm(helm, *args, *(["-f", str(values)] if values else []))
    assert done.returncode == 0, done.stderr
    notes = yaml.safe_load(done.stdout)["data"]["notes"]

    commands = re.findall(r"ureplicator ((?:topics|status) [^'\n]*)", notes)
    assert len(commands) >= 3, notes
    for command in commands:
        command = command.replace('"$UREPLICATOR_CONTROLLER_ADMIN_TOKEN"', "t0ken-123")
        parsed = cli._parser().parse_args(shlex.split(command))
        assert parsed.url.endswith(f":{values_of(values)['controller']['containerPorts']['http']}")
    docs = render(helm, values)
    for kind, component in (("Deployment", "controller"), ("Service", "controller")):
        assert one(docs, kind, component)["metadata"]["name"] in notes
    # the rollout command names the workers' real kind (a StatefulSet by default), for each pool
    for pool in worker_pools(docs):
        assert f"rollout status statefulset/{pool['metadata']['name']}" in notes


# --- the image ---------------------------------------------------------------------------------


class _Instruction(SimpleNamespace):
    keyword: str
    args: str


@functools.cache
def _dockerfile_stages() -> dict[str, list[_Instruction]]:
    """Instructions per stage name of the Dockerfile (continuations joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    stages: dict[str, list[_Instruction]] = {"": []}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        instruction = _Instruction(keyword=keyword.upper(), args=args.strip())
        if instruction.keyword == "FROM":
            match = re.search(r"\bAS\s+(\S+)$", args, re.IGNORECASE)
            current = match.group(1) if match else f"stage{len(stages)}"
            stages[current] = []
        stages[current].append(instruction)
    return stages


def _dockerignore_allowed() -> set[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return {line[1:].rstrip("/") for line in lines if line.startswith("!")}


def test_dockerfile_copies_only_what_the_build_context_sends() -> None:
    allowed = _dockerignore_allowed()
    copies = [i for stage in _dockerfile_stages().values() for i in stage
              if i.keyword == "COPY" and "--from=" not in i.args]
    assert copies
    for copy in copies:
        *sources, _destination = copy.args.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            assert source.rstrip("/").split("/")[0] in allowed, f"COPY {source}: excluded by .dockerignore"


def test_images_run_ureplicator_as_the_charts_user() -> None:
    stages = _dockerfile_stages()
    assert list(stages)[-1] == "runtime", "the default target (last stage) is the controller/worker image"
    args = dict(re.match(r"(\w+)=(\S+)", i.args).groups() for i in stages[""] if i.keyword == "ARG")  # type: ignore[union-attr]
    assert re.fullmatch(r"python:3\.\d+-slim-\w+", args["PYTHON_IMAGE"]), "pin the base image by tag"
    entrypoint = [i.args for i in stages["base"] if i.keyword == "ENTRYPOINT"]
    # The chart passes subcommands as args: the entrypoint must end with the CLI.
    assert entrypoint and entrypoint[-1].rstrip("]").rstrip().endswith('"ureplicator"')
    for name in ("runtime", "verifier"):
        users = [i.args for i in stages["base"] + stages[name] if i.keyword == "USER"]
        assert users[-1] == "10001:10001" == f"{_image_user()}:{_image_user()}"
    assert _chart_values()["controller"]["podSecurityContext"]["runAsUser"] == _image_user()


def test_verifier_image_puts_the_connector_where_the_verifier_looks() -> None:
    stages = _dockerfile_stages()
    env = " ".join(i.args for i in stages["verifier"] if i.keyword == "ENV")
    jars = re.search(rf"{connector.JARS_ENV}=(\S+)", env).group(1)  # type: ignore[union-attr]
    copies = [i.args.split() for i in stages["verifier"] if i.keyword == "COPY" and "--from=jars" in i.args]
    assert [c[-1].rstrip("/") for c in copies] == [jars]
    assert any("openjdk-17-jre-headless" in i.args for i in stages["verifier"] if i.keyword == "RUN")


def test_only_the_verifier_image_carries_pyspark() -> None:
    stages = _dockerfile_stages()
    venvs = {name: [i.args.split()[0] for i in stages[name] if i.keyword == "COPY" and "venv" in i.args]
             for name in ("runtime", "verifier")}
    assert venvs == {"runtime": ["--from=build"], "verifier": ["--from=build-verifier"]}
    installs = {name: " ".join(i.args for i in stages[name] if i.keyword == "RUN" and "pip install" in i.args)
                for name in ("build", "build-verifier")}
    assert "[verifier]" not in installs["build"] and "'.[verifier]'" in installs["build-verifier"]


# --- issue 27: stable worker ids, preflight, REST TLS, pools and routes ------------------------

BASELINE = Path(__file__).parent / "helm_baseline"


def _without_preflight(template: dict[str, Any]) -> dict[str, Any]:
    spec = dict(template["spec"])
    spec.pop("initContainers", None)
    metadata = dict(template["metadata"])
    metadata["annotations"] = {k: v for k, v in metadata.get("annotations", {}).items() if k != "checksum/config"}
    return {**template, "spec": spec, "metadata": metadata}


def _intended(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the changes issue 27 makes on purpose taken out (applied to old and new alike)."""
    doc = json.loads(json.dumps(doc))
    kind, labels = doc["kind"], doc["metadata"].get("labels", {})
    if kind in ("Deployment", "StatefulSet") and labels.get("app.kubernetes.io/component") == "worker":
        # 1. Workers are a StatefulSet: the pod template is today's; only the workload's kind and its
        #    update fields (strategy -> updateStrategy, serviceName, podManagementPolicy) change.
        spec = doc["spec"]
        doc = {"kind": "worker-workload", "metadata": doc["metadata"], "spec": {
            k: spec[k] for k in ("replicas", "minReadySeconds", "selector") if k in spec}}
        doc["spec"]["template"] = _without_preflight(spec["template"])
    elif kind == "Deployment":
        # 2. The preflight init container (and the config checksum, since the config changed below).
        doc["spec"]["template"] = _without_preflight(doc["spec"]["template"])
    elif kind == "CronJob":
        template = doc["spec"]["jobTemplate"]["spec"]["template"]
        doc["spec"]["jobTemplate"]["spec"]["template"] = _without_preflight(template)
    elif kind == "ServiceMonitor":
        # 6. Every scraped series carries the pipeline label.
        for endpoint in doc["spec"]["endpoints"]:
            endpoint["relabelings"] = [r for r in endpoint.get("relabelings", []) if r.get("targetLabel") != "pipeline"]
            if not endpoint["relabelings"]:
                del endpoint["relabelings"]
    elif kind == "HorizontalPodAutoscaler":
        doc["spec"]["scaleTargetRef"]["kind"] = "worker-workload"
    elif kind == "ConfigMap" and "config.yaml" in doc["data"]:
        # 3. The restart grace default: 0 -> 120 s, so a restarted StatefulSet pod keeps its partitions;
        #    and the new keys with their application defaults (heartbeat, RPO, destination topic safety).
        rendered = yaml.safe_load(doc["data"]["config.yaml"])
        for key in ("worker_restart_grace_s", "heartbeat_interval_s", "heartbeat_topic", "rpo_s",
                    "destination_replication_factor", "destination_min_insync_replicas"):
            rendered["controller"].pop(key, None)
        # 7. worker.shutdown_timeout_s is split into four named waits (issue 25); the old key is deprecated.
        #    And worker.fetch_stall_s, the fetch watch (librdkafka #5153).
        for key in ("shutdown_timeout_s", "stop_timeout_s", "release_ack_timeout_s", "release_commit_timeout_s",
                    "producer_stall_s", "fetch_stall_s"):
            rendered.get("worker", {}).pop(key, None)
        doc["data"]["config.yaml"] = rendered
    elif kind == "ConfigMap" and "ureplicator.json" in doc["data"]:
        # 4. The dashboard's uid is the release's own, and a freshness row comes first (the rest moves down).
        dashboard = json.loads(doc["data"]["ureplicator.json"])
        dashboard.pop("uid")
        dashboard["panels"] = [{k: v for k, v in p.items() if k != "gridPos"} for p in dashboard["panels"]
                               if "heartbeat" not in json.dumps(p) and p["title"] != "Freshness"]
        # 9. (issue 24) A route variable; the controller, verification and (10.) worker panels show one
        #    series per route, and the topic variable lists the chosen routes' topics.
        dashboard["templating"]["list"] = [
            {**v, "query": "<changed on purpose>", "definition": "<changed on purpose>"} if v["name"] == "topic" else v
            for v in dashboard["templating"]["list"] if v["name"] != "route"]
        for panel in dashboard["panels"]:
            if re.search(r"ureplicator_(controller|verification|worker)_", json.dumps(panel.get("targets", []))):
                panel["targets"] = panel["description"] = "<changed on purpose>"
        doc["data"]["ureplicator.json"] = dashboard
    elif kind == "PrometheusRule":
        # 5. New alerts (records expired, freshness above the RPO, assigned but not mirroring, group sync
        #    stale), and a verification alert that a later successful run clears.
        # 8. (issue 24) Controller series carry `route`: the controller's alerts fire per route, and a
        #    route without workers has an alert of its own (then it is not "partitions without owner").
        # 11. The fetch watch's alert (librdkafka #5153, worker/fetchwatch.py).
        new = {"UReplicatorRecordsExpired", "UReplicatorFreshnessAboveRpo", "UReplicatorNotMirroring",
               "UReplicatorGroupSyncStale", "UReplicatorRouteWaitingForWorkers", "UReplicatorFetchStalled"}
        # 10. (issue 24) Worker series carry `route` too: the worker alerts group by it and name it.
        per_route = {"UReplicatorVerificationFailed", "UReplicatorVerificationMissing", "UReplicatorNoLeader",
                     "UReplicatorPartitionsWithoutOwner", "UReplicatorLagGrowing", "UReplicatorProduceErrors",
                     "UReplicatorReleaseCommitFailures", "UReplicatorPartitionRewinds", "UReplicatorProducerReplaced"}
        renamed = {"UReplicatorPartitionsWithoutOwner", "UReplicatorLagGrowing", "UReplicatorProduceErrors",
                   "UReplicatorReleaseCommitFailures", "UReplicatorPartitionRewinds", "UReplicatorProducerReplaced"}
        for group in doc["spec"]["groups"]:
            group["rules"] = [r for r in group["rules"] if r.get("alert") not in new]
            for rule in group["rules"]:
                if rule.get("alert") in per_route:
                    rule["expr"] = "<changed on purpose>"
                if rule.get("alert") in renamed:
                    rule["annotations"] = "<changed on purpose>"
    return doc


def _keyed(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for doc in docs:
        kind = "worker-workload" if doc["kind"] in ("Deployment", "StatefulSet") and doc["metadata"]["labels"].get(
            "app.kubernetes.io/component") == "worker" else doc["kind"]
        out[(kind, doc["metadata"]["name"])] = doc
    return out


# ci values files added after the baseline: they render objects the baseline never had.
NEW_SINCE_BASELINE = {"warm-verifier", "routes"}
BASELINE_VALUES = [v for v in CI_VALUES if v.name.removesuffix("-values.yaml") not in NEW_SINCE_BASELINE]


def test_every_ci_values_file_has_a_baseline_or_is_named_new() -> None:
    names = {v.name.removesuffix("-values.yaml") for v in CI_VALUES}
    baselines = {p.stem for p in BASELINE.glob("*.yaml")}
    assert names - NEW_SINCE_BASELINE == baselines
    assert NEW_SINCE_BASELINE <= names


@pytest.mark.parametrize("values", BASELINE_VALUES, ids=[v.name.removesuffix("-values.yaml") for v in BASELINE_VALUES])
def test_todays_values_render_todays_manifests_but_for_the_intended_changes(helm: Path, values: Path) -> None:
    # Given the manifests today's chart rendered for each ci values file (helm_baseline/README.md)
    before = _keyed([d for d in yaml.safe_load_all((BASELINE / f"{values.name.removesuffix('-values.yaml')}.yaml")
                                                   .read_text()) if d])
    # When the same values render with this chart
    after = _keyed(render(helm, values))
    # Then the only new object is the preflight's helm test Pod, and nothing disappeared
    added = set(after) - set(before)
    assert {kind for kind, _ in added} <= {"Pod"}, added
    assert all(after[key]["metadata"]["annotations"]["helm.sh/hook"] == "test" for key in added)
    assert set(before) - set(after) == set()
    # And every object is unchanged except for the listed, intended changes
    for key, old in before.items():
        assert _intended(after[key]) == _intended(old), f"{key} changed beyond the intended changes"
    # And the one switch is visible: the workers are a StatefulSet now (a Deployment before)
    assert [d["kind"] for (kind, _), d in before.items() if kind == "worker-workload"] == ["Deployment"]
    assert [d["kind"] for (kind, _), d in after.items() if kind == "worker-workload"] == ["StatefulSet"]


def test_every_scraped_series_carries_the_pipeline(helm: Path) -> None:
    values = next(v for v in CI_VALUES if v.name == "many-workers-values.yaml")
    monitors = of_kind(render(helm, values), "ServiceMonitor")
    assert len(monitors) == 2
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["relabelings"][0] == {"targetLabel": "pipeline", "replacement": values_of(values)["pipeline"]}


def test_statefulset_workers_have_stable_ids_and_the_deployment_stays_an_option(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, MINIMAL_VALUES)
    workers = one(docs, "StatefulSet", "worker")
    spec = workers["spec"]
    # The pod name is the worker id; a StatefulSet's pod names are <name>-0..N-1 and survive restarts
    env = {e["name"]: e for e in pod_template(workers)["spec"]["containers"][0]["env"]}
    assert env["UREPLICATOR_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert spec["serviceName"] == one(docs, "Service", "worker")["metadata"]["name"]
    assert one(docs, "Service", "worker")["spec"]["clusterIP"] == "None"
    assert spec["podManagementPolicy"] == "Parallel" and spec["updateStrategy"]["type"] == "RollingUpdate"
    # And the controller keeps a departed worker's partitions long enough for the pod to come back
    assert rendered_config(docs)["controller"]["worker_restart_grace_s"] >= 60

    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(MINIMAL_VALUES.read_text() + "\nworker:\n  kind: Deployment\n")
    docs = render(helm, deployment)
    assert one(docs, "Deployment", "worker")["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 1
    assert not of_kind(docs, "StatefulSet")


def test_preflight_runs_as_an_init_container_and_a_helm_test_with_each_pods_config(helm: Path) -> None:
    docs = render(helm, next(v for v in CI_VALUES if v.name == "sasl-values.yaml"))
    parser = cli._parser()
    for kind, component in (("Deployment", "controller"), (WORKER_KIND, "worker")):
        spec = pod_template(one(docs, kind, component))["spec"]
        (init,) = spec["initContainers"]
        main = spec["containers"][0]
        assert init["name"] == "preflight" and init["image"] == main["image"]
        args = parser.parse_args(init["args"])
        assert args.command == "check" and args.config == CONFIG_PATH
        # the same credentials (SASL password Secret) and the same mounted files as the process it guards
        assert [e for e in init["env"] if e["name"] != "UREPLICATOR_LOG_LEVEL"] == [
            e for e in main["env"] if e["name"].startswith(("UREPLICATOR_SOURCE", "UREPLICATOR_DESTINATION",
                                                            "UREPLICATOR_ZOOKEEPER"))]
        assert {m["mountPath"] for m in init["volumeMounts"]} <= {m["mountPath"] for m in main["volumeMounts"]}
    (test_pod,) = of_kind(docs, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert parser.parse_args(test_pod["spec"]["containers"][0]["args"]).command == "check"
    assert test_pod["spec"]["restartPolicy"] == "Never"


def test_rest_tls_comes_from_a_secret_and_the_probes_speak_https(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "tls.yaml"
    values.write_text(MINIMAL_VALUES.read_text() + "\ncontroller:\n  adminToken:\n    existingSecret: admin\n"
                      "  tls:\n    enabled: true\n    existingSecret: rest-cert\n")
    docs = render(helm, values)
    controller = pod_template(one(docs, "Deployment", "controller"))["spec"]
    container = controller["containers"][0]
    rendered = rendered_config(docs)["controller"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in controller["volumes"]}
    assert volumes["rest-tls"]["secret"]["secretName"] == "rest-cert"
    assert rendered["rest_tls_certfile"] == f"{mounts['rest-tls']}/tls.crt"
    assert rendered["rest_tls_keyfile"] == f"{mounts['rest-tls']}/tls.key"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    values.write_text(MINIMAL_VALUES.read_text() + "\ncontroller:\n  tls:\n    enabled: true\n")
    done = _run_helm(helm, "template", RELEASE, str(CHART), "-f", str(values))
    assert done.returncode != 0 and "controller.tls.existingSecret: required" in done.stderr


def test_worker_pools_render_one_workload_each_and_a_pinned_pool_sets_its_route(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "pools.yaml"
    values.write_text(MINIMAL_VALUES.read_text() + """
workerPools:
  - name: east
    replicas: 2
    nodeSelector: {topology.kubernetes.io/zone: east-1a}
    route: dc1-to-dc2
  - name: shared
    replicas: 4
""")
    docs = render(helm, values)
    pools = {d["metadata"]["name"]: d for d in of_kind(docs, WORKER_KIND)}
    east, shared = pools[f"{RELEASE}-ureplicator-worker-east"], pools[f"{RELEASE}-ureplicator-worker-shared"]
    assert (east["spec"]["replicas"], shared["spec"]["replicas"]) == (2, 4)
    assert pod_template(east)["spec"]["nodeSelector"] == {"topology.kubernetes.io/zone": "east-1a"}
    assert "nodeSelector" not in pod_template(shared)["spec"]
    env = {p: {e["name"]: e.get("value") for e in pod_template(d)["spec"]["containers"][0]["env"]}
           for p, d in (("east", east), ("shared", shared))}
    assert env["east"]["UREPLICATOR_WORKER_ROUTE"] == "dc1-to-dc2" and "UREPLICATOR_WORKER_ROUTE" not in env["shared"]
    # each workload selects its own pods only; the metrics Service and the PDB see every worker
    for pool in (east, shared):
        picked = [d for d in (east, shared) if _selects(pool["spec"]["selector"]["matchLabels"],
                                                        pod_template(d)["metadata"]["labels"])]
        assert picked == [pool]
    metrics = one(docs, "Service", "worker")
    assert all(_selects(metrics["spec"]["selector"], pod_template(d)["metadata"]["labels"]) for d in (east, shared))
    for version in (KUBE_MIN, KUBE_MAX):
        for doc in render(helm, values, version):
            if (doc["apiVersion"], doc["kind"]) not in CUSTOM_KINDS:
                kubernetes_validate.validate(doc, version, strict=True)


_TWO_ROUTES = """
routes:
  - {id: s-to-t, source: source, destination: target}
  - {id: t-to-s, source: target, destination: source, topic_naming: prefix}
"""


def _worker_env(workload: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in pod_template(workload)["spec"]["containers"][0]["env"]}


def test_route_less_pools_start_shared_pool_workers_probed_and_ready_while_waiting_for_a_binding(
    helm: Path, tmp_path: Path
) -> None:
    # Given two declared routes, a pool pinned to one of them and a pool without a route
    values = tmp_path / "pools.yaml"
    values.write_text(MINIMAL_VALUES.read_text() + _TWO_ROUTES + """
workerPools:
  - {name: east, replicas: 2, route: s-to-t}
  - {name: shared, replicas: 4}
""")
    docs = render(helm, values)
    pools = {d["metadata"]["name"].rsplit("-", 1)[1]: d for d in of_kind(docs, WORKER_KIND)}
    # Then the route-less pool joins the shared pool and the pinned one does not
    assert _worker_env(pools["shared"])["UREPLICATOR_WORKER_POOL"] == "true"
    assert "UREPLICATOR_WORKER_ROUTE" not in _worker_env(pools["shared"])
    assert "UREPLICATOR_WORKER_POOL" not in _worker_env(pools["east"])
    # And each worker loads the rendered config as what it is: a pool worker, or pinned to its route
    path = tmp_path / "config.yaml"
    path.write_text(_config_text(docs))
    for name, pooled, route in (("shared", True, ""), ("east", False, "s-to-t")):
        container = pod_template(pools[name])["spec"]["containers"][0]
        cfg = config.load(path, env=pod_environment(container, pod_name=f"mirror-worker-{name}-0"))
        assert (cfg.worker.pool, cfg.worker.route) == (pooled, route)
    # And both pools' pods are probed on the metrics port; waiting for a binding is not "unready": an
    # unbound pool worker answers /ready (registered in the pool) and /healthz (its session is up)
    # itself, so neither a rolling update nor OrderedReady waits on a binding
    for name, pooled in (("shared", True), ("east", False)):
        container = pod_template(pools[name])["spec"]["containers"][0]
        for probe, path in (("readinessProbe", "/ready"), ("livenessProbe", "/healthz")):
            assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}, (name, probe)
            assert _served_by_worker(path, pooled), (name, path)
    for version in (KUBE_MIN, KUBE_MAX):
        for doc in render(helm, values, version):
            if (doc["apiVersion"], doc["kind"]) not in CUSTOM_KINDS:
                kubernetes_validate.validate(doc, version, strict=True)


def test_with_routes_and_no_pools_the_workers_are_the_shared_pool_and_without_routes_they_stay_pinned(
    helm: Path, tmp_path: Path
) -> None:
    values = tmp_path / "routes.yaml"
    values.write_text(MINIMAL_VALUES.read_text() + _TWO_ROUTES)
    assert _worker_env(one(render(helm, values), WORKER_KIND, "worker"))["UREPLICATOR_WORKER_POOL"] == "true"
    # today's values: one route, the workers serve it as before
    container = pod_template(one(render(helm, MINIMAL_VALUES), WORKER_KIND, "worker"))["spec"]["containers"][0]
    assert "UREPLICATOR_WORKER_POOL" not in _worker_env(one(render(helm, MINIMAL_VALUES), WORKER_KIND, "worker"))
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    # a pool may join the shared pool without declared routes (routes added through the API)
    values.write_text(MINIMAL_VALUES.read_text() + "\nworkerPools:\n  - {name: any, replicas: 1, pool: true}\n")
    (pool,) = of_kind(render(helm, values), WORKER_KIND)
    assert _worker_env(pool)["UREPLICATOR_WORKER_POOL"] == "true"


@pytest.mark.parametrize(("pools", "message"), [
    ("  - {name: a, replicas: 1, route: s-to-t, pool: true}",
     "workerPools[0]: a pool serves its route or joins the shared pool (pool: true), not both"),
    ("  - {name: a, replicas: 1, pool: false}",
     "workerPools[0]: with 2 routes a worker serves one (route: <id>) or joins the shared pool"),
])
def test_a_pool_that_cannot_serve_is_refused_naming_it(helm: Path, tmp_path: Path, pools: str, message: str) -> None:
    values = tmp_path / "bad.yaml"
    values.write_text(MINIMAL_VALUES.read_text() + _TWO_ROUTES + "workerPools:\n" + pools + "\n")
    done = _run_helm(helm, "template", RELEASE, str(CHART), "-f", str(values))
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_every_cluster_of_every_route_gets_its_secrets_and_files_in_every_process(helm: Path, tmp_path: Path) -> None:
    # Given three clusters (SCRAM over TLS, mutual TLS with a key password, plain SASL) and three routes
    values = CHART / "ci" / "routes-values.yaml"
    v = values_of(values)
    docs = render(helm, values)
    path = tmp_path / "config.yaml"
    path.write_text(_config_text(docs))
    for workload in workloads(docs):
        spec = pod_template(workload)["spec"]
        volumes = {vol["name"]: vol for vol in spec["volumes"]}
        container = spec["containers"][0]
        loaded = config.load(path, env=pod_environment(container, pod_name="mirror-worker-0"))
        # Then each process loads every route, and each cluster has its credentials and mounted files
        assert [r.id for r in loaded.routes] == [r["id"] for r in v["routes"]]
        for key in {side for r in v["routes"] for side in (r["source"], r["destination"])}:
            cluster = v["clusters"][key]
            properties = loaded.clusters[cluster.get("alias", key)].properties
            _assert_secrets_arrive(cluster, properties)
            _assert_files_are_mounted(properties, container, volumes)


def test_routes_render_the_clusters_and_routes_of_the_config_contract(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "routes.yaml"
    values.write_text(MINIMAL_VALUES.read_text() + """
routes:
  - {id: s-to-t, source: source, destination: target, topic_naming: prefix, forward: origin}
""")
    docs = render(helm, values)
    rendered = rendered_config(docs)
    assert rendered["routes"] == [{"id": "s-to-t", "source": "source", "destination": "target",
                                   "topic_naming": "prefix", "forward": "origin"}]
    assert set(rendered["clusters"]) == {"source", "target"}
    # Next to routes the loader refuses source/destination sections and the controller's naming
    assert "source" not in rendered and "destination" not in rendered
    assert "topic_naming" not in rendered["controller"]
    path = tmp_path / "config.yaml"
    path.write_text(_config_text(docs))
    container = pod_template(one(docs, "Deployment", "controller"))["spec"]["containers"][0]
    loaded = config.load(path, env=pod_environment(container, pod_name="mirror-controller-0"))
    assert [r.id for r in loaded.routes] == ["s-to-t"]
    assert loaded.source.bootstrap_servers == "source-kafka-bootstrap:9092"
    values.write_text(MINIMAL_VALUES.read_text() + "\nroutes:\n  - {id: x, source: source, destination: nowhere}\n")
    done = _run_helm(helm, "template", RELEASE, str(CHART), "-f", str(values))
    assert done.returncode != 0 and 'routes[0].destination: "nowhere" is not a key of clusters' in done.stderr
