"""Read consumer groups on both clusters, translate their offsets, and commit them on the destination (Kafka edge).

The pure rules live in :mod:`failover.translation`; this module only reads
and writes Kafka: committed offsets and watermarks with the AdminClient,
destination records (for their ``urep`` headers) with one assigned consumer,
and translated offsets with ``alter_consumer_group_offsets``. One lock
serializes every call: the REST API and the leader's sync share one instance.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ureplicator.common import kafka, logs, provenance
from ureplicator.common.config import Config
from ureplicator.common.errors import ClusterUnavailable, UReplicatorError
from ureplicator.failover.translation import (
    AnchorIndex,
    PartitionTranslation,
    Seen,
    SyncPlan,
    eligible_group,
    mirrored_partitions,
    mirrored_through,
    plan_sync,
    search,
)

BATCH = 64  # records per read: one fetch either way, and short replays show up inside one read

# Codes that mean "no answer (yet)" even where librdkafka does not flag them retriable.
_NO_ANSWER = frozenset((
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
    KafkaError._WAIT_COORD, KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
    KafkaError.BROKER_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
))


def cluster_failure(what: str, error: object) -> UReplicatorError:
    """The error to raise for a failed Kafka call: unavailable (REST 503) or refused (REST 502).

    A cluster that did not answer, or answered "not now", may answer on a retry; one that answered
    with a refusal (authorization, an invalid request) will not, and that is a bad gateway.
    """
    if isinstance(error, KafkaError):
        message = error.str()
        if error.retriable() or error.code() in _NO_ANSWER:
            return ClusterUnavailable(f"{what} did not answer: {message}")
        return UReplicatorError(f"{what} refused the request: {message}")
    return ClusterUnavailable(f"{what} did not answer: {error}")


class GroupNotFound(UReplicatorError):
    """The source cluster knows no such group, or it has no committed offset on a mirrored topic."""


@dataclass(frozen=True)
class GroupTranslation:
    group: str
    partitions: list[PartitionTranslation]
    reads: int
    elapsed_s: float

    def as_dict(self) -> dict[str, Any]:
        rows = [p.as_dict() for p in self.partitions]
        states = [p.state for p in self.partitions]
        return {
            "group": self.group,
            "partitions": rows,
            "summary": {
                "partitions": len(rows),
                "behind": states.count("behind"),
                "at": states.count("at"),
                "ahead": states.count("ahead"),
                "ahead_by": sum(p.ahead_by for p in self.partitions),
                "unmirrored_records": sum(r["unmirrored_records"] for r in rows),
            },
        }


@dataclass(frozen=True)
class SyncOutcome:
    group: str
    translation: GroupTranslation
    plan: SyncPlan
    committed: dict[tuple[str, int], int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "refused": self.plan.refused,
            "committed": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.committed.items())],
            "kept": [{"topic": t, "partition": p, "reason": r} for (t, p), r in sorted(self.plan.kept.items())],
            "ahead": [p.as_dict() for p in self.translation.partitions if p.state == "ahead"],
        }


class GroupOffsets:
    """Translate and sync consumer groups of one pipeline; ``destinations`` names the mirrored topics."""

    def __init__(self, config: Config, destinations: Callable[[], Mapping[str, str]],
                 source_admin: AdminClient | None = None, destination_admin: AdminClient | None = None,
                 timeout_s: float = 10.0) -> None:
        self._config = config
        self._destinations = destinations
        self._source = source_admin or kafka.admin(config.source)
        self._destination = destination_admin or kafka.admin(config.destination)
        self._timeout_s = timeout_s
        self._reader = kafka.consumer(
            config.destination, f"ureplicator.{config.pipeline}.translator", "ureplicator-translator",
            **{"enable.partition.eof": True, "max.partition.fetch.bytes": 262144, "fetch.wait.max.ms": 10},
        )
        self._anchors: dict[tuple[str, int], AnchorIndex] = {}
        self._lock = threading.Lock()
        self._log = logs.get(__name__, pipeline=config.pipeline)

    def close(self) -> None:
        with self._lock:
            self._reader.close()

    # --- reads -------------------------------------------------------------------------------

    def list_groups(self) -> list[dict[str, Any]]:
        """Source groups that are not internal, with how many mirrored partitions each has committed."""
        with self._lock:
            listings = self._call("source", lambda: self._source.list_consumer_groups(
                request_timeout=self._timeout_s).result(timeout=self._timeout_s)).valid
            destinations = self._destinations()
            rows = []
            for listing in sorted(listings, key=lambda g: g.group_id):
                if not eligible_group(listing.group_id):
                    continue
                committed = self._committed(self._source, "source", listing.group_id)
                rows.append({
                    "group": listing.group_id,
                    "state": _state(listing.state),
                    "mirrored_partitions": len(mirrored_partitions(committed, destinations)),
                })
            return rows

    def translate(self, group: str) -> GroupTranslation:
        with self._lock:
            return self._translate(group)

    def _translate(self, group: str) -> GroupTranslation:
        started = time.monotonic()
        if not eligible_group(group):
            raise GroupNotFound(f"group {group!r} is internal or the replicator's own: never translated")
        committed = self._committed(self._source, "source", group)
        mapped = mirrored_partitions(committed, self._destinations())
        if not mapped:
            if not committed:
                raise GroupNotFound(f"group {group!r} has no committed offsets on the source cluster "
                                    f"{self._config.source.alias}")
            raise GroupNotFound(f"group {group!r} has no committed offset on a topic this pipeline mirrors")
        replicator = self._committed(self._source, "source", self._config.consumer_group)
        source_ends = self._list_offsets(self._source, "source", list(mapped), OffsetSpec.latest())
        dest_tps = list(mapped.values())
        starts = self._list_offsets(self._destination, "destination", dest_tps, OffsetSpec.earliest())
        ends = self._list_offsets(self._destination, "destination", dest_tps, OffsetSpec.latest())
        rows, reads = [], 0
        for (topic, p), (dest_topic, dp) in sorted(mapped.items()):
            start, end = starts[(dest_topic, dp)], ends[(dest_topic, dp)]
            read = self._read_fn(dest_topic, dp, p)
            anchors = self._anchors.setdefault((dest_topic, dp), AnchorIndex())
            found = search(committed[(topic, p)], start, end, read, anchors)
            tail = read(max(start, end - BATCH)) if end > start else []
            reads += found.reads + 1
            last = max((r.source_offset for r in tail), default=None)
            rows.append(PartitionTranslation(
                topic=topic, partition=p, destination_topic=dest_topic,
                source_committed=committed[(topic, p)], destination_offset=found.destination_offset,
                destination_end=end, mirrored_through=mirrored_through(last, replicator.get((topic, p))),
                source_end=source_ends.get((topic, p)),
            ))
        elapsed = time.monotonic() - started
        self._log.info("group_translated", group=group, partitions=len(rows), reads=reads,
                       elapsed_ms=round(elapsed * 1000, 1))
        return GroupTranslation(group, rows, reads, elapsed)

    # --- sync --------------------------------------------------------------------------------

    def sync(self, group: str, force: bool = False) -> SyncOutcome:
        """Commit the translated offsets for ``group`` on the destination, per :func:`plan_sync`."""
        with self._lock:
            translation = self._translate(group)
            members = self._active_members(group)
            current = self._committed(self._destination, "destination", group)
            targets = {(p.destination_topic, p.partition): p.destination_offset for p in translation.partitions}
            plan = plan_sync(targets, current, members, force)
            if plan.refused or not plan.commit:
                return SyncOutcome(group, translation, plan)
            request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o)
                                                             for (t, p), o in sorted(plan.commit.items())])]
            result = self._call("destination", lambda: self._destination.alter_consumer_group_offsets(
                request, request_timeout=self._timeout_s)[group].result(timeout=self._timeout_s))
            failed = [f"{tp.topic}:{tp.partition}: {tp.error.str()}" for tp in result.topic_partitions if tp.error]
            if failed:
                raise UReplicatorError(f"the destination refused offsets for group {group!r}: {'; '.join(failed)}")
            self._log.info("group_synced", group=group, committed=len(plan.commit), kept=len(plan.kept),
                           forced=force)
            return SyncOutcome(group, translation, plan, dict(plan.commit))

    def source_groups(self) -> list[str]:
        with self._lock:
            listings = self._call("source", lambda: self._source.list_consumer_groups(
                request_timeout=self._timeout_s).result(timeout=self._timeout_s)).valid
        return sorted(g.group_id for g in listings)

    def _active_members(self, group: str) -> int:
        description = self._call("destination", lambda: self._destination.describe_consumer_groups(
            [group], request_timeout=self._timeout_s)[group].result(timeout=self._timeout_s))
        return len(description.members or [])

    # --- Kafka helpers -----------------------------------------------------------------------

    def _call(self, side: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (KafkaException, TimeoutError, concurrent.futures.TimeoutError) as exc:
            error = exc.args[0] if exc.args else f"no answer within {self._timeout_s:.0f}s"
            cluster = self._config.source if side == "source" else self._config.destination
            raise cluster_failure(f"the {side} cluster {cluster.alias} ({cluster.bootstrap_servers})",
                                  error) from None

    def _committed(self, client: AdminClient, side: str, group: str) -> dict[tuple[str, int], int]:
        request = [ConsumerGroupTopicPartitions(group)]
        result = self._call(side, lambda: client.list_consumer_group_offsets(
            request, request_timeout=self._timeout_s)[group].result(timeout=self._timeout_s))
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

    def _list_offsets(self, client: AdminClient, side: str, tps: list[tuple[str, int]],
                      spec: OffsetSpec) -> dict[tuple[str, int], int]:
        if not tps:
            return {}

        def run() -> dict[tuple[str, int], int]:
            futures = client.list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                          request_timeout=self._timeout_s)
            return {(tp.topic, tp.partition): f.result(timeout=self._timeout_s).offset for tp, f in futures.items()}

        return self._call(side, run)

    def _read_fn(self, topic: str, partition: int, source_partition: int) -> Callable[[int], list[Seen]]:
        def read(offset: int) -> list[Seen]:
            return self._read(topic, partition, source_partition, offset)

        return read

    def _read(self, topic: str, partition: int, source_partition: int, offset: int) -> list[Seen]:
        """Up to BATCH mirrored records from ``offset`` on (records without our header are passed over)."""
        self._reader.assign([TopicPartition(topic, partition, offset)])
        seen: list[Seen] = []
        deadline = time.monotonic() + self._timeout_s
        try:
            while len(seen) < BATCH:
                if time.monotonic() > deadline:
                    raise ClusterUnavailable(
                        f"the destination cluster {self._config.destination.alias} returned no records of "
                        f"{topic}:{partition} from offset {offset} within {self._timeout_s:.0f}s")
                # What is fetched already, at once; only when nothing is, wait for the first
                # record or the end-of-partition event. consume(BATCH, 0.5) would wait out the
                # 0.5 s near a partition's end, where fewer than BATCH records follow (the EOF
                # event does not end the wait): several such waits per translation.
                messages = self._reader.consume(BATCH, 0)
                if not messages:
                    messages = self._reader.consume(1, 0.5)
                    if messages:
                        messages.extend(self._reader.consume(BATCH - 1, 0))
                eof = False
                for msg in messages:
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            eof = True
                            continue
                        if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                            eof = True  # below the log start now (retention): the search restarts higher
                            continue
                        raise cluster_failure(
                            f"the destination cluster {self._config.destination.alias} reading {topic}:{partition}",
                            error)
                    origin = _source_offset(msg.headers(), source_partition, self._config.source.alias)
                    if origin is not None:
                        seen.append(Seen(msg.offset(), origin))
                if eof:
                    break
        finally:
            self._reader.unassign()
        return seen


def _source_offset(headers: list[tuple[str, bytes]] | None, source_partition: int, source: str) -> int | None:
    """The source offset of a copy of ``source_partition`` read from cluster ``source``, else None.

    A destination topic can gather several routes' copies (``shared: true``), each numbered
    by its own source cluster's offsets: only this route's copies say where its group stands.
    A version 1 header names no source cluster; it is taken as this route's (written before routes).
    """
    for key, value in headers or ():
        if key == provenance.HEADER:
            try:
                decoded = provenance.decode(value)
            except provenance.ProvenanceError:
                return None
            if decoded.source_partition != source_partition or decoded.source not in (None, source):
                return None
            return decoded.source_offset
    return None


def _state(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return name.lower()
