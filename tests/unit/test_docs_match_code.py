"""The docs name only what exists: config keys (docs/configuration.md), REST paths (docs/api.md) and the
chart's values keys named anywhere in the docs, checked against the code and helm/ureplicator/values.yaml."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from ureplicator.common import config

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md", REPO / "helm" / "ureplicator" / "README.md"]
VALUES = yaml.safe_load((REPO / "helm" / "ureplicator" / "values.yaml").read_text())

# Fields of the loaded view that no file sets: a route's forwarding and id come from its `routes[]` entry.
_UNDOCUMENTED_HERE = {"forward", "route_id"}
_ROUTES_KEYS = {"worker.route"}


def config_keys() -> set[str]:
    keys: set[str] = set()

    def walk(cls: type, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            name = f"{prefix}{f.name}"
            nested = config._NESTED.get(f.name) if prefix else None
            if nested is not None:
                walk(nested, f"{name}.")
            elif dataclasses.is_dataclass(f.type) or f.name in config._SECTIONS and not prefix:
                walk(config._SECTIONS[f.name], f"{name}.")
            else:
                keys.add(name)

    walk(config.Config, "")
    return keys


def documented_config_keys() -> set[str]:
    text = (REPO / "docs" / "configuration.md").read_text()
    keys = set(re.findall(r"^\| `([a-z_.]+)` \|", text, flags=re.M))
    # `clusters.<alias>.bootstrap_servers`, `routes[].id`: the maps and lists of the deployment
    keys.update(re.findall(r"^\| `(clusters|routes)[.\[]", text, flags=re.M))
    return keys


def test_every_config_key_in_configuration_md_exists_and_every_key_is_documented():
    code, docs = config_keys(), documented_config_keys()
    assert docs - code == set(), "configuration.md documents keys the loader does not know"
    assert code - docs - _UNDOCUMENTED_HERE == set(), "keys missing from configuration.md"


def _app_rules() -> list[str]:
    from ureplicator.controller import groups_api
    from ureplicator.controller.api import Controller, create_app
    from ureplicator.controller.verification_api import make_blueprint

    stub = Controller(config=None, zk=None, leadership=None, source_admin=None, destination_admin=None,  # type: ignore[arg-type]
                      route_blueprints=[make_blueprint(None), groups_api.make_blueprint(None)])  # type: ignore[arg-type]
    return sorted({r.rule for r in create_app(stub).url_map.iter_rules() if r.endpoint != "static"})


def documented_paths() -> set[str]:
    """`METHOD /path` in api.md, with shorthands like "`POST /topics/<t>/pause`, `/resume`" expanded."""
    text = (REPO / "docs" / "api.md").read_text()
    paths = set()
    for line in text.splitlines():
        full = re.findall(r"`(?:GET|POST|PUT|DELETE|PATCH) (/[^` ?]*)", line)
        paths.update(full)
        if full:
            base = full[-1].rsplit("/", 1)[0]
            paths.update(f"{base}{extra}" if not extra.startswith(base) else extra
                         for extra in re.findall(r", `(/[a-z_]+)`", line))
    return paths


def _matches(rule: str, path: str) -> bool:
    pattern = re.sub(r"<path:[^>]+>", ".+", rule)
    pattern = re.sub(r"<[^>]+>", "[^/]+", pattern)
    return re.fullmatch(pattern, re.sub(r"<[^>]+>", "x", path)) is not None


def test_every_path_in_api_md_is_served_and_every_served_path_is_documented():
    rules, paths = _app_rules(), documented_paths()
    assert paths, "no paths found in api.md"
    unserved = sorted(p for p in paths if not any(_matches(r, p) for r in rules))
    assert unserved == [], "api.md documents paths the controller does not serve"
    # api.md says once that every route-scoped endpoint is also served under /routes/<id>/.
    scoped = "/routes/<route_id>/"
    assert "**`/routes/<id>/`**" in (REPO / "docs" / "api.md").read_text()
    undocumented = sorted(r for r in rules
                          if not any(_matches(r, p) or r.startswith(scoped) and _matches(r.replace(scoped, "/", 1), p)
                                     for p in paths))
    assert undocumented == [], "the controller serves paths api.md does not document"


# Values maps whose keys are the user's (client properties, Spark conf, labels, ...).
_FREE_FORM = {"properties", "secretProperties", "conf", "labels", "annotations", "nodeSelector", "podLabels",
              "podAnnotations", "topic_mapping", "commonLabels", "resources", "requests", "limits"}
_CHART_ROOTS = ("verifier", "metrics", "preflight", "workerPools", "routes", "clusters", "networkPolicy",
                "zookeeperAuth", "image", "serviceAccount", "controller", "worker", "sourceCluster", "targetCluster")


def _resolves(key: str) -> bool:
    node: Any = VALUES
    parts = key.split(".")
    for i, part in enumerate(parts):
        if isinstance(node, list):
            return True  # a list's items (workerPools[], routes[]) are checked by the schema
        if not isinstance(node, dict):
            return False
        if part not in node:
            return i > 0 and parts[i - 1] in _FREE_FORM
        node = node[part]
    return True


def chart_keys_in_docs() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for token in re.findall(r"`([A-Za-z][A-Za-z0-9_.]*\.[A-Za-z0-9_.]*[A-Za-z0-9_])`", doc.read_text()):
            if token.split(".")[0] in _CHART_ROOTS:
                found.setdefault(token, []).append(doc.name)
    return found


def test_every_chart_key_named_in_the_docs_exists_in_values_yaml():
    config_names = config_keys() | _ROUTES_KEYS
    unknown = {
        key: where for key, where in chart_keys_in_docs().items()
        if key not in config_names and not any(key.startswith(f"{c}.") for c in config_names)
        and not _resolves(key)
    }
    assert unknown == {}, "the docs name chart keys that values.yaml does not have"


def test_the_report_example_shows_the_schema_version_its_heading_names():
    from ureplicator.reports import model

    text = (REPO / "docs" / "verification.md").read_text()
    heading = int(re.search(r"## Report \(schema version (\d+)\)", text).group(1))
    example = int(re.search(r'"schema_version": (\d+)', text).group(1))
    hash_version = int(re.search(r'"hash": \{"version": (\d+)', text).group(1))
    assert heading == example == model.SCHEMA_VERSION
    assert hash_version == model.HASH_SPEC["version"]


def test_readme_curl_examples_carry_the_token_and_install_from_the_checkout():
    readme = (REPO / "README.md").read_text()
    for line in (line for line in readme.splitlines() if "curl" in line and "-XPOST" in line):
        assert "Authorization: Bearer" in line, line
    # deploy.md says nothing is published: the README must not tell people to install from PyPI
    assert "nothing is published" in (REPO / "docs" / "deploy.md").read_text()
    assert "pip install ureplicator-py" not in readme


def test_security_md_lists_every_acl_the_preflight_checks():
    from ureplicator.controller.preflight import REQUIRED

    rows = [line for line in (REPO / "docs" / "security.md").read_text().splitlines() if line.startswith("| ")]
    for cluster, resources in REQUIRED.items():
        for resource, operations in resources.items():
            for operation in operations:
                assert any(f"| {cluster} |" in row and f"| {resource.capitalize()}" in row and f"`{operation}`" in row
                           for row in rows), f"security.md lacks {operation} on the {cluster}'s {resource}"


# --- issue 45: curl examples, pinned client properties, the chart's alerts ----------------------


def test_every_curl_example_names_a_full_url():
    # `curl -XPOST :9000/topics` is refused by curl ("bad/illegal format"): a URL needs its host.
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            for command in re.findall(r"\bcurl\b[^`#\n]*", line):
                urls = [w.strip("'\"") for w in command.split()[1:] if not w.startswith("-") and "/" in w
                        and not w.startswith(("'{", "{", "\"{"))]
                for url in urls:
                    if re.match(r"^\S*:\d+/", url) or url.startswith("/"):
                        assert re.match(r"^https?://[^/:\s]+", url), f"{doc.name}: {command.strip()!r}: {url}"


def test_configuration_md_names_every_client_property_the_worker_pins():
    from ureplicator.worker import clients

    cfg = config.from_dict({"pipeline": "unit", "zookeeper": {"connect": "127.0.0.1:1"},
                            "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
                            "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"}})
    pinned = clients.pins(cfg)
    assert len(pinned.producer) >= 7 and len(pinned.consumer) >= 3  # the walk sees the pins
    text = (REPO / "docs" / "configuration.md").read_text()
    rows = {key: next(line for line in text.splitlines() if line.startswith(f"| `{key}` |"))
            for key in ("source.properties", "destination.properties")}
    missing = [f"{key}: {name}" for key, names in (("destination.properties", pinned.producer),
                                                   ("source.properties", pinned.consumer))
               for name in names if f"`{name}`" not in rows[key]]
    assert missing == [], "configuration.md does not name these pinned properties"


def chart_alerts() -> set[str]:
    text = (REPO / "helm" / "ureplicator" / "templates" / "prometheusrule.yaml").read_text()
    return set(re.findall(r"^\s*- alert: (\w+)\s*$", text, flags=re.M))


def test_operations_and_deploy_docs_name_every_alert_the_chart_ships():
    alerts = chart_alerts()
    assert len(alerts) >= 17, alerts  # the parse found the rules
    operations = (REPO / "docs" / "operations.md").read_text()
    paragraph = operations[operations.index("On Kubernetes the chart turns these into a PrometheusRule"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    deploy_rows = {m for m in re.findall(r"^\| `(UReplicator\w+)` \|", (REPO / "docs" / "deploy.md").read_text(),
                                         flags=re.M)}
    assert sorted(a for a in alerts if f"`{a}`" not in paragraph) == [], "missing from operations.md's alert list"
    assert sorted(alerts - deploy_rows) == [], "missing from deploy.md's alert table"
    # and neither names an alert the chart does not ship
    assert sorted(set(re.findall(r"`(UReplicator\w+)`", paragraph)) - alerts) == []
    assert sorted(deploy_rows - alerts) == []
