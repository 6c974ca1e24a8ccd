"""Freshness you can alert on: a heartbeat record through the pipeline, and the age of the newest one.

An idle pipeline and a stuck one look the same by lag alone. So, like MirrorMaker 2's heartbeat
connector and the canary of the seed chapter, the leader writes one small record to
``controller.heartbeat_topic`` on the source every ``controller.heartbeat_interval_s``. The
controller registers that topic like any mirrored topic, so the workers copy it with the data,
CreateTime preserved. Every controller replica reads the newest heartbeat on the destination:
``ureplicator_heartbeat_age_seconds{pipeline}`` is how old it is, the end-to-end freshness of the
pipeline. ``GET /status`` reports it and calls it a problem above ``controller.rpo_s``.

    heartbeat = start(config, client, leadership, source_admin, destination_admin)
    ...
    heartbeat.stop()
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry, Gauge

from common import kafka, logs
from common.config import Config
from common.errors import UReplicatorError
from controller import topics

AGE_METRIC = "ureplicator_heartbeat_age_seconds"


class Heartbeat:
    """Writes heartbeats while this replica leads; reads the newest mirrored one always."""

    def __init__(self, config: Config, client: KazooClient, leadership: Any, source_admin: Any,
                 destination_admin: Any, clock: Any = time.time) -> None:
        self._config = config
        self._client = client
        self._leadership = leadership
        self._admins = (source_admin, destination_admin)
        self._clock = clock
        self._interval = config.controller.heartbeat_interval_s
        self._topic = topic_of(config)
        self._stop = threading.Event()
        self._producer: Any = None
        self._reader: Any = None
        self._registered_term: int | None = None
        self._newest: float | None = None  # CreateTime (epoch s) of the newest heartbeat on the destination
        self._newest_offset = -1
        self._log = logs.get(__name__, pipeline=config.pipeline)
        self.sent = register_metrics(leadership.metrics.registry, config.pipeline, self.age)
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        if self._interval > 0:
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._producer is not None:
            self._producer.flush(5)
        if self._reader is not None:
            self._reader.close()

    def age(self) -> float | None:
        return None if self._newest is None else max(0.0, self._clock() - self._newest)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                if self._leadership.state.is_leader:
                    self._write()
                self._read()
            except (KafkaException, UReplicatorError) as exc:
                self._log.warning("heartbeat_failed", error=str(exc))
            except Exception:  # noqa: BLE001 - the heartbeat must never take the controller down
                self._log.exception("heartbeat_error")

    def _write(self) -> None:
        term = self._leadership.state.generation
        if self._registered_term is None:
            self._register()
            self._registered_term = term
        if self._producer is None:
            self._producer = kafka.producer(self._config.source, f"ureplicator-heartbeat-{socket.gethostname()}",
                                            **{"linger.ms": 0, "message.timeout.ms": 30_000})
        now = self._clock()
        value = json.dumps({"pipeline": self._config.pipeline, "source": self._config.source.alias,
                            "sent_at": now}).encode()
        self._producer.produce(self._topic, value=value, partition=0, timestamp=int(now * 1000))
        self._producer.poll(0)
        self.sent.set(now)

    def _register(self) -> None:
        """The heartbeat topic exists on the source (one partition) and is mirrored like any topic."""
        source_admin, destination_admin = self._admins
        kafka.ensure_topic(source_admin, self._config.source, kafka.TopicInfo(self._topic, 1, {}))
        try:
            topics.register(self._config, self._client, source_admin, destination_admin, self._topic, automatic=True)
            self._leadership.request_reconcile()
            self._log.info("heartbeat_topic_registered", topic=self._topic)
        except topics.TopicError as exc:
            if exc.status != 409:  # 409: mirrored already, or an operator removed it (then it stays removed)
                raise

    def _read(self) -> None:
        """The CreateTime of the newest record in the destination's heartbeat topic."""
        destination = topics.destination_name(self._config, self._topic)
        if self._reader is None:
            self._reader = kafka.consumer(self._config.destination, f"{self._config.consumer_group}.heartbeat",
                                          "ureplicator-heartbeat-reader")
        try:
            low, high = self._reader.get_watermark_offsets(TopicPartition(destination, 0), timeout=5)
        except KafkaException:
            return  # not created yet, or the destination is away: the age keeps growing
        if high <= low or high - 1 == self._newest_offset:
            return
        self._reader.assign([TopicPartition(destination, 0, high - 1)])
        try:
            for message in self._reader.consume(num_messages=1, timeout=5):
                kind, ts = message.timestamp()
                if message.error() is None and kind and ts > 0:
                    newest = ts / 1000.0
                    if self._newest is None or newest > self._newest:
                        self._newest = newest
                    self._newest_offset = message.offset()
        finally:
            self._reader.unassign()


def topic_of(config: Config) -> str:
    """One heartbeat topic per pipeline: in active-active, A's own heartbeats must not stand in for B's."""
    return config.controller.heartbeat_topic or f"ureplicator-heartbeats-{config.pipeline}"


def register_metrics(registry: CollectorRegistry, pipeline: str, age: Callable[[], float | None]) -> Any:
    """``ureplicator_heartbeat_age_seconds{pipeline}`` (NaN until a heartbeat was seen), and the
    last-sent gauge, which is returned."""
    Gauge(AGE_METRIC, "Age of the newest heartbeat record on the destination (freshness)", ["pipeline"],
          registry=registry).labels(pipeline).set_function(lambda: _or_nan(age()))
    return Gauge("ureplicator_heartbeat_last_sent_timestamp_seconds",
                 "When this replica last wrote a heartbeat to the source (leader only)", ["pipeline"],
                 registry=registry).labels(pipeline)


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def start(config: Config, client: KazooClient, leadership: Any, source_admin: Any,
          destination_admin: Any) -> Heartbeat:
    return Heartbeat(config, client, leadership, source_admin, destination_admin).start()
