"""Freshness you can alert on: a heartbeat record through each route, and the age of the newest one.

An idle pipeline and a stuck one look the same by lag alone. So, like MirrorMaker 2's heartbeat
connector and the canary of the seed chapter, the leader writes one small record to each route's
heartbeat topic on that route's source every ``controller.heartbeat_interval_s``. The controller
registers that topic on the route like any mirrored topic, so the route's workers copy it with
the data, CreateTime preserved. Every controller replica reads the newest heartbeat on each
route's destination: ``ureplicator_heartbeat_age_seconds{pipeline,route}`` is how old it is, the
end-to-end freshness of that route. ``GET /status`` reports the stalest route and calls it a
problem above ``controller.rpo_s``.

Each route has a topic of its own (:func:`topic_of`): with routes c1->c2 and c2->c3, a heartbeat
written straight to c2 for the second route must not make the first look fresh.

    heartbeat = start(config, client, leadership, admins)
    ...
    heartbeat.stop()
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry, Gauge

from ureplicator.common import kafka, logs
from ureplicator.common.config import Config, RouteConfig, route_view
from ureplicator.common.errors import ConfigError, UReplicatorError
from ureplicator.controller import routeset, topics

AGE_METRIC = "ureplicator_heartbeat_age_seconds"


class HeartbeatMetrics:
    """``ureplicator_heartbeat_age_seconds{pipeline,route}`` (NaN until a heartbeat was seen) and
    ``ureplicator_heartbeat_last_sent_timestamp_seconds{pipeline,route}``."""

    def __init__(self, registry: CollectorRegistry, pipeline: str) -> None:
        self._pipeline = pipeline
        self._age = Gauge(AGE_METRIC, "Age of the newest heartbeat record on the route's destination (freshness)",
                          ["pipeline", "route"], registry=registry)
        self._sent = Gauge("ureplicator_heartbeat_last_sent_timestamp_seconds",
                           "When this replica last wrote a heartbeat to the route's source (leader only)",
                           ["pipeline", "route"], registry=registry)

    def track(self, route: str, age: Callable[[], float | None]) -> None:
        self._age.labels(self._pipeline, route).set_function(lambda: _or_nan(age()))

    def sent(self, route: str, at: float) -> None:
        self._sent.labels(self._pipeline, route).set(at)

    def forget(self, route: str) -> None:
        for gauge in (self._age, self._sent):
            try:
                gauge.remove(self._pipeline, route)
            except KeyError:
                pass  # never sent: this replica did not lead while the route existed


@dataclass
class _Route:
    """One route's heartbeat: its single-route config, its topic, and what was read on its destination."""

    view: Config
    topic: str
    definition: dict[str, Any]
    registered_term: int | None = None
    newest: float | None = None  # CreateTime (epoch s) of the newest heartbeat on the destination
    newest_offset: int = -1


