"""The fake producer checked against librdkafka itself: its built-in mock cluster, in-process, in milliseconds.

``tests/unit/fakes.FakeProducer`` encodes the behaviour the worker's unit tests depend on: one
delivery report per record, in produce order, with its offset; ``BufferError`` on a full local
queue; ``flush`` returning what is left; ``purge`` reporting queued records ``_PURGE_QUEUE`` and
records on the wire ``_PURGE_INFLIGHT``; and — the one that matters most — a record the broker
refuses turns the gap-less idempotent producer fatal, so nothing after it is written and every
later ``produce`` raises ``_FATAL``. Each test below runs one scenario on both the fake and a real
producer with the worker's pinned settings (``common.kafka.PRODUCER_INVARIANTS``) against
librdkafka's mock cluster (``tests/unit/librdkafka_mock.py``: its broker refuses a produce
request, answers late, or the partition loses its leader, on demand), and asserts the same
observable outcome on both.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.unit.fakes import FakeProducer, FakeTransactions
from tests.unit.librdkafka_mock import MockCluster
from ureplicator.common import provenance
from ureplicator.common.kafka import PRODUCER_INVARIANTS
from ureplicator.worker.acks import resend
from ureplicator.worker.clients import FatalErrors, GuardedProducer

TOPIC = "orders"
QUEUE_SIZE = 4  # queue.buffering.max.messages of the real producer, capacity of the fake
MAX_BYTES = 10_000  # message.max.bytes of the real producer, max_message_bytes of the fake

# The worker's destination settings, plus what makes a scenario fast and small.
SETTINGS = {
    **{invariant.name: invariant.value for invariant in PRODUCER_INVARIANTS},
    "linger.ms": 0, "queue.buffering.max.messages": QUEUE_SIZE, "message.max.bytes": MAX_BYTES,
    "log_level": 0,
}


class Destination:
    """One scenario's producer and what it reports: the fake, or a real producer on the mock cluster."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.reports: list[tuple[KafkaError | None, bytes]] = []
        self.offsets: list[int | None] = []  # the offset each report names
        self.partitions: list[int] = []  # the partition each report names
        self.fatal_errors: list[KafkaError] = []
        self.mock: MockCluster | None = None
        if kind == "fake":
            self.fake = FakeProducer(partitions=2)
            self.fake.capacity = QUEUE_SIZE
            self.fake.max_message_bytes = MAX_BYTES
            self.producer: Any = self.fake
        else:
            self.mock = MockCluster(TOPIC, partitions=2)
            self.producer = Producer({**SETTINGS, "bootstrap.servers": self.mock.bootstrap,
                                      "error_cb": self.fatal_errors.append})

    def report(self, err: KafkaError | None, msg: Any) -> None:
        self.reports.append((err, msg.value()))
        self.offsets.append(msg.offset() if err is None else None)
        self.partitions.append(msg.partition())

    def produce(self, value: bytes, offset: int, partition: int = 0) -> None:
        """Produce as the worker's loop does: positional arguments, a callback, a timestamp and headers."""
        headers = [(provenance.HEADER, provenance.encode(offset, partition, "src"))]
        self.producer.produce(TOPIC, value, None, partition, self.report, None, 1_700_000_000_000 + offset, headers)

    def refuse(self, offset: int) -> None:
        """The broker refuses the record of this source offset (sent on its own)."""
        if self.mock is not None:
            self.mock.refuse_next_produce()
        else:
            self.fake.refuse[(TOPIC, 0)] = offset

    def go_silent(self) -> None:
        """The destination stops answering: nothing is acknowledged until :meth:`answer_again`."""
        if self.mock is not None:
            self.mock.lose_leader()
        else:
            self.fake.hold = True

    def answer_late(self, rtt_ms: int = 10_000) -> None:
        """The destination takes requests but answers them ``rtt_ms`` late: sent records stay on the wire."""
        if self.mock is not None:
            self.mock.answer_after(rtt_ms)
        else:
            self.fake.hold = True

    def let_send(self) -> None:
        """Give the producer a moment to put queued records on the wire (the fake: at once)."""
        if self.mock is not None:
            self.producer.poll(0.01)
        else:
            self.fake.send()

    def answer_again(self) -> None:
        if self.mock is not None:
            self.mock.restore_leader()
            self.mock.answer_after(0)
        else:
            self.fake.hold = False

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
        raise AssertionError(f"{len(self.producer)} records never reported")

    def written(self, partition: int = 0) -> list[bytes]:
        if self.mock is not None:
            return self.mock.written(partition)
        return list(self.fake.written.get((TOPIC, partition), []))

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


