"""The worker's destination side: each call that changes the producer answers with what happened."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from tests.unit.fakes import FakeProducer, FakeTxnProducer
from tests.unit.test_worker_transactions import Log, TxnError
from ureplicator.worker import transactions
from ureplicator.worker.clients import FatalErrors
from ureplicator.worker.destination import Aborted, Committed, Destination, Purged, Replaced, Retry, Stalled


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def destination(producer: FakeProducer, clock: Clock | None = None, exactly_once: bool = False,
                made: list[Any] | None = None) -> Destination:
    fresh = made if made is not None else []

    def make() -> Any:
        fresh.append(FakeTxnProducer() if exactly_once else producer.fresh())
        return fresh[-1]

    txn = None
    if exactly_once:
        txn = transactions.Transactions(1.0, 1_000_000, lambda: "group", Log(), clock=clock or Clock(), overrun_s=0.0)
    return Destination(producer, make, FatalErrors(), stall_s=30.0, txn=txn, clock=clock or Clock())


def reports(into: list[str]) -> Any:
    return lambda err, msg: into.append("ok" if err is None else err.name())


def test_a_purge_drops_what_is_queued_reports_it_and_answers_with_the_fresh_producer():
    # Given a destination that holds two records unacknowledged
    producer = FakeProducer()
    producer.hold = True
    dest = destination(producer)
    seen: list[str] = []
    producer.produce("t", b"a", partition=0, callback=reports(seen))
    producer.produce("t", b"b", partition=0, callback=reports(seen))
    # When it is purged because the worker is fenced
    outcome = dest.purge("fenced")
    # Then nothing was sent, each record came back purged, and a fresh producer took over
    assert outcome == Purged("fenced", Replaced("fenced", fatal=False))
    assert seen == ["_PURGE_QUEUE", "_PURGE_QUEUE"] and producer.written == {}
    assert dest.producer is producer.replacements[0] and producer.closed


def test_a_purge_while_stopping_keeps_the_producer():
    producer = FakeProducer()
    dest = destination(producer)
    assert dest.purge("stopping_while_fenced", replace=False) == Purged("stopping_while_fenced", None)
    assert dest.producer is producer and producer.purges == 1


def test_a_fatal_produce_error_makes_the_replacement_fatal_and_the_new_producer_is_clean():
    producer = FakeProducer()
    dest = destination(producer)
    dest.mark_broken("gapless guarantee")
    assert dest.broken == "gapless guarantee"
    assert dest.replace("gapless guarantee") == Replaced("gapless guarantee", fatal=True)
    assert dest.broken is None and producer.purges == 1  # not purged before: the replacement did it


def test_a_producer_that_acknowledges_nothing_for_the_stall_period_is_called_stalled_once_per_period():
    # Given a producer that holds records and acknowledges none
    clock = Clock()
    producer = FakeProducer()
    producer.hold = True
    producer.produce("t", b"a", partition=0)
    dest = destination(producer, clock)
    # Then it is not stalled before the period, stalled at it, and the period starts again
    assert dest.watch(clock.now, acks=5, in_flight_bytes=1) is None
    clock.now += 29.9
    assert dest.watch(clock.now, acks=5, in_flight_bytes=1) is None
    clock.now += 0.1
    assert dest.watch(clock.now, acks=5, in_flight_bytes=1) == Stalled(30.0)
    clock.now += 10
    assert dest.watch(clock.now, acks=5, in_flight_bytes=1) is None
    # and an acknowledgement, or nothing in flight, starts the period again
    clock.now += 25
    assert dest.watch(clock.now, acks=6, in_flight_bytes=1) is None
    clock.now += 29
    assert dest.watch(clock.now, acks=6, in_flight_bytes=0) is None
    clock.now += 29
    assert dest.watch(clock.now, acks=6, in_flight_bytes=1) is None


def test_a_replaced_producer_is_watched_from_its_replacement_on():
    clock = Clock()
    producer = FakeProducer()
    producer.hold = True
    producer.produce("t", b"a", partition=0)
    dest = destination(producer, clock)
    assert dest.watch(clock.now, acks=1, in_flight_bytes=1) is None
    clock.now += 29
    producer.hold = False  # its record is reported at the replacement: no wait for the rest
    dest.replace("fenced", purged=True)
    fresh = dest.producer
    fresh.hold = True
    fresh.produce("t", b"a", partition=0)
    clock.now += 29  # 58 s after the old producer's last acknowledgement, 29 s after the replacement
    assert dest.watch(clock.now, acks=1, in_flight_bytes=1) is None
    clock.now += 1
    assert dest.watch(clock.now, acks=1, in_flight_bytes=1) == Stalled(30.0)


def test_exactly_once_a_purge_with_no_open_transaction_does_nothing_and_an_open_one_is_aborted():
    producer = FakeTxnProducer()
    dest = destination(producer, exactly_once=True)
    assert dest.ready()
    assert dest.purge("fenced") is None
    dest.begin()
    assert dest.purge("fenced") == Aborted("fenced", transactions.ABORTED, None)
    assert producer.calls == ["init", "begin", "abort"] and dest.producer is producer


def test_exactly_once_each_commit_outcome_is_answered_and_a_fenced_producer_is_replaced():
    made: list[Any] = []
    # A retriable error sending the positions: not committed yet, the same call later
    producer = FakeTxnProducer()
    producer.fail_offsets = TxnError(KafkaError._TIMED_OUT, retriable=True)
    dest = destination(producer, exactly_once=True, made=made)
    assert dest.ready()
    dest.begin()
    offsets = [TopicPartition("t", 0, 5)]
    assert dest.commit(offsets, "interval") == Retry()
    producer.fail_offsets = None
    # A fenced producer: a new one, which needs init_transactions again
    producer.fail_commit = TxnError(KafkaError._FENCED, fatal=True)
    outcome = dest.commit(offsets, "interval")
    assert outcome == Aborted("interval", transactions.FATAL,
                              Replaced("transaction interval: producer fenced or failed", fatal=False))
    assert dest.producer is made[0] and not dest.txn.open
    assert dest.ready() and made[0].calls == ["init"]
    dest.begin()
    assert dest.commit(offsets, "interval") == Committed()
    assert made[0].calls == ["init", "begin", "offsets", "commit"]


def test_the_error_callback_keeps_a_lost_coordinator_and_nothing_else_of_the_connection_errors():
    errors = FatalErrors()
    errors(KafkaError(KafkaError._TRANSPORT, "127.0.0.1:9092/1: Disconnected (after 5000ms in state UP)"))
    errors(KafkaError(KafkaError._MSG_TIMED_OUT, "a record timed out"))
    assert errors.coordinator_lost is None and errors.failed is None
    for text in ("TxnCoordinator: 127.0.0.1:9092: Connect to ipv4#127.0.0.1:9092 failed: Connection refused",
                 "GroupCoordinator: 127.0.0.1:9092: Disconnected"):
        errors.coordinator_lost = None
        errors(KafkaError(KafkaError._TRANSPORT, text))
        assert errors.coordinator_lost == text
    errors.coordinator_lost = None
    errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert errors.coordinator_lost == "1/1 brokers are down" and errors.failed is None


def test_exactly_once_a_producer_that_lost_the_coordinators_is_renewed_at_the_commit_not_asked_to_send():
    # Given an exactly-once destination whose producer is ready
    made: list[Any] = []
    producer = FakeTxnProducer()
    dest = destination(producer, exactly_once=True, made=made)
    assert dest.ready()
    assert dest.renew("interval") is None  # nothing lost: the commit goes on as usual
    # When the destination went down after that (the producer's error callback said so)
    dest.errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    renewed = dest.renew("interval")
    # Then the commit gets a fresh producer instead of sending the positions on the old one
    assert isinstance(renewed, Aborted) and renewed.outcome == transactions.FATAL
    assert renewed.replaced is not None and not renewed.replaced.fatal
    assert dest.producer is made[0] and "offsets" not in producer.calls
    assert dest.errors.coordinator_lost is None
    # And errors seen while the fresh producer was being made ready do not renew it again
    dest.errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert dest.ready() and made[0].calls == ["init"]
    assert dest.renew("interval") is None


def test_exactly_once_a_producer_silent_for_renew_silent_s_is_renewed_at_the_commit():
    # Given an exactly-once destination whose ready producer holds a record without a report
    clock = Clock()
    made: list[Any] = []
    producer = FakeTxnProducer()
    producer.hold = True
    dest = destination(producer, clock=clock, exactly_once=True, made=made)
    assert dest.ready()
    dest.begin()
    producer.produce("t", b"a", partition=0)
    dest.watch(clock(), acks=0, in_flight_bytes=1)
    # When no report came for less than RENEW_SILENT_S, and nothing said the destination went away
    clock.now += transactions.RENEW_SILENT_S - 1
    assert dest.silent_s(clock(), acks=0) == transactions.RENEW_SILENT_S - 1
    assert dest.renew("interval", dest.silent_s(clock(), acks=0)) is None
    # Then a report since the last look means it is not silent
    assert dest.silent_s(clock(), acks=1) == 0.0
    # And once silent for RENEW_SILENT_S the commit gets a fresh producer, named for its silence
    clock.now += 1
    renewed = dest.renew("interval", dest.silent_s(clock(), acks=0))
    assert isinstance(renewed, Aborted) and renewed.outcome == transactions.FATAL
    assert renewed.replaced is not None and "no delivery report for 10.0 s" in renewed.replaced.reason
    assert dest.producer is made[0] and "offsets" not in producer.calls