class Heartbeat:
    """Writes heartbeats on every route while this replica leads; reads the newest mirrored ones always."""

    def __init__(self, config: Config, client: KazooClient, leadership: Any, admins: Callable[[str], Any],
                 clock: Any = time.time, routes: Callable[[], dict[str, RouteConfig]] | None = None) -> None:
        self._config = config
        self._client = client
        self._leadership = leadership
        self._admins = admins  # cluster alias -> AdminClient (shared with the REST API)
        self._clock = clock
        self._routes_of = routes or (lambda: {rid: r for rid, (r, _) in routeset.registry(config, client).items()})
        self._interval = config.controller.heartbeat_interval_s
        self._stop = threading.Event()
        self._routes: dict[str, _Route] = {}
        self._producers: dict[str, Any] = {}  # per source cluster: routes from one cluster share it
        self._readers: dict[str, Any] = {}  # per destination cluster
        self._log = logs.get(__name__, pipeline=config.pipeline)
        self.metrics = HeartbeatMetrics(leadership.metrics.registry, config.pipeline)
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        if self._interval > 0:
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        for producer in self._producers.values():
            producer.flush(5)
        for reader in self._readers.values():
            reader.close()

    def age(self, route: str) -> float | None:
        state = self._routes.get(route)
        if state is None or state.newest is None:
            return None
        return max(0.0, self._clock() - state.newest)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.tick()

    def tick(self) -> None:
        """One round: follow the route registry, write (when leading), read every route's destination."""
        try:
            self._follow(self._routes_of())
        except Exception as exc:  # noqa: BLE001 - keep the routes known so far
            self._log.warning("heartbeat_routes_unreadable", error=logs.error_text(exc))
        leading = self._leadership.state.is_leader
        for route_id, state in list(self._routes.items()):
            try:
                if leading:
                    self._write(state)
                self._read(state)
            except (KafkaException, UReplicatorError) as exc:
                self._log.warning("heartbeat_failed", route=route_id, error=logs.error_text(exc))
            except Exception:  # noqa: BLE001 - the heartbeat must never take the controller down
                self._log.exception("heartbeat_error", route=route_id)

    def _follow(self, routes: dict[str, RouteConfig]) -> None:
        for route_id in set(self._routes) - set(routes):
            del self._routes[route_id]
            self.metrics.forget(route_id)
        for route_id, route in routes.items():
            known = self._routes.get(route_id)
            if known is not None and known.definition == route.definition():
                continue
            try:
                view = route_view(self._config, route=route)
            except ConfigError as exc:  # a route added through the API over a cluster this file lacks
                self._log.warning("heartbeat_route_skipped", route=route_id, error=logs.error_text(exc))
                continue
            self._routes[route_id] = _Route(view, topic_of(self._config, route_id), route.definition())
            self.metrics.track(route_id, lambda rid=route_id: self.age(rid))

    def _write(self, state: _Route) -> None:
        view = state.view
        term = self._leadership.state.generation
        if state.registered_term is None:
            self._register(state)
            state.registered_term = term
        producer = self._producers.get(view.source.alias)
        if producer is None:
            producer = kafka.producer(view.source, f"ureplicator-heartbeat-{socket.gethostname()}",
                                      **{"linger.ms": 0, "message.timeout.ms": 30_000})
            self._producers[view.source.alias] = producer
        now = self._clock()
        value = json.dumps({"pipeline": view.pipeline, "route": view.route_id, "source": view.source.alias,
                            "sent_at": now}).encode()
        producer.produce(state.topic, value=value, partition=0, timestamp=int(now * 1000))
        producer.poll(0)
        self.metrics.sent(view.route_id, now)

    def _register(self, state: _Route) -> None:
        """The route's heartbeat topic exists on its source (one partition) and is mirrored like any topic."""
        view = state.view
        source_admin, destination_admin = self._admins(view.source.alias), self._admins(view.destination.alias)
        kafka.ensure_topic(source_admin, view.source, kafka.TopicInfo(state.topic, 1, {}))
        try:
            topics.register(view, self._client, source_admin, destination_admin, state.topic, automatic=True)
            self._leadership.request_reconcile()
            self._log.info("heartbeat_topic_registered", route=view.route_id, topic=state.topic)
        except topics.TopicError as exc:
            if exc.status != 409:  # 409: mirrored already, or an operator removed it (then it stays removed)
                raise

    def _read(self, state: _Route) -> None:
        """The CreateTime of the newest record in the route's heartbeat topic on its destination."""
        view = state.view
        destination = topics.destination_name(view, state.topic)
        reader = self._readers.get(view.destination.alias)
        if reader is None:
            reader = kafka.consumer(view.destination, f"{self._config.consumer_group}.heartbeat",
                                    "ureplicator-heartbeat-reader")
            self._readers[view.destination.alias] = reader
        try:
            low, high = reader.get_watermark_offsets(TopicPartition(destination, 0), timeout=5)
        except KafkaException:
            return  # not created yet, or the destination is away: the age keeps growing
        if high <= low or high - 1 == state.newest_offset:
            return
        reader.assign([TopicPartition(destination, 0, high - 1)])
        try:
            for message in reader.consume(num_messages=1, timeout=5):
                kind, ts = message.timestamp()
                if message.error() is None and kind and ts > 0:
                    newest = ts / 1000.0
                    if state.newest is None or newest > state.newest:
                        state.newest = newest
                    state.newest_offset = message.offset()
        finally:
            reader.unassign()


def topic_of(config: Config, route_id: str | None = None) -> str:
    """The heartbeat topic of a route.

    One per pipeline (in active-active, A's own heartbeats must not stand in for B's), and one per
    route: the config's first route keeps the pipeline's name (so a single-route deployment's topic
    never changes), every other route adds ``.<route id>``.
    """
    base = config.controller.heartbeat_topic or f"ureplicator-heartbeats-{config.pipeline}"
    first = config.routes[0].id if config.routes else None
    return base if route_id in (None, "", first) else f"{base}.{route_id}"


def ages(registry: CollectorRegistry, pipeline: str) -> dict[str, float | None]:
    """Per route, the age this replica reports (None: no heartbeat seen yet), read back from its registry."""
    found: dict[str, float | None] = {}
    for family in registry.collect():
        if family.name != AGE_METRIC:
            continue
        for sample in family.samples:
            if sample.labels.get("pipeline") == pipeline:
                value = sample.value
                found[sample.labels.get("route", "")] = None if value != value else value  # NaN: none seen
    return found


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def start(config: Config, client: KazooClient, leadership: Any, admins: Callable[[str], Any]) -> Heartbeat:
    return Heartbeat(config, client, leadership, admins).start()
