"""The chart's probes, ports and metrics reach what processes serve; shutdown, security and selectors."""

from __future__ import annotations

import functools
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.unit.helm_chart import (
    CHART,
    MINIMAL_VALUES,
    NAMESPACE,
    REPO,
    STANDARD_LABELS,
    VALUES_FILES,
    VALUES_IDS,
    WORKER_KIND,
    component,
    container_port,
    image_user,
    of_kind,
    one,
    pod_template,
    render,
    rendered_config,
    selects,
    served_by_worker,
    values_of,
    worker_pools,
    workloads,
)

# --- probes, ports and metrics -----------------------------------------------------------------


@functools.cache
def _served_by_controller() -> frozenset[str]:
    """GET routes of the controller's REST app (building it needs no ZooKeeper or Kafka)."""
    from ureplicator.controller.api import Controller, create_app

    stub = Controller(config=None, zk=None, leadership=None, source_admin=None, destination_admin=None)  # type: ignore[arg-type]
    app = create_app(stub)
    return frozenset(rule.rule for rule in app.url_map.iter_rules() if "GET" in (rule.methods or ()))




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
                assert probe["path"] == path and served_by_worker(path, pooled)
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
        services = [s for s in of_kind(docs, "Service") if selects(monitor["spec"]["selector"]["matchLabels"],
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




@pytest.mark.parametrize("values", VALUES_FILES, ids=VALUES_IDS)
def test_pods_run_unprivileged_on_a_read_only_root(helm: Path, values: Path | None) -> None:
    docs = render(helm, values)
    for workload in workloads(docs):
        spec = pod_template(workload)["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        # Spark's Hadoop login needs a user in /etc/passwd: the image's, not a random one.
        assert spec["securityContext"]["runAsUser"] == image_user()
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
            picked = [w for w, labels in pods.items() if selects(selector, labels)]
            if doc["kind"] in ("PodDisruptionBudget", "Service") and component(doc) == "worker":
                # the workers' PDB and metrics Service span every worker pool, and nothing else
                assert picked == sorted(p["metadata"]["name"] for p in worker_pools(docs)), picked
                continue
            assert len(picked) == 1, f"{doc['kind']}/{name} selects {picked}"
    for workload in of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet"):
        assert selects(workload["spec"]["selector"]["matchLabels"], pod_template(workload)["metadata"]["labels"])
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
