"""Clusters and routes in the config: the implicit route keeps today's paths; declared routes get their own."""

from __future__ import annotations

import pytest

from ureplicator.common import config
from ureplicator.common.errors import ConfigError

TODAY = {
    "pipeline": "dr",
    "zookeeper": {"connect": "zk:2181"},
    "source": {"alias": "src", "bootstrap_servers": "s:9092"},
    "destination": {"alias": "dst", "bootstrap_servers": "d:9092"},
}


def mesh_doc(forward: str = "origin", **extra) -> dict:
    return {
        "pipeline": "mesh",
        "zookeeper": {"connect": "zk:2181"},
        "clusters": {n: {"bootstrap_servers": f"{n}:9092"} for n in ("east", "west", "north")},
        "routes": [{"id": f"{s}-{d}", "source": s, "destination": d, "forward": forward}
                   for s in ("east", "west", "north") for d in ("east", "west", "north") if s != d],
        **extra,
    }


def error(doc: dict) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        config.from_dict(doc)
    return err.value


def test_todays_config_is_one_implicit_route_with_todays_paths_and_group():
    cfg = config.from_dict(TODAY)
    assert [r.id for r in cfg.routes] == [config.IMPLICIT_ROUTE]
    assert not cfg.declared_routes
    route = cfg.routes[0]
    assert (route.source, route.destination, route.forward) == ("src", "dst", "transit")
    view = config.route_view(cfg)
    assert view.root == cfg.root == "/ureplicator/dr"
    assert view.consumer_group == "ureplicator.dr"
    assert view.forward == "transit" and view.source.alias == "src"
    assert set(cfg.clusters) == {"src", "dst"}


def test_declared_routes_get_their_own_paths_group_and_clusters():
    cfg = config.from_dict(mesh_doc())
    assert cfg.declared_routes and len(cfg.routes) == 6
    view = config.route_view(cfg, "west-north")
    assert view.root == "/ureplicator/mesh/routes/west-north"
    assert view.consumer_group == "ureplicator.mesh.west-north"
    assert (view.source.alias, view.destination.alias, view.forward) == ("west", "north", "origin")
    assert view.source.bootstrap_servers == "west:9092"
    assert view.pipeline_root == "/ureplicator/mesh"


def test_a_declared_route_named_default_keeps_the_pipelines_state():
    doc = {**mesh_doc(), "routes": [{"id": "default", "source": "east", "destination": "west"},
                                    {"id": "back", "source": "west", "destination": "east"}]}
    view = config.route_view(config.from_dict(doc), "default")
    assert view.root == "/ureplicator/mesh" and view.consumer_group == "ureplicator.mesh"
    assert view.forward == "origin"  # declared routes default to origin


def test_route_fields_and_worker_bounds():
    doc = {**mesh_doc(), "routes": [{"id": "agg", "source": "east", "destination": "north", "topic_naming": "prefix",
                                     "workers": {"min": 2, "max": 4}, "forward": "transit"}]}
    cfg = config.from_dict(doc)
    route = cfg.routes[0]
    assert (route.workers.min, route.workers.max, route.topic_naming) == (2, 4, "prefix")
    view = config.route_view(cfg, "agg")
    assert view.controller.topic_naming == "prefix"
    assert route.definition()["workers"] == {"min": 2, "max": 4}


def test_the_mesh_under_transit_fails_at_start_with_the_path():
    err = error(mesh_doc("transit"))
    assert err.key == "routes" and "a record produced on east" in err.reason


