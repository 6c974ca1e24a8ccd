"""A destination partition the producer does not know yet is awaited beside the loop (issue 44 §4.1), with fakes.

``produce()`` refuses a record whose destination partition is not in the producer's metadata
(``_UNKNOWN_PARTITION``): the destination topic was grown moments ago, or is still to be. The
partition is paused and its destination partition awaited on a thread of its own; the others
keep flowing; it restarts from its acknowledged position once the partition appears, or stops
after the wait's timeout. The real-cluster test is tests/integration/test_unknown_partition_wait.py.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from structlog.testing import capture_logs

from tests.unit.fakes import FakeConsumer, FakeProducer
from tests.unit.test_worker_exactly_once import exactly_once_worker, turns
from tests.unit.test_worker_mirror import Rig, make_rig, values, wait_until
from ureplicator.worker.handoff import Beside


class Grown:
    """Whether the destination topic ``t`` has its partition 1 yet, as the producer and its metadata see it."""

    def __init__(self, producer: FakeProducer, consumer: FakeConsumer, grown: bool = True,
                 after_lists: int | None = None) -> None:
        self.event = threading.Event()
        if grown:
            self.event.set()
        self.lists = 0  # metadata requests made
        self.after_lists = after_lists  # the destination grows after this many metadata requests
        self.resumed: list[tuple[str, int]] = []
        produce = producer.produce

        def refusing_produce(topic: str, value: Any = None, key: Any = None, partition: int = -1,
                             *args: Any, **kwargs: Any) -> None:
            if topic == "t" and partition >= 1 and not self.event.is_set():
                raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition"))
            produce(topic, value, key, partition, *args, **kwargs)

        def list_topics(topic: str | None = None, timeout: float = -1) -> Any:
            self.lists += 1
            if self.after_lists is not None and self.lists >= self.after_lists:
                self.event.set()
            partitions = producer.partitions if self.event.is_set() or topic != "t" else 1
            meta = SimpleNamespace(error=None, partitions=dict.fromkeys(range(partitions)))
            return SimpleNamespace(topics={topic: meta})

        def resume(partitions: list[TopicPartition]) -> None:
            self.resumed.extend((tp.topic, tp.partition) for tp in partitions)
            consumer.paused.difference_update((tp.topic, tp.partition) for tp in partitions)

        producer.produce = refusing_produce  # type: ignore[method-assign]
        producer.list_topics = list_topics  # type: ignore[method-assign]
        consumer.resume = resume  # type: ignore[attr-defined]


def mirroring_rig() -> tuple[Rig, Grown]:
    """A worker (partition waits on their own thread, as in production) that acquired t:0 and t:1, t:1 empty."""
    rig = make_rig(handoff_thread=True)
    rig.consumer.logs[("t", 1)] = []
    grown = Grown(rig.producer, rig.consumer)
    rig.assign(1, ("t", 0), ("t", 1))
    wait_until(lambda: rig.worker.handoff.change is None and len(rig.worker.owned) == 2, rig)
    rig.turns(2)
    assert rig.producer.written[("t", 0)] == values(10, 0)
    return rig, grown


def test_other_partitions_flow_while_a_destination_partition_is_awaited_then_it_restarts_exactly_once():
    # Given a worker mirroring t:0 and t:1 whose producer does not know destination partition t:1
    rig, grown = mirroring_rig()
    grown.event.clear()
    rig.consumer.append(("t", 1), *values(10, 1))
    with capture_logs() as logs:
        # When records of t:1 arrive
        rig.turns(3)
        # Then t:1 is paused and awaited beside the loop, nothing of it sent
        handoff = rig.worker.handoff
        assert ("t", 1) in handoff.waiting and ("t", 1) in rig.consumer.paused and ("t", 1) not in handoff.routes
        assert ("t", 1) not in rig.producer.written
        # And t:0 keeps flowing and being committed meanwhile
        rig.consumer.append(("t", 0), *values(5, 0, start=10))
        rig.turns(3)
        assert rig.producer.written[("t", 0)] == values(15, 0)
        assert rig.consumer.group[("t", 0)] == 15
        assert ("t", 1) in handoff.waiting
        # When the destination partition appears
        grown.event.set()
        wait_until(lambda: rig.producer.written.get(("t", 1)) == values(10, 1), rig)
        rig.turns(3)
    # Then t:1 restarted from its acknowledged position, resumed, and every record is there once, in order
    assert rig.producer.written[("t", 1)] == values(10, 1)
    assert rig.consumer.group[("t", 1)] == 10
    assert ("t", 1) in grown.resumed and ("t", 1) not in rig.consumer.paused and not handoff.waiting
    events = [e["event"] for e in logs]
    assert "destination_partition_awaited" in events and "destination_partition_found" in events
    assert "partition_stopped" not in events
    assert rig.status().partitions[("t", 1)].error is None


def test_a_destination_partition_that_never_appears_stops_its_partition_with_a_clear_error():
    # Given a worker whose partition waits give up after 0.3 s, and whose producer never learns t:1
    rig, grown = mirroring_rig()
    rig.worker.handoff.await_partition_s = 0.3
    grown.event.clear()
    rig.consumer.append(("t", 1), *values(4, 1))
    with capture_logs() as logs:
        rig.turns(2)
        # When the wait times out
        wait_until(lambda: not rig.worker.handoff.waiting, rig)
        rig.consumer.append(("t", 0), *values(2, 0, start=10))
        rig.turns(2)
    # Then t:1 is stopped at its first record, naming the destination partition; t:0 goes on
    error = rig.worker.owned[("t", 1)].error
    assert error is not None and error.startswith("offset 0: Local: Unknown partition: destination topic 't' has no "
                                                  "partition 1 after 0.3s of metadata refreshes"), error
    assert rig.status().partitions[("t", 1)].error == error
    assert ("t", 1) in rig.consumer.paused and ("t", 1) not in rig.producer.written
    assert rig.producer.written[("t", 0)] == values(12, 0)
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["partition_stopped"]


def test_a_release_during_the_wait_forgets_it_and_a_later_acquisition_is_not_left_paused():
    # Given t:1 awaiting its destination partition
    rig, grown = mirroring_rig()
    grown.event.clear()
    rig.consumer.append(("t", 1), *values(3, 1))
    rig.turns(2)
    assert ("t", 1) in rig.worker.handoff.waiting
    # When the leader takes t:1 away, then (the destination grown) gives it back
    rig.assign(2, ("t", 0))
    wait_until(lambda: rig.worker.handoff.change is None and ("t", 1) not in rig.worker.owned, rig)
    assert not rig.worker.handoff.waiting
    grown.event.set()
    rig.assign(3, ("t", 0), ("t", 1))
    wait_until(lambda: rig.producer.written.get(("t", 1)) == values(3, 1), rig)
    # Then the new acquisition was resumed (librdkafka keeps a pause through an unassign) and copied it once
    assert ("t", 1) in grown.resumed
    rig.turns(2)
    assert rig.producer.written[("t", 1)] == values(3, 1) and rig.consumer.group[("t", 1)] == 3


def test_exactly_once_a_partition_resumed_after_the_wait_joins_the_open_transaction_without_an_abort():
    # Given an exactly-once worker (inline waits: the destination grows at the wait's second look)
    worker, consumer, producer, zk, paths, clock = exactly_once_worker()
    consumer.logs[("t", 1)] = []
    grown = Grown(producer, consumer)
    turns(worker, clock, 4, commit=True)
    assert producer.written[("t", 0)] == values(10, 0) and producer.calls.count("commit") == 1
    grown.event.clear()
    grown.lists, grown.after_lists = 0, 2
    # When a transaction holds records of t:0 and t:1's records are refused (unknown partition)
    consumer.append(("t", 0), *values(3, 0, start=10))
    consumer.append(("t", 1), *values(5, 1))
    with capture_logs() as logs:
        turns(worker, clock, 1)
        assert producer.txn_open and ("t", 1) not in producer.written
        # And the destination partition appears: the next turns restart t:1 in the same transaction
        consumer.append(("t", 0), *values(2, 0, start=13))
        turns(worker, clock, 3)
        turns(worker, clock, 2, commit=True)
    events = [e["event"] for e in logs]
    # Then no transaction was aborted, and the commit covers every record of both partitions, each sent once
    assert "destination_partition_found" in events and "transaction_aborted" not in events
    assert producer.calls.count("abort") == 0 and producer.calls.count("commit") == 2
    assert producer.written[("t", 0)] == values(15, 0)
    assert producer.written[("t", 1)] == values(5, 1)
    assert {(tp.topic, tp.partition): tp.offset for tp in producer.offsets} == {("t", 0): 15, ("t", 1): 5}


def test_exactly_once_an_abort_during_the_wait_leaves_the_partition_waiting_then_it_restarts_from_the_commit():
    # Given an exactly-once worker (the wait on its own thread here) that committed t:0, t:1 empty
    worker, consumer, producer, zk, paths, clock = exactly_once_worker()
    consumer.logs[("t", 1)] = []
    grown = Grown(producer, consumer)
    worker.handoff._waits = Beside()
    turns(worker, clock, 4, commit=True)
    # And whose t:1 records are refused (unknown partition) and awaited, in an open transaction with t:0's
    grown.event.clear()
    consumer.append(("t", 0), *values(3, 0, start=10))
    consumer.append(("t", 1), *values(4, 1))
    turns(worker, clock, 2)
    assert ("t", 1) in worker.handoff.waiting and producer.txn_open
    # When that transaction is aborted meanwhile (say, a run of t:0 failed)
    worker.loop.abort_transaction("test")
    turns(worker, clock, 3)
    # Then t:1 is still awaited (not rewound into another refusal), and nothing asks to rewind it
    assert ("t", 1) in worker.handoff.waiting and ("t", 1) not in worker.ledger.needs_rewind
    # When the destination partition appears
    grown.event.set()
    for _ in range(250):
        turns(worker, clock, 1)
        if ("t", 1) in producer.written:
            break
        time.sleep(0.02)
    turns(worker, clock, 2, commit=True)
    # Then the commit holds both partitions complete, t:1's records sent once
    assert producer.written[("t", 1)] == values(4, 1)
    assert {(tp.topic, tp.partition): tp.offset for tp in producer.offsets} == {("t", 0): 13, ("t", 1): 4}


def test_a_stopped_partition_given_back_later_is_resumed_not_left_paused_by_its_old_stop():
    # Given a worker whose consumer keeps a pause through an unassign, as librdkafka does
    rig = make_rig(handoff_thread=True)
    resumed: list[tuple[str, int]] = []

    def unassign(partitions: list[TopicPartition]) -> None:
        paused = set(rig.consumer.paused)
        FakeConsumer.incremental_unassign(rig.consumer, partitions)
        rig.consumer.paused |= paused

    def resume(partitions: list[TopicPartition]) -> None:
        resumed.extend((tp.topic, tp.partition) for tp in partitions)
        rig.consumer.paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    rig.consumer.incremental_unassign = unassign  # type: ignore[method-assign]
    rig.consumer.resume = resume  # type: ignore[attr-defined]
    rig.consumer.logs[("t", 1)] = []
    rig.assign(1, ("t", 0), ("t", 1))
    wait_until(lambda: rig.worker.handoff.change is None and len(rig.worker.owned) == 2, rig)
    # and t:1 stopped at offset 0 (a record the destination refused)
    acks = rig.worker.ledger.partitions[("t", 1)]
    rig.worker.handoff.stop_partition(acks, 0, "Broker: Message size too large")
    assert ("t", 1) in rig.consumer.paused
    # When the operator fixed the cause and a rebalance takes t:1 away, then gives it back
    rig.assign(2, ("t", 0))
    wait_until(lambda: rig.worker.handoff.change is None and ("t", 1) not in rig.worker.owned, rig)
    rig.consumer.append(("t", 1), *values(3, 1))
    rig.assign(3, ("t", 0), ("t", 1))
    # Then the new acquisition is resumed and copies its records (was: paused for good, with no error shown)
    wait_until(lambda: rig.producer.written.get(("t", 1)) == values(3, 1), rig)
    assert ("t", 1) in resumed and ("t", 1) not in rig.consumer.paused