def test_delivery_reports_come_once_per_record_in_produce_order_with_offsets(destination: Destination) -> None:
    for offset in range(3):
        destination.produce(b"r%d" % offset, offset)
    destination.settle()
    assert destination.reports == [(None, b"r0"), (None, b"r1"), (None, b"r2")]
    assert destination.offsets == [0, 1, 2]
    assert destination.written() == [b"r0", b"r1", b"r2"]


def test_delivery_reports_keep_produce_order_within_each_partition(destination: Destination) -> None:
    for offset in range(QUEUE_SIZE):  # interleaved: 0-0, 1-0, 0-1, 1-1
        destination.produce(b"%d-%d" % (offset % 2, offset // 2), offset, partition=offset % 2)
    destination.settle()
    assert all(err is None for err, _ in destination.reports)
    for partition in (0, 1):
        mine = [(value, offset) for (_, value), offset, p in
                zip(destination.reports, destination.offsets, destination.partitions, strict=True) if p == partition]
        assert mine == [(b"%d-%d" % (partition, n), n) for n in range(2)]
        assert destination.written(partition) == [b"%d-%d" % (partition, n) for n in range(2)]


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


def test_a_record_over_message_max_bytes_is_refused_by_produce_and_the_producer_goes_on(
    destination: Destination,
) -> None:
    with pytest.raises(KafkaException) as raised:
        destination.produce(b"x" * (MAX_BYTES + 1), 0)
    err = raised.value.args[0]
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE and not err.fatal()  # the worker stops the partition
    destination.produce(b"next", 1)
    destination.settle()
    assert destination.reports == [(None, b"next")]  # no report for the refused one: it was never queued


@pytest.mark.parametrize("where", ["queued", "on the wire"])
def test_a_full_local_queue_raises_buffer_error_and_loses_nothing(destination: Destination, where: str) -> None:
    """Records count against queue.buffering.max.messages until they are reported, sent or not."""
    if where == "queued":
        destination.go_silent()
    else:
        destination.answer_late(300)
    for offset in range(QUEUE_SIZE):
        destination.produce(b"q%d" % offset, offset)
    if where == "on the wire":
        destination.let_send()
    with pytest.raises(BufferError):
        destination.produce(b"one too many", QUEUE_SIZE)
    destination.answer_again()  # (the mock answers the request on the wire after its 300 ms)
    destination.settle()
    assert destination.reports == [(None, b"q%d" % offset) for offset in range(QUEUE_SIZE)]


def test_flush_returns_what_is_left_while_the_destination_does_not_answer(destination: Destination) -> None:
    destination.go_silent()
    for offset in range(3):
        destination.produce(b"f%d" % offset, offset)
    assert destination.producer.flush(0.1) == 3
    assert len(destination.producer) == 3 and destination.reports == []
    destination.answer_again()
    destination.settle()
    assert destination.reports == [(None, b"f0"), (None, b"f1"), (None, b"f2")]


def test_purge_reports_every_queued_record_as_purged(destination: Destination) -> None:
    destination.go_silent()  # nothing leaves the local queue
    for offset in range(3):
        destination.produce(b"p%d" % offset, offset)
    assert len(destination.producer) == 3
    destination.producer.purge(in_queue=True, in_flight=True, blocking=True)
    destination.producer.poll(0)
    assert _codes(destination.reports) == [KafkaError._PURGE_QUEUE] * 3
    assert all(resend(err) for err, _ in destination.reports)
    assert len(destination.producer) == 0


def test_purging_records_on_the_wire_reports_them_and_turns_the_producer_fatal(destination: Destination) -> None:
    """The gap-less guarantee fires on a purge too: the purged sequence numbers would leave a gap.

    librdkafka also raises ``_GAPLESS_GUARANTEE`` (fatal) from the ``poll`` that serves the
    error, which the worker's ``GuardedProducer`` keeps as state; the fake's ``poll`` never
    raises, so the shared outcome checked is the ``_FATAL`` of the next ``produce``.
    """
    destination.produce(b"first", 0)
    destination.settle()  # the producer has its id and epoch
    destination.answer_late()
    for offset in (1, 2):
        destination.produce(b"w%d" % offset, offset)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until both left the local queue: only then does an in-flight purge take them
        try:
            destination.let_send()
            destination.producer.purge(in_queue=False, in_flight=True, blocking=True)
            destination.producer.poll(0)
        except KafkaException as exc:
            destination.fatal_errors.append(exc.args[0])
        if len(destination.reports) == 3:
            break
    assert _codes(destination.reports) == [None, KafkaError._PURGE_INFLIGHT, KafkaError._PURGE_INFLIGHT]
    assert all(resend(err) for err, _ in destination.reports[1:])
    assert len(destination.producer) == 0
    with pytest.raises(KafkaException) as raised:
        destination.produce(b"after", 3)
    assert raised.value.args[0].code() == KafkaError._FATAL


def test_librdkafka_fails_every_record_of_a_refused_request() -> None:
    """Where the fake is finer than librdkafka: a refusal fails the whole produce request.

    The fake refuses exactly the poison record and purges its successors. librdkafka reports the
    broker's error on every record the refused request carried, before the poison too. So in
    exact mode the worker stops the partition in front of the request's *first* record and names
    that offset: safe (nothing is skipped, nothing after it is written), but the offset named may
    be a sound record sent in the same request as the poison.
    """
    mock = MockCluster(TOPIC)
    try:
        reports: list[KafkaError | None] = []
        producer = Producer({**SETTINGS, "bootstrap.servers": mock.bootstrap, "linger.ms": 50,
                             "error_cb": lambda err: None})
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


def test_begin_transaction_tells_an_abortable_transaction_from_an_open_one() -> None:
    """What ``Transactions.abortable`` rests on, on librdkafka itself and on the fake.

    A refused record puts the open transaction in librdkafka's abortable-error state and
    librdkafka holds the transaction's later records; ``begin_transaction`` then fails with an
    error that requires an abort, where on an open, healthy transaction it fails with a plain
    state error. Neither call opens or sends anything.
    """
    mock = MockCluster(TOPIC)
    fake = FakeTransactions()
    fake.calls = []
    try:
        producer = Producer({**SETTINGS, "bootstrap.servers": mock.bootstrap, "transactional.id": "t1",
                             "error_cb": lambda err: None})
        for client in (producer, fake):  # before init_transactions: a state error, nothing opened
            with pytest.raises(KafkaException) as uninitialised:
                client.begin_transaction()
            assert uninitialised.value.args[0].code() == KafkaError._STATE
            client.init_transactions(10)
        for client in (producer, fake):
            client.begin_transaction()
            with pytest.raises(KafkaException) as healthy:
                client.begin_transaction()
            assert healthy.value.args[0].code() == KafkaError._STATE
            assert not healthy.value.args[0].txn_requires_abort()
        producer.produce(TOPIC, b"ok", partition=0)
        assert producer.flush(10) == 0
        mock.refuse_next_produce()
        producer.produce(TOPIC, b"poison", partition=0)
        producer.flush(2)
        fake.abortable_error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "refused", txn_requires_abort=True)
        for client in (producer, fake):
            with pytest.raises(KafkaException) as abortable:
                client.begin_transaction()
            assert abortable.value.args[0].txn_requires_abort()
            client.abort_transaction(10)
            client.begin_transaction()  # a new transaction opens after the abort
    finally:
        mock.close()


def test_an_abortable_transaction_refuses_every_record_with_a_state_error_until_the_abort() -> None:
    """What the copy loop's ``produce_refused_until_abort`` rests on, on librdkafka itself and on the fake.

    Once the open transaction failed, ``produce`` raises ``_STATE`` ("Erroneous state") for
    any record, whatever its partition: the producer's state, not a refusal of the record (the
    exactly-once soak's destination restarts stopped a partition on it). After the abort the
    same record is taken.
    """
    mock = MockCluster(TOPIC)
    fake = FakeTransactions()
    fake.calls = []
    try:
        producer = Producer({**SETTINGS, "bootstrap.servers": mock.bootstrap, "transactional.id": "t2",
                             "error_cb": lambda err: None})
        producer.init_transactions(10)
        producer.begin_transaction()
        mock.refuse_next_produce()
        producer.produce(TOPIC, b"poison", partition=0)
        producer.flush(2)
        fake.init_transactions(10)
        fake.begin_transaction()
        fake.abortable_error = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "refused", txn_requires_abort=True)
        for client in (producer, fake):
            with pytest.raises(KafkaException) as refused:
                client.produce(TOPIC, b"fine", partition=0)
            assert refused.value.args[0].code() == KafkaError._STATE
            assert not refused.value.args[0].fatal()
            client.abort_transaction(10)
            client.begin_transaction()
            client.produce(TOPIC, b"fine", partition=0)  # taken again after the abort
        assert producer.flush(10) == 0
    finally:
        mock.close()


