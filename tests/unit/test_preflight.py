"""The preflight's reading of the brokers' authorized operations: what fails, what only warns."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka.admin import AclOperation

from ureplicator.common import config
from ureplicator.controller import preflight

CONFIG = config.from_dict({
    "pipeline": "p", "zookeeper": {"connect": "zk:2181"},
    "source": {"alias": "src", "bootstrap_servers": "s:9092"},
    "destination": {"alias": "dst", "bootstrap_servers": "d:9092"},
})


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value


class Broker:
    """An AdminClient that grants ``ops`` per resource kind (None: not reported)."""

    def __init__(self, topics, cluster=None, topic=None, group=None):
        self.topics, self.ops = topics, {"cluster": cluster, "topic": topic, "group": group}

    def list_topics(self, timeout=None):
        return SimpleNamespace(brokers={1: None}, topics={t: SimpleNamespace(error=None) for t in self.topics})

    def describe_cluster(self, include_authorized_operations=False):
        return _Done(SimpleNamespace(authorized_operations=self.ops["cluster"]))

    def describe_topics(self, collection, include_authorized_operations=False):
        return {t: _Done(SimpleNamespace(authorized_operations=self.ops["topic"])) for t in collection.topic_names}

    def describe_consumer_groups(self, groups, include_authorized_operations=False):
        return {g: _Done(SimpleNamespace(authorized_operations=self.ops["group"])) for g in groups}


def _ops(*names):
    return [AclOperation[n] for n in names]


def _run(monkeypatch, role, broker):
    monkeypatch.setattr(preflight.kafka, "admin", lambda cluster: broker)
    cluster = CONFIG.source if role == "source" else CONFIG.destination
    return preflight.check_cluster(role, cluster, CONFIG, {"orders": "orders"}, 1.0)


def test_a_source_topic_without_read_and_a_group_without_read_fail(monkeypatch):
    findings = _run(monkeypatch, "source", Broker(["orders"], topic=_ops("DESCRIBE", "DESCRIBE_CONFIGS"),
                                                  group=_ops("DESCRIBE")))
    failures = [f.message for f in findings if f.level == "fail"]
    assert failures == ["topic orders: not authorized for READ",
                        "group ureplicator.p: not authorized for READ (offsets are committed in this group)"]
    assert preflight.failed(findings)


def test_everything_granted_passes(monkeypatch):
    findings = _run(monkeypatch, "destination", Broker(["orders"], cluster=_ops("ALL"),
                                                       topic=_ops("DESCRIBE", "WRITE", "DESCRIBE_CONFIGS",
                                                                  "ALTER_CONFIGS")))
    assert not preflight.failed(findings)
    assert [f.level for f in findings] == ["ok", "ok", "ok"]


def test_missing_cluster_create_or_idempotent_write_and_unreported_acls_only_warn(monkeypatch):
    findings = _run(monkeypatch, "destination", Broker([], cluster=_ops("DESCRIBE")))
    assert not preflight.failed(findings)
    warnings = " | ".join(f.message for f in findings if f.level == "warn")
    assert "IDEMPOTENT_WRITE" in warnings and "CREATE" in warnings
    findings = _run(monkeypatch, "source", Broker(["orders"]))
    assert {f.level for f in findings} == {"ok", "warn"}


def test_a_mirrored_topic_missing_on_the_source_fails(monkeypatch):
    findings = _run(monkeypatch, "source", Broker([], group=_ops("READ", "DESCRIBE")))
    assert [f.message for f in findings if f.level == "fail"] == [
        "mirrored topic(s) missing or not visible on the source: orders (DESCRIBE on the topic is needed to see it)"]
