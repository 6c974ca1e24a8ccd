"""The worker in exactly-once mode, driven with fake clients: a transaction that failed is aborted, never a refusal."""

from __future__ import annotations

from confluent_kafka import KafkaError
from structlog.testing import capture_logs

from tests.unit.fakes import FakeCommitClient, FakeConsumer, FakeTxnProducer, FakeZooKeeper
from tests.unit.test_worker_mirror import Clock
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Assignment, Paths, TopicRecord, WorkerStatus
from ureplicator.worker.clients import WorkerClients
from ureplicator.worker.mirror import MirrorWorker


def values(n: int, partition: int, start: int = 0) -> list[bytes]:
    return [f"p{partition}-{i}".encode() for i in range(start, start + n)]


def exactly_once_worker() -> tuple[MirrorWorker, FakeConsumer, FakeTxnProducer, FakeZooKeeper, Paths, Clock]:
    """One exactly-once worker (Python loop) on fake clients, topic t with 2 partitions of 10 records."""
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
