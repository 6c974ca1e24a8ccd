"""Issue 45: the chart's values schema accepts exactly what the application accepts, and nothing it refuses.

A key the application knows but the schema rejects cannot be set on Kubernetes at all
(``controller.group_sync.timeout_s``, ``routes[].topic_mapping``); a value the schema accepts but
the application refuses (a route id with a '.') installs cleanly and then crash-loops every pod.
"""

from __future__ import annotations

import configparser
import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helm_chart import (
    CHART,
    MINIMAL_VALUES,
    RELEASE,
    REPO,
    config_text,
    one,
    pod_environment,
    pod_template,
    render,
    rendered_config,
    run_helm,
    values_of,
)
from ureplicator.common import config, topology

SCHEMA = json.loads((CHART / "values.schema.json").read_text())

# JSON schema type per config field type (common/config.py's annotated aliases).
_JSON_TYPES: list[tuple[Any, str]] = [
    (config.Flag, "boolean"), (config.Integer, "integer"), (config.Number, "number"),
    (config.Text, "string"), (config.OptionalText, "string"), (config.Properties, "object"),
]

# Keys of a section that the chart sets itself, so its `config` block does not offer them.
_CHART_SET = {
    # containerPorts.http, adminToken Secret, verificationReports mount, controller.tls Secret
    "controller": {"rest_port", "admin_token", "verification_dir", "rest_tls_certfile", "rest_tls_keyfile"},
    "worker": {"id", "metrics_port", "route"},  # pod name, containerPorts.metrics, the pool's route
}


def _json_type(hint: Any) -> str | None:
    return next((name for alias, name in _JSON_TYPES if hint == alias), None)


def _schema_type(prop: dict[str, Any]) -> set[str]:
    kind = prop.get("type")
    if kind is None and "enum" in prop:
        return {"string"} if all(isinstance(v, str) for v in prop["enum"]) else set()
    return set(kind) if isinstance(kind, list) else {kind}


def _compare(section: type, schema: dict[str, Any], where: str, chart_set: set[str] = frozenset()) -> list[str]:
    """Every field of ``section`` (nested sections too) offered by ``schema`` with its type, and no other key."""
    problems = []
    hints = typing.get_type_hints(section, include_extras=True)
    offered = schema.get("properties", {})
    if schema.get("additionalProperties") is not False:
        problems.append(f"{where}: additionalProperties must be false (a typo would reach the loader)")
    fields = {f.name for f in dataclasses.fields(section)}
    problems += [f"{where}.{k}: offered by the schema, refused by the loader" for k in sorted(set(offered) - fields)]
    for name in sorted(fields - chart_set):
        key = f"{where}.{name}"
        if name not in offered:
            problems.append(f"{key}: the loader takes it, the schema refuses it")
        elif dataclasses.is_dataclass(hints[name]):
            problems += _compare(hints[name], offered[name], key)
        else:
            expected, actual = _json_type(hints[name]), _schema_type(offered[name])
            # an integer-only schema for a number field is stricter, never wrong
            if expected is not None and expected not in actual and not (expected == "number" and "integer" in actual):
                problems.append(f"{key}: the loader takes a {expected}, the schema {offered[name]}")
    return problems


@pytest.mark.parametrize("component", ["controller", "worker"])
def test_every_config_key_of_the_loader_is_accepted_by_the_values_schema_nested_sections_too(component: str) -> None:
    section = {"controller": config.ControllerConfig, "worker": config.WorkerConfig}[component]
    schema = SCHEMA["properties"][component]["properties"]["config"]
    assert _compare(section, schema, f"{component}.config", _CHART_SET[component]) == []


def test_every_route_key_of_the_loader_is_accepted_by_the_values_schema() -> None:
    assert _compare(config.RouteConfig, SCHEMA["properties"]["routes"]["items"], "routes[]") == []


def test_the_charts_route_id_pattern_is_the_applications() -> None:
    # common/topology.py's ROUTE_ID_RE is what config.load and POST /routes check; the chart's
    # copies (routes[].id, workerPools[].route) must say the same, or a helm install that
    # succeeds leaves pods in a crash loop.
    routes = SCHEMA["properties"]["routes"]["items"]["properties"]
    pools = SCHEMA["properties"]["workerPools"]["items"]["properties"]
    assert routes["id"]["pattern"] == topology.ROUTE_ID_RE.pattern
    assert pools["route"]["pattern"] == topology.ROUTE_ID_RE.pattern
    # and the topic names of a route's mapping are the loader's
    mapping = routes["topic_mapping"]
    assert mapping["propertyNames"]["pattern"] == config._TOPIC_RE.pattern
    assert mapping["additionalProperties"]["pattern"] == config._TOPIC_RE.pattern


def _with_routes(tmp_path: Path, routes: str, extra: str = "") -> Path:
    values = tmp_path / "values.yaml"
    values.write_text(MINIMAL_VALUES.read_text() + "\nroutes:\n" + routes + "\n" + extra)
    return values


