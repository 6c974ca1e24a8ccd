"""Every error path of the REST API answers a JSON error with the right status (Flask test client, fakes)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.unit.fakes import FakeAdmin, FakeZooKeeper
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Paths, TopicRecord
from ureplicator.controller.api import Controller, create_app
from ureplicator.controller.leader import LeaderState

TOKEN = "s3cret-token"


@dataclass
class FakeLeadership:
    state: LeaderState
    thread_alive: bool = True
    woken: int = 0

    def request_reconcile(self) -> None:
        self.woken += 1

    def leader_id(self) -> str | None:
        return "c1"

    def alive(self) -> bool:
        return self.thread_alive


class FailingConsumer:
    def committed(self, partitions: list[Any], timeout: float | None = None) -> list[Any]:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))


@dataclass
class Api:
    client: Any
    zk: FakeZooKeeper
    paths: Paths
    source: FakeAdmin
    destination: FakeAdmin
    controller: Controller

    def call(self, method: str, path: str, body: Any = None, token: str | None = TOKEN,
             raw: str | None = None) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        resp = self.client.open(path, method=method, data=data, headers=headers, content_type="application/json")
        return resp.status_code, resp.get_json()


@pytest.fixture
def api() -> Api:
    cfg = config_module.from_dict({
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
        "controller": {"admin_token": TOKEN},
    })
    paths = Paths(cfg.root)
    fake_zk = FakeZooKeeper()
    for parent in paths.all_parents():
        fake_zk.ensure_path(parent)
    fake_zk.nodes[paths.topic("t")] = TopicRecord("t", "t", 2).encode()
    fake_zk.nodes[paths.worker("w1")] = b"{}"
    source, destination = FakeAdmin({"t": 2, "src-only": 3}), FakeAdmin({"t": 2})
    controller = Controller(config=cfg, zk=fake_zk, leadership=FakeLeadership(LeaderState()),  # type: ignore[arg-type]
                            source_admin=source, destination_admin=destination)
    app = create_app(controller)
    return Api(app.test_client(), fake_zk, paths, source, destination, controller)


def assert_error(result: tuple[int, dict[str, Any]], status: int, words: str = "") -> None:
    code, body = result
    assert code == status, body
    assert body["error"]["code"] == status and words in body["error"]["message"], body


# --- authentication -------------------------------------------------------------------------


def test_a_mutating_call_without_a_token_is_401_and_with_a_wrong_one_403(api):
    assert_error(api.call("POST", "/topics", {"topic": "src-only"}, token=None), 401, "Bearer")
    assert_error(api.call("POST", "/topics", {"topic": "src-only"}, token="wrong-token"), 403, "wrong")
    assert api.call("GET", "/topics", token=None)[0] == 200  # reads need no token


# --- topics -----------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["[1]", "not json", "\"t\""])
def test_a_body_that_is_not_a_json_object_is_400(api, raw):
    assert_error(api.call("POST", "/topics", raw=raw), 400, "JSON object")


@pytest.mark.parametrize("topic", [None, "", "bad name", "x" * 250, 7])
def test_an_invalid_topic_name_is_400(api, topic):
    assert_error(api.call("POST", "/topics", {"topic": topic}), 400, "Kafka topic name")


@pytest.mark.parametrize("count", [0, -1, "x", True, 2_000_000])
def test_an_invalid_partition_count_is_400(api, count):
    assert_error(api.call("POST", "/topics", {"topic": "src-only", "numPartitions": count}), 400, "positive integer")


def test_a_partition_count_that_differs_from_the_source_is_400(api):
    assert_error(api.call("POST", "/topics", {"topic": "src-only", "numPartitions": 5}), 400, "3 partitions")


def test_a_topic_missing_on_the_source_is_404(api):
    assert_error(api.call("POST", "/topics", {"topic": "nowhere"}), 404, "does not exist")


def test_a_topic_already_mirrored_is_409(api):
    assert_error(api.call("POST", "/topics", {"topic": "t"}), 409, "already mirrored")


def test_an_unreachable_source_cluster_is_503(api):
    api.source.down = True
    assert_error(api.call("POST", "/topics", {"topic": "src-only"}), 503, "did not answer")


def test_a_destination_that_refuses_the_topic_is_502_and_nothing_is_registered(api):
    api.destination.refuse_create = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert_error(api.call("POST", "/topics", {"topic": "src-only"}), 502, "cannot create topic")
    assert api.paths.topic("src-only") not in api.zk.nodes


def test_adding_a_topic_creates_the_destination_and_wakes_the_leader(api):
    # The successful path, for contrast with the errors above
    code, body = api.call("POST", "/topics", {"topic": "src-only"})
    assert code == 201 and body["destination_topic"] == "created" and api.destination.topics["src-only"] == 3
    assert api.controller.leadership.woken == 1


def test_an_invalid_destination_name_is_400(api):
    assert_error(api.call("POST", "/topics", {"topic": "src-only", "destination": "no way"}), 400, "destination")


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/topics/unknown"), ("DELETE", "/topics/unknown"), ("POST", "/topics/unknown/pause"),
    ("GET", "/offset/unknown/0"),
])
def test_an_unmirrored_topic_is_404(api, method, path):
    assert_error(api.call(method, path), 404, "not mirrored")


def test_expanding_an_unmirrored_topic_is_404_and_shrinking_is_400(api):
    assert_error(api.call("PUT", "/topics", {"topic": "src-only"}), 404, "not mirrored")
    api.source.topics["t"] = 1
    assert_error(api.call("PUT", "/topics", {"topic": "t"}), 400, "cannot shrink")


def test_an_unknown_topic_action_is_404(api):
    assert_error(api.call("POST", "/topics/t/explode"), 404, "pause or resume")


def test_an_unknown_partition_is_404(api):
    assert_error(api.call("GET", "/offset/t/9"), 404, "no partition")
    assert_error(api.call("GET", "/offset/t/x"), 404, "no partition")


# --- offsets ----------------------------------------------------------------------------------


def test_offsets_without_a_source_consumer_are_503(api):
    assert_error(api.call("GET", "/offset"), 503, "no source consumer")


def test_offsets_when_the_source_does_not_answer_are_503(api):
    api.controller.source_consumer = FailingConsumer()
    assert_error(api.call("GET", "/offset/t/0"), 503, "did not answer")


# --- workers ----------------------------------------------------------------------------------


def test_invalid_worker_ids_are_400(api):
    assert_error(api.call("DELETE", "/instances/bad%20id"), 400, "worker id")


def test_blacklisting_an_unregistered_worker_is_404_and_twice_is_409(api):
    assert_error(api.call("DELETE", "/instances/w9"), 404, "not registered")
    assert api.call("DELETE", "/instances/w1")[0] == 200
    assert_error(api.call("DELETE", "/instances/w1"), 409, "already blacklisted")


def test_whitelisting_a_worker_that_is_not_blacklisted_is_404(api):
    assert_error(api.call("POST", "/instances/w1"), 404, "not blacklisted")


# --- blacklist and admin ----------------------------------------------------------------------


def test_blacklist_changes_with_a_bad_op_or_partition_are_400(api):
    assert_error(api.call("POST", "/blacklist", {"topic": "t", "op": "maybe"}), 400, "op must be")
    assert_error(api.call("POST", "/blacklist", {"topic": "t", "op": "blacklist", "partition": -1}), 400,
                 "non-negative")


def test_whitelisting_what_is_not_blacklisted_is_404(api):
    assert_error(api.call("POST", "/blacklist", {"topic": "t", "partition": 1, "op": "whitelist"}), 404,
                 "t:1 is not blacklisted")


def test_unknown_admin_operations_are_404(api):
    assert_error(api.call("GET", "/admin/reboot"), 404, "unknown admin operation")
    assert_error(api.call("POST", "/admin/reboot"), 404, "unknown admin operation")


def test_rate_limits_with_unknown_keys_or_negative_values_are_400(api):
    assert_error(api.call("POST", "/admin/rate_limit", {"records_per_s": 1, "speed": 2}), 400, "unknown")
    assert_error(api.call("POST", "/admin/rate_limit", {"records_per_s": -5}), 400, "non-negative")


# --- dependencies, routing, bugs --------------------------------------------------------------


def test_zookeeper_unreachable_is_503(api):
    api.zk.broken = True
    assert_error(api.call("GET", "/topics"), 503, "unavailable")


def test_an_unknown_route_is_a_json_404_and_a_wrong_method_a_json_405(api):
    assert_error(api.call("GET", "/nothing/here"), 404)
    assert_error(api.call("PATCH", "/topics"), 405)


def test_a_bug_is_a_json_500_that_names_no_internals(api, monkeypatch):
    from ureplicator.controller import api as api_module

    monkeypatch.setattr(api_module.zk, "read_topics", lambda *a: 1 / 0)
    code, body = api.call("GET", "/topics")
    assert code == 500 and body["error"]["message"] == "internal error: ZeroDivisionError"


def test_health_is_503_without_zookeeper_and_liveness_follows_the_election_thread(api):
    api.zk.state = "SUSPENDED"
    assert api.call("GET", "/health")[0] == 503
    assert api.call("GET", "/healthz")[0] == 200  # ZooKeeper away: no reason to restart
    api.controller.leadership.thread_alive = False
    assert api.call("GET", "/healthz")[0] == 503


def test_removing_a_topic_unregisters_and_blacklists_it_and_an_explicit_add_lifts_the_entry(api):
    assert api.call("POST", "/topics", {"topic": "src-only"})[0] == 201

    assert api.call("DELETE", "/topics/src-only")[0] == 200

    assert api.paths.topic("src-only") not in api.zk.nodes
    assert api.call("GET", "/blacklist")[1]["topics"] == ["src-only"]
    assert_error(api.call("DELETE", "/topics/src-only"), 404, "not mirrored")
    assert api.call("POST", "/topics", {"topic": "src-only"})[0] == 201
    assert api.call("GET", "/blacklist")[1]["topics"] == []
