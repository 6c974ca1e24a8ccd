"""Build Kafka clients for the source and destination clusters, and read or create topics.

The one place that knows librdkafka settings: throughput defaults for the
mirror path, user properties (SASL/SSL, ...) layered on top, and librdkafka's
logs routed to structlog. Topic helpers return plain values so the controller
stays testable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from ureplicator.common import autherrors, logs
from ureplicator.common.config import IMPLICIT_ROUTE, ClusterConfig
from ureplicator.common.errors import ClusterUnavailable, ConfigError, UReplicatorError

# Topic configs that describe the source cluster rather than the data; never copied.
_CLUSTER_SPECIFIC = {
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
    "message.format.version",
    # LogAppendTime on the destination would overwrite the mirrored timestamps.
    "message.timestamp.type",
    "confluent.placement.constraints",
    "confluent.tier.enable",
    "remote.storage.enable",
}

# After a broker's controlled shutdown librdkafka 2.16 can log "new leader-N not found in cache"
# and leave the partitions leaderless until the next periodic metadata refresh (5 minutes by
# default): minutes of silence after a restart (the soak). A refresh every 10 s bounds that.
_METADATA_REFRESH_MS = 10_000

_CONSUMER_DEFAULTS: dict[str, Any] = {
    "reconnect.backoff.max.ms": 1000,  # librdkafka's 10 s default delays recovery after a broker restart
    "topic.metadata.refresh.interval.ms": _METADATA_REFRESH_MS,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 100,
    "queued.max.messages.kbytes": 65536,
    # librdkafka >= 2.4 postpones a partition's next fetch by this much (default 1000 ms)
    # once its local queue passes queued.min.messages / queued.max.messages.kbytes; at
    # mirror speed that is a one-second bubble every few batches.
    "fetch.queue.backoff.ms": 10,
    "socket.keepalive.enable": True,
}

_PRODUCER_DEFAULTS: dict[str, Any] = {
    "reconnect.backoff.max.ms": 1000,
    "topic.metadata.refresh.interval.ms": _METADATA_REFRESH_MS,
    # The worker pins these and more (PRODUCER_INVARIANTS); the benchmarks' clients copy them from here.
    "enable.idempotence": True,
    "acks": "all",
    # librdkafka sends one produce request per partition with at most 5 in flight per broker
    # (issue #1700), so under load batches fill while they queue for a slot whatever the linger;
    # at moderate rates the linger only adds itself to records (20 ms gave twice MirrorMaker 2's
    # default latency, 5 ms still 2.7 ms more median than 1 ms at 20,000 records/s: the
    # latency benchmark of 2026-11-26). 0 cost 11 % of the 100 B backlog rate (2026-11-28).
    "linger.ms": 1,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "queue.buffering.max.kbytes": 262144,
    "queue.buffering.max.messages": 500_000,
    "socket.keepalive.enable": True,
    # Nagle stays on (librdkafka's default): TCP_NODELAY, as Java's clients set it, cost 18 % more CPU
    # per record on a 100 B backlog and moved no latency percentile by 3 ms at 50,000/s (2026-11-28).
}


@dataclass(frozen=True)
class Invariant:
    """A client property that a guarantee rests on: applied after the user's, a conflicting user value refused.

    ``value`` is what the client gets when the user says nothing; a user value is kept only
    when ``accepts`` takes it (by default: only the same value). ``aliases`` are librdkafka's
    other names for the same property, checked like the name itself.
    """

    name: str
    value: Any
    why: str
    aliases: tuple[str, ...] = ()
    accepts: Callable[[str], bool] | None = None

    def allows(self, given: Any) -> bool:
        text = _text(given)
        return self.accepts(text) if self.accepts is not None else text == _text(self.value)


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value).strip().lower()


def _int_between(low: int, high: int) -> Callable[[str], bool]:
    def accepts(text: str) -> bool:
        try:
            return low <= int(text) <= high
        except ValueError:
            return False
    return accepts


# What the worker's no-loss and ordering accounting rests on, on the destination producer
# (docs/architecture.md, "Runs, not records"). One delivery report speaks for a whole run only
# because the broker takes a partition's records in sequence (idempotence, acks=all, at most 5
# requests in flight, which is what keeps the sequence numbers ordered across retries) and a
# record that fails for good fails the whole producer instead of leaving a gap (gapless). The
# gapless guarantee does not cover message timeouts, so no record may ever time out: the worker's
# own stall watchdog replaces a silent producer instead (worker.producer_stall_s).
PRODUCER_INVARIANTS: tuple[Invariant, ...] = (
    Invariant("enable.idempotence", True, "the broker must take a partition's records only in sequence"),
    Invariant("enable.gapless.guarantee", True, "a record that fails for good must fail the producer, not leave a gap"),
    Invariant("acks", "all", "a report must mean every in-sync replica has the record",
              aliases=("request.required.acks",), accepts=lambda v: v in ("all", "-1")),
    Invariant("max.in.flight.requests.per.connection", 5,
              "idempotent ordering across retries holds for at most 5 requests in flight",
              aliases=("max.in.flight",), accepts=_int_between(1, 5)),
    Invariant("message.timeout.ms", 0,
              "librdkafka's gapless guarantee does not cover message timeouts: a record must never time out",
              aliases=("delivery.timeout.ms",)),
    Invariant("message.send.max.retries", 2147483647,
              "a record out of retries fails the producer (gapless): retries must not run out",
              aliases=("retries",)),
    Invariant("delivery.report.only.error", False, "a successful delivery report is what acknowledges a run"),
)


def consumer_invariants(group_id: str) -> tuple[Invariant, ...]:
    """What the worker's commits rest on, on its source consumers (the fetching one and the commit client)."""
    return (
        Invariant("group.id", group_id,
                  "committed offsets live in the pipeline's group, where the next owner reads them"),
        Invariant("enable.auto.commit", False, "only acknowledged positions may be committed",
                  aliases=("auto.commit.enable",)),
        Invariant("enable.auto.offset.store", False, "only acknowledged positions may be committed"),
    )