@pytest.mark.parametrize(("route_id", "accepted"), [
    ("a" * 64, True), ("dc1_to-dc2", True), ("a" * 65, False), ("dc1.to.dc2", False), ("", False),
])
def test_helm_accepts_a_route_id_exactly_when_the_application_does(
    helm: Path, tmp_path: Path, route_id: str, accepted: bool
) -> None:
    values = _with_routes(tmp_path, f"  - {{id: {json.dumps(route_id)}, source: source, destination: target}}")
    done = run_helm(helm, "template", RELEASE, str(CHART), "-f", str(values))
    assert (done.returncode == 0) == accepted, done.stderr
    assert bool(topology.ROUTE_ID_RE.match(route_id)) == accepted
    if not accepted:
        assert "/routes/0/id" in done.stderr, done.stderr


def test_a_route_with_mapping_workers_and_shared_renders_them_and_the_application_loads_them(
    helm: Path, tmp_path: Path
) -> None:
    # Given a route that renames its topics, bounds its workers and shares its topics
    values = _with_routes(tmp_path, """  - id: s-to-t
    source: source
    destination: target
    topic_naming: mapping
    topic_mapping: {orders: orders-dr, payments: payments-dr}
    workers: {min: 2, max: 4}
    shared: true
    forward: transit""")
    docs = render(helm, values)
    # Then the config file carries them, and the process loads the route the values describe
    (route,) = rendered_config(docs)["routes"]
    assert route["topic_mapping"] == {"orders": "orders-dr", "payments": "payments-dr"}
    path = tmp_path / "config.yaml"
    path.write_text(config_text(docs))
    container = pod_template(one(docs, "Deployment", "controller"))["spec"]["containers"][0]
    (loaded,) = config.load(path, env=pod_environment(container, pod_name="mirror-controller-0")).routes
    assert loaded.definition() == {
        "id": "s-to-t", "source": "source", "destination": "target", "topic_naming": "mapping",
        "topic_mapping": {"orders": "orders-dr", "payments": "payments-dr"}, "forward": "transit",
        "workers": {"min": 2, "max": 4}, "shared": True}


@pytest.mark.parametrize(("route", "message"), [
    ("{id: a, source: source, destination: target, workers: {min: 3, max: 2}}",
     "routes[0].workers: min 3 is above max 2"),
    ("{id: a, source: source, destination: target, workers: {min: -1}}", "/routes/0/workers/min"),
    ("{id: a, source: source, destination: target, topic_mapping: {orders: 'bad name'}}",
     "/routes/0/topic_mapping/orders"),
    ("{id: a, source: source, destination: target, replicas: 3}", "/routes/0"),
])
def test_route_values_the_application_refuses_fail_at_install(
    helm: Path, tmp_path: Path, route: str, message: str
) -> None:
    done = run_helm(helm, "template", RELEASE, str(CHART), "-f", str(_with_routes(tmp_path, f"  - {route}")))
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_every_group_sync_key_renders_and_loads(helm: Path, tmp_path: Path) -> None:
    # Every key of controller.group_sync, set to a non-default value, reaches the loaded config:
    # the schema accepts it (helm validates values against it) and the template passes it on.
    chosen = {"enabled": True, "interval_s": 30.0, "include": "billing-.*", "exclude": ".*-test", "timeout_s": 7.5}
    assert set(chosen) == {f.name for f in dataclasses.fields(config.GroupSyncConfig)}, "a new key: add it here"
    values = tmp_path / "values.yaml"
    minimal = yaml.safe_load(MINIMAL_VALUES.read_text())
    minimal.setdefault("controller", {}).setdefault("config", {})["group_sync"] = chosen
    values.write_text(yaml.safe_dump(minimal))
    docs = render(helm, values)
    path = tmp_path / "config.yaml"
    path.write_text(config_text(docs))
    container = pod_template(one(docs, "Deployment", "controller"))["spec"]["containers"][0]
    loaded = config.load(path, env=pod_environment(container, pod_name="mirror-controller-0"))
    assert dataclasses.asdict(loaded.controller.group_sync) == chosen


def test_chart_versions_match_the_release_and_no_text_names_a_later_chart() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    assert chart["appVersion"] == setup["metadata"]["version"]
    own = tuple(int(x) for x in chart["version"].split(".")[:2])
    # "before 0.2" in a chart whose version is 0.1.0 speaks of a release that does not exist
    for path in (CHART / "values.yaml", REPO / "docs" / "deploy.md", CHART / "README.md"):
        for major, minor in re.findall(r"\b(?:before|chart|since) (\d+)\.(\d+)\b", path.read_text()):
            assert (int(major), int(minor)) <= own, f"{path.name} names chart {major}.{minor}; Chart.yaml is {own}"


def test_deploy_md_waits_for_the_workers_of_the_default_kind() -> None:
    # `rollout status deployment/...-worker` fails on a default install: the workers are a StatefulSet.
    kind = values_of(None)["worker"]["kind"]
    text = (REPO / "docs" / "deploy.md").read_text()
    commands = re.findall(r"^(#?\s*)kubectl .*rollout status (\w+)/\S+-worker\b", text, flags=re.M)
    assert commands and commands[0] == ("", kind.lower()), commands
    assert f"{kind} `<release>-ureplicator-worker`" in text
