"""Exactly-once mode: a worker's transactional id is scoped to its route (issue 44, section 4).

With ``worker.transactional_id_prefix`` set, the id used to be prefix + worker id for every
route: two routes into one destination with the same worker id (two pinned workers, or a
pool worker that moved) fenced each other's producer, and one route's fence of its departed
worker fenced the other route's live one. On the real destination cluster, with the clients
the worker opens (worker.clients.connect) and the controller's fencer.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from confluent_kafka import KafkaException

from tests.support import kafka_io
from ureplicator.common import config as config_module
from ureplicator.common import logs, zk
from ureplicator.controller import fencing
from ureplicator.worker import clients as worker_clients

pytestmark = pytest.mark.integration


def _config(services: dict[str, Any], pipeline: str) -> config_module.Config:
    clusters = services["clusters"]
    return config_module.from_dict({
        "pipeline": pipeline,
        "zookeeper": {"connect": services["zookeeper"], "session_timeout_s": 6},
        "clusters": {alias: {"bootstrap_servers": clusters[alias]} for alias in ("c1", "c2", "c3")},
        # Two routes into c2, each served by a worker named w1
        "routes": [{"id": "r1", "source": "c1", "destination": "c2", "topic_naming": "prefix"},
                   {"id": "r2", "source": "c3", "destination": "c2", "topic_naming": "prefix"}],
        "worker": {"id": "w1", "route": "r1", "exactly_once": True, "transactional_id_prefix": "pay."},
    })


def _commit_one(producer: Any, topic: str, value: bytes) -> None:
    producer.begin_transaction()
    producer.produce(topic, value)
    producer.commit_transaction(30)


def test_two_routes_with_the_same_worker_id_and_a_prefix_do_not_fence_each_other(clusters3):
    # Given the clients of worker w1 on route r1 and of worker w1 on route r2, one destination (c2)
    cfg = _config(clusters3, f"txid{os.getpid()}")
    r1, r2 = config_module.route_view(cfg, "r1"), config_module.route_view(cfg, "r2")
    topic = f"{cfg.pipeline}-txn"
    kafka_io.create_topic(clusters3["clusters"]["c2"], topic, 1)
    first, second = worker_clients.connect(r1, "w1"), worker_clients.connect(r2, "w1")
    fence_zk = zk.connect(r2)
    try:
        first.producer.init_transactions(30)
        first.producer.begin_transaction()
        first.producer.produce(topic, b"r1-open")
        # When route r2's w1 starts its producer while r1's has a transaction open
        second.producer.init_transactions(30)
        _commit_one(second.producer, topic, b"r2")
        # Then r1's transaction still commits: it was not fenced
        first.producer.commit_transaction(30)
        # When r2's leader fences its departed w1, while r1's w1 has a transaction open again
        first.producer.begin_transaction()
        first.producer.produce(topic, b"r1-again")
        fenced = threading.Event()
        fencer = fencing.Fencer(r2, fence_zk, r2.root, fenced.set, logs.get("test"),
                                spawn=lambda run, _name: run())
        assert fencer.transactional_id("w1") == worker_clients.transactional_id(r2, "w1")
        assert fencer.unfenced({"w1"}, set()) == {"w1"} and fenced.is_set()
        assert fencer.unfenced({"w1"}, set()) == set(), "r2's fence did not finish"
        # Then r1's w1 is untouched, and r2's w1 was the one fenced
        first.producer.commit_transaction(30)
        with pytest.raises(KafkaException):
            _commit_one(second.producer, topic, b"r2-zombie")
        ids = {worker_clients.transactional_id(r1, "w1"), worker_clients.transactional_id(r2, "w1")}
        assert len(ids) == 2 and all(i.startswith("pay.") for i in ids), ids  # a prefixed ACL still covers both
    finally:
        for opened in (first, second):
            opened.producer.flush(0)
            opened.consumer.close()
            opened.zk.stop()
            opened.zk.close()
        fence_zk.stop()
        fence_zk.close()