def pin(section: str, properties: Mapping[str, Any], invariants: Iterable[Invariant]) -> dict[str, Any]:
    """The settings to apply after ``properties`` (the user's), or a ConfigError naming the conflicting key.

    ``section`` is where the properties come from in the config (``destination.properties``).
    """
    pinned: dict[str, Any] = {}
    for invariant in invariants:
        given = [(name, properties[name]) for name in (invariant.name, *invariant.aliases) if name in properties]
        for name, value in given:
            if not invariant.allows(value):
                raise ConfigError(f"{section}.{name}",
                                  f"must be {_text(invariant.value)} ({invariant.why}), got {value!r}")
        if len({_text(value) for _, value in given}) > 1:
            raise ConfigError(f"{section}.{given[-1][0]}",
                              f"conflicts with {section}.{given[0][0]}: set the property once")
        # A user value the invariant accepts is kept (max.in.flight below 5, say); applied last,
        # under the property's own name, so no alias can change it afterwards.
        pinned[invariant.name] = given[0][1] if given else invariant.value
    return pinned
def _unavailable(client: Any, cluster: ClusterConfig, exc: KafkaException) -> ClusterUnavailable:
    """'did not answer', unless the cluster refused our credentials: then it says so."""
    return autherrors.unavailable(cluster.alias, cluster.bootstrap_servers, exc.args[0], autherrors.watch_of(client))


def read_metadata(client: Any, cluster: ClusterConfig, timeout_s: float, topic: str | None = None) -> Any:
    """``client.list_topics`` within ``timeout_s``, raising at once when the cluster refuses our credentials.

    librdkafka reports a refused login only through the error callback, while ``list_topics`` waits out
    its whole timeout for a broker that will never let us in. So the wait is cut into slices that
    double from 0.5 s (a slow but healthy broker still gets its full time, minus a few re-sent
    requests), and after each failed slice an authentication error seen during this call ends it.
    """
    watch = getattr(client, "_ureplicator_errors", None)
    started = time.monotonic()
    deadline = started + timeout_s
    step = 0.5 if watch is not None else timeout_s
    while True:
        wait = max(min(step, deadline - time.monotonic()), 0.01)
        called = time.monotonic()
        try:
            return client.list_topics(timeout=wait) if topic is None else client.list_topics(topic=topic, timeout=wait)
        except KafkaException as exc:
            now = time.monotonic()
            refused = autherrors.kind(exc.args[0]) is not None or (
                watch is not None and autherrors.watch_of(client) is not None
                and watch.failure(within_s=now - started + 1.0) is not None)
            # Only a slice that ran out is tried again: an error that came sooner is the answer.
            if refused or now - called < 0.9 * wait or now >= deadline - 0.01:
                raise _unavailable(client, cluster, exc) from None
            step *= 2


