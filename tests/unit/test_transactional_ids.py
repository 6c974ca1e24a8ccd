"""Exactly-once mode: transactional ids are unique per route, and the leader fences the worker's own id."""

from __future__ import annotations

from typing import Any

import pytest

from ureplicator.common import config as config_module
from ureplicator.controller import fencing
from ureplicator.worker import clients

_CLUSTERS = {"a": {"bootstrap_servers": "127.0.0.1:1"}, "b": {"bootstrap_servers": "127.0.0.1:2"},
             "c": {"bootstrap_servers": "127.0.0.1:3"}}


def _routes(prefix: str, *ids: str) -> config_module.Config:
    sources = iter("ac")
    return config_module.from_dict({
        "pipeline": "pay", "zookeeper": {"connect": "127.0.0.1:1"}, "clusters": _CLUSTERS,
        "routes": [{"id": i, "source": next(sources), "destination": "b", "topic_naming": "prefix"} for i in ids],
        "worker": {"exactly_once": True, **({"transactional_id_prefix": prefix} if prefix else {})},
    })


def _fencer(view: config_module.Config) -> fencing.Fencer:
    def never(*_: Any) -> None:
        raise AssertionError("not called")

    return fencing.Fencer(view, None, view.root, never, None, init=never, spawn=never)


@pytest.mark.parametrize("prefix", ["", "pay."])
def test_two_routes_with_the_same_worker_id_get_different_ids_and_each_leader_fences_its_own(prefix):
    cfg = _routes(prefix, "r1", "r2")
    views = [config_module.route_view(cfg, r) for r in ("r1", "r2")]
    ids = [clients.transactional_id(v, "w1") for v in views]
    assert ids[0] != ids[1]
    assert [_fencer(v).transactional_id("w1") for v in views] == ids
    if prefix:
        assert ids == ["pay.r1.w1", "pay.r2.w1"]  # the prefix first: a prefixed ACL covers both
    else:
        assert ids == ["ureplicator.pay.r1.w1", "ureplicator.pay.r2.w1"]  # the route's group, as before


def test_the_implicit_route_keeps_its_ids():
    # A config without routes, and a declared route "default" (the same state): the ids of before routes
    single = config_module.from_dict({
        "pipeline": "pay", "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "a", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "b", "bootstrap_servers": "127.0.0.1:2"},
        "worker": {"exactly_once": True, "transactional_id_prefix": "pay."},
    })
    declared = config_module.route_view(_routes("pay.", "default", "r2"), "default")
    for view in (single, declared):
        assert clients.transactional_id(view, "w1") == _fencer(view).transactional_id("w1") == "pay.w1"
    assert clients.transactional_id(config_module.route_view(_routes("pay.", "default", "r2"), "r2"), "w1") \
        == "pay.r2.w1"
