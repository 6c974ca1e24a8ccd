"""The routes API: bad input gets a 400 naming the problem and writes nothing; routes scope every endpoint."""

from __future__ import annotations

import json
from typing import Any

import pytest

from common import config as config_module
from common.zkschema import Paths, RouteRecord, TopicRecord
from controller.api import Controller, create_app
from controller.leader import LeaderState
from tests.unit.fakes import FakeAdmin, FakeZooKeeper
from tests.unit.test_api_errors import TOKEN, FakeLeadership


class Api:
    def __init__(self, routes: list[dict[str, Any]]) -> None:
        cfg = config_module.from_dict({
            "pipeline": "unit",
            "zookeeper": {"connect": "127.0.0.1:1"},
            "clusters": {n: {"bootstrap_servers": f"127.0.0.{i}:9092"} for i, n in enumerate("abc", 1)},
            "routes": routes,
            "controller": {"admin_token": TOKEN},
        })
        self.zk = FakeZooKeeper()
        self.pipeline = Paths(cfg.pipeline_root)
        for route in cfg.routes:
            view = config_module.route_view(cfg, route.id)
            for parent in Paths(view.root).all_parents():
                self.zk.ensure_path(parent)
            record = RouteRecord(route.definition(), declared_in="config")
            self.zk.nodes[self.pipeline.route(route.id)] = record.encode()
        self.leadership = FakeLeadership(LeaderState())
        admins = {"a": FakeAdmin({"t": 2}), "b": FakeAdmin({"t": 2}), "c": FakeAdmin({})}
        self.controller = Controller(config=cfg, zk=self.zk, leadership=self.leadership,  # type: ignore[arg-type]
                                     source_admin=admins[cfg.routes[0].source],
                                     destination_admin=admins[cfg.routes[0].destination],
                                     admins_for=admins.__getitem__)
        self.client = create_app(self.controller).test_client()

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        resp = self.client.open(path, method=method, data=json.dumps(body) if body is not None else None,
                                headers={"Authorization": f"Bearer {TOKEN}"}, content_type="application/json")
        return resp.status_code, resp.get_json()


@pytest.fixture
def api() -> Api:
    return Api([{"id": "a2b", "source": "a", "destination": "b"}])


def test_clusters_are_listed_without_their_properties(api):
    status, body = api.call("GET", "/clusters")
    assert status == 200
    assert body["clusters"][0] == {"alias": "a", "bootstrap_servers": "127.0.0.1:9092"}


def test_a_route_without_workers_is_waiting_for_workers_not_an_error(api):
    status, body = api.call("GET", "/routes/a2b")
    assert status == 200
    assert body["state"] == "waiting_for_workers" and body["declared_in"] == "config"
    assert body["zookeeper_root"] == "/ureplicator/unit/routes/a2b"
    assert body["consumer_group"] == "ureplicator.unit.a2b"


@pytest.mark.parametrize(
    ("route", "needle"),
    [
        ({"id": "x", "source": "a", "destination": "z"}, "unknown cluster alias 'z' (clusters: a, b, c)"),
        ({"id": "x", "source": "a", "destination": "b"}, "a -> b is already route 'a2b'"),
        ({"id": "a2b", "source": "b", "destination": "c"}, "route id 'a2b' is already taken"),
        ({"id": "b2a", "source": "b", "destination": "a", "forward": "transit", "topic_naming": "identity"}, None),
        ({"id": "x y", "source": "b", "destination": "c"}, "route id 'x y'"),
        ({"id": "x", "source": "b", "destination": "c", "colour": 1}, "unknown route keys: colour"),
    ],
)
def test_bad_routes_get_a_400_naming_the_problem_and_nothing_is_written(api, route, needle):
    before = dict(api.zk.nodes)
    status, body = api.call("POST", "/routes", route)
    if needle is None:  # the reverse pair is active-active, accepted
        assert status == 201, body
        return
    assert status == 400 and needle in body["error"]["message"], body
    assert api.zk.nodes == before