class TopicNotFound(UReplicatorError):
    """The topic does not exist on the cluster that was asked."""


def transactional_id(prefix: str, consumer_group: str, worker_id: str, route_id: str) -> str:
    """Exactly-once mode: a worker's transactional id, unique per route and worker id.

    The worker's producer uses it, and the leader fences it when the worker departs
    (controller/fencing.py). An empty prefix means ``<consumer group>.``, and the group
    names the route already. A set prefix is followed by the route's id (``<prefix><route>.``),
    except on the implicit route (a config without ``routes``, or a route ``default``),
    whose ids stay ``<prefix><worker id>`` as before routes existed: without the route,
    two routes' workers with one id into one destination fenced each other, and a pool
    worker that moved could be fenced by its old route's leader. The prefix comes first,
    so a prefixed ACL on it still covers every route's ids.
    """
    if not prefix:
        return f"{consumer_group}.{worker_id}"
    if not route_id or route_id == IMPLICIT_ROUTE:
        return prefix + worker_id
    return f"{prefix}{route_id}.{worker_id}"


def consumer(cluster: ClusterConfig, group_id: str, client_id: str, pinned: Mapping[str, Any] | None = None,
             **overrides: Any) -> Consumer:
    """A consumer: defaults, then ``overrides``, then the user's properties, then ``pinned`` (see :func:`pin`)."""
    config = {**_CONSUMER_DEFAULTS, "group.id": group_id, "client.id": client_id}
    config.update(overrides)
    config.update(cluster.client_config())
    config.update(pinned or {})
    config["logger"] = logs.librdkafka_logger(f"consumer.{cluster.alias}")
    return Consumer(config)


def producer(cluster: ClusterConfig, client_id: str, pinned: Mapping[str, Any] | None = None,
             **overrides: Any) -> Producer:
    """A producer: defaults, then ``overrides``, then the user's properties, then ``pinned`` (see :func:`pin`)."""
    config = {**_PRODUCER_DEFAULTS, "client.id": client_id}
    config.update(overrides)
    config.update(cluster.client_config())
    config.update(pinned or {})
    config["logger"] = logs.librdkafka_logger(f"producer.{cluster.alias}")
    return Producer(config)


def admin(cluster: ClusterConfig) -> AdminClient:
    config: dict[str, Any] = dict(cluster.client_config())
    config["logger"] = logs.librdkafka_logger(f"admin.{cluster.alias}")
    # The error callback tells a refused credential from a silent cluster (common.autherrors).
    return autherrors.attach(config, AdminClient)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    configs: dict[str, str]
    # A topic to create on the destination gets these (capped by its broker count); -1/None: the
    # broker's defaults. describe_topic fills them with the source topic's.
    replication_factor: int = -1
    min_insync_replicas: int | None = None


def for_destination(source: TopicInfo, name: str, replication_factor: int = 0,
                    min_insync_replicas: int = 0) -> TopicInfo:
    """The destination topic for ``source``: configured values, else the source topic's (0 = the source's)."""
    return TopicInfo(name, source.partitions, source.configs,
                     replication_factor or source.replication_factor,
                     min_insync_replicas or source.min_insync_replicas)


