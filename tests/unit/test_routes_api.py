"""The routes API: bad input gets a 400 naming the problem and writes nothing; routes scope every endpoint."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.fakes import FakeAdmin, FakeZooKeeper
from tests.unit.test_api_errors import TOKEN, FakeLeadership
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Paths, RouteRecord, TopicRecord
from ureplicator.controller.api import Controller, create_app
from ureplicator.controller.leader import LeaderState


class Api:
    def __init__(self, routes: list[dict[str, Any]], route_blueprints: list[Any] | None = None) -> None:
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
                                     admins_for=admins.__getitem__, route_blueprints=route_blueprints or [])
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
    from ureplicator.cli.main import main
    from ureplicator.controller.api import serve

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


class RouteGroups:
    """A route's group translator, as far as routing goes: it answers with the clusters it translates between."""

    def __init__(self, route: Any) -> None:
        self.route = route.config

    def list_groups(self) -> list[dict[str, Any]]:
        return [{"group": f"{self.route.source.alias}->{self.route.destination.alias}", "state": "empty",
                 "mirrored_partitions": 0}]

    def sync(self, group: str, force: bool) -> Any:
        """A sync that commits nothing and says whether it was forced."""
        class Outcome:
            plan = type("Plan", (), {"refused": None})()

            def as_dict(self) -> dict[str, Any]:
                return {"group": group, "forced": force}
        return Outcome()


def _scoped_api(routes: list[dict[str, Any]], reports: Any) -> Api:
    from ureplicator.controller import groups_api
    from ureplicator.controller.api import route_of_request
    from ureplicator.controller.verification_api import make_blueprint

    return Api(routes, [make_blueprint(reports, lambda: route_of_request().config.route_id),
                        groups_api.make_blueprint(RouteGroups)])


def _report(directory: Any, run_id: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps({"run_id": run_id, "status": "OK"}))


def test_groups_and_verification_are_served_per_route_and_a_bare_call_names_the_routes(tmp_path):
    # Given two routes, each with its own verification reports (<dir>/<route id>/)
    api = _scoped_api([{"id": "a2b", "source": "a", "destination": "b"},
                       {"id": "b2c", "source": "b", "destination": "c", "topic_naming": "prefix"}], tmp_path)
    _report(tmp_path / "a2b", "run-a2b")
    _report(tmp_path / "b2c", "run-b2c")
    # Then each route's groups are translated between its own clusters, and its own report is served
    assert api.call("GET", "/routes/a2b/groups")[1]["groups"][0]["group"] == "a->b"
    assert api.call("GET", "/routes/b2c/groups")[1]["groups"][0]["group"] == "b->c"
    assert api.call("GET", "/groups?src=b&dst=c")[1]["groups"][0]["group"] == "b->c"
    assert api.call("GET", "/routes/a2b/verification")[1]["run_id"] == "run-a2b"
    assert api.call("GET", "/verification?route=b2c")[1]["run_id"] == "run-b2c"
    assert api.call("GET", "/routes/b2c/verification/history")[0] == 404  # no run in b2c's history yet
    # And a bare call, or a sync, that names no route gets a 400 listing them; an unknown route a 404
    for method, path in (("GET", "/verification"), ("GET", "/groups"), ("POST", "/groups/g/sync")):
        status, body = api.call(method, path)
        assert status == 400 and "a2b, b2c" in body["error"]["message"], (path, body)
    assert api.call("GET", "/routes/nope/groups")[0] == 404


def test_the_implicit_route_reads_todays_verification_directory(tmp_path):
    api = _scoped_api([{"id": "default", "source": "a", "destination": "b"}], tmp_path)
    _report(tmp_path, "run-today")
    assert api.call("GET", "/verification")[1]["run_id"] == "run-today"
    assert api.call("GET", "/routes/default/verification")[1]["run_id"] == "run-today"
    assert api.call("GET", "/routes/default/groups")[1]["groups"][0]["group"] == "a->b"


