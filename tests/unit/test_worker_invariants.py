"""The client settings that carry no-loss and ordering: applied after the user's, a conflicting one refused."""

from __future__ import annotations

from typing import Any

import pytest

from ureplicator.common import config as config_module
from ureplicator.common import kafka
from ureplicator.common.errors import ConfigError
from ureplicator.worker import clients


def config_with(source: dict[str, Any] | None = None, destination: dict[str, Any] | None = None) -> Any:
    return config_module.from_dict({
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1", "properties": source or {}},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2", "properties": destination or {}},
    })


# (property as the user writes it, a value that voids a guarantee)
PRODUCER_CONFLICTS = [
    ("enable.idempotence", "false"),
    ("enable.gapless.guarantee", "false"),
    ("acks", "1"),
    ("request.required.acks", "0"),
    ("max.in.flight.requests.per.connection", "6"),
    ("max.in.flight", "1000"),
    ("message.timeout.ms", "300000"),
    ("delivery.timeout.ms", "120000"),
    ("message.send.max.retries", "3"),
    ("retries", "0"),
    ("delivery.report.only.error", "true"),
]
CONSUMER_CONFLICTS = [
    ("group.id", "someone-elses-group"),
    ("enable.auto.commit", "true"),
    ("auto.commit.enable", "true"),
    ("enable.auto.offset.store", "true"),
]


@pytest.mark.parametrize(("name", "value"), PRODUCER_CONFLICTS)
def test_a_destination_property_that_voids_a_producer_guarantee_is_refused_naming_the_key(name, value):
    # Given a destination property that would turn "no loss" into loss (or endless replacement)
    cfg = config_with(destination={name: value})
    # When the worker works out its client settings at start-up
    # Then it refuses to start, naming the key, what it must be and what was given
    with pytest.raises(ConfigError, match=rf"destination\.properties\.{name}: must be .*got '{value}'$"):
        clients.pins(cfg)


@pytest.mark.parametrize(("name", "value"), CONSUMER_CONFLICTS)
def test_a_source_property_that_voids_the_commit_rules_is_refused_naming_the_key(name, value):
    cfg = config_with(source={name: value})
    with pytest.raises(ConfigError, match=rf"source\.properties\.{name}: must be .*got '{value}'$"):
        clients.pins(cfg)


def test_values_that_agree_with_the_guarantees_are_accepted_and_a_smaller_in_flight_is_kept():
    cfg = config_with(
        source={"enable.auto.commit": "false", "group.id": "ureplicator.unit"},
        destination={"acks": "-1", "enable.idempotence": "true", "max.in.flight": "2", "delivery.timeout.ms": "0",
                     "linger.ms": "5"},
    )
    pinned = clients.pins(cfg)
    assert pinned.producer["acks"] == "-1"
    assert pinned.producer["max.in.flight.requests.per.connection"] == "2"
    assert pinned.producer["message.timeout.ms"] == "0"
    assert "linger.ms" not in pinned.producer  # tuning stays the user's
    assert pinned.consumer["group.id"] == "ureplicator.unit"


def test_two_names_of_one_property_with_different_values_are_refused():
    cfg = config_with(destination={"acks": "all", "request.required.acks": "-1"})
    with pytest.raises(ConfigError, match=r"request\.required\.acks: conflicts with destination\.properties\.acks"):
        clients.pins(cfg)


def test_the_pinned_settings_are_applied_after_the_users(monkeypatch):
    # Given user properties that tune the producer and consumer
    built: list[dict[str, Any]] = []
    monkeypatch.setattr(kafka, "Producer", lambda conf: built.append(conf))
    monkeypatch.setattr(kafka, "Consumer", lambda conf: built.append(conf))
    cfg = config_with(source={"fetch.wait.max.ms": "7"}, destination={"linger.ms": "3"})
    pinned = clients.pins(cfg)
    # When the clients are built
    kafka.producer(cfg.destination, "p", pinned=pinned.producer, **{"message.timeout.ms": 5})
    kafka.consumer(cfg.source, "ureplicator.unit", "c", pinned=pinned.consumer, **{"enable.auto.commit": True})
    producer_conf, consumer_conf = built
    # Then each invariant has the pinned value, whatever came before it, and the tuning is the user's
    assert producer_conf["linger.ms"] == "3" and producer_conf["message.timeout.ms"] == 0
    assert producer_conf["enable.gapless.guarantee"] is True and producer_conf["delivery.report.only.error"] is False
    assert producer_conf["max.in.flight.requests.per.connection"] == 5
    assert consumer_conf["fetch.wait.max.ms"] == "7" and consumer_conf["enable.auto.commit"] is False
    assert consumer_conf["enable.auto.offset.store"] is False and consumer_conf["group.id"] == "ureplicator.unit"