@pytest.mark.parametrize(
    ("change", "key", "needle"),
    [
        (lambda d: d["routes"].append({"id": "x", "source": "east", "destination": "south"}),
         "routes[6].destination", "unknown cluster alias 'south'"),
        (lambda d: d["routes"].append({"id": "x", "source": "east", "destination": "west"}),
         "routes[6].destination", "east -> west is already route 'east-west'"),
        (lambda d: d["routes"].append({"id": "east-west", "source": "east", "destination": "east"}),
         "routes[6].id", "route id 'east-west' is already taken"),
        (lambda d: d["routes"][0].update(id="bad.id"), "routes[0].id", "route id 'bad.id'"),
        (lambda d: d["routes"][0].update(forward="maybe"), "routes[0].forward", "'origin' or 'transit'"),
        (lambda d: d["routes"][0].update(workers={"min": 3, "max": 1}), "routes[0].workers", "above max"),
        (lambda d: d["routes"][0].update(color="red"), "routes[0].color", "unknown key"),
        (lambda d: d.update(source={"alias": "s", "bootstrap_servers": "s:1"}), "source", "id 'default' keeps"),
        (lambda d: d.update(controller={"topic_naming": "prefix"}), "controller.topic_naming", "on each route"),
        (lambda d: d.update(worker={"route": "no.pe"}), "worker.route", "route id 'no.pe'"),
        (lambda d: d["clusters"]["east"].update(alias="e"), "clusters.east.alias", "the key of clusters"),
        (lambda d: d.update(routes=[]), "routes", "non-empty list"),
    ],
)
def test_each_route_mistake_is_a_config_error_naming_it(change, key, needle):
    doc = mesh_doc()
    change(doc)
    err = error(doc)
    assert err.key == key and needle in err.reason, (err.key, err.reason)


def test_route_view_needs_a_route_when_there_are_several():
    cfg = config.from_dict(mesh_doc())
    with pytest.raises(ConfigError, match="has 6 routes"):
        config.route_view(cfg)
    with pytest.raises(ConfigError, match="unknown route 'nope'"):
        config.route_view(cfg, "nope")


def test_a_file_loads_as_the_view_of_its_workers_route_or_of_the_first():
    pinned = config.from_dict({**mesh_doc(), "worker": {"route": "west-north"}})
    assert (pinned.route_id, pinned.root, pinned.consumer_group) == (
        "west-north", "/ureplicator/mesh/routes/west-north", "ureplicator.mesh.west-north")
    assert (pinned.source.alias, pinned.destination.alias) == ("west", "north")
    first = config.from_dict(mesh_doc())
    assert first.route_id == "east-west" and first.root == "/ureplicator/mesh/routes/east-west"
    # a route only ZooKeeper knows (added through the API) is resolved at start by zk.route_config
    elsewhere = config.from_dict({**mesh_doc(), "worker": {"route": "added-later"}})
    assert elsewhere.worker.route == "added-later" and elsewhere.route_id == "east-west"


def test_cluster_secrets_come_from_the_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""
pipeline: p
zookeeper: {connect: "zk:2181"}
clusters:
  us-east_1: {bootstrap_servers: "e:9092", properties: {security.protocol: SASL_SSL}}
  west: {bootstrap_servers: "w:9092"}
routes:
  - {id: e2w, source: us-east_1, destination: west}
""")
    env = {
        "UREPLICATOR_CLUSTERS_US_EAST_1_PROPERTIES_SASL_PASSWORD": "hunter22",
        "UREPLICATOR_CLUSTERS_WEST_BOOTSTRAP_SERVERS": "w2:9092",
        "UREPLICATOR_CLUSTERS_SOUTH_BOOTSTRAP_SERVERS": "s:9092",
        "UREPLICATOR_WORKER_ROUTE": "e2w",
    }
    cfg = config.load(path, env=env)
    assert cfg.clusters["us-east_1"].properties == {"security.protocol": "SASL_SSL", "sasl.password": "hunter22"}
    assert cfg.clusters["west"].bootstrap_servers == "w2:9092"
    assert cfg.clusters["south"].bootstrap_servers == "s:9092"
    assert cfg.worker.route == "e2w"
    assert "hunter22" in config.secret_values(cfg)
    assert cfg.redacted()["clusters"]["us-east_1"]["properties"]["sasl.password"] == config.REDACTED
    assert cfg.redacted()["routes"][0]["id"] == "e2w"


def test_todays_config_may_declare_more_clusters_for_routes_added_later():
    cfg = config.from_dict({**TODAY, "clusters": {"third": {"bootstrap_servers": "t:9092"}}})
    assert set(cfg.clusters) == {"src", "dst", "third"} and len(cfg.routes) == 1


def test_a_controller_with_a_looping_config_stops_at_start_naming_the_path(tmp_path):
    import subprocess
    import sys

    import yaml

    path = tmp_path / "mesh.yaml"
    path.write_text(yaml.safe_dump(mesh_doc("transit")))
    result = subprocess.run([sys.executable, "-m", "ureplicator", "controller", "--config", str(path)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "config error: routes: a record produced on east would reach" in result.stderr
    assert " -[" in result.stderr
