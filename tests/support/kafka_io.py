"""Test helpers that write and read real Kafka partitions (no mocks): produce, drain, compare."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from devtools import harness
from devtools.harness import Cluster, client_config, committed, create_topic  # noqa: F401 - the tests' names
from ureplicator.common import provenance


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int

    def logical(self) -> tuple:
        """What must survive mirroring: everything except the offset and the urep header."""
        kept = tuple((k, v) for k, v in self.headers if k != provenance.HEADER)
        return (self.key, self.value, kept, self.timestamp)

    def provenance(self) -> provenance.Provenance | None:
        for k, v in self.headers:
            if k == provenance.HEADER:
                return provenance.decode(v)
        return None


def grow_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(30)


def produce(bootstrap: Cluster, topic: str, count: int, partitions: int, start: int = 0, tag: str = "r") -> None:
    """Keyed records with two headers each, spread over all partitions explicitly."""
    producer = Producer(client_config(bootstrap, **{"linger.ms": 5, "enable.idempotence": True}))
    # Recent timestamps: the broker's time-based retention must not delete test data mid-test.
    base_ts = int(time.time() * 1000) - 3_600_000
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(
                    topic,
                    key=f"key-{i}".encode(),
                    value=f"{tag}-value-{i}-".encode() * (1 + i % 5),
                    partition=i % partitions,
                    headers=[("trace", f"t{i}".encode()), ("kind", b"\x00\x01binary")],
                    timestamp=base_ts + i,
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0


# Answers of a broker that just restarted while leadership settles, or of a client whose metadata
# has not yet caught up with a topic created a moment ago: ask again, not a failure.
TRANSIENT = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                       KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._WAIT_COORD,
                       KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART})


def end_offsets(bootstrap: Cluster, topic: str, partitions: int, settle_s: float = 60.0) -> dict[int, int]:
    """Per partition end offset; asked again for ``settle_s`` while a restarting broker cannot answer."""
    deadline = time.monotonic() + settle_s
    while (ends := harness.end_offsets(bootstrap, topic, partitions)) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"no end offsets of {topic} within {settle_s:g}s")
        time.sleep(0.5)
    return ends


def read_partition(bootstrap: Cluster, topic: str, partition: int, timeout_s: float = 60) -> list[Record]:
    """Every record of one partition, from its start to its current end."""
    consumer = Consumer(client_config(bootstrap, **{"group.id": "test-reader", "enable.auto.commit": False}))
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        records: list[Record] = []
        if high <= low:
            return records
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    continue
                records.append(
                    Record(msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()[1])
                )
            if records and records[-1].offset >= high - 1:
                return records
        raise AssertionError(f"{topic}:{partition} stopped at {len(records)} records, end offset {high}")
    finally:
        consumer.close()


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.5):  # noqa: ANN001, ANN201
    return harness.wait_for(predicate, timeout_s, what, interval_s, error=AssertionError)