@pytest.mark.parametrize("path", ["/topics", "/instances", "/validation", "/offset", "/noprogress", "/blacklist",
                                  "/admin/autobalancing_status", "/admin/workloadinfo", "/admin/rate_limit"])
def test_every_route_endpoint_answers_under_its_route_and_its_bare_read_names_the_routes(path):
    api = Api([{"id": "a2b", "source": "a", "destination": "b"}, {"id": "b2c", "source": "b", "destination": "c"}])
    status, body = api.call("GET", path)
    assert status == 400 and "a2b, b2c" in body["error"]["message"]
    status, body = api.call("GET", f"/routes/b2c{path}")
    assert status in (200, 503), body  # /offset: no source consumer in this unit test, a 503 that says so
    assert api.call("GET", f"/routes/nope{path}")[0] == 404


def test_a_write_to_one_route_leaves_the_others_state_alone():
    api = Api([{"id": "a2b", "source": "a", "destination": "b"}, {"id": "b2c", "source": "b", "destination": "c"}])
    assert api.call("POST", "/blacklist", {"topic": "t", "op": "blacklist"})[0] == 400
    assert api.call("POST", "/routes/b2c/blacklist", {"topic": "t", "op": "blacklist"})[0] == 200
    assert api.call("POST", "/admin/rate_limit?src=b&dst=c", {"records_per_s": 5, "bytes_per_s": 0})[0] == 200
    assert api.call("GET", "/routes/b2c/blacklist")[1]["topics"] == ["t"]
    assert api.call("GET", "/routes/a2b/blacklist")[1]["topics"] == []
    assert api.call("GET", "/routes/b2c/admin/rate_limit")[1]["records_per_s"] == 5
    assert api.call("GET", "/routes/a2b/admin/rate_limit")[1]["records_per_s"] == 0


def test_the_verification_gauges_carry_the_route_whose_reports_they_read(tmp_path):
    from prometheus_client import CollectorRegistry

    from tests.support.verifier_samples import sample_report
    from ureplicator.controller.verification_api import register_metrics
    from ureplicator.reports.store import ReportStore

    # Given the implicit route's reports in the directory itself and route a2b's in <dir>/a2b
    ReportStore(tmp_path).save(sample_report().to_dict())
    ReportStore(tmp_path / "a2b").save(sample_report().to_dict())
    registry = CollectorRegistry()
    register_metrics(registry, tmp_path, routes=lambda: ["default", "a2b", "b2c"])
    # Then each route's verdict is its own series; a route without a report has none
    for route in ("default", "a2b"):
        assert registry.get_sample_value("ureplicator_verification_status", {"route": route}) is not None
        assert registry.get_sample_value("ureplicator_verification_records",
                                         {"category": "verified", "route": route}) is not None
    assert registry.get_sample_value("ureplicator_verification_status", {"route": "b2c"}) is None


@pytest.mark.parametrize("body", [{"force": 1}, {"force": "true"}, {"forse": True}, [True], "force"])
def test_a_group_sync_body_that_is_not_an_optional_force_flag_is_refused(tmp_path, body):
    api = _scoped_api([{"id": "a2b", "source": "a", "destination": "b"}], tmp_path)
    status, answer = api.call("POST", "/routes/a2b/groups/g1/sync", body)
    assert (status, answer["error"]["message"]) == (400, 'the body is optional; when sent it is {"force": true|false}')


@pytest.mark.parametrize(("body", "forced"), [(None, False), ({}, False), ({"force": True}, True),
                                              ({"force": False}, False)])
def test_a_group_sync_takes_an_optional_force_flag(tmp_path, body, forced):
    api = _scoped_api([{"id": "a2b", "source": "a", "destination": "b"}], tmp_path)
    assert api.call("POST", "/routes/a2b/groups/g1/sync", body) == (200, {"group": "g1", "forced": forced})
