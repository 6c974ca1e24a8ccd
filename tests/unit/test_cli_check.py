"""Issue 45: ``ureplicator check`` refuses what the controller refuses at start, checks every cluster of
every route (each once per role), and keeps the client libraries' log lines out of its table."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from ureplicator.cli import check as check_cli
from ureplicator.cli import main as cli
from ureplicator.common import config as config_module
from ureplicator.common.errors import ConfigError
from ureplicator.controller import preflight


def _single(**controller: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "pipeline": "unit", "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
    }
    if controller:
        doc["controller"] = controller
    return doc


def _three_routes() -> dict[str, Any]:
    # a is the source of two routes, b both a destination and a source, c a destination twice
    return {"pipeline": "unit", "zookeeper": {"connect": "127.0.0.1:1"},
            "controller": {"rest_host": "127.0.0.1"},
            "clusters": {k: {"bootstrap_servers": f"127.0.0.1:{i}"} for i, k in enumerate("abc", start=1)},
            "routes": [{"id": "a-b", "source": "a", "destination": "b"},
                       {"id": "b-c", "source": "b", "destination": "c"},
                       {"id": "a-c", "source": "a", "destination": "c", "topic_naming": "prefix"}]}


@pytest.fixture(autouse=True)
def _no_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("UREPLICATOR_CONTROLLER_ADMIN_TOKEN", "UREPLICATOR_CONTROLLER_REST_HOST",
                 "UREPLICATOR_CONTROLLER_ALLOW_ANONYMOUS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_services(monkeypatch: pytest.MonkeyPatch) -> list[preflight.Finding]:
    """preflight.run without ZooKeeper and Kafka: one ok finding."""
    found = [preflight.Finding("zookeeper", "ok", "connected (fake)")]
    monkeypatch.setattr(preflight, "run", lambda cfg, timeout_s=15.0: list(found))
    return found


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: dict[str, Any], *extra: str) -> tuple[int, str]:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))
    status = cli.main(["check", "--config", str(path), "--timeout", "0.1", *extra])
    out = capsys.readouterr()
    return status, out.out + out.err


# --- (a) the controller's start-up refusal ----------------------------------------------------------


def test_check_refuses_an_open_rest_api_with_the_controllers_own_error(tmp_path, capsys, no_services):
    # Given a config the controller refuses at start: the REST API on 0.0.0.0, no token, not allowed
    doc = _single()
    with pytest.raises(ConfigError) as refused:
        config_module.check_rest_exposure(config_module.from_dict(doc))
    # When check runs, Then it fails as a config error (exit 2, as the controller) with that message
    status, out = _check(tmp_path, capsys, doc)
    assert status == 2
    assert out.splitlines()[0].split(None, 2) == ["FAIL", "config", str(refused.value)]
    status, out = _check(tmp_path, capsys, doc, "--json")
    assert status == 2 and json.loads(out)["findings"][0]["message"] == str(refused.value)


@pytest.mark.parametrize("controller", [{"admin_token": "s3cret-token"}, {"allow_anonymous": True},
                                        {"rest_host": "127.0.0.1"}])
def test_check_passes_what_the_controller_accepts(tmp_path, capsys, no_services, controller):
    status, out = _check(tmp_path, capsys, _single(**controller))
    assert status == 0, out
    assert out.splitlines()[0].startswith("OK    config")


def test_a_workers_check_skips_the_rest_api_rule(tmp_path, capsys, no_services):
    # A worker serves no REST API: its host needs no admin token (the chart's worker preflight says --role worker)
    status, out = _check(tmp_path, capsys, _single(), "--role", "worker")
    assert status == 0, out


# --- (b) every cluster of every route ---------------------------------------------------------------


def test_preflight_checks_every_cluster_of_every_route_once_per_role(monkeypatch):
    cfg = config_module.from_dict(_three_routes())
    topics = {"a-b": {"orders": "orders"}, "b-c": {"pay": "pay"}, "a-c": {"orders": "a.orders"}}
    monkeypatch.setattr(preflight, "_check_zookeeper", lambda config, views, timeout_s: (
        [preflight.Finding("zookeeper", "ok", "fake")], {v.route_id: topics[v.route_id] for v in views}))
    calls: list[tuple[str, str, dict[str, str], list[str] | None]] = []

    def check_cluster(role, cluster, config, mirrored, timeout_s, groups=None):
        calls.append((role, cluster.alias, dict(mirrored), None if groups is None else list(groups)))
        return [preflight.Finding(f"{role} {cluster.alias}", "ok", "fake")]

    monkeypatch.setattr(preflight, "check_cluster", check_cluster)
    preflight.run(cfg, timeout_s=0.1)
    by_role = {(role, alias): (mirrored, groups) for role, alias, mirrored, groups in calls}
    # Then each (role, cluster) once, every cluster of every route included
    assert len(calls) == len(by_role)
    assert set(by_role) == {("source", "a"), ("source", "b"), ("destination", "b"), ("destination", "c")}
    # a source cluster is checked with the topics and the offsets group of every route reading it
    # (the source role reads the source topic names: the map's keys)
    assert set(by_role[("source", "a")][0]) == {"orders"}
    assert by_role[("source", "a")][1] == ["ureplicator.unit.a-b", "ureplicator.unit.a-c"]
    assert by_role[("source", "b")][1] == ["ureplicator.unit.b-c"]
    # a destination with the destination topics of every route writing it
    assert set(by_role[("destination", "c")][0].values()) == {"pay", "a.orders"}


class _FakeZooKeeper:
    """Just enough of KazooClient for check_zookeeper: a1's route exists, the others are new."""

    def __init__(self, **_: Any) -> None:
        self.probes: list[str] = []

    def start(self, timeout: float) -> None:
        pass

    def exists(self, path: str) -> bool:
        return path.endswith("/routes/a-b") or path == "/ureplicator"

    def create(self, path: str, value: bytes, ephemeral: bool, sequence: bool) -> str:
        self.probes.append(path)
        return path + "0"

    def delete(self, path: str) -> None:
        pass

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_zookeeper_is_read_for_every_route_over_one_connection(monkeypatch):
    clients: list[_FakeZooKeeper] = []

    def make(**kwargs: Any) -> _FakeZooKeeper:
        clients.append(_FakeZooKeeper(**kwargs))
        return clients[-1]

    monkeypatch.setattr(preflight, "KazooClient", make)
    monkeypatch.setattr(preflight.zk, "read_topics", lambda client, paths: {
        "orders": type("Record", (), {"destination": "orders"})()})
    cfg = config_module.from_dict(_three_routes())
    views = [config_module.route_view(cfg, route=r) for r in cfg.routes]
    findings, topics = preflight._check_zookeeper(cfg, views, 0.1)
    assert len(clients) == 1
    assert topics == {"a-b": {"orders": "orders"}}
    messages = [f.message for f in findings]
    assert any(m.startswith("route a-b exists at ") and "1 mirrored topic(s)" in m for m in messages), messages
    assert sum(m.startswith(("route b-c is new", "route a-c is new")) for m in messages) == 2, messages
    assert len(clients[0].probes) == 1  # one write probe, under the first existing route's root


