"""Topic lifecycle on both clusters: naming, registration, partition growth, config re-sync, auto-whitelisting.

Used by the REST API (register on request) and by the leader (periodic sync).
Errors carry an HTTP-like status so the API can answer with the right code.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from kazoo.client import KazooClient

from ureplicator.common import kafka, logs, zk
from ureplicator.common.config import Config
from ureplicator.common.errors import UReplicatorError
from ureplicator.common.zkschema import Paths, TopicRecord, valid_topic_name

log = logs.get(__name__)

# Topics no replicator should copy: Kafka's own, and MirrorMaker 2's bookkeeping; and other
# pipelines' heartbeat topics (each pipeline registers its own, controller/heartbeat.py).
_INTERNAL = re.compile(r"^(__.*|_schemas|.*\.internal|mm2-.*|heartbeats|.*\.checkpoints\.internal"
                       r"|(.*\.)?ureplicator-heartbeats-.*)$")


class TopicError(UReplicatorError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def destination_name(config: Config, topic: str, explicit: str | None = None) -> str:
    """The destination topic for ``topic`` under the configured naming (or an explicit override)."""
    ctl = config.controller
    if explicit:
        name = explicit
    elif ctl.topic_naming == "prefix":
        name = f"{config.source.alias}.{topic}"
    elif ctl.topic_naming == "mapping":
        name = ctl.topic_mapping.get(topic, topic)
    else:
        name = topic
    if not valid_topic_name(name):
        raise TopicError(400, f"destination topic name {name!r} is not a valid Kafka topic name")
    if name == topic and _same_cluster(config):
        raise TopicError(400, f"refusing to mirror {topic!r} onto itself: source and destination are one cluster")
    return name


def _same_cluster(config: Config) -> bool:
    norm = lambda s: frozenset(x.strip().lower() for x in s.split(",") if x.strip())  # noqa: E731
    return norm(config.source.bootstrap_servers) == norm(config.destination.bootstrap_servers)


def register(
    config: Config,
    client: KazooClient,
    source_admin: Any,
    destination_admin: Any,
    topic: str,
    requested_partitions: int | None = None,
    destination: str | None = None,
    automatic: bool = False,
) -> tuple[TopicRecord, str]:
    """Check the source, create the destination topic, record the topic in ZooKeeper.

    ``automatic`` is auto-whitelisting: it never registers a topic an operator removed.
    """
    paths = Paths(config.root)
    if zk.read_topic(client, paths, topic) is not None:
        raise TopicError(409, f"topic {topic!r} is already mirrored")
    target = destination_name(config, topic, destination)
    if config.worker.exactly_once:
        _one_source_per_destination(client, paths, topic, target)
    try:
        info = kafka.describe_topic(source_admin, config.source, topic)
    except kafka.TopicNotFound as exc:
        raise TopicError(404, str(exc)) from None
    if requested_partitions is not None and requested_partitions != info.partitions:
        raise TopicError(
            400,
            f"numPartitions is {requested_partitions} but topic {topic!r} has {info.partitions} partitions "
            f"on the source; every partition is mirrored, so send {info.partitions} or leave it out",
        )
    safety = config.controller  # destination_replication_factor / _min_insync_replicas (0 = the source's)
    outcome = kafka.ensure_topic(destination_admin, config.destination, kafka.for_destination(
        info, target, safety.destination_replication_factor, safety.destination_min_insync_replicas))
    record = TopicRecord(
        topic=topic,
        destination=target,
        partitions=info.partitions,
        added_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        options={"initial_partitions": info.partitions},
    )
    try:  # an explicit add lifts an earlier removal's blacklist entry; auto-whitelisting never does
        created = zk.create_topic(client, paths, record, lift_blacklist=not automatic)
    except zk.TopicBlacklisted as exc:
        raise TopicError(409, str(exc)) from None
    if not created:
        raise TopicError(409, f"topic {topic!r} is already mirrored")
    log.info("topic_registered", topic=topic, destination=target, partitions=info.partitions, created=outcome)
    return record, outcome


def _one_source_per_destination(client: KazooClient, paths: Paths, topic: str, target: str) -> None:
    """Exactly-once mode: refuse a second source topic onto one destination topic (409).

    The positions a transaction commits are keyed by destination topic and partition
    (worker/copyloop.py): two source topics there would overwrite each other's.
    """
    for other in zk.read_topics(client, paths).values():
        if other.destination == target and other.topic != topic:
            raise TopicError(409, f"refusing to mirror {topic!r} onto destination topic {target!r}: {other.topic!r} "
                                  "is mirrored there already, and exactly-once mode keys its committed positions "
                                  f"by destination topic; give {topic!r} a destination topic of its own")


def expand(config: Config, client: KazooClient, source_admin: Any, destination_admin: Any, topic: str,
           partitions: int | None) -> TopicRecord:
    """Grow a mirrored topic to the source's partition count (uReplicator's ``PUT /topics``)."""
    paths = Paths(config.root)
    record = zk.read_topic(client, paths, topic)
    if record is None:
        raise TopicError(404, f"topic {topic!r} is not mirrored")
    info = kafka.describe_topic(source_admin, config.source, topic)
    if partitions is not None and partitions != info.partitions:
        raise TopicError(400, f"the source topic {topic!r} has {info.partitions} partitions, not {partitions}; "
                              "grow the source topic first")
    if info.partitions < record.partitions:
        raise TopicError(400, f"topic {topic!r} cannot shrink from {record.partitions} partitions")
    return _grow(config, client, destination_admin, record, info.partitions)


def _grow(config: Config, client: KazooClient, destination_admin: Any, record: TopicRecord,
          partitions: int) -> TopicRecord:
    if partitions == record.partitions:
        return record
    # Destination first: a worker must never be assigned a partition it cannot write.
    kafka.ensure_topic(destination_admin, config.destination, kafka.TopicInfo(record.destination, partitions, {}))
    options = dict(record.options)
    options.setdefault("initial_partitions", record.partitions)
    grown = replace(record, partitions=partitions, options=options)
    zk.update_topic(client, Paths(config.root), grown)
    log.info("topic_grown", topic=record.topic, before=record.partitions, after=partitions)
    return grown


def set_state(config: Config, client: KazooClient, topic: str, state: str) -> TopicRecord:
    paths = Paths(config.root)
    record = zk.read_topic(client, paths, topic)
    if record is None:
        raise TopicError(404, f"topic {topic!r} is not mirrored")
    updated = replace(record, state=state)
    zk.update_topic(client, paths, updated)
    return updated


def sync(config: Config, client: KazooClient, source_admin: Any, destination_admin: Any) -> dict[str, list[str]]:
    """Leader's periodic pass: grow partitions, re-sync configs, auto-whitelist. Returns what changed."""
    paths = Paths(config.root)
    changes: dict[str, list[str]] = {"grown": [], "configs": [], "added": []}
    for name, record in zk.read_topics(client, paths).items():
        try:
            info = kafka.describe_topic(source_admin, config.source, name)
        except kafka.TopicNotFound:
            log.warning("source_topic_missing", topic=name)
            continue
        if info.partitions > record.partitions:
            _grow(config, client, destination_admin, record, info.partitions)
            changes["grown"].append(name)
        if kafka.sync_configs(destination_admin, config.destination, record.destination, info.configs):
            changes["configs"].append(name)
    include = config.controller.auto_whitelist_include
    if include:
        changes["added"] = _auto_whitelist(config, client, source_admin, destination_admin, include)
    return changes


def _auto_whitelist(config: Config, client: KazooClient, source_admin: Any, destination_admin: Any,
                    include: str) -> list[str]:
    paths = Paths(config.root)
    exclude = config.controller.auto_whitelist_exclude
    # Registered first, then the blacklist: remove_topic changes both in one write, so in this
    # order a removed topic is always seen in one or the other (the reverse order can miss it).
    registered = set(client.get_children(paths.topics))
    blacklisted = set(client.get_children(paths.blacklist_topics))
    added = []
    for topic in sorted(kafka.list_topics(source_admin, config.source)):
        if topic in registered or topic in blacklisted or _INTERNAL.match(topic):
            continue
        if not re.fullmatch(include, topic) or (exclude and re.fullmatch(exclude, topic)):
            continue
        try:
            register(config, client, source_admin, destination_admin, topic, automatic=True)
            added.append(topic)
        except TopicError as exc:
            log.warning("auto_whitelist_skipped", topic=topic, error=logs.error_text(exc))
    return added
