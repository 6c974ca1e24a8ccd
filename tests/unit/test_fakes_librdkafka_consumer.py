"""The fake source consumer checked against a real consumer on librdkafka's mock cluster.

``tests/unit/fakes.FakeConsumer`` stands for the worker's ``assign()`` consumer and
``FakeCommitClient`` for its commit client. What the worker reads from them decides where
an acquisition starts and what the fetch watch compares: the records from an assigned
offset (or a logical start), ``position`` before and after a record was consumed
(``MirrorWorker._positions``), ``committed`` of a never-committed partition, the watermarks
and the log start (``offsets_for_times`` at ``OFFSET_BEGINNING``), what ``pause`` holds back,
and the error of unassigning what is not assigned. Each test runs one scenario on the fake
and on a real consumer with the worker's pinned settings, and asserts the same outcome.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from tests.unit.fakes import FakeCommitClient, FakeConsumer
from tests.unit.librdkafka_mock import MockCluster
from ureplicator.common.kafka import consumer_invariants

TOPIC = "orders"
GROUP = "ureplicator.unit"
SETTINGS = {
    **{invariant.name: invariant.value for invariant in consumer_invariants(GROUP)},
    "fetch.wait.max.ms": 10, "log_level": 0,
}


class Source:
    """A two-partition source holding five records in partition 0: the fake, or the mock cluster."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.mock: MockCluster | None = None
        self._clients: list[Any] = []
        if kind == "fake":
            self.fake = FakeConsumer({(TOPIC, 0): [], (TOPIC, 1): []})
            self.consumer: Any = self.fake
        else:
            self.mock = MockCluster(TOPIC, partitions=2)
            self._producer = Producer({"bootstrap.servers": self.mock.bootstrap, "linger.ms": 0, "log_level": 0})
            self.consumer = self._client()
        self.append(0, *[b"v%d" % n for n in range(5)])

    def _client(self) -> Consumer:
        assert self.mock is not None
        client = Consumer({**SETTINGS, "bootstrap.servers": self.mock.bootstrap})
        self._clients.append(client)
        return client

    def append(self, partition: int, *values: bytes) -> None:
        if self.mock is None:
            self.fake.append((TOPIC, partition), *values)
            return
        for value in values:
            self._producer.produce(TOPIC, value, partition=partition)
        assert self._producer.flush(10) == 0

    def commit_client(self) -> Any:
        """A client of the same group that is never assigned (the worker's commit client)."""
        return FakeCommitClient(self.fake) if self.mock is None else self._client()

    def consume(self, count: int) -> list[tuple[int, int, bytes]]:
        """``consume`` until ``count`` records came: (partition, offset, value) of each."""
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 10
        while len(out) < count and time.monotonic() < deadline:
            for msg in self.consumer.consume(count - len(out), 0.05):
                assert msg.error() is None, msg.error()
                out.append((msg.partition(), msg.offset(), msg.value()))
        assert len(out) == count, f"{len(out)} of {count} records came"
        return out

    def position(self, partition: int = 0) -> int:
        (found,) = self.consumer.position([TopicPartition(TOPIC, partition)])
        return int(found.offset)

    def close(self) -> None:
        for client in self._clients:
            client.close()
        if self.mock is not None:
            self.mock.close()


@pytest.fixture(params=["fake", "librdkafka"])
def source(request: pytest.FixtureRequest) -> Iterator[Source]:
    src = Source(request.param)
    yield src
    src.close()


def test_an_assignment_at_an_offset_returns_records_from_it_and_position_follows(source: Source) -> None:
    source.consumer.incremental_assign([TopicPartition(TOPIC, 0, 2)])
    assert source.position() == OFFSET_INVALID  # unknown until a record is consumed: the worker falls back
    assert source.consume(3) == [(0, 2, b"v2"), (0, 3, b"v3"), (0, 4, b"v4")]
    assert source.position() == 5


def test_an_assignment_at_the_beginning_returns_every_record(source: Source) -> None:
    source.consumer.incremental_assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    assert source.position() == OFFSET_INVALID
    assert [offset for _, offset, _ in source.consume(5)] == [0, 1, 2, 3, 4]


def test_an_assignment_at_the_end_returns_only_later_records(source: Source) -> None:
    """librdkafka resolves ``OFFSET_END`` when it starts fetching, not in ``assign`` as the fake does.

    A record appended in between may be skipped (why the worker resolves the end to a number
    itself, worker/handoff.py): so records are appended until one comes, and the first that
    comes must be one of them.
    """
    source.consumer.incremental_assign([TopicPartition(TOPIC, 0, OFFSET_END)])
    assert source.position() == OFFSET_INVALID
    got: list[Any] = []
    for n in range(100):
        source.append(0, b"new%d" % n)
        got = source.consumer.consume(1, 0.05)
        if got:
            break
    (msg,) = got
    assert msg.offset() >= 5 and msg.value().startswith(b"new")
    assert source.position() == msg.offset() + 1


def test_a_never_committed_partition_reads_offset_invalid_and_a_commit_is_read_back(source: Source) -> None:
    committer = source.commit_client()
    wanted = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]
    assert [tp.offset for tp in source.consumer.committed(wanted, timeout=10)] == [-1001, -1001]
    done = committer.commit(offsets=[TopicPartition(TOPIC, 0, 4)], asynchronous=False)
    assert [(tp.partition, tp.offset, tp.error) for tp in done] == [(0, 4, None)]
    assert [tp.offset for tp in source.consumer.committed(wanted, timeout=10)] == [4, -1001]


def test_unassigning_a_partition_that_is_not_assigned_is_refused(source: Source) -> None:
    source.consumer.incremental_assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    with pytest.raises(KafkaException) as raised:
        source.consumer.incremental_unassign([TopicPartition(TOPIC, 1)])
    assert raised.value.args[0].code() == KafkaError._INVALID_ARG
    source.consumer.incremental_unassign([TopicPartition(TOPIC, 0)])
    with pytest.raises(KafkaException) as raised:
        source.consumer.incremental_unassign([TopicPartition(TOPIC, 0)])
    assert raised.value.args[0].code() == KafkaError._INVALID_ARG


def test_watermarks_and_the_log_start(source: Source) -> None:
    assert source.consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10) == (0, 5)
    assert source.consumer.get_watermark_offsets(TopicPartition(TOPIC, 1), timeout=10) == (0, 0)
    (start,) = source.consumer.offsets_for_times([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)], timeout=10)
    assert (start.partition, start.offset) == (0, 0)


def test_a_paused_partition_returns_nothing_while_the_others_flow(source: Source) -> None:
    source.append(1, b"held")
    source.consumer.incremental_assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING),
                                        TopicPartition(TOPIC, 1, OFFSET_BEGINNING)])
    source.consumer.pause([TopicPartition(TOPIC, 1)])
    source.append(0, b"v5")  # the paused partition's record is older than the last one awaited
    assert [(partition, offset) for partition, offset, _ in source.consume(6)] == [(0, n) for n in range(6)]
    assert source.position(1) == OFFSET_INVALID
