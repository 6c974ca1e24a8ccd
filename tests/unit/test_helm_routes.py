"""The chart against its baseline renders; issue 27: stable worker ids, preflight, REST TLS, pools, routes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.unit.helm_chart import (
    CHART,
    CI_VALUES,
    CONFIG_PATH,
    CUSTOM_KINDS,
    KUBE_MAX,
    KUBE_MIN,
    MINIMAL_VALUES,
    RELEASE,
    WORKER_KIND,
    assert_files_are_mounted,
    assert_secrets_arrive,
    config_text,
    of_kind,
    one,
    pod_environment,
    pod_template,
    render,
    rendered_config,
    run_helm,
    selects,
    served_by_worker,
    values_of,
    workloads,
)
from ureplicator.cli import main as cli
from ureplicator.common import config

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
    # 13. (issue 45) The chart's version is bumped with each chart change: every `helm.sh/chart` label.
    _without_chart_version(doc)
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
        # 12. A worker on the Python copy loop (ureplicator_worker_native_loop 0, commit 1b140fd).
        new = {"UReplicatorRecordsExpired", "UReplicatorFreshnessAboveRpo", "UReplicatorNotMirroring",
               "UReplicatorGroupSyncStale", "UReplicatorRouteWaitingForWorkers", "UReplicatorFetchStalled",
               "UReplicatorPythonCopyLoop"}
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


def _without_chart_version(node: Any) -> None:
    if isinstance(node, dict):
        if "helm.sh/chart" in node:
            node["helm.sh/chart"] = "ureplicator-<chart version>"
        for value in node.values():
            _without_chart_version(value)
    elif isinstance(node, list):
        for value in node:
            _without_chart_version(value)


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
        # (issue 45) each checks as its process: the controller's the admin-token rule it starts under
        assert args.role == component
        # the same credentials (SASL password Secret, the controller's admin token) and the same mounted
        # files as the process it guards
        assert [e for e in init["env"] if e["name"] != "UREPLICATOR_LOG_LEVEL"] == [
            e for e in main["env"] if e["name"].startswith(("UREPLICATOR_SOURCE", "UREPLICATOR_DESTINATION",
                                                            "UREPLICATOR_ZOOKEEPER",
                                                            "UREPLICATOR_CONTROLLER_ADMIN_TOKEN"))]
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
    done = run_helm(helm, "template", RELEASE, str(CHART), "-f", str(values))
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
        picked = [d for d in (east, shared) if selects(pool["spec"]["selector"]["matchLabels"],
                                                        pod_template(d)["metadata"]["labels"])]
        assert picked == [pool]
    metrics = one(docs, "Service", "worker")
    assert all(selects(metrics["spec"]["selector"], pod_template(d)["metadata"]["labels"]) for d in (east, shared))
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
    path.write_text(config_text(docs))
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
            assert served_by_worker(path, pooled), (name, path)
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
    done = run_helm(helm, "template", RELEASE, str(CHART), "-f", str(values))
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_every_cluster_of_every_route_gets_its_secrets_and_files_in_every_process(helm: Path, tmp_path: Path) -> None:
    # Given three clusters (SCRAM over TLS, mutual TLS with a key password, plain SASL) and three routes
    values = CHART / "ci" / "routes-values.yaml"
    v = values_of(values)
    docs = render(helm, values)
    path = tmp_path / "config.yaml"
    path.write_text(config_text(docs))
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
            assert_secrets_arrive(cluster, properties)
            assert_files_are_mounted(properties, container, volumes)


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
    path.write_text(config_text(docs))
    container = pod_template(one(docs, "Deployment", "controller"))["spec"]["containers"][0]
    loaded = config.load(path, env=pod_environment(container, pod_name="mirror-controller-0"))
    assert [r.id for r in loaded.routes] == ["s-to-t"]
    assert loaded.source.bootstrap_servers == "source-kafka-bootstrap:9092"
    values.write_text(MINIMAL_VALUES.read_text() + "\nroutes:\n  - {id: x, source: source, destination: nowhere}\n")
    done = run_helm(helm, "template", RELEASE, str(CHART), "-f", str(values))
    assert done.returncode != 0 and 'routes[0].destination: "nowhere" is not a key of clusters' in done.stderr