def test_a_fenced_producer_s_flush_leaves_the_fatal_error_as_state_not_a_system_error() -> None:
    """confluent-kafka's fatal error can surface as a SystemError; the guarded producer keeps it as state.

    The fatal error is raised from the error callback, and the delivery reports served after it
    in the same ``flush`` call the worker's callback with that exception still set: the raw
    ``flush`` ends in ``SystemError`` raised from the fatal ``KafkaException``. That killed a
    worker in the exactly-once soak (2026-11-29). Through ``GuardedProducer`` the same ``flush``
    returns, and the fatal error waits in ``FatalErrors.failed`` for the loop to replace the producer.
    """

    class Partition:  # the shape of worker.acks.PartitionAcks: its report reads a property
        def __init__(self) -> None:
            self.reports: list[KafkaError | None] = []

        @property
        def tp(self) -> tuple[str, int]:
            return (TOPIC, 0)

        def report(self, err: KafkaError | None, msg: Any) -> None:
            assert self.tp
            self.reports.append(err)

    outcomes = []
    for guarded in (False, True):
        mock = MockCluster(TOPIC, partitions=2)
        errors = FatalErrors()
        try:
            raw = Producer({**SETTINGS, "bootstrap.servers": mock.bootstrap, "transactional.id": "fenced",
                            "linger.ms": 5, "queue.buffering.max.messages": 100, "error_cb": errors})
            producer: Any = GuardedProducer(raw, errors) if guarded else raw
            raw.init_transactions(10)
            raw.begin_transaction()
            mock.fence_next_produces(4)
            partition = Partition()
            for i in range(10):
                raw.produce(TOPIC, b"r%d" % i, partition=i % 2, on_delivery=partition.report)
            try:
                producer.flush(5)
                outcomes.append(("returned", errors.failed))
            except (KafkaException, SystemError) as exc:
                outcomes.append((type(exc).__name__, type(exc.__cause__).__name__))
        finally:
            mock.close()
    assert outcomes[0] == ("SystemError", "KafkaException")  # why the guard exists (confluent-kafka 2.16)
    assert outcomes[1][0] == "returned"
    assert outcomes[1][1] is not None and "fenced" in outcomes[1][1]


def test_a_transaction_call_s_system_error_is_raised_as_the_kafka_error_behind_it() -> None:
    """The transaction calls serve delivery reports too; their callers classify KafkaErrors only."""
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))

    class Raw:
        produce = list_topics = None  # bound by GuardedProducer, not called here

        def commit_transaction(self, timeout: float) -> None:
            try:
                raise fenced
            except KafkaException as exc:
                raise SystemError("returned a result with an exception set") from exc

        def abort_transaction(self, timeout: float) -> None:
            raise SystemError("not from Kafka")

    producer = GuardedProducer(Raw(), FatalErrors())
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(1)
    assert raised.value is fenced
    with pytest.raises(SystemError):  # a SystemError of our own making stays what it is
        producer.abort_transaction(1)
