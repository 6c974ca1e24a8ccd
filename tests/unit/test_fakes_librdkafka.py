"""The fake producer checked against librdkafka itself: its built-in mock cluster, in-process, in milliseconds.

``tests/unit/fakes.FakeProducer`` encodes the behaviour the worker's unit tests depend on: in-order
delivery reports, ``BufferError`` on a full local queue, ``_PURGE_QUEUE`` reports from ``purge``,
and — the one that matters most — a record the broker refuses turns the gap-less idempotent
producer fatal, so nothing after it is written and every later ``produce`` raises ``_FATAL``.
Each test below runs one scenario on both the fake and a real producer (the worker's settings)
against librdkafka's mock cluster, whose broker refuses a produce request on demand, and asserts
the same observable outcome on both.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.unit.fakes import FakeProducer
from ureplicator.common import provenance
from ureplicator.worker.acks import resend

TOPIC = "orders"
PRODUCE_API = 0  # Kafka's ApiKey of a ProduceRequest
MESSAGE_TOO_LARGE = 10  # the broker's MESSAGE_TOO_LARGE: a refusal of the record, not of the producer


class MockCluster:
    """librdkafka's mock cluster through its C API (confluent-kafka does not wrap it)."""

    def __init__(self) -> None:
        libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
        found = sorted(libs.glob("librdkafka*.so*"))
        if not found:  # a confluent-kafka built against a system librdkafka
            found = [Path("librdkafka.so.1")]
        lib = ctypes.CDLL(str(found[0]))
        lib.rd_kafka_conf_new.restype = ctypes.c_void_p
        lib.rd_kafka_new.restype = ctypes.c_void_p
        lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
        lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_mock_push_request_errors_array.argtypes = [
            ctypes.c_void_p, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]
        self._lib = lib
        errstr = ctypes.create_string_buffer(512)
        self._host = lib.rd_kafka_new(0, lib.rd_kafka_conf_new(), errstr, len(errstr))  # owns the mock cluster
        assert self._host, errstr.value.decode()
        self._cluster = lib.rd_kafka_mock_cluster_new(self._host, 1)
        assert self._cluster
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()
        lib.rd_kafka_mock_topic_create(self._cluster, TOPIC.encode(), 1, 1)

    def refuse_next_produce(self) -> None:
        errors = (ctypes.c_int * 1)(MESSAGE_TOO_LARGE)
        self._lib.rd_kafka_mock_push_request_errors_array(self._cluster, PRODUCE_API, 1, errors)

    def written(self) -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "check", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])  # no group join: milliseconds
        values: list[bytes] = []
        try:
            while True:
                msg = consumer.poll(10)
                assert msg is not None, "the mock cluster did not answer"
                if msg.error() is not None:
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    return values
                values.append(msg.value())
        finally:
            consumer.close()

    def close(self) -> None:
        self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
        self._lib.rd_kafka_destroy(self._host)