def describe_topic(client: AdminClient, cluster: ClusterConfig, topic: str, timeout_s: float = 10.0) -> TopicInfo:
    """Partition count and non-default, copyable configs of ``topic``."""
    metadata = read_metadata(client, cluster, timeout_s, topic)
    found = metadata.topics.get(topic)
    if found is not None and found.error is not None and autherrors.kind(found.error):
        raise autherrors.unavailable(cluster.alias, cluster.bootstrap_servers, found.error)
    if found is None or found.error is not None or not found.partitions:
        raise TopicNotFound(f"topic {topic!r} does not exist on cluster {cluster.alias}")
    configs, min_insync = _copyable_configs(client, topic, timeout_s)
    replicas = max((len(p.replicas) for p in found.partitions.values()), default=-1)
    return TopicInfo(topic, len(found.partitions), configs, replicas, min_insync)


def _copyable_configs(client: AdminClient, topic: str, timeout_s: float) -> tuple[dict[str, str], int | None]:
    """The configs to copy, and the topic's min.insync.replicas (cluster-specific: not copied as is)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entries = client.describe_configs([resource])[resource].result(timeout=timeout_s)
    except KafkaException:
        return {}, None  # configs are best effort; partitions and data are what matter
    min_insync = entries.get("min.insync.replicas")
    return {
        name: entry.value
        for name, entry in entries.items()
        if not entry.is_default
        and not entry.is_read_only
        and entry.value is not None
        and name not in _CLUSTER_SPECIFIC
        and entry.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    }, (int(min_insync.value) if min_insync is not None and str(min_insync.value).isdigit() else None)


def ensure_topic(client: AdminClient, cluster: ClusterConfig, want: TopicInfo, timeout_s: float = 30.0) -> str:
    """Create ``want`` on the cluster, or grow its partitions; return what was done."""
    metadata = read_metadata(client, cluster, timeout_s, want.name)
    existing = metadata.topics.get(want.name)
    if existing is None or existing.error is not None or not existing.partitions:
        replication, configs = _safety(want, len(metadata.brokers))
        future = client.create_topics(
            [NewTopic(want.name, num_partitions=want.partitions, replication_factor=replication, config=configs)],
            operation_timeout=timeout_s,
        )[want.name]
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise UReplicatorError(
                    f"cannot create topic {want.name!r} on {cluster.alias}: {exc.args[0].str()}"
                ) from None
        return "created"
    have = len(existing.partitions)
    if have < want.partitions:
        future = client.create_partitions([NewPartitions(want.name, want.partitions)])[want.name]
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise UReplicatorError(f"cannot grow {want.name!r} on {cluster.alias}: {exc.args[0].str()}") from None
        return "grown"
    return "exists"


def _safety(want: TopicInfo, brokers: int) -> tuple[int, dict[str, str]]:
    """Replication factor and min.insync.replicas for a new topic: as wanted, capped by the brokers."""
    configs = dict(want.configs)
    if want.replication_factor <= 0:
        return -1, configs  # the broker's default.replication.factor, as before
    replication = min(want.replication_factor, brokers) if brokers > 0 else want.replication_factor
    if want.min_insync_replicas:
        configs["min.insync.replicas"] = str(max(1, min(want.min_insync_replicas, replication)))
    return replication, configs


def list_topics(client: AdminClient, cluster: ClusterConfig, timeout_s: float = 10.0) -> list[str]:
    return sorted(read_metadata(client, cluster, timeout_s).topics)


def sync_configs(client: AdminClient, cluster: ClusterConfig, topic: str, wanted: dict[str, str],
                 timeout_s: float = 10.0) -> list[str]:
    """Set the destination topic's configs that differ from the source's; return the changed names."""
    if not wanted:
        return []
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        current = client.describe_configs([resource])[resource].result(timeout=timeout_s)
    except KafkaException:
        return []  # topic gone or cluster briefly away: the next sync tries again
    changed = sorted(k for k, v in wanted.items() if k not in current or current[k].value != v)
    if not changed:
        return []
    update = ConfigResource(
        ConfigResource.Type.TOPIC, topic,
        incremental_configs=[
            ConfigEntry(k, wanted[k], incremental_operation=AlterConfigOpType.SET) for k in changed
        ],
    )
    try:
        client.incremental_alter_configs([update])[update].result(timeout=timeout_s)
    except KafkaException as exc:
        logs.get(__name__).warning("config_sync_failed", topic=topic, error=str(exc.args[0]))
        return []
    return changed
