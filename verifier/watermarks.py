"""Read the replicator's committed offsets and both clusters' watermarks, in the order that keeps verification exact.

Driver side, a handful of admin requests per topic (confluent-kafka). The
order matters because the replicator keeps running while we look:

1. the replicator group's committed offsets C on the source: a commit names
   only records the destination had acknowledged when it was made;
2. the destination's log start and end offsets D: every record below C is
   already below D;
3. the source's log start L and end offset E (read_committed: the last stable
   offset): every destination record below D was fetched from a source offset
   below E, so a destination record naming an offset >= E is an orphan.

Each partition is then verified on [L, W) with W = min(E, C).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from ureplicator.common import kafka
from ureplicator.common.config import ClusterConfig
from ureplicator.common.errors import ClusterUnavailable, UReplicatorError
from ureplicator.reports.model import Watermarks


class TopicMissing(UReplicatorError):
    """The topic does not exist on the cluster that was asked."""


@dataclass(frozen=True)
class TopicSnapshot:
    topic: str
    destination: str
    partitions: dict[int, Watermarks]
    # Destination partitions with no source partition of the same number: (log start, end).
    destination_only: dict[int, tuple[int, int]]
    # cleanup.policy of the source topic includes compact: records may vanish on either side.
    compacted: bool = False

    def destination_ranges(self) -> dict[int, tuple[int, int]]:
        """[start, end) this run reads of every existing destination partition (start: log start or checkpoint)."""
        ranges = {p: r for p, w in self.partitions.items() if (r := w.destination_range) is not None}
        ranges.update(self.destination_only)
        return ranges

    def only(self, partitions: set[int]) -> TopicSnapshot:
        """This snapshot restricted to some partitions: a destination record is attributed only to the source
        partition of its own number, so each partition is verified on its own."""
        return replace(
            self,
            partitions={p: w for p, w in self.partitions.items() if p in partitions},
            destination_only={p: r for p, r in self.destination_only.items() if p in partitions},
        )

    def resumed(self, resume: dict[int, tuple[int, int]]) -> TopicSnapshot:
        """This snapshot with checkpoint resume points (source, destination offset) for some partitions."""
        partitions = {
            p: replace(w, resume_from=resume[p][0], destination_resume_from=resume[p][1]) if p in resume else w
            for p, w in self.partitions.items()
        }
        return replace(self, partitions=partitions)


class Clusters:
    """Admin clients for both clusters of a pipeline."""

    def __init__(self, source: ClusterConfig, destination: ClusterConfig, timeout_s: float = 15.0) -> None:
        self.source_config = source
        self.destination_config = destination
        self.source = kafka.admin(source)
        self.destination = kafka.admin(destination)
        self.timeout_s = timeout_s

    def check_reachable(self) -> None:
        """Raise ClusterUnavailable naming the cluster that does not answer."""
        for config, client in ((self.source_config, self.source), (self.destination_config, self.destination)):
            try:
                client.list_topics(timeout=self.timeout_s)
            except KafkaException as exc:
                raise ClusterUnavailable(
                    f"{_side(config, self)} cluster {config.alias} ({config.bootstrap_servers}) did not answer "
                    f"within {self.timeout_s:.0f}s: {exc.args[0].str()}"
                ) from None

    def partitions(self, side: str, topic: str) -> int | None:
        """Partition count of ``topic`` on ``side`` (source|destination); None when it does not exist."""
        client = self.source if side == "source" else self.destination
        try:
            metadata = client.list_topics(topic=topic, timeout=self.timeout_s)
        except KafkaException as exc:
            raise ClusterUnavailable(f"{side} cluster did not answer: {exc.args[0].str()}") from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            return None
        return len(found.partitions)

    def topic_id(self, side: str, topic: str) -> str | None:
        """Kafka's id of ``topic`` (it changes when a topic is deleted and created again); None if unknown."""
        client = self.source if side == "source" else self.destination
        try:
            futures = client.describe_topics(TopicCollection([topic]), request_timeout=self.timeout_s)
            description = futures[topic].result(timeout=self.timeout_s)
        except (KafkaException, KeyError):
            return None
        topic_id = getattr(description, "topic_id", None)
        return None if topic_id is None else str(topic_id)

    def compacted(self, topic: str) -> bool:
        """Whether the source topic's cleanup.policy includes compact (False when configs cannot be read)."""
        return self._compacted(self._configs(topic))

    def _configs(self, topic: str) -> Any:
        """The source topic's configs, requested (``_compacted`` waits for them)."""
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            return self.source.describe_configs([resource])[resource]
        except KafkaException:
            return None

    def _compacted(self, future: Any) -> bool:
        if future is None:
            return False
        try:
            entries = future.result(timeout=self.timeout_s)
        except KafkaException:
            return False  # no DescribeConfigs permission: verify as a plain topic
        policy = entries.get("cleanup.policy")
        return policy is not None and "compact" in (policy.value or "")

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int | None]:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        request = [ConsumerGroupTopicPartitions(group, tps)]
        try:
            future = self.source.list_consumer_group_offsets(request, request_timeout=self.timeout_s)[group]
            result = future.result(timeout=self.timeout_s)
        except KafkaException as exc:
            raise ClusterUnavailable(
                f"cannot read the committed offsets of group {group}: {exc.args[0].str()}"
            ) from None
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in result.topic_partitions}

    def offsets(self, side: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        """(log start, end) per partition; the end is the last stable offset (read_committed). Both requests are
        in flight at once: a warm incremental run is mostly such round trips."""
        client = self.source if side == "source" else self.destination
        wanted = list(range(partitions))
        pending = [self._request(client, topic, wanted, spec) for spec in (OffsetSpec.earliest(), OffsetSpec.latest())]
        starts, ends = (self._results(topic, futures) for futures in pending)
        return {p: (starts[p], ends[p]) for p in range(partitions)}

    def log_starts(self, side: str, topic: str, partitions: list[int]) -> dict[int, int]:
        client = self.source if side == "source" else self.destination
        if not partitions:
            return {}
        return self._list(client, topic, max(partitions) + 1, OffsetSpec.earliest(), only=partitions)

    def _list(
        self, client: AdminClient, topic: str, partitions: int, spec: OffsetSpec, only: list[int] | None = None
    ) -> dict[int, int]:
        wanted = only if only is not None else list(range(partitions))
        return self._results(topic, self._request(client, topic, wanted, spec))

    def _request(self, client: AdminClient, topic: str, partitions: list[int], spec: OffsetSpec) -> dict[Any, Any]:
        try:
            return client.list_offsets(  # type: ignore[no-any-return]
                {TopicPartition(topic, p): spec for p in partitions},
                isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=self.timeout_s,
            )
        except KafkaException as exc:
            raise ClusterUnavailable(f"cannot list the offsets of {topic}: {exc.args[0].str()}") from None

    def _results(self, topic: str, futures: dict[Any, Any]) -> dict[int, int]:
        try:
            return {tp.partition: f.result(timeout=self.timeout_s).offset for tp, f in futures.items()}
        except KafkaException as exc:
            raise ClusterUnavailable(f"cannot list the offsets of {topic}: {exc.args[0].str()}") from None

    def snapshot(self, topic: str, destination: str, group: str) -> TopicSnapshot:
        source_count = self.partitions("source", topic)
        if source_count is None:
            raise TopicMissing(f"topic {topic!r} does not exist on the source cluster {self.source_config.alias}")
        configs = self._configs(topic)  # in flight while the offsets are read
        committed = self.committed(group, topic, source_count)  # 1. before the destination is read
        destination_count = self.partitions("destination", destination)
        dst = self.offsets("destination", destination, destination_count) if destination_count else {}  # 2.
        src = self.offsets("source", topic, source_count)  # 3.
        partitions = {
            p: Watermarks(
                partition=p,
                log_start=src[p][0],
                end=src[p][1],
                committed=committed.get(p),
                destination_log_start=dst[p][0] if p in dst else None,
                destination_end=dst[p][1] if p in dst else None,
            )
            for p in range(source_count)
        }
        extra = {p: r for p, r in dst.items() if p >= source_count}
        return TopicSnapshot(topic, destination, partitions, extra, self._compacted(configs))

    def close(self) -> None:
        # AdminClient has no close(); dropping the references lets librdkafka tear down.
        self.source = self.destination = None  # type: ignore[assignment]


def _side(config: ClusterConfig, clusters: Clusters) -> str:
    return "source" if config is clusters.source_config else "destination"
