"""Delivery reports acknowledge the record they name, under the acquisition it was sent in."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from tests.unit.fakes import FakeMessage
from ureplicator.common.errors import ConfigError
from ureplicator.worker.acks import AckLedger
from ureplicator.worker.clients import check_producer_properties

OK = None


def msg() -> FakeMessage:
    return FakeMessage("t", 0, 0, b"v", _timestamp=1)


def test_reports_out_of_order_advance_the_watermark_only_past_contiguous_acks():
    # Given three records sent under one acquisition
    ledger = AckLedger()
    acks = ledger.acquire(("t", 0), "t", position=5)
    for offset in (5, 6, 7):
        acks.sent_record(offset, 10)
    # When the third is acknowledged first
    acks.report(7, 10, OK, msg())
    # Then nothing can be committed until the first two are
    assert ledger.to_commit() == {}
    acks.report(5, 10, OK, msg())
    acks.report(6, 10, OK, msg())
    assert ledger.to_commit() == {("t", 0): 8}
    assert ledger.in_flight_bytes == 0 and acks.outstanding == 0


def test_a_retired_acquisitions_reports_change_nothing():
    # Given a partition released with a record still unacknowledged, and acquired again
    failures = []
    ledger = AckLedger(on_failure=lambda acks, offset, reason: failures.append(offset))
    old = ledger.acquire(("t", 0), "t", position=0)
    old.sent_record(0, 10)
    new = ledger.acquire(("t", 0), "t", position=0)
    new.sent_record(0, 10)
    # When the old record's report (success or error) arrives
    old.report(0, 10, OK, msg())
    old.report(0, 10, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), msg())
    # Then the new acquisition is untouched and no failure is raised
    assert new.position == 0 and new.outstanding == 1 and failures == []
    assert ledger.in_flight_bytes == 10


def test_a_purged_record_marks_its_partition_for_a_rewind_and_is_never_acknowledged():
    ledger = AckLedger()
    acks = ledger.acquire(("t", 0), "t", position=0)
    acks.sent_record(0, 1)
    acks.sent_record(1, 1)
    acks.report(0, 1, OK, msg())
    acks.report(1, 1, KafkaError(KafkaError._PURGE_QUEUE), msg())
    assert ledger.needs_rewind == {("t", 0)}
    assert ledger.to_commit() == {("t", 0): 1}
    assert ledger.outstanding([("t", 0)]) == 0


def test_a_refused_record_stops_the_watermark_in_front_of_it():
    failures = []
    ledger = AckLedger(on_failure=lambda acks, offset, reason: failures.append((acks.tp, offset)))
    acks = ledger.acquire(("t", 0), "t", position=0)
    for offset in (0, 1, 2):
        acks.sent_record(offset, 1)
    acks.report(0, 1, OK, msg())
    acks.report(1, 1, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), msg())
    acks.report(2, 1, OK, msg())
    assert failures == [(("t", 0), 1)]
    assert ledger.to_commit() == {("t", 0): 1}


def test_a_run_report_acknowledges_every_record_of_the_run():
    ledger = AckLedger()
    acks = ledger.acquire(("t", 0), "t", position=0)
    acks.sent_run(through=4, count=5, nbytes=50)
    acks.sent_run(through=9, count=5, nbytes=50)
    assert ledger.in_flight_bytes == 100 and ledger.outstanding([("t", 0)]) == 10
    acks.report_run(0, 4, 5, 50, OK, msg())
    assert ledger.to_commit() == {("t", 0): 5}
    acks.report_run(5, 9, 5, 50, OK, msg())
    assert ledger.to_commit() == {("t", 0): 10}
    assert ledger.in_flight_bytes == 0 and acks.outstanding == 0 and ledger.acks == 10


def test_an_error_on_a_run_rewinds_and_turns_exact_reports_on_but_never_stops_the_partition():
    failures = []
    ledger = AckLedger(on_failure=lambda acks, offset, reason: failures.append(offset))
    ledger.clock = lambda: 1000.0
    acks = ledger.acquire(("t", 0), "t", position=0)
    acks.sent_run(through=9, count=10, nbytes=100)
    # Which of the ten records the destination refused is unknown
    acks.report_run(0, 9, 10, 100, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), msg())
    assert failures == [] and acks.error is None
    assert ledger.needs_rewind == {("t", 0)} and ledger.to_commit() == {}
    assert ledger.exact(1000.0 + 1) and not ledger.exact(1000.0 + 10_000)


def test_a_purged_run_is_rewound_without_switching_to_exact_reports():
    ledger = AckLedger()
    acks = ledger.acquire(("t", 0), "t", position=0)
    acks.sent_run(through=9, count=10, nbytes=100)
    acks.report_run(0, 9, 10, 100, KafkaError(KafkaError._PURGE_INFLIGHT), msg())
    assert ledger.needs_rewind == {("t", 0)} and not ledger.exact(0.0)


def test_a_fatal_error_in_a_report_asks_for_a_new_producer():
    ledger = AckLedger()
    acks = ledger.acquire(("t", 0), "t", position=0)
    acks.sent_record(0, 1)
    acks.report(0, 1, KafkaError(KafkaError._FATAL, "gapless", fatal=True), msg())
    assert ledger.producer_failed and ledger.needs_rewind == {("t", 0)} and acks.error is None


@pytest.mark.parametrize("err", [
    KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "out of order sequence number"),
    KafkaError(KafkaError.UNKNOWN_PRODUCER_ID, "unknown producer id"),
    KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "any code, but fatal", fatal=True),
])
def test_a_broken_producer_sequence_resends_the_record_and_never_stops_its_partition(err):
    # Seen after a destination restart mid-transaction: an abort, a rewind, then the broker
    # refused the producer's sequence; the old ledger named the record refused and stopped it
    failures = []
    ledger = AckLedger(on_failure=lambda acks, offset, reason: failures.append(offset))
    acks = ledger.acquire(("t", 0), "t", position=0)
    acks.sent_record(0, 1)
    acks.report(0, 1, err, msg())
    assert failures == [] and acks.error is None
    assert ledger.needs_rewind == {("t", 0)} and ledger.producer_failed


def test_destination_properties_cannot_void_the_producer_guarantees():
    check_producer_properties({"enable.idempotence": "true", "acks": "-1", "linger.ms": "5"})
    for name, value in (("enable.idempotence", "false"), ("enable.gapless.guarantee", False), ("acks", "1")):
        with pytest.raises(ConfigError, match=f"destination.properties.{name}: must be"):
            check_producer_properties({name: value})