# --- (c) the libraries' own log lines -----------------------------------------------------------------


def test_check_keeps_kazoo_and_librdkafka_log_lines_out_of_its_output(tmp_path, capsys, monkeypatch):
    kazoo = logging.getLogger("kazoo.client")
    before = {name: logging.getLogger(name).level for name in ("kazoo", "kazoo.client", "librdkafka")}

    def noisy_run(cfg: Any, timeout_s: float = 15.0) -> list[preflight.Finding]:
        # what kazoo and librdkafka log while ZooKeeper or a broker refuses the connection
        kazoo.warning("Connection dropped: socket connection error: Connection refused")
        logging.getLogger("kazoo.client.connection").warning("Connection refused (child logger)")
        logging.getLogger("librdkafka").error("FAIL|rdkafka#producer-1| Connect to ipv4#127.0.0.1:1 failed")
        return [preflight.Finding("zookeeper", "fail", "ZooKeeper at 127.0.0.1:1 did not answer within 0s")]

    monkeypatch.setattr(preflight, "run", noisy_run)
    status, out = _check(tmp_path, capsys, _single(rest_host="127.0.0.1"))
    assert status == 1
    assert "Connection refused" not in out and "rdkafka" not in out, out
    lines = out.splitlines()
    assert lines[0].startswith("OK    config") and lines[-1].startswith("not ready")
    # and the loggers are as they were once check returns
    assert {name: logging.getLogger(name).level for name in before} == before
    # --log-level debug keeps them (to see what the library saw): the same run, with them in its output
    _, out = _check(tmp_path, capsys, _single(rest_host="127.0.0.1"), "--log-level", "debug")
    assert "Connection refused" in out and "rdkafka" in out, out
    assert check_cli._LIBRARIES  # the silenced names are the module's, one place to add a library