class Destination:
    """One scenario's producer and what it reports: the fake, or a real producer on the mock cluster."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.reports: list[tuple[KafkaError | None, bytes]] = []
        self.fatal_errors: list[KafkaError] = []
        self.mock: MockCluster | None = None
        if kind == "fake":
            self.fake = FakeProducer(partitions=1)
            self.producer: Any = self.fake
        else:
            self.mock = MockCluster()
            # The worker's destination settings (common.kafka.PRODUCER_INVARIANTS): idempotent, gap-less, acks=all.
            self.producer = Producer({
                "bootstrap.servers": self.mock.bootstrap, "enable.idempotence": True,
                "enable.gapless.guarantee": True, "acks": "all", "linger.ms": 0,
                "queue.buffering.max.messages": 4, "error_cb": self.fatal_errors.append, "log_level": 0,
            })

    def report(self, err: KafkaError | None, msg: Any) -> None:
        self.reports.append((err, msg.value()))

    def produce(self, value: bytes, offset: int) -> None:
        headers = [(provenance.HEADER, provenance.encode(offset, 0, "src"))]
        self.producer.produce(TOPIC, value, partition=0, headers=headers, callback=self.report)

    def refuse(self, offset: int) -> None:
        """The broker refuses the record of this source offset (sent on its own)."""
        if self.mock is not None:
            self.mock.refuse_next_produce()
        else:
            self.fake.refuse[(TOPIC, 0)] = offset

    def settle(self) -> None:
        """Serve every delivery report (a fatal error is raised from the call that serves it)."""
        for _ in range(50):
            try:
                left = self.producer.flush(0.2)
            except KafkaException as exc:
                self.fatal_errors.append(exc.args[0])
                continue
            if left == 0:
                return

    def written(self) -> list[bytes]:
        if self.mock is not None:
            return self.mock.written()
        return list(self.fake.written.get((TOPIC, 0), []))

    def close(self) -> None:
        if self.mock is not None:
            self.mock.close()


@pytest.fixture(params=["fake", "librdkafka"])
def destination(request: pytest.FixtureRequest) -> Iterator[Destination]:
    dest = Destination(request.param)
    yield dest
    dest.close()


def _codes(reports: list[tuple[KafkaError | None, bytes]]) -> list[int | None]:
    return [None if err is None else err.code() for err, _ in reports]


def test_delivery_reports_come_in_produce_order(destination: Destination) -> None:
    for offset in range(3):
        destination.produce(b"r%d" % offset, offset)
    destination.settle()
    assert destination.reports == [(None, b"r0"), (None, b"r1"), (None, b"r2")]
    assert destination.written() == [b"r0", b"r1", b"r2"]


def test_a_refused_record_turns_the_producer_fatal_and_nothing_after_it_is_written(destination: Destination) -> None:
    for offset in range(2):
        destination.produce(b"ok%d" % offset, offset)
    destination.settle()
    destination.refuse(2)
    destination.produce(b"poison", 2)
    destination.settle()

    (err, value), = destination.reports[2:]
    assert value == b"poison"
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert not resend(err), "the worker names a refused record (stops its partition), it does not resend it"
    with pytest.raises(KafkaException) as raised:
        destination.produce(b"after", 3)
    assert raised.value.args[0].code() == KafkaError._FATAL
    assert destination.written() == [b"ok0", b"ok1"]  # gap-less: nothing past the refused record


def test_a_full_local_queue_raises_buffer_error(destination: Destination) -> None:
    if destination.kind == "fake":
        destination.fake.capacity = 4
    if destination.kind == "fake":
        destination.fake.hold = True
    for offset in range(4):
        destination.produce(b"q%d" % offset, offset)
    with pytest.raises(BufferError):
        destination.produce(b"one too many", 4)
    if destination.kind == "fake":
        destination.fake.hold = False
    destination.settle()
    assert _codes(destination.reports) == [None] * 4


def test_purge_reports_every_queued_record_as_purged(destination: Destination) -> None:
    if destination.kind == "fake":
        destination.fake.hold = True
    else:
        destination.producer = Producer({"bootstrap.servers": destination.mock.bootstrap, "linger.ms": 60_000,
                                         "enable.idempotence": True, "log_level": 0})
    for offset in range(3):
        destination.produce(b"p%d" % offset, offset)
    destination.producer.purge(in_queue=True, in_flight=True, blocking=True)
    destination.producer.poll(0)
    assert _codes(destination.reports) == [KafkaError._PURGE_QUEUE] * 3
    assert all(resend(err) for err, _ in destination.reports)


def test_librdkafka_fails_every_record_of_a_refused_request() -> None:
    """Where the fake is finer than librdkafka: a refusal fails the whole produce request.

    The fake refuses exactly the poison record and purges its successors. librdkafka reports the
    broker's error on every record the refused request carried, before the poison too. So in
    exact mode the worker stops the partition in front of the request's *first* record and names
    that offset: safe (nothing is skipped, nothing after it is written), but the offset named may
    be a sound record sent in the same request as the poison.
    """
    mock = MockCluster()
    try:
        reports: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": mock.bootstrap, "enable.idempotence": True,
                             "enable.gapless.guarantee": True, "acks": "all", "linger.ms": 50,
                             "error_cb": lambda err: None, "log_level": 0})
        mock.refuse_next_produce()
        for offset in range(3):
            producer.produce(TOPIC, b"b%d" % offset, partition=0, callback=lambda err, msg: reports.append(err))
        for _ in range(50):
            try:
                if producer.flush(0.2) == 0:
                    break
            except KafkaException:
                continue
        assert [err.code() if err else None for err in reports] == [KafkaError.MSG_SIZE_TOO_LARGE] * 3
        assert mock.written() == []
    finally:
        mock.close()
