"""The chart's operators' kit, offline: the Grafana dashboard and the PrometheusRule alerts.

The dashboard is validated against a JSON Schema of Grafana's dashboard model
(tests/support/grafana-dashboard.schema.json); its queries and the rendered alerting rules
are parsed by the pinned promtool (``make promtool``), every metric they name must be one
the processes serve, and ``promtool test rules`` replays scenarios in which each alert must
fire - and the healthy twin of each in which it must not.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from tests.support.verifier_samples import sample_report
from tests.unit.helm_chart import CHART, CI_VALUES, MINIMAL_VALUES, NAMESPACE, RELEASE, of_kind, one, render, values_of

DASHBOARD = CHART / "dashboards" / "ureplicator.json"
SCHEMA = Path(__file__).resolve().parents[1] / "support" / "grafana-dashboard.schema.json"
RULE_VALUES = [v for v in CI_VALUES if values_of(v)["metrics"]["prometheusRule"]["enabled"]]
METRIC = re.compile(r"\b(ureplicator_\w+)")


@pytest.fixture(scope="session")
def served(tmp_path_factory) -> set[str]:
    """Every ureplicator_* sample and family name the worker, controller and verification views expose."""
    from ureplicator.controller import heartbeat
    from ureplicator.controller.metrics import ControllerMetrics
    from ureplicator.controller.verification_api import register_metrics
    from ureplicator.failover.sync import GroupSyncMetrics
    from ureplicator.reports.store import ReportStore
    from ureplicator.worker.metrics import WorkerMetrics

    worker = WorkerMetrics()
    for family in (worker.records, worker.bytes, worker.skipped, worker.produce_errors, worker.expired):
        family.labels("orders").inc()  # labelled families only appear once they have a child
    worker.lag.labels("orders", "0").set(3)
    worker.commits.labels("error").inc()
    reports = tmp_path_factory.mktemp("reports")
    ReportStore(reports).save(sample_report().to_dict())
    verification = CollectorRegistry()
    register_metrics(verification, reports)
    metrics = ControllerMetrics()
    metrics.handoff.labels("default").observe(0.2)  # the controller's families are per route
    metrics.rebalances.labels("default").inc()
    controller = metrics.registry
    heartbeat.HeartbeatMetrics(controller, "p").track("default", lambda: 3.0)
    GroupSyncMetrics(controller)
    exposition = b"".join(generate_latest(r) for r in (worker.registry, controller, verification))
    return set(re.findall(r"^(?:# TYPE )?(ureplicator_\w+)", exposition.decode(), re.MULTILINE))


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries() -> list[tuple[str, str]]:
    return [(f"{p['id']}{t['refId']}", t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]


def rendered_rules(helm: Path, values: Path | None) -> dict[str, Any]:
    (rule,) = of_kind(render(helm, values), "PrometheusRule")
    return rule


def check_rules(promtool: Path, groups: list[dict[str, Any]], path: Path) -> subprocess.CompletedProcess[str]:
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


# --- the dashboard -------------------------------------------------------------------------------


def test_dashboard_matches_grafanas_dashboard_schema() -> None:
    doc = dashboard()
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(doc)
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in doc["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, f"{panel['title']} runs off the 24-column grid"
    variables = {v["name"] for v in doc["templating"]["list"]}
    used = {name for _, expr in dashboard_queries() for name in re.findall(r"\$(\w+)", expr)} - {"__rate_interval"}
    assert used <= variables, f"queries use undefined variables: {sorted(used - variables)}"


def test_dashboard_shows_lag_throughput_latency_handoffs_and_the_verdict() -> None:
    queries = " ".join(expr for _, expr in dashboard_queries())
    for metric in ("ureplicator_worker_source_lag_records", "ureplicator_worker_records_mirrored_total",
                   "ureplicator_worker_replication_latency_seconds_bucket",
                   "ureplicator_controller_handoff_duration_seconds_count", "ureplicator_verification_status"):
        assert metric in queries, f"the dashboard has no panel on {metric}"


def test_dashboard_has_a_route_variable_and_every_per_route_panel_filters_on_it() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["route"]["includeAll"] and variables["route"]["multi"]
    assert "ureplicator_controller_" in variables["route"]["definition"]
    # The controller's, the verifier's and the workers' series all carry route
    per_route = [(ref, expr) for ref, expr in dashboard_queries()
                 if re.search(r"ureplicator_(controller|verification|worker)_", expr)]
    assert per_route and all('route=~"$route"' in expr for _, expr in per_route), per_route
    assert any("ureplicator_worker_" in expr for _, expr in per_route)
    # A topic name two routes mirror is two series: the worker panels that sum keep route apart
    summed = [expr for _, expr in per_route if "ureplicator_worker_" in expr and "sum" in expr]
    assert summed and all("sum by (route" in expr for expr in summed), summed
    # The topic variable follows the chosen routes, so it is defined after route
    names = list(variables)
    assert names.index("route") < names.index("topic") and 'route=~"$route"' in variables["topic"]["definition"]


def test_dashboard_shows_freshness_first() -> None:
    panels = sorted(dashboard()["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    first_queries = [t["expr"] for p in panels[:3] for t in p.get("targets", [])]
    assert panels[0]["type"] == "row" and panels[0]["title"] == "Freshness"
    assert first_queries and all("ureplicator_heartbeat_age_seconds" in q for q in first_queries)


def test_dashboard_queries_name_only_served_metrics(served: set[str]) -> None:
    named = {m for _, expr in dashboard_queries() for m in METRIC.findall(expr)}
    assert named and named <= served, f"not served: {sorted(named - served)}"


def test_dashboard_queries_are_valid_promql(promtool: Path, tmp_path: Path) -> None:
    # Grafana's variables become what they expand to with "All" selected.
    concrete = {"$__rate_interval": "5m", "$namespace": ".*", "$topic": ".*", "$route": ".*"}
    rules = []
    for ref, expr in dashboard_queries():
        for variable, value in concrete.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:query_{ref}", "expr": expr})
    done = check_rules(promtool, [{"name": "dashboard", "rules": rules}], tmp_path / "dashboard.rules.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_chart_ships_the_dashboard_unchanged_for_grafanas_sidecar(helm: Path) -> None:
    many = next(v for v in CI_VALUES if v.name == "many-workers-values.yaml")
    (config_map,) = [d for d in of_kind(render(helm, many), "ConfigMap") if "ureplicator.json" in d["data"]]
    # The same dashboard, with a uid of this release's own: two releases never share one
    shipped = json.loads(config_map["data"]["ureplicator.json"])
    assert shipped == {**dashboard(), "uid": f"urep-{NAMESPACE}-{RELEASE}"}
    other = json.loads(next(d for d in of_kind(render(helm, many, release="other"), "ConfigMap")
                            if "ureplicator.json" in d["data"])["data"]["ureplicator.json"])
    assert other["uid"] != shipped["uid"] and len(other["uid"]) <= 40
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert not [d for d in of_kind(render(helm, MINIMAL_VALUES), "ConfigMap") if "ureplicator.json" in d["data"]]


# --- the alerting rules ------------------------------------------------------------------------


@pytest.mark.parametrize("values", RULE_VALUES, ids=[v.name.removesuffix("-values.yaml") for v in RULE_VALUES])
def test_rendered_rules_pass_promtool_and_name_only_served_metrics(
    helm: Path, promtool: Path, values: Path, served: set[str], tmp_path: Path
) -> None:
    rule = rendered_rules(helm, values)
    done = check_rules(promtool, rule["spec"]["groups"], tmp_path / "rules.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"UReplicatorLagGrowing", "UReplicatorProduceErrors", "UReplicatorPartitionsWithoutOwner",
            "UReplicatorNoLeader", "UReplicatorReleaseCommitFailures", "UReplicatorPartitionRewinds",
            "UReplicatorElectionErrors", "UReplicatorVerificationFailed", "UReplicatorVerificationMissing",
            "UReplicatorRecordsExpired", "UReplicatorFreshnessAboveRpo", "UReplicatorNotMirroring",
            "UReplicatorRouteWaitingForWorkers"} <= alerts
    named = {m for g in rule["spec"]["groups"] for r in g["rules"] for m in METRIC.findall(r["expr"])}
    assert named <= served, f"not served: {sorted(named - served)}"


def test_no_prometheus_rule_unless_enabled(helm: Path) -> None:
    assert not of_kind(render(helm, MINIMAL_VALUES), "PrometheusRule")


def _alert_test(promtool: Path, tmp_path: Path, groups: list[dict[str, Any]], tests: list[dict[str, Any]]) -> str:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False))
    done = subprocess.run([str(promtool), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _fires(alert: str, at: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert,
            "exp_alerts": [{"exp_labels": labels or {}}] if labels is not None else []}


def _annotations(groups: list[dict[str, Any]], alert: str) -> dict[str, str]:
    return next(r for g in groups for r in g["rules"] if r.get("alert") == alert)["annotations"]


def test_each_alert_fires_in_its_scenario_and_stays_quiet_when_healthy(helm: Path, promtool: Path,
                                                                     tmp_path: Path) -> None:
    # Given the rules of a release with the verifier's reports served by the controllers
    values = next(v for v in CI_VALUES if v.name == "auto-whitelist-values.yaml")
    docs = render(helm, values)
    (rule,) = of_kind(docs, "PrometheusRule")
    groups = rule["spec"]["groups"]
    pipeline = values_of(values)["pipeline"]
    services = {d["metadata"]["name"] for d in of_kind(docs, "Service")}
    controller_service = one(docs, "Service", "controller")["metadata"]["name"]
    (worker_service,) = [name for name in services if name.endswith("-worker-metrics")]
    verifier_job = f'{one(docs, "CronJob", "verifier")["metadata"]["name"]}-2901'
    controller = f'namespace="{NAMESPACE}", service="{controller_service}"'
    workers = f'namespace="{NAMESPACE}", service="{worker_service}"'
    severity = {"warning": {"severity": "warning", "pipeline": pipeline},
                "critical": {"severity": "critical", "pipeline": pipeline}}

    def alert(name: str, at: str, series: list[tuple[str, str]], labels: dict[str, str] | None,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
        case = _fires(name, at, labels)
        if labels is not None:
            case["exp_alerts"][0]["exp_annotations"] = annotations or _annotations(groups, name)
        return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [case]}

    # Worker series carry the route they mirror (worker/metrics.py): the worker alerts fire per route
    lag = f'ureplicator_worker_source_lag_records{{{workers}, pod="w-1", route="east", topic="orders", partition="3"}}'
    other_lag = lag.replace('route="east"', 'route="west"')
    lag_annotations = {
        "summary": "Replication lag of orders[3] on route east keeps growing",
        "description": _annotations(groups, "UReplicatorLagGrowing")["description"].replace(
            "{{ $value | humanize }}", "5k"),
    }
    leader = f"ureplicator_controller_leader{{{controller}, pod=\"c-%d\", route=\"%s\"}}"
    unassigned = f'ureplicator_controller_unassigned_partitions{{{controller}, pod="c-0", route="east"}}'
    waiting = f'ureplicator_controller_route_waiting_for_workers{{{controller}, pod="c-0", route="%s"}}'
    release_failures = f'ureplicator_worker_release_commit_failures_total{{{workers}, pod="w-1", route="east"}}'
    rewinds = f'ureplicator_worker_partition_rewinds_total{{{workers}, pod="w-%d", route="east"}}'
    # A ZooKeeper blip rewinds all of a worker's partitions at once (4 here): every 10 minutes, or once
    every_10m = " ".join(str(4 * (minute // 10)) for minute in range(61))
    election_errors = f'ureplicator_controller_election_errors_total{{{controller}, pod="c-0"}}'
    replacements = f'ureplicator_worker_producer_replacements_total{{{workers}, pod="w-1", route="east"}}'
    python_loop = (f'ureplicator_worker_native_loop{{{workers}, pod="w-1", route="east", '
                   'reason="worker.native_loop is off"}')
    native_loop = f'ureplicator_worker_native_loop{{{workers}, pod="w-1", route="east", reason=""}}'
    expired = f'ureplicator_worker_records_expired_total{{{workers}, pod="w-1", route="east", topic="orders"}}'
    mirrored = f'ureplicator_worker_records_mirrored_total{{{workers}, pod="w-1", route="east", topic="orders"}}'
    other_mirrored = mirrored.replace('route="east"', 'route="west"')
    heartbeat_age = (f'ureplicator_heartbeat_age_seconds{{{controller}, pod="c-0", pipeline="{pipeline}", '
                     'route="default"}')
    other_route = heartbeat_age.replace('route="default"', 'route="b2c"')
    cronjob = one(docs, "CronJob", "verifier")["metadata"]["name"]
    failed_job = f'kube_job_status_failed{{namespace="{NAMESPACE}", job_name="{verifier_job}"}}'
    job_start = f'kube_job_status_start_time{{namespace="{NAMESPACE}", job_name="{verifier_job}"}}'
    last_success = f'kube_cronjob_status_last_successful_time{{namespace="{NAMESPACE}", cronjob="{cronjob}"}}'
    tests = [
        # When lag grows by 500 records a minute for 40 minutes, then it alerts; a high steady lag does not
        alert("UReplicatorLagGrowing", "40m", [(lag, "2000+500x40")],
              {**severity["warning"], "route": "east", "topic": "orders", "partition": "3"}, lag_annotations),
        alert("UReplicatorLagGrowing", "40m", [(lag, "50000x40")], None),
        # The same topic and partition on another route whose lag falls does not hide (or cancel) route east's
        alert("UReplicatorLagGrowing", "40m", [(lag, "2000+500x40"), (other_lag, "30000-500x40")],
              {**severity["warning"], "route": "east", "topic": "orders", "partition": "3"}, lag_annotations),
        # When no controller leads, or two lead a route, or controllers vanish; not when exactly one leads each
        alert("UReplicatorNoLeader", "10m", [(leader % (0, "east"), "0x10")],
              {**severity["critical"], "route": "east"}),
        alert("UReplicatorNoLeader", "10m", [(leader % (0, "east"), "1x10"), (leader % (1, "east"), "1x10")],
              {**severity["critical"], "route": "east"}),
        alert("UReplicatorNoLeader", "10m", [(leader % (0, "east"), "1x10"), (leader % (0, "west"), "1x10")], None),
        # When a worker released partitions without their final commit lately; not for one long ago
        alert("UReplicatorReleaseCommitFailures", "10m", [(release_failures, "0x5 2x5")],
              {**severity["warning"], "pod": "w-1", "route": "east"},
              {**_annotations(groups, "UReplicatorReleaseCommitFailures"),
               "summary": "Worker w-1 released partitions of route east without committing their final offsets"}),
        alert("UReplicatorReleaseCommitFailures", "30m", [(release_failures, "0 1x30")], None),
        # When partitions are rewound every 10 minutes for an hour; not 14 minutes after a single blip
        alert("UReplicatorPartitionRewinds", "60m", [(rewinds % 1, every_10m), (rewinds % 2, "0x60")],
              {**severity["warning"], "route": "east"},
              {**_annotations(groups, "UReplicatorPartitionRewinds"),
               "summary": "Workers of route east keep rewinding partitions to their acknowledged position"}),
        alert("UReplicatorPartitionRewinds", "44m", [(rewinds % 1, "0x30 4x30"), (rewinds % 2, "0x60")], None),
        # When a worker replaced its fatal producer lately; not for one an hour ago
        alert("UReplicatorProducerReplaced", "10m", [(replacements, "0x5 1x5")],
              {**severity["warning"], "pod": "w-1", "route": "east"},
              {**_annotations(groups, "UReplicatorProducerReplaced"),
               "summary": "Worker w-1 replaced its destination producer for route east after a fatal error"}),
        alert("UReplicatorProducerReplaced", "60m", [(replacements, "0 1x60")], None),
        # When a worker has copied on the Python loop for 15 minutes, with its reason; not on the C loop
        alert("UReplicatorPythonCopyLoop", "20m", [(python_loop, "0x20")],
              {**severity["warning"], "pod": "w-1", "route": "east", "reason": "worker.native_loop is off"},
              {**_annotations(groups, "UReplicatorPythonCopyLoop"),
               "summary": "Worker w-1 copies route east on the Python loop: worker.native_loop is off"}),
        alert("UReplicatorPythonCopyLoop", "20m", [(native_loop, "1x20")], None),
        alert("UReplicatorPythonCopyLoop", "10m", [(python_loop, "0x10")], None),
        # When the election thread survived an error lately; not when it never failed
        alert("UReplicatorElectionErrors", "10m", [(election_errors, "0x5 1x5")],
              {**severity["warning"], "pod": "c-0"},
              {**_annotations(groups, "UReplicatorElectionErrors"),
               "summary": "The election thread of controller c-0 hit unexpected errors"}),
        alert("UReplicatorElectionErrors", "10m", [(election_errors, "0x10")], None),
        # When partitions of a route stay unassigned longer than a hand-off; not for a brief hand-off
        alert("UReplicatorPartitionsWithoutOwner", "10m", [(unassigned, "3x10"), (waiting % "east", "0x10")],
              {**severity["warning"], "route": "east"},
              {**_annotations(groups, "UReplicatorPartitionsWithoutOwner"),
               "summary": "3 source partitions of route east have no worker"}),
        alert("UReplicatorPartitionsWithoutOwner", "10m", [(unassigned, "0 0 0 0 0 0 0 3 0 0 0")], None),
        # When an active route has no worker at all for 10 minutes: that alert, not the one above
        alert("UReplicatorRouteWaitingForWorkers", "15m", [(unassigned, "3x15"), (waiting % "east", "1x15")],
              {**severity["warning"], "route": "east"},
              {**_annotations(groups, "UReplicatorRouteWaitingForWorkers"),
               "summary": "Route east is active and no worker serves it"}),
        alert("UReplicatorPartitionsWithoutOwner", "15m", [(unassigned, "3x15"), (waiting % "east", "1x15")], None),
        alert("UReplicatorRouteWaitingForWorkers", "15m", [(waiting % "east", "0x15"), (waiting % "west", "1x5 0x10")],
              None),
        # When the newest verification FAILed; not when it was OK or WARN
        alert("UReplicatorVerificationFailed", "5m",
              [(f"ureplicator_verification_status{{{controller}, pod=\"c-0\"}}", "2x5")], severity["critical"]),
        alert("UReplicatorVerificationFailed", "5m",
              [(f"ureplicator_verification_status{{{controller}, pod=\"c-0\"}}", "1x5")], None),
        # When a verifier Job failed (kube-state-metrics)
        alert("UReplicatorVerificationFailed", "5m",
              [(f'kube_job_status_failed{{namespace="{NAMESPACE}", job_name="{verifier_job}"}}', "1x5")],
              {**severity["critical"], "job_name": verifier_job}),
        # When it failed after the CronJob's last success; not once a later run succeeded (the failed Job lingers)
        alert("UReplicatorVerificationFailed", "5m",
              [(failed_job, "1x5"), (job_start, "9000x5"), (last_success, "5000x5")],
              {**severity["critical"], "job_name": verifier_job}),
        alert("UReplicatorVerificationFailed", "5m",
              [(failed_job, "1x5"), (job_start, "1000x5"), (last_success, "5000x5")], None),
        # When retention deleted source records before they were mirrored (data loss); not when none expired
        alert("UReplicatorRecordsExpired", "10m", [(expired, "0x5 40x5")],
              {**severity["critical"], "route": "east", "topic": "orders"},
              {**_annotations(groups, "UReplicatorRecordsExpired"),
               "summary": "Records of orders expired on route east's source before they were mirrored: data loss",
               "description": _annotations(groups, "UReplicatorRecordsExpired")["description"].replace(
                   "{{ $value | humanize }}", "40")}),
        alert("UReplicatorRecordsExpired", "30m", [(expired, "0x30")], None),
        # When the newest heartbeat on the destination is older than the RPO (300 s) for 2 minutes; not at 10 s
        alert("UReplicatorFreshnessAboveRpo", "10m", [(heartbeat_age, "10+60x10")],
              {**severity["critical"], "route": "default"},
              {**_annotations(groups, "UReplicatorFreshnessAboveRpo"),
               "summary": "Route default: the destination is more than the RPO behind the source "
                          "(newest heartbeat 10m 10s old)"}),
        alert("UReplicatorFreshnessAboveRpo", "10m", [(heartbeat_age, "10x10")], None),
        # With two routes, a fresh one does not hide a stale one: the alert names the stale route
        alert("UReplicatorFreshnessAboveRpo", "10m", [(heartbeat_age, "10x10"), (other_route, "10+60x10")],
              {**severity["critical"], "route": "b2c"},
              {**_annotations(groups, "UReplicatorFreshnessAboveRpo"),
               "summary": "Route b2c: the destination is more than the RPO behind the source "
                          "(newest heartbeat 10m 10s old)"}),
        # When a topic has lag and nothing was mirrored for 10+10 minutes; not while records flow
        alert("UReplicatorNotMirroring", "30m", [(lag, "500x30"), (mirrored, "100x30")],
              {**severity["warning"], "route": "east", "topic": "orders"},
              {**_annotations(groups, "UReplicatorNotMirroring"),
               "summary": "orders (route east) is assigned and has lag, but nothing was mirrored for 10 minutes"}),
        alert("UReplicatorNotMirroring", "30m", [(lag, "500x30"), (mirrored, "100+100x30")], None),
        # Records flowing for the same topic on another route do not hide that route east stands still
        alert("UReplicatorNotMirroring", "30m", [(lag, "500x30"), (mirrored, "100x30"), (other_mirrored, "100+100x30")],
              {**severity["warning"], "route": "east", "topic": "orders"},
              {**_annotations(groups, "UReplicatorNotMirroring"),
               "summary": "orders (route east) is assigned and has lag, but nothing was mirrored for 10 minutes"}),
    ]
    output = _alert_test(promtool, tmp_path, groups, tests)
    assert "SUCCESS" in output


def test_missing_verification_alerts_after_the_configured_age(helm: Path, promtool: Path, tmp_path: Path) -> None:
    # Given verificationMaxAgeSeconds: 7200 and kube-state-metrics for the verifier's CronJob
    values = next(v for v in CI_VALUES if v.name == "all-options-values.yaml")
    docs = render(helm, values)
    (rule,) = of_kind(docs, "PrometheusRule")
    groups = rule["spec"]["groups"]
    labels = {"severity": "warning", "pipeline": values_of(values)["pipeline"]}
    cronjob = f'namespace="{NAMESPACE}", cronjob="{one(docs, "CronJob", "verifier")["metadata"]["name"]}"'

    def case(series: list[tuple[str, str]], fires: bool) -> dict[str, Any]:
        expected = [{"exp_labels": labels, "exp_annotations": _annotations(groups, "UReplicatorVerificationMissing")}]
        return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [{"eval_time": "4h", "alertname": "UReplicatorVerificationMissing",
                                     "exp_alerts": expected if fires else []}]}

    tests = [
        # When the CronJob exists since t=0 and never succeeded: after 2 h + the rule's 1 h
        case([(f"kube_cronjob_created{{{cronjob}}}", "0x240")], True),
        # When the last success was at t=0: the same
        case([(f"kube_cronjob_created{{{cronjob}}}", "0x240"),
              (f"kube_cronjob_status_last_successful_time{{{cronjob}}}", "0x240")], True),
        # Not when it just succeeded (the series holds the time of the last success)
        case([(f"kube_cronjob_created{{{cronjob}}}", "0x240"),
              (f"kube_cronjob_status_last_successful_time{{{cronjob}}}", "0+60x240")], False),
    ]
    assert "SUCCESS" in _alert_test(promtool, tmp_path, groups, tests)


def test_warm_verifier_alerts_when_its_pod_is_down_a_pass_fails_or_none_completes(
    helm: Path, promtool: Path, tmp_path: Path
) -> None:
    # Given the warm verifier (a Deployment) whose reports the controllers serve
    values = next(v for v in CI_VALUES if v.name == "warm-verifier-values.yaml")
    docs = render(helm, values)
    (rule,) = of_kind(docs, "PrometheusRule")
    groups = rule["spec"]["groups"]
    assert not [r for g in groups for r in g["rules"] if "kube_cronjob" in r["expr"] or "kube_job" in r["expr"]]
    pipeline = values_of(values)["pipeline"]
    age = values_of(values)["metrics"]["prometheusRule"]["verificationMaxAgeSeconds"]
    deployment = f'namespace="{NAMESPACE}", deployment="{one(docs, "Deployment", "verifier")["metadata"]["name"]}"'
    controller = f'namespace="{NAMESPACE}", service="{one(docs, "Service", "controller")["metadata"]["name"]}"'
    available = f"kube_deployment_status_replicas_available{{{deployment}}}"
    status = f'ureplicator_verification_status{{{controller}, pod="c-0"}}'
    last_run = f'ureplicator_verification_last_run_timestamp_seconds{{{controller}, pod="c-0"}}'
    minutes = 240
    fresh = f"0+60x{minutes}"  # a pass ends every minute
    stale = f"0x{minutes}"  # the last pass ended at t=0

    def case(alert: str, severity: str, series: list[tuple[str, str]], fires: bool) -> dict[str, Any]:
        labels = {"severity": severity, "pipeline": pipeline}
        expected = [{"exp_labels": labels, "exp_annotations": _annotations(groups, alert)}] if fires else []
        return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [{"eval_time": f"{minutes}m", "alertname": alert, "exp_alerts": expected}]}

    assert age < (minutes - 60) * 60
    tests = [
        # When the pod is not available for over an hour
        case("UReplicatorVerificationMissing", "warning", [(available, f"0x{minutes}"), (last_run, fresh)], True),
        # When the pod runs but no pass has completed for longer than the configured age
        case("UReplicatorVerificationMissing", "warning", [(available, f"1x{minutes}"), (last_run, stale)], True),
        # Not when it runs and passes complete
        case("UReplicatorVerificationMissing", "warning", [(available, f"1x{minutes}"), (last_run, fresh)], False),
        # When the newest pass failed (2) or could not run (3); not while it is OK
        case("UReplicatorVerificationFailed", "critical", [(status, f"2x{minutes}")], True),
        case("UReplicatorVerificationFailed", "critical", [(status, f"0x{minutes}")], False),
    ]
    assert "SUCCESS" in _alert_test(promtool, tmp_path, groups, tests)
