"""Connect the three clients a worker drives: source consumer, destination producer, ZooKeeper."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from common import kafka, zk
from common.config import Config


@dataclass(frozen=True)
class WorkerClients:
    """What :class:`worker.mirror.MirrorWorker` talks to; unit tests pass pure-Python fakes."""

    consumer: Any  # confluent_kafka.Consumer, used with assign() only
    producer: Any  # confluent_kafka.Producer; delivery reports come per record (on_delivery)
    zk: Any  # kazoo.client.KazooClient
    # Builds a fresh destination producer (a new idempotent producer id). After a purge of
    # in-flight records the worker swaps its producer for a new one: librdkafka's idempotence
    # state of the old one (sequence gap, epoch-bump drain) must not outlive the purge.
    new_producer: Callable[[], Any] | None = None


def connect(config: Config, worker_id: str) -> WorkerClients:
    """Open the real clients; ZooKeeper first, so an unreachable ensemble fails fast."""
    client = zk.connect(config)
    client_id = f"ureplicator-{config.pipeline}-{worker_id}"
    consumer = kafka.consumer(
        config.source, config.consumer_group, client_id, **{"auto.offset.reset": config.worker.auto_offset_reset}
    )
    new_producer = partial(kafka.producer, config.destination, client_id)
    return WorkerClients(consumer=consumer, producer=new_producer(), zk=client, new_producer=new_producer)