def test_a_route_that_would_deliver_twice_is_refused_with_the_path(api):
    status, _ = api.call("POST", "/routes", {"id": "b2c", "source": "b", "destination": "c", "forward": "transit"})
    assert status == 201
    before = dict(api.zk.nodes)
    status, body = api.call("POST", "/routes", {"id": "a2c", "source": "a", "destination": "c",
                                                "topic_naming": "prefix"})
    assert status == 400
    assert "a record produced on a would reach c twice" in body["error"]["message"]
    assert "-[b2c]->" in body["error"]["message"]
    assert api.zk.nodes == before


def test_an_added_route_gets_its_own_state_and_the_bare_paths_need_a_route(api):
    status, body = api.call("POST", "/routes", {"id": "b2c", "source": "b", "destination": "c",
                                                "topic_naming": "prefix", "forward": "origin"})
    assert status == 201 and body["state"] == "waiting_for_workers" and body["declared_in"] == "api"
    assert api.zk.exists("/ureplicator/unit/routes/b2c/topics")
    assert api.zk.exists("/ureplicator/unit/routes/b2c/blacklist/topics")
    # With two routes a write without a route is refused, listing them
    status, body = api.call("POST", "/topics", {"topic": "t"})
    assert status == 400 and "a2b, b2c" in body["error"]["message"]
    # Named by path or by src/dst, each route's topics are its own
    api.zk.nodes["/ureplicator/unit/routes/a2b/topics/t"] = TopicRecord("t", "t", 2).encode()
    assert [t["topic"] for t in api.call("GET", "/routes/a2b/topics")[1]["topics"]] == ["t"]
    assert api.call("GET", "/routes/b2c/topics")[1]["topics"] == []
    assert api.call("GET", "/topics/t?src=a&dst=b")[1]["destination"] == "t"
    assert api.call("GET", "/topics/t?src=b&dst=c")[0] == 404
    assert api.call("GET", "/topics?src=c&dst=a")[0] == 404
    # A topic added to the new route is created under its naming on its destination
    status, body = api.call("POST", "/routes/b2c/topics", {"topic": "t"})
    assert status == 201 and body["destination"] == "b.t"
    assert api.zk.exists("/ureplicator/unit/routes/b2c/topics/t")


def test_a_route_is_patched_paused_and_resumed_but_its_id_and_clusters_never_change(api):
    api.call("POST", "/routes", {"id": "b2c", "source": "b", "destination": "c"})
    status, body = api.call("PATCH", "/routes/b2c", {"destination": "a"})
    assert status == 400 and "cannot change" in body["error"]["message"]
    status, body = api.call("PATCH", "/routes/b2c", {"topic_naming": "prefix"})
    assert status == 200 and body["topic_naming"] == "prefix"
    assert api.call("PATCH", "/routes/a2b", {"forward": "transit"})[0] == 409  # declared in the file
    assert api.call("POST", "/routes/b2c/pause")[1]["state"] == "paused"
    assert api.call("GET", "/routes")[1]["routes"][1]["state"] == "paused"
    assert api.call("POST", "/routes/b2c/resume")[1]["state"] == "waiting_for_workers"
    assert api.leadership.woken >= 3


def test_with_one_route_the_bare_paths_behave_as_today(api):
    status, body = api.call("POST", "/topics", {"topic": "t"})
    assert status == 201 and body["destination"] == "t"
    assert api.zk.exists("/ureplicator/unit/routes/a2b/topics/t")
    assert api.call("GET", "/routes/a2b/topics/t")[0] == 200
    assert api.call("GET", "/routes/nope/topics")[0] == 404


def test_the_cli_lists_adds_pauses_and_refuses_routes(api, capsys):
    from cli.main import main
    from controller.api import serve

    server = serve(create_app(api.controller), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        base = ["routes", "--url", url, "--token", TOKEN]
        assert main([*base, "add", "b2c", "b", "c", "--topic-naming", "prefix"]) == 0
        assert main([*base, "pause", "b2c"]) == 0
        assert main([*base, "list"]) == 0
        out = capsys.readouterr().out
        assert "b2c: b -> c, waiting_for_workers" in out and "b2c: b -> c, paused" in out
        assert "a2b    a -> b    identity  origin   waiting_for_workers  0        0" in out
        assert main([*base, "add", "c2b", "c", "x"]) == 1
        assert "routes add: 400: route 'c2b': unknown cluster alias 'x'" in capsys.readouterr().err
    finally:
        server.shutdown()
