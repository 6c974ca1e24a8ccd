"""An acquisition that starts at the end (``auto_offset_reset: latest``, nothing committed) starts at a number."""

from __future__ import annotations

from tests.unit.fakes import FakeCommitClient, FakeConsumer, FakeProducer, FakeZooKeeper
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Assignment, Paths, TopicRecord
from ureplicator.worker.clients import WorkerClients
from ureplicator.worker.mirror import MirrorWorker


def _worker(consumer: FakeConsumer, latest_offsets) -> tuple[MirrorWorker, FakeZooKeeper, Paths, FakeProducer]:
    cfg = config_module.from_dict({
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1", "session_timeout_s": 600},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
        "worker": {"id": "w1", "commit_interval_s": 0.001, "auto_offset_reset": "latest"},
    })
    paths = Paths(cfg.root)
    zk = FakeZooKeeper()
    zk.nodes[paths.topic("t")] = TopicRecord("t", "t", 1).encode()
    producer = FakeProducer()
    clients = WorkerClients(consumer=consumer, producer=producer, zk=zk, make_producer=producer.fresh,
                            make_commit_client=lambda: FakeCommitClient(consumer), commit_thread=False,
                            handoff_thread=False, latest_offsets=latest_offsets)
    worker = MirrorWorker(cfg, "w1", clients=clients)
    worker.register()
    return worker, zk, paths, producer


def test_the_end_is_read_as_a_number_so_a_later_consumer_starts_there_not_at_a_newer_end():
    # Given a partition with 5 records, nothing committed, and a worker whose source says its end is 5
    consumer = FakeConsumer({("t", 0): [b"old"] * 5})
    asked: list[list[tuple[str, int]]] = []

    def latest_offsets(partitions, timeout_s):
        asked.append(list(partitions))
        return {tp: len(consumer.logs[tp]) for tp in partitions}

    worker, zk, paths, producer = _worker(consumer, latest_offsets)
    # When the partition is assigned
    zk.put(paths.assignment("w1"), Assignment(1, frozenset({("t", 0)})).encode())
    for _ in range(5):
        worker.turn()
    # Then the acquisition starts at offset 5, a number any later consumer (a rewind, a
    # replacement after a fetch stall) starts from, rather than "the end" resolved again later
    assert asked == [[("t", 0)]]
    assert worker.handoff.start_of(("t", 0)) == 5
    assert consumer.positions[("t", 0)] == 5
    # And the records written after it are all copied, the old ones not
    consumer.append(("t", 0), b"new1", b"new2")
    for _ in range(5):
        producer.poll(0)
        worker.turn()
    assert producer.written.get(("t", 0)) == [b"new1", b"new2"]


def test_a_source_that_does_not_answer_leaves_the_start_at_the_logical_end():
    # Given a source whose end-offset question fails
    from confluent_kafka import OFFSET_END, KafkaError, KafkaException

    consumer = FakeConsumer({("t", 0): [b"old"] * 3})

    def latest_offsets(partitions, timeout_s):
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "source down"))

    worker, zk, paths, _ = _worker(consumer, latest_offsets)
    # When the partition is assigned
    zk.put(paths.assignment("w1"), Assignment(1, frozenset({("t", 0)})).encode())
    for _ in range(5):
        worker.turn()
    # Then it starts at the end as before: the consumer resolves it
    assert worker.handoff.start_of(("t", 0)) == OFFSET_END
    assert consumer.positions[("t", 0)] == 3
