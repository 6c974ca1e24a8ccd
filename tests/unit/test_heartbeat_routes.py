"""Per-route freshness: each route has its own heartbeat topic and its own age gauge, labelled with the route."""

from __future__ import annotations

import math
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from ureplicator.common import config as config_module
from ureplicator.controller import heartbeat
from ureplicator.controller.status_api import View, evaluate


def _config(routes: list[dict] | None = None, **controller):
    doc = {"pipeline": "p", "zookeeper": {"connect": "127.0.0.1:1"}, "controller": controller}
    if routes is None:
        doc |= {"source": {"alias": "a", "bootstrap_servers": "127.0.0.1:1"},
                "destination": {"alias": "b", "bootstrap_servers": "127.0.0.2:1"}}
    else:
        doc |= {"clusters": {n: {"bootstrap_servers": f"127.0.0.{i}:9092"} for i, n in enumerate("abc", 1)},
                "routes": routes}
    return config_module.from_dict(doc)


TWO = [{"id": "a2b", "source": "a", "destination": "b"}, {"id": "b2c", "source": "b", "destination": "c"}]


def test_a_single_route_keeps_the_pipeline_topic_and_other_routes_get_their_own():
    assert heartbeat.topic_of(_config()) == "ureplicator-heartbeats-p"
    assert heartbeat.topic_of(_config(), "default") == "ureplicator-heartbeats-p"
    two = _config(TWO)
    assert heartbeat.topic_of(two, "a2b") == "ureplicator-heartbeats-p"
    # b2c's source is a2b's destination: its heartbeats written there must not pass for a2b's
    assert heartbeat.topic_of(two, "b2c") == "ureplicator-heartbeats-p.b2c"
    assert heartbeat.topic_of(_config(TWO, heartbeat_topic="hb"), "b2c") == "hb.b2c"


def _heartbeat(cfg, routes: dict, clock: list[float]) -> tuple[heartbeat.Heartbeat, CollectorRegistry]:
    registry = CollectorRegistry()
    leadership = SimpleNamespace(metrics=SimpleNamespace(registry=registry), state=SimpleNamespace(is_leader=False))
    beat = heartbeat.Heartbeat(cfg, client=None, leadership=leadership, admins=lambda alias: None,  # type: ignore[arg-type]
                               clock=lambda: clock[0], routes=lambda: routes)
    return beat, registry


def test_each_route_has_an_age_gauge_labelled_with_the_route_and_a_deleted_route_loses_it():
    cfg = _config(TWO)
    routes = {r.id: r for r in cfg.routes}
    clock = [1000.0]
    beat, registry = _heartbeat(cfg, routes, clock)

    # Given both routes followed, a heartbeat seen on a2b's destination and none yet on b2c's
    beat._follow(routes)
    beat._routes["a2b"].newest = 990.0
    assert registry.get_sample_value(heartbeat.AGE_METRIC, {"pipeline": "p", "route": "a2b"}) == 10.0
    assert math.isnan(registry.get_sample_value(heartbeat.AGE_METRIC, {"pipeline": "p", "route": "b2c"}))
    assert heartbeat.ages(registry, "p") == {"a2b": 10.0, "b2c": None}
    assert beat._routes["b2c"].view.source.alias == "b" and beat._routes["b2c"].topic.endswith(".b2c")

    # When time passes, the age grows without a new read
    clock[0] = 1030.0
    assert heartbeat.ages(registry, "p")["a2b"] == 40.0

    # When b2c is deleted, its gauge goes
    beat._follow({"a2b": routes["a2b"]})
    assert heartbeat.ages(registry, "p") == {"a2b": 40.0}


def test_status_takes_the_stalest_route_and_names_it():
    view = View(pipeline="p", topics={}, live=frozenset(), blacklisted_workers=frozenset(),
                blacklisted_partitions=frozenset(), assignments={}, statuses={}, lost={}, leader="c1",
                is_leader=True, zookeeper="connected", heartbeat_enabled=True, rpo_s=60,
                freshness_s=400.0, freshness_routes={"a2b": 3.0, "b2c": 400.0})
    doc = evaluate(view, now=10_000.0)
    assert doc["freshness"]["routes"] == {"a2b": 3.0, "b2c": 400.0}
    assert doc["freshness"]["late"] is True
    assert "freshness: the newest heartbeat on the destination is 400s old (RPO 60s) (route b2c)" in doc["problems"]
