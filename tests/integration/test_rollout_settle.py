"""Issue 48 on real ZooKeeper and a real controller: a rollout's first worker is not written everything.

Workers register one after another, as a StatefulSet rollout starts them. The workers are played
by the test through their ZooKeeper nodes, as a worker process writes them (registration and first
status in one transaction, a status reporting each applied generation at once), so only the
leader's behaviour is measured. Before the settle, the first worker to register was written all
partitions, and the one-unconfirmed-generation rule then kept the others waiting on it.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from kazoo.client import KazooClient

from tests.support.kafka_io import wait_for
from ureplicator.common import config as config_module
from ureplicator.common import zk
from ureplicator.common.zkschema import Assignment, PartitionStatus, Paths, TopicRecord, WorkerInfo, WorkerStatus

pytestmark = pytest.mark.integration

TOPICS, WIDTH = 50, 4
PARTITIONS = TOPICS * WIDTH
DELAY_S, CAP = 1.0, 10


class FakeWorker:
    """One worker's ZooKeeper nodes; applying an assignment is instantaneous. Keeps every version written to it."""

    def __init__(self, client: KazooClient, paths: Paths, worker_id: str) -> None:
        self.client, self.paths, self.id = client, paths, worker_id
        self.versions: list[Assignment] = []
        self.applied = Assignment(0)
        self._lock = threading.Lock()

    def register(self) -> None:
        tx = self.client.transaction()
        tx.create(self.paths.worker(self.id), WorkerInfo("test", 0, "test", "").encode(), ephemeral=True)
        tx.create(self.paths.worker_status(self.id), WorkerStatus(0).encode(), ephemeral=True)
        assert not any(isinstance(r, Exception) for r in tx.commit())
        self.client.DataWatch(self.paths.assignment(self.id), self._on_assignment)

    def _on_assignment(self, data: bytes | None, stat: Any) -> None:
        if not data:
            return
        written = Assignment.decode(data)
        with self._lock:
            self.versions.append(written)
            self.applied = written
        status = WorkerStatus(written.generation, {tp: PartitionStatus() for tp in written.partitions})
        self.client.set_async(self.paths.worker_status(self.id), status.encode())  # never block kazoo's thread

    def owned(self) -> frozenset:
        with self._lock:
            return self.applied.partitions


def balanced(workers: list[FakeWorker]) -> bool:
    owned = [w.owned() for w in workers]
    share = PARTITIONS // len(workers)
    return (sum(len(o) for o in owned) == PARTITIONS and len(frozenset().union(*owned)) == PARTITIONS
            and all(share <= len(o) <= share + 1 for o in owned))


def most_moved_in_one_round(workers: list[FakeWorker]) -> int:
    """Partitions taken from a worker per written generation (a round's write carries one generation)."""
    taken: dict[int, int] = defaultdict(int)
    for worker in workers:
        before: frozenset = frozenset()
        for version in worker.versions:
            taken[version.generation] += len(before - version.partitions)
            before = version.partitions
    return max(taken.values(), default=0)


def test_a_rollout_of_ten_workers_gives_the_first_no_more_than_its_share(pipeline, services):
    cfg = config_module.from_dict(pipeline.config_doc())
    paths = Paths(cfg.root)
    client = zk.connect(cfg)
    try:
        for t in range(TOPICS):
            zk.create_topic(client, paths, TopicRecord(f"roll{t:02d}", f"roll{t:02d}", WIDTH))
        pipeline.start_controller(controller={"initial_assignment_delay_s": DELAY_S, "max_moves_per_round": CAP})
        workers = [FakeWorker(client, paths, f"w{i:02d}") for i in range(10)]
        # When ten workers register 0.3 s apart, as a StatefulSet rollout starts them
        for worker in workers:
            worker.register()
            time.sleep(0.3)
        last_join = time.monotonic()
        # Then every worker owns its share within a few seconds of the last join
        wait_for(lambda: balanced(workers), 10, "ten workers with 20 partitions each", interval_s=0.05)
        settled_after = time.monotonic() - last_join
        # And the first worker was never written more than its fair share and a margin
        first = workers[0].versions[0]
        assert len(first.partitions) <= 2 * PARTITIONS // len(workers), len(first.partitions)
        # When an eleventh worker joins a balanced route, its 18 partitions move at most CAP per round
        late = FakeWorker(client, paths, "w10")
        late.register()
        everyone = [*workers, late]
        wait_for(lambda: balanced(everyone), 15, "eleven workers balanced", interval_s=0.05)
        assert most_moved_in_one_round(everyone) <= CAP
        assert len(late.versions) >= 2  # 18 moves: two rounds at least under the cap of 10
        print(f"balanced {settled_after:.2f} s after the last join; first worker's first assignment "
              f"{len(first.partitions)} partitions; most moved in one round {most_moved_in_one_round(everyone)}")
    finally:
        client.stop()
        client.close()
