"""Topic lifecycle: auto-whitelisting, naming rules, config re-sync, restart grace."""

from __future__ import annotations

import os
import signal

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.rounds import gauge, wait_rounds

pytestmark = pytest.mark.integration


def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        return admin.describe_configs([res])[res].result(10)[name].value
    except Exception:  # noqa: BLE001 - topic not there yet
        return None


def test_auto_whitelisting_adds_matching_topics_and_never_re_adds_a_removed_one(pipeline, services):
    prefix = f"{pipeline.name}-auto"
    wanted, excluded, other = f"{prefix}-orders", f"{prefix}-orders-tmp", f"{pipeline.name}-manual"
    for topic in (wanted, excluded, other):
        kafka_io.create_topic(services["source"], topic, 1)
    kafka_io.produce(services["source"], wanted, 20, 1)
    pipeline.start_controller(controller={
        "auto_whitelist_include": f"{prefix}-.*", "auto_whitelist_exclude": ".*-tmp", "topic_sync_interval_s": 1,
    })
    pipeline.start_worker("w1")

    def mirrored() -> set[str]:
        return {t["topic"] for t in pipeline.api("GET", "/topics")[1]["topics"]}

    wait_for(lambda: mirrored() == {wanted}, 30, "auto-whitelisted topic")
    wait_for(lambda: kafka_io.end_offsets(services["destination"], wanted, 1)[0] == 20, 30, "mirrored")
    # When an operator removes it, auto-whitelisting does not bring it back
    assert pipeline.api("DELETE", f"/topics/{wanted}")[0] == 200
    wait_rounds(pipeline.url, 2, "topic_sync")  # a pass that started before the DELETE, and a whole one after
    assert mirrored() == set()
    assert wanted in pipeline.api("GET", "/blacklist")[1]["topics"]
    # but an explicit add does (and lifts the blacklist entry)
    assert pipeline.api("POST", "/topics", {"topic": wanted})[0] == 201
    assert wanted not in pipeline.api("GET", "/blacklist")[1]["topics"]


def test_prefix_naming_and_config_resync(pipeline, services):
    topic = f"{pipeline.name}-named"
    kafka_io.create_topic(services["source"], topic, 2, {"retention.ms": "3600000"})
    kafka_io.produce(services["source"], topic, 40, 2)
    pipeline.start_controller(controller={"topic_naming": "prefix", "topic_sync_interval_s": 1})
    pipeline.start_worker("w1")
    status, body = pipeline.api("POST", "/topics", {"topic": topic})
    assert status == 201 and body["destination"] == f"src.{topic}"
    wait_for(lambda: sum(kafka_io.end_offsets(services["destination"], f"src.{topic}", 2).values()) == 40, 30,
             "mirrored under the prefixed name")
    assert topic_config(services["destination"], f"src.{topic}", "retention.ms") == "3600000"
    # When the source topic's retention changes, the destination follows
    admin = AdminClient({"bootstrap.servers": services["source"]})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    wait_for(lambda: topic_config(services["destination"], f"src.{topic}", "retention.ms") == "7200000", 30,
             "config re-synced")
    # An explicit destination that maps a topic onto itself on the same cluster is refused
    status, body = pipeline.api("POST", "/topics", {"topic": f"{pipeline.name}-x", "destination": "bad name"})
    assert status == 400


def test_a_worker_restarting_within_the_grace_period_gets_its_partitions_back(pipeline, services):
    topic = f"{pipeline.name}-grace"
    kafka_io.create_topic(services["source"], topic, 4)
    pipeline.start_controller(controller={"worker_restart_grace_s": 20})
    first = pipeline.start_worker("w1")
    pipeline.start_worker("w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201

    def owners() -> dict[int, str | None]:
        return {p["partition"]: p["applied_by"] for p in pipeline.api("GET", f"/topics/{topic}")[1]["assignment"]}

    wait_for(lambda: set(owners().values()) == {"w1", "w2"}, 60, "both own")
    mine = {p for p, w in owners().items() if w == "w1"}
    os.kill(first.popen.pid, signal.SIGKILL)
    first.popen.wait(10)
    # When the leader has seen w1's session end (6 s) and reconciled twice more: its partitions are
    # reserved for it, not handed to w2
    wait_for(lambda: gauge(pipeline.url, "ureplicator_controller_live_workers") == 1, 30, "the leader saw w1 go")
    wait_rounds(pipeline.url, 2)
    assert {p for p, w in owners().items() if w == "w2"} == set(range(4)) - mine
    pipeline.start_worker("w1")
    wait_for(lambda: {p for p, w in owners().items() if w == "w1"} == mine, 30, "w1 got its own partitions back")
