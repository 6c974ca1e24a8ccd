"""The worker in exactly-once mode, driven with fake clients: a transaction that failed is aborted, never a refusal."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from structlog.testing import capture_logs

from tests.unit.fakes import FakeCommitClient, FakeConsumer, FakeTxnProducer, FakeZooKeeper
from tests.unit.test_worker_mirror import Clock
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Assignment, Paths, TopicRecord, WorkerStatus
from ureplicator.worker import transactions
from ureplicator.worker.clients import WorkerClients
from ureplicator.worker.mirror import MirrorWorker


def values(n: int, partition: int, start: int = 0) -> list[bytes]:
    return [f"p{partition}-{i}".encode() for i in range(start, start + n)]


def exactly_once_worker(destination_group: FakeConsumer | None = None,
                        ) -> tuple[MirrorWorker, FakeConsumer, FakeTxnProducer, FakeZooKeeper, Paths, Clock]:
    """One exactly-once worker (Python loop) on fake clients, topic t with 2 partitions of 10 records.

    ``destination_group``: the pipeline's group on the destination (default: a new one, nothing committed).
    """
    cfg = config_module.from_dict({
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1", "session_timeout_s": 600},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
        "worker": {"id": "w1", "commit_interval_s": 0.001, "auto_offset_reset": "earliest", "exactly_once": True,
                   "transaction_interval_ms": 1000, "native_loop": "off"},
    })
    paths = Paths(cfg.root)
    zk = FakeZooKeeper()
    zk.nodes[paths.topic("t")] = TopicRecord("t", "t", 2).encode()
    consumer = FakeConsumer({("t", 0): values(10, 0), ("t", 1): values(10, 1)})
    consumer.consumer_group_metadata = lambda: "group-metadata"  # type: ignore[attr-defined]
    if destination_group is None:
        destination_group = FakeConsumer({})  # the pipeline's group on the destination: nothing committed yet
    producer = FakeTxnProducer()
    clients = WorkerClients(consumer=consumer, producer=producer, zk=zk, make_producer=producer.fresh,
                            make_commit_client=lambda: FakeCommitClient(consumer),
                            make_offsets_client=lambda: FakeCommitClient(destination_group),
                            commit_thread=False, handoff_thread=False)
    clock = Clock()
    worker = MirrorWorker(cfg, "w1", clients=clients, clock=clock)
    worker.register()
    zk.put(paths.assignment("w1"), Assignment(1, frozenset({("t", 0), ("t", 1)})).encode())
    return worker, consumer, producer, zk, paths, clock


def turns(worker: MirrorWorker, clock: Clock, n: int, commit: bool = False) -> None:
    """``n`` turns 2 ms apart; ``commit``: the last one past the 1 s transaction interval."""
    for i in range(n):
        clock.now += 1.1 if commit and i == n - 1 else 0.002
        worker.turn()


def test_a_record_refused_because_the_transaction_failed_is_sent_again_after_the_abort_not_stopped():
    # Given an exactly-once worker that copied and committed t's 20 records
    worker, consumer, producer, zk, paths, clock = exactly_once_worker()
    turns(worker, clock, 4, commit=True)
    assert producer.written[("t", 0)] == values(10, 0) and producer.written[("t", 1)] == values(10, 1)
    assert producer.calls.count("commit") == 1
    # And a transaction open with 3 more records of each partition, acknowledged
    for p in (0, 1):
        consumer.append(("t", p), *values(3, p, start=10))
    turns(worker, clock, 2)
    assert producer.txn_open and producer.written[("t", 1)][-3:] == values(3, 1, start=10)
    # When that transaction fails (a purge, a sequence gap after a destination restart): librdkafka
    # then refuses every record with a state error until it is aborted
    producer.abortable_error = KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "skipped sequence numbers",
                                          txn_requires_abort=True)
    for p in (0, 1):
        consumer.append(("t", p), *values(3, p, start=13))
    with capture_logs() as logs:
        turns(worker, clock, 4)
        turns(worker, clock, 2, commit=True)
    events = [e["event"] for e in logs]
    # Then no partition is stopped: the loop aborted the transaction, rewound and sent the records again
    assert "produce_refused_until_abort" in events and "partition_stopped" not in events
    assert producer.calls.count("abort") == 1
    status = WorkerStatus.decode(zk.nodes[paths.worker_status("w1")]).partitions
    assert status[("t", 0)].error is None and status[("t", 1)].error is None
    for p in (0, 1):  # the aborted copies stay in the fake's log; the new transaction holds all six again
        assert producer.written[("t", p)][-6:] == values(6, p, start=10)
    # And the next transaction commits positions that cover every record
    assert producer.calls.count("commit") == 2
    assert {(tp.topic, tp.partition): tp.offset for tp in producer.offsets} == {("t", 0): 16, ("t", 1): 16}


@pytest.mark.parametrize("coordinator_committed", [True, False])
def test_a_producer_replaced_while_its_commit_was_in_doubt_restarts_from_the_destination_group(coordinator_committed):
    # Given an exactly-once worker that committed t's 20 records, then sent 3 more of each partition
    destination_group = FakeConsumer({})
    worker, consumer, producer, zk, paths, clock = exactly_once_worker(destination_group)
    turns(worker, clock, 4, commit=True)
    for p in (0, 1):
        destination_group.group[("t", p)] = 10  # what that commit wrote to the destination's group
        consumer.append(("t", p), *values(3, p, start=10))
    turns(worker, clock, 2)
    # When the commit of those 3 times out (librdkafka goes on with it in the background), which
    # costs the producer, and the coordinator did complete that commit (or did not)
    producer.fail_commit = KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True)
    if coordinator_committed:
        for p in (0, 1):
            destination_group.group[("t", p)] = 13
    for p in (0, 1):
        consumer.append(("t", p), *values(2, p, start=13))
    with capture_logs() as logs:
        turns(worker, clock, 1, commit=True)
        assert producer.calls.count("commit") == 2 and len(producer.replacements) == 1
        turns(worker, clock, 4)
        turns(worker, clock, 2, commit=True)
    # Then the positions were read back from the destination's group before any rewind
    settled = [e for e in logs if e["event"] == "positions_settled"]
    assert len(settled) == 1
    assert settled[0]["moved"] == ({"t:0": [10, 13], "t:1": [10, 13]} if coordinator_committed else {})
    new = producer.replacements[-1]
    assert new.calls.count("init") == 1 and new.calls.count("commit") == 1
    assert {(tp.topic, tp.partition): tp.offset for tp in new.offsets} == {("t", 0): 15, ("t", 1): 15}
    for p in (0, 1):
        # the fake's log keeps every copy sent, committed or not: the records the coordinator
        # committed are not sent again; the ones it aborted are
        resent = [] if coordinator_committed else values(3, p, start=10)
        assert producer.written[("t", p)] == values(13, p) + resent + values(2, p, start=13)


def test_after_the_destination_went_down_the_commit_renews_the_producer_and_sends_the_transaction_again():
    # Given an exactly-once worker that committed t's 20 records and has 3 more of each partition sent
    worker, consumer, producer, zk, paths, clock = exactly_once_worker()
    turns(worker, clock, 4, commit=True)
    for p in (0, 1):
        consumer.append(("t", p), *values(3, p, start=10))
    turns(worker, clock, 2)
    offsets_sent = producer.calls.count("offsets")
    # When the producer's error callback said every destination broker was down (a restart)
    worker.destination.errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    with capture_logs() as logs:
        turns(worker, clock, 1, commit=True)
        turns(worker, clock, 3)
        turns(worker, clock, 1, commit=True)
    # Then the old producer was never asked to send the positions (librdkafka would hang there)
    assert producer.calls.count("offsets") == offsets_sent
    replaced = [e for e in logs if e["event"] == "producer_replaced"]
    assert len(replaced) == 1 and "coordinators lost" in replaced[0]["reason"]
    # And its successor sent the open transaction's records again and committed them
    new = producer.replacements[-1]
    assert new.calls.count("commit") == 1
    assert {(tp.topic, tp.partition): tp.offset for tp in new.offsets} == {("t", 0): 13, ("t", 1): 13}
    for p in (0, 1):  # the fake keeps the aborted copies too
        assert producer.written[("t", p)] == values(13, p) + values(3, p, start=10)


def owing_reports() -> tuple[MirrorWorker, FakeTxnProducer, Clock]:
    """An exactly-once worker that committed t's 20 records and sent 3 more of each partition into a
    transaction whose reports do not come."""
    worker, consumer, producer, zk, paths, clock = exactly_once_worker()
    turns(worker, clock, 4, commit=True)
    producer.hold = True
    for p in (0, 1):
        consumer.append(("t", p), *values(3, p, start=10))
    turns(worker, clock, 2)
    return worker, producer, clock


def test_a_producer_that_lost_the_coordinators_and_owes_reports_is_renewed_a_few_seconds_after_its_commit_was_due():
    # Given a transaction whose reports do not come, because the destination went away under the producer
    worker, producer, clock = owing_reports()
    worker.destination.errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    # When the commit is due: first the reports are waited for
    with capture_logs() as logs:
        turns(worker, clock, 1, commit=True)
        clock.now += 2.0
        worker.turn()
    assert not producer.replacements and "producer_replaced" not in [e["event"] for e in logs]
    # Then, RENEW_AFTER_S past due, the producer is renewed without them, and its successor sends
    # the transaction's records again and commits them
    renewed_then_committed(worker, producer, clock, clock.now + 1.5, "coordinators lost")


def renewed_then_committed(worker: MirrorWorker, producer: FakeTxnProducer, clock: Clock, at: float,
                           reason: str) -> None:
    """At ``at`` the owed-reports producer is renewed once (``reason``); its successor commits the 3 records again."""
    with capture_logs() as logs:
        clock.now = at
        worker.turn()
        turns(worker, clock, 3)
        turns(worker, clock, 1, commit=True)
    replaced = [e for e in logs if e["event"] == "producer_replaced"]
    assert len(replaced) == 1 and reason in replaced[0]["reason"]
    new = producer.replacements[-1]
    assert new.calls.count("commit") == 1
    assert {(tp.topic, tp.partition): tp.offset for tp in new.offsets} == {("t", 0): 13, ("t", 1): 13}


def test_a_silent_producer_is_waited_for_then_renewed_when_nothing_says_the_destination_went_away():
    # Given a transaction whose reports do not come, with no error from the destination (a frozen
    # destination keeps its connections: nothing comes until librdkafka's request timeout)
    worker, producer, clock = owing_reports()
    silent_from = clock.now - 0.004  # the first of owing_reports' two turns sent the records
    # When its commit is due: the reports are waited for while the silence is shorter than RENEW_SILENT_S
    turns(worker, clock, 1, commit=True)
    clock.now = silent_from + transactions.RENEW_SILENT_S - 0.5
    worker.turn()
    assert not producer.replacements and producer.txn_open
    # Then, silent that long, the producer is renewed without them, and its successor commits them
    renewed_then_committed(worker, producer, clock, silent_from + transactions.RENEW_SILENT_S + 0.5,
                           "no delivery report for 10.")
