"""The leader's hand-off gate on real ZooKeeper: no partition is granted while a worker may still be taking it.

The workers here are played by the test through their ZooKeeper nodes (registration, status),
exactly as a worker process writes them, so one can stay "still acquiring" for as many
reconcile rounds as the test needs: a real worker's acquisition (committed offsets, metadata)
is only sometimes slow enough to show the race.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from tests.support.kafka_io import wait_for
from ureplicator.common import config as config_module
from ureplicator.common import zk
from ureplicator.common.zkschema import Assignment, PartitionStatus, Paths, TopicRecord, WorkerInfo, WorkerStatus
from ureplicator.controller.leader import Leadership

pytestmark = pytest.mark.integration

ALL = frozenset(("t", p) for p in range(4))


def register(client: KazooClient, paths: Paths, worker: str) -> None:
    """What a worker's register() writes: its registration, then its status at generation 0."""
    client.create(paths.worker(worker), WorkerInfo("test", 0, "test", "").encode(), ephemeral=True)
    client.create(paths.worker_status(worker), WorkerStatus(0).encode(), ephemeral=True)


def report(client: KazooClient, paths: Paths, worker: str, applied: Assignment) -> None:
    """What a worker's status says once it has applied ``applied``."""
    status = WorkerStatus(applied.generation, {tp: PartitionStatus() for tp in applied.partitions})
    client.set(paths.worker_status(worker), status.encode())


def written(client: KazooClient, paths: Paths, worker: str) -> Assignment:
    data = client.exists(paths.assignment(worker)) and client.get(paths.assignment(worker))[0]
    return Assignment.decode(data) if data else Assignment(0)


def rounds(leadership: Leadership, count: int) -> None:
    """Let the leader plan ``count`` more reconcile rounds."""
    for _ in range(count):
        before = leadership.state.last_reconcile
        leadership.request_reconcile()
        wait_for(lambda before=before: leadership.state.last_reconcile > before, 15, "a reconcile round",
                 interval_s=0.05)


def test_a_partition_is_never_granted_while_its_old_owner_may_still_be_acquiring_it(pipeline, services):
    cfg = config_module.from_dict(pipeline.config_doc())
    paths = Paths(cfg.root)
    leader_client, workers_client = zk.connect(cfg), zk.connect(cfg)
    leadership = Leadership(cfg, leader_client, "c1")
    granted: list[frozenset] = []  # every version of w2's assignment node

    def on_w2(data: bytes | None, stat: object) -> None:
        if data:
            granted.append(Assignment.decode(data).partitions)

    try:
        # Given a 4-partition topic and one worker, w1, written all of it
        zk.create_topic(workers_client, paths, TopicRecord("t", "t", 4))
        register(workers_client, paths, "w1")
        leadership.start()
        wait_for(lambda: written(workers_client, paths, "w1").partitions == ALL, 15, "w1 assigned everything")
        first = written(workers_client, paths, "w1")
        # When w2 registers while w1 is still acquiring that assignment (its status shows generation 0)
        workers_client.DataWatch(paths.assignment("w2"), on_w2)
        register(workers_client, paths, "w2")
        rounds(leadership, 4)
        # Then w2 gets nothing yet (w1 may take any of it), and w1 is not written a newer generation
        assert [tps for tps in granted if tps] == []
        assert written(workers_client, paths, "w1") == first
        # When w1 reports that generation applied
        report(workers_client, paths, "w1", first)
        wait_for(lambda: written(workers_client, paths, "w1") != first, 15, "w1 shrunk", interval_s=0.05)
        shrunk = written(workers_client, paths, "w1")
        rounds(leadership, 2)
        # Then it is shrunk first, and w2 waits for the release
        assert len(shrunk.partitions) == 2 and [tps for tps in granted if tps] == []
        # When w1 reports the shrunk generation (released the other two)
        report(workers_client, paths, "w1", shrunk)
        wait_for(lambda: written(workers_client, paths, "w2").partitions, 15, "w2 granted", interval_s=0.05)
        rounds(leadership, 2)
        # Then w2 is granted them once: never granted, withheld and granted again
        assert [tps for tps in granted if tps] == [ALL - shrunk.partitions]
        assert written(workers_client, paths, "w2").partitions == ALL - shrunk.partitions
    finally:
        leadership.stop()
        for client in (leader_client, workers_client):
            client.stop()
            client.close()


def test_a_worker_registers_with_its_first_status_and_deregisters_in_one_write_each(pipeline, services):
    # The gate pins a worker's written assignment only while its status is readable, so a live
    # worker must never be registered without one; one write is observable as one zxid.
    cfg = config_module.from_dict(pipeline.config_doc())
    paths = Paths(cfg.root)
    client = zk.connect(cfg)
    try:
        worker = pipeline.start_worker("w1")
        wait_for(lambda: client.exists(paths.worker("w1")) is not None, 60, "w1 registered")
        registration = client.exists(paths.worker("w1"))
        status = client.exists(paths.worker_status("w1"))
        assert status is not None and status.czxid == registration.czxid
        assert WorkerStatus.decode(client.get(paths.worker_status("w1"))[0]).generation == 0
        # When it stops gracefully (SIGTERM), both nodes go in one write too
        worker.terminate(30)
        assert client.exists(paths.worker("w1")) is None and client.exists(paths.worker_status("w1")) is None
        assert client.exists(paths.workers).pzxid == client.exists(paths.status).pzxid
    finally:
        client.stop()
        client.close()
