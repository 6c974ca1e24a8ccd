"""A destination partition the producer does not know yet is waited for beside the loop, on real clusters.

Issue 44 §4.1: a produce refused with ``_UNKNOWN_PARTITION`` (the destination topic has fewer
partitions than the source partition being mirrored, until it is grown) waited on the loop
thread for up to 30 s, so no other partition of the worker was copied meanwhile. The test plays
the leader through ZooKeeper (no controller: it grows a destination first, so the destination
could never lag): it registers a source topic that grew to 2 partitions while its destination
topic still has 1, assigns the new partition, checks another topic keeps being copied during the
wait, then grows the destination and checks every record arrives exactly once and in order.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from tests.integration.test_exactly_once import EXACT, read_sources
from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from ureplicator.common import config as config_module
from ureplicator.common import zk
from ureplicator.common.zkschema import Assignment, Paths, TopicRecord, WorkerStatus

pytestmark = pytest.mark.integration

FIRST = 40  # records per topic before the source topic grows
GROWN = 30  # records produced over both partitions of the grown topic
DURING = 20  # records of the other topic produced while the new partition is waited for


def _generation(client: KazooClient, paths: Paths, worker: str) -> int:
    if client.exists(paths.worker_status(worker)) is None:
        return -1
    return WorkerStatus.decode(client.get(paths.worker_status(worker))[0]).generation


def _partitions(bootstrap: str, topic: str) -> int:
    admin = AdminClient(kafka_io.client_config(bootstrap))
    return len(admin.list_topics(topic=topic, timeout=10).topics[topic].partitions)


def _copied(bootstrap: str, topic: str, partition: int, isolation: str) -> list[int]:
    """The source offsets (from ``urep``) the destination partition holds, read under ``isolation``."""
    return read_sources(bootstrap, topic, partition, isolation)


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at_least_once", "exactly_once"])
def test_other_topics_flow_while_a_destination_partition_is_awaited(pipeline, services, exactly_once):
    src, dst = services["source"], services["destination"]
    isolation = "read_committed" if exactly_once else "read_uncommitted"
    grown, other = f"{pipeline.name}-grown", f"{pipeline.name}-other"
    for topic in (grown, other):
        kafka_io.create_topic(src, topic, 1)
        kafka_io.create_topic(dst, topic, 1)
    kafka_io.produce(src, grown, FIRST, 1)
    kafka_io.produce(src, other, FIRST, 1)
    cfg = config_module.from_dict(pipeline.config_doc())
    paths = Paths(cfg.root)
    client = zk.connect(cfg)
    try:
        # Given a worker mirroring two one-partition topics
        for topic in (grown, other):
            zk.create_topic(client, paths, TopicRecord(topic, topic, 1, options={"initial_partitions": 1}))
        worker = pipeline.start_worker("w1", worker=dict(EXACT) if exactly_once else {})
        wait_for(lambda: client.exists(paths.worker("w1")) is not None, 60, "w1 registered")
        client.create(paths.assignment("w1"), Assignment(1, frozenset({(grown, 0), (other, 0)})).encode(),
                      makepath=True)
        wait_for(lambda: len(_copied(dst, grown, 0, isolation)) == FIRST
                 and len(_copied(dst, other, 0, isolation)) == FIRST, 90, "both topics mirrored")

        # When the source topic grows to 2 partitions and its new partition is assigned while the
        # destination topic still has 1 (the producer refuses its records: unknown partition)
        kafka_io.grow_topic(src, grown, 2)
        kafka_io.produce(src, grown, GROWN, 2, start=FIRST)
        zk.update_topic(client, paths, TopicRecord(grown, grown, 2, options={"initial_partitions": 1}))
        client.set(paths.assignment("w1"),
                   Assignment(2, frozenset({(grown, 0), (grown, 1), (other, 0)})).encode())
        # (the acquisition itself waits up to 10 s beside the loop for the partition, then starts it)
        wait_for(lambda: _generation(client, paths, "w1") == 2, 60, "w1 acquired the new partition")
        time.sleep(1.0)  # its first records are fetched and refused: the wait has begun
        assert worker.alive(), worker.tail()

        # Then the other topic keeps being copied during the wait (it blocked the loop for 30 s)
        kafka_io.produce(src, other, DURING, 1, start=FIRST)
        asked = time.monotonic()
        wait_for(lambda: len(_copied(dst, other, 0, isolation)) == FIRST + DURING, 10,
                 "the other topic copied while the new destination partition is awaited")
        during_s = time.monotonic() - asked
        assert _partitions(dst, grown) == 1  # still not grown: the wait goes on

        # When the destination topic is grown
        kafka_io.grow_topic(dst, grown, 2)
        # Then every record arrives, exactly once and in source order, the new partition's too
        new = GROWN // 2
        wait_for(lambda: len(_copied(dst, grown, 1, isolation)) >= new, 60, "the new partition mirrored")
        wait_for(lambda: len(_copied(dst, grown, 0, isolation)) >= FIRST + GROWN - new, 60, "partition 0 mirrored")
        time.sleep(3.0)  # a duplicate would arrive after the last record: give it the time to
        assert _copied(dst, grown, 0, isolation) == list(range(FIRST + GROWN - new))
        assert _copied(dst, grown, 1, isolation) == list(range(new))
        assert _copied(dst, other, 0, isolation) == list(range(FIRST + DURING))
        log = worker.tail(400)
        assert "destination_partition_awaited" in log and "destination_partition_found" in log, log
        assert worker.alive(), worker.tail()
        print(f"other topic copied {during_s:.1f}s into the wait")
    finally:
        client.stop()
        client.close()
