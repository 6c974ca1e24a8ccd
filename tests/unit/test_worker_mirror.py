"""The worker's hand-off, fencing and delivery-report handling, driven with fake clients."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest
from kazoo.client import KazooState
from structlog.testing import capture_logs

from tests.unit.fakes import FakeCommitClient, FakeConsumer, FakeProducer, FakeZooKeeper
from ureplicator.common import config as config_module
from ureplicator.common import provenance
from ureplicator.common.zkschema import Assignment, Paths, TopicRecord, WorkerStatus
from ureplicator.worker.clients import WorkerClients
from ureplicator.worker.mirror import MirrorWorker


class Clock:
    """The worker's clock: time passes only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Rig:
    worker: MirrorWorker
    consumer: FakeConsumer
    producer: FakeProducer
    zk: FakeZooKeeper
    paths: Paths
    commit_clients: list[FakeCommitClient]
    clock: Clock

    def assign(self, generation: int, *partitions: tuple[str, int]) -> None:
        """The leader writes this worker's assignment."""
        self.zk.put(self.paths.assignment("w1"), Assignment(generation, frozenset(partitions)).encode())

    def turns(self, n: int = 5) -> None:
        for _ in range(n):
            self.clock.advance(0.002)  # past the 1 ms commit interval: every turn commits and reports
            self.worker.turn()

    def lose_zookeeper(self) -> None:
        """ZooKeeper stops answering for longer than the lease: the worker must fence itself."""
        self.zk.connection(KazooState.SUSPENDED)
        self.zk.answering = False
        self.worker._lease_at -= self.worker.config.zookeeper.session_timeout_s

    def regain_zookeeper(self) -> None:
        """ZooKeeper answers again, with the same session: the next turn renews the lease."""
        self.zk.answering = True
        self.zk.connection(KazooState.CONNECTED)

    def status(self) -> WorkerStatus:
        return WorkerStatus.decode(self.zk.nodes[self.paths.worker_status("w1")])

    def statuses_written(self) -> list[WorkerStatus]:
        path = self.paths.worker_status("w1")
        return [WorkerStatus.decode(data) for _, p, data in self.zk.writes if p == path and data]


def values(n: int, partition: int = 0, start: int = 0) -> list[bytes]:
    return [f"p{partition}-{i}".encode() for i in range(start, start + n)]


@pytest.fixture
def rig() -> Rig:
    return make_rig()


def make_rig(fresh: list[FakeProducer] | None = None, handoff_thread: bool = False) -> Rig:
    """One worker registered on fake clients; topics t (2 partitions, 10 records each) and u.

    With ``fresh``, the worker may replace its producer: each new one writes to the same
    destination and is appended to ``fresh``. With ``handoff_thread`` an acquisition's reads
    run on their own thread, as in production (otherwise inline, so one turn completes them).
    """
    cfg = config_module.from_dict({
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1", "session_timeout_s": 600},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
        "worker": {"id": "w1", "commit_interval_s": 0.001, "shutdown_timeout_s": 0.5, "auto_offset_reset": "earliest"},
    })
    paths = Paths(cfg.root)
    zk = FakeZooKeeper()
    for topic in ("t", "u"):
        zk.nodes[paths.topic(topic)] = TopicRecord(topic, topic, 2).encode()
    consumer = FakeConsumer({("t", 0): values(10, 0), ("t", 1): values(10, 1), ("u", 0): values(3, 0)})
    producer = FakeProducer()
    replacements = fresh if fresh is not None else []

    def new_producer() -> FakeProducer:
        replacement = producer.fresh()  # the same destination cluster
        replacements.append(replacement)
        return replacement

    commit_clients: list[FakeCommitClient] = []

    def new_commit_client() -> FakeCommitClient:
        commit_clients.append(FakeCommitClient(consumer))  # the same group on the same source cluster
        return commit_clients[-1]

    clients = WorkerClients(consumer=consumer, producer=producer, zk=zk, make_producer=new_producer,
                            make_commit_client=new_commit_client, commit_thread=False,
                            handoff_thread=handoff_thread)
    clock = Clock()
    worker = MirrorWorker(cfg, "w1", clients=clients, clock=clock)
    worker.register()
    return Rig(worker, consumer, producer, zk, paths, commit_clients, clock)


def held_rig() -> tuple[Rig, list[FakeProducer]]:
    """A worker that sent t:0's records to a destination that holds them unacknowledged; ``fresh``
    collects the producers that replace the first one."""
    fresh: list[FakeProducer] = []
    rig = make_rig(fresh)
    rig.assign(1, ("t", 0))
    rig.producer.hold = True
    rig.turns(1)
    return rig, fresh


def test_an_assignment_is_mirrored_in_order_and_committed_after_the_acks(rig):
    # Given an assignment of two partitions
    rig.assign(1, ("t", 0), ("t", 1))
    # When the loop turns
    rig.turns()
    # Then each partition is written in source order and its next offset committed
    assert rig.producer.written[("t", 0)] == values(10, 0)
    assert rig.producer.written[("t", 1)] == values(10, 1)
    assert rig.consumer.group == {("t", 0): 10, ("t", 1): 10}
    assert rig.status().generation == 1 and rig.status().owned == {("t", 0), ("t", 1)}


def test_a_release_waits_for_the_acks_commits_and_reports_the_new_generation(rig):
    # Given a worker mirroring t:0 and t:1 whose destination has not acknowledged the last records
    rig.assign(1, ("t", 0), ("t", 1))
    rig.turns(1)
    rig.consumer.append(("t", 1), *values(5, 1, start=10))
    rig.producer.hold = True
    rig.turns(1)
    assert rig.worker.ledger.outstanding([("t", 1)]) == 5

    # When the leader takes t:1 away while the destination acknowledges during the wait
    def acknowledge_later() -> None:
        rig.producer.hold = False
    rig.producer.on_poll = acknowledge_later
    rig.assign(2, ("t", 0))
    rig.turns(1)
    # Then t:1 was committed at its acknowledged end before the status dropped it
    assert rig.consumer.group[("t", 1)] == 15
    assert rig.status().generation == 2 and rig.status().owned == {("t", 0)}
    assert ("unassign", [("t", 1)]) in rig.consumer.events


def test_a_hung_coordinator_during_an_acquisition_stalls_neither_the_release_nor_the_unmoved_partitions():
    # Given a worker mirroring t:0 and t:1, whose acquisitions read committed offsets beside the loop
    rig = make_rig(handoff_thread=True)
    rig.assign(1, ("t", 0), ("t", 1))
    wait_until(lambda: rig.worker.handoff.change is None and len(rig.worker.owned) == 2, rig)
    rig.turns(2)
    # When one assignment removes t:1 and adds u:0, and the group coordinator hangs on u:0's offsets
    hang = threading.Event()
    asked = threading.Event()
    original = rig.consumer.committed

    def hung_committed(partitions, timeout=None):
        asked.set()
        hang.wait(30)
        return original(partitions, timeout)

    rig.consumer.committed = hung_committed  # type: ignore[method-assign]
    rig.assign(2, ("t", 0), ("u", 0))
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    try:
        rig.turns(3)
        assert asked.wait(5)
        # Then the loop kept mirroring the unmoved t:0 while the coordinator hangs
        assert rig.producer.written[("t", 0)] == values(15, 0)
        assert rig.consumer.group[("t", 0)] == 15
        # And the release was committed and published at once, under the previous generation,
        # so the leader can hand t:1 on and still counts u:0 as headed here
        assert rig.consumer.group[("t", 1)] == 10
        assert rig.status().generation == 1 and rig.status().owned == {("t", 0)}
        assert ("u", 0) not in rig.worker.owned
    finally:
        hang.set()
    # And once the coordinator answers, u:0 is acquired and the new generation reported
    wait_until(lambda: rig.worker.handoff.change is None, rig)
    assert rig.status().generation == 2 and rig.status().owned == {("t", 0), ("u", 0)}
    rig.turns(2)
    assert rig.producer.written[("u", 0)] == values(3, 0)


def wait_until(predicate, rig: Rig, timeout_s: float = 5.0) -> None:
    """Turn the loop until ``predicate`` holds (an acquisition finishing on its own thread)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        rig.turns(1)


def test_a_report_from_before_a_session_loss_never_acknowledges_a_later_acquisition(rig):
    # Given records of t:0 on the wire (sent, not yet acknowledged) when the session is lost
    rig.assign(1, ("t", 0))
    rig.producer.hold = True
    rig.turns(1)
    rig.producer.send()
    assert len(rig.producer.wire) == 10
    stale = list(rig.producer.wire)  # their reports, should any still arrive after the purge
    rig.zk.expire()
    rig.turns(1)  # drops t:0 without committing
    assert rig.producer.wire == [] and rig.producer.queue == []  # nothing left to send or retry
    rig.zk.connection(KazooState.CONNECTED)  # a new session
    rig.turns(1)  # re-registers
    assert rig.worker.owned == {}
    assert ("t", 0) not in rig.consumer.group
    current = rig.worker.producer  # a fresh producer replaced the purged one
    assert current is not rig.producer
    current.hold = True

    # When t:0 is assigned again, and only then the old records' reports arrive
    rig.assign(2, ("t", 0))
    rig.turns(1)
    acquisition = rig.worker.owned[("t", 0)]
    rig.producer._deliver(stale)
    # Then the new acquisition's watermark did not move: those reports acknowledge nothing now
    assert acquisition.position == -1 and acquisition.outstanding == 10
    # And once its own records are acknowledged it commits exactly the end
    current.hold = False
    rig.turns(2)
    assert rig.consumer.group[("t", 0)] == 10


def test_fencing_purges_the_queue_sends_nothing_and_rewinds_when_the_session_holds(rig):
    # Given records of t:0 queued locally, not yet sent, when ZooKeeper becomes unreachable
    rig.assign(1, ("t", 0))
    rig.producer.hold = True
    rig.turns(1)
    queued = len(rig.producer.queue)
    assert queued == 10
    rig.lose_zookeeper()
    # When the loop turns while fenced
    produced = rig.producer.produced_total
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    rig.turns(3)
    # Then librdkafka's queue was purged, nothing new was produced, nothing committed
    assert rig.producer.purges == 1 and rig.producer.queue == []
    assert rig.producer.produced_total == produced
    assert ("t", 0) not in rig.consumer.group
    # And when the connection returns with the same session, t:0 restarts from its watermark
    rig.producer.hold = False
    rig.regain_zookeeper()
    rig.turns(3)
    assert rig.producer.written[("t", 0)] == values(15, 0)
    assert rig.consumer.group[("t", 0)] == 15
    assert rig.worker.metrics.rewinds._value.get() == 1


def test_a_zookeeper_disconnection_shorter_than_the_lease_pauses_nothing(rig):
    # Given a worker mirroring t:0 whose ZooKeeper connection is suspended (a ZooKeeper restart)
    rig.assign(1, ("t", 0))
    rig.turns(1)
    rig.zk.connection(KazooState.SUSPENDED)
    rig.zk.answering = False
    # When more records arrive while the lease is still fresh
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    rig.turns(2)
    # Then they are mirrored and committed: the session lives, nobody else can own t:0
    assert rig.producer.written[("t", 0)] == values(15, 0)
    assert rig.consumer.group[("t", 0)] == 15
    assert rig.producer.purges == 0 and rig.worker.ready
    # And only once the lease runs out does the worker fence itself
    rig.worker._lease_at -= rig.worker.config.zookeeper.session_timeout_s
    rig.consumer.append(("t", 0), *values(5, 0, start=15))
    rig.turns(2)
    assert rig.producer.written[("t", 0)] == values(15, 0) and rig.producer.purges == 1


def test_a_reconnection_renews_the_lease_on_the_next_turn(rig):
    # Given a worker fenced by a stale lease, whose last renewal was asked a moment ago
    rig.assign(1, ("t", 0))
    rig.turns(1)
    rig.lose_zookeeper()
    rig.turns(1)
    assert rig.producer.purges == 1
    rig.zk.answering = True  # answers again, but the renewal cadence would wait 0.5 s
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    rig.turns(2)
    assert rig.producer.written[("t", 0)] == values(10, 0)
    # When the connection comes back with the same session
    rig.zk.connection(KazooState.CONNECTED)
    rig.turns(3)
    # Then the very next turn renews the lease and the partition restarts (no wait for the cadence)
    assert rig.producer.written[("t", 0)] == values(15, 0)


def test_the_lease_follows_the_session_the_server_granted(rig):
    from ureplicator.worker.mirror import lease_s

    # Given a worker configured with a 600 s session, mirroring t:0
    assert rig.worker.config.zookeeper.session_timeout_s == 600
    rig.assign(1, ("t", 0))
    rig.turns(1)
    # When ZooKeeper granted only 4 s at the handshake (its maxSessionTimeout), and renewals stop
    rig.zk.granted_session_s = 4.0
    rig.zk.connection(KazooState.CONNECTED)
    rig.zk.answering = False
    # Then a lease 3.5 s old is stale (4 s minus 1 s of margin), though 600 s would allow 540 s
    assert rig.worker.lease_window_s == lease_s(4.0) == 3.0
    rig.worker._lease_at -= 3.5
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    rig.turns(2)
    assert rig.producer.purges == 1 and rig.producer.written[("t", 0)] == values(10, 0)


def test_a_paused_process_with_a_stale_lease_fences_itself(rig):
    # Given a worker mirroring t:0 whose ZooKeeper stops answering lease renewals
    rig.assign(1, ("t", 0))
    rig.turns(1)
    rig.zk.answering = False
    rig.worker._lease_at -= rig.worker.config.zookeeper.session_timeout_s  # it slept through the lease
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    produced = rig.producer.produced_total
    # When the loop turns
    rig.turns(2)
    # Then it fetches nothing and purges, though kazoo still says CONNECTED
    assert rig.producer.produced_total == produced
    assert rig.producer.purges == 1


def test_the_buffer_full_retry_gives_up_on_stop_and_never_commits_past_unsent_records(rig):
    # Given a destination whose local queue is full and never drains
    rig.assign(1, ("t", 0))
    rig.producer.capacity = 4
    rig.producer.hold = True

    # When the worker is asked to stop while waiting for room
    def stop_soon() -> None:
        rig.worker.stop()
    rig.producer.on_poll = stop_soon
    rig.turns(1)
    # Then the loop came back (no endless retry) with only the first four records sent
    assert rig.producer.produced_total == 4
    # And the shutdown commits nothing it has not seen acknowledged: the four sent records form
    # a run whose callback-carrying last record was never sent, so no report speaks for them
    rig.producer.hold = False
    rig.producer.capacity = None
    rig.producer.on_poll = None
    rig.worker._shutdown()
    assert rig.producer.written[("t", 0)] == values(4, 0)
    assert ("t", 0) not in rig.consumer.group  # the next owner repeats them: duplicates, never a gap


def test_the_buffer_full_retry_gives_up_when_fenced_and_the_partition_is_rewound(rig):
    # Given a full local queue when the ZooKeeper connection is suspended
    rig.assign(1, ("t", 0))
    rig.producer.capacity = 4
    rig.producer.hold = True
    rig.producer.on_poll = rig.lose_zookeeper
    rig.turns(1)
    assert rig.producer.produced_total == 4
    rig.turns(1)  # fenced: the queue is purged
    # When the connection comes back with the same session and the destination drains
    rig.producer.on_poll = None
    rig.producer.capacity = None
    rig.producer.hold = False
    rig.regain_zookeeper()
    rig.turns(3)
    # Then every record is written once, in order
    assert rig.producer.written[("t", 0)] == values(10, 0)
    assert rig.consumer.group[("t", 0)] == 10


def test_a_refused_record_stops_only_its_partition_and_a_new_acquisition_starts_clean(rig):
    # Given the destination refuses t:1's fourth record
    rig.producer.refuse[("t", 1)] = 3
    rig.assign(1, ("t", 0), ("t", 1))
    # When the loop turns
    rig.turns(3)
    # Then t:1 is stopped at offset 3 and says so in status; t:0 goes on
    status = rig.status().partitions
    assert status[("t", 1)].error is not None and status[("t", 1)].error.startswith("offset 3:")
    assert status[("t", 0)].error is None
    assert rig.consumer.group == {("t", 0): 10, ("t", 1): 3}
    # And an error report arriving for the partition after it was released changes nothing
    stopped = rig.worker.owned[("t", 1)]
    rig.assign(2, ("t", 0))
    rig.turns(1)
    rig.worker.handoff.stop_partition(stopped, 7, "late report")
    assert rig.worker.metrics.produce_errors.labels("t")._value.get() == 1
    # When t:1 is assigned again (the operator fixed the destination), it starts without the old error
    del rig.producer.refuse[("t", 1)]
    rig.assign(3, ("t", 0), ("t", 1))
    rig.turns(3)
    assert rig.status().partitions[("t", 1)].error is None
    assert rig.consumer.group[("t", 1)] == 10


def test_a_failed_commit_on_release_is_retried(rig):
    # Given a worker that mirrored t:1 and a coordinator that refuses the next two commits
    rig.assign(1, ("t", 0), ("t", 1))
    rig.turns(1)
    rig.consumer.append(("t", 1), *values(2, 1, start=10))
    rig.consumer.fail_commits = 3  # the periodic commit after these two records fails too
    rig.turns(1)
    assert rig.consumer.group[("t", 1)] == 10
    # When t:1 is released
    rig.assign(2, ("t", 0))
    rig.turns(1)
    # Then the release's commit was retried until it went through
    assert rig.consumer.group[("t", 1)] == 12
    assert [e[0] for e in rig.consumer.events].count("commit_failed") == 3


def test_a_commit_that_keeps_failing_on_release_is_surfaced(rig):
    # Given a coordinator that refuses every commit
    rig.assign(1, ("t", 0), ("t", 1))
    rig.turns(1)
    rig.consumer.append(("t", 1), *values(2, 1, start=10))
    rig.consumer.fail_commits = 1000
    rig.turns(1)
    # When t:1 is released
    with capture_logs() as logs:
        rig.assign(2, ("t", 0))
        rig.turns(1)
    # Then the release goes on (the next owner repeats records: duplicates, no loss) and says so
    assert rig.status().owned == {("t", 0)}
    assert rig.worker.metrics.release_commit_failures._value.get() == 1
    failed = [e for e in logs if e["event"] == "release_commit_failed"]
    assert failed and failed[0]["partitions"] == ["t:1"] and failed[0]["positions"] == {"t:1": 12}


def test_a_release_that_times_out_purges_so_nothing_lands_behind_the_next_owner(rig):
    # Given a destination that acknowledges nothing while t:0 and t:1 have records queued
    rig.assign(1, ("t", 0), ("t", 1))
    rig.producer.hold = True
    rig.turns(1)
    # When t:1 is released and its acks do not come within worker.release_ack_timeout_s (0.5 s here)
    rig.assign(2, ("t", 0))
    rig.turns(1)
    assert rig.status().generation == 1  # the release waits for the acks, beside the loop
    rig.clock.advance(0.6)
    rig.turns(1)
    # Then nothing of t:1 is left to be sent and nothing of it was committed
    held = [msg.partition() for msg, _ in rig.producer.queue + rig.producer.wire if msg.topic() == "t"]
    assert 1 not in held
    assert ("t", 1) not in rig.consumer.group
    # And t:0, whose records were purged with them, is rewound and written once, in order
    rig.producer.hold = False
    rig.turns(3)
    assert ("t", 1) not in rig.producer.written
    assert rig.producer.written[("t", 0)] == values(10, 0)
    assert rig.worker.metrics.rewinds._value.get() >= 1


def test_one_delivery_callback_speaks_for_each_run_of_a_partition(rig):
    # Given two partitions of ten records each, fetched in one batch
    rig.assign(1, ("t", 0), ("t", 1))
    # When the loop mirrors them
    rig.turns(2)
    # Then only the last record of each partition's run carried a callback, and yet every
    # record is acknowledged and committed exactly to the end
    assert rig.producer.callbacks == 2
    assert rig.producer.written[("t", 0)] == values(10, 0)
    assert rig.consumer.group == {("t", 0): 10, ("t", 1): 10}
    assert rig.worker.ledger.in_flight_bytes == 0


def test_a_run_ends_before_a_record_with_headers_so_loop_prevention_skips_safely(rig):
    # Given t:0 where record 5 came from the destination cluster (active-active) and 6 has a header
    rig.consumer.headers[("t", 0, 5)] = [("urep", provenance.encode(77, 0, "dst"))]
    rig.consumer.headers[("t", 0, 6)] = [("trace", b"x")]
    rig.assign(1, ("t", 0))
    # When the loop mirrors the partition
    rig.turns(2)
    # Then record 5 is skipped, the rest written in order, 6 keeps its header, the commit reaches the end
    written = rig.producer.written[("t", 0)]
    assert written == [v for i, v in enumerate(values(10, 0)) if i != 5]
    assert rig.consumer.group[("t", 0)] == 10
    # And the run 0-4 was closed in front of the header-carrying record 5; 6-9 is the second run
    assert rig.producer.callbacks == 2


def test_a_fatal_producer_is_replaced_and_the_culprit_is_named_in_exact_mode(rig):
    # Given the destination refuses t:1's record at offset 3; sent in runs, no callback names it
    rig.producer.refuse[("t", 1)] = 3
    rig.assign(1, ("t", 0), ("t", 1))
    with capture_logs() as logs:
        rig.turns(6)
    # Then the fatal producer was replaced (twice: once for the run, once in exact mode)
    assert [e["event"] for e in logs].count("producer_replaced") >= 1
    assert rig.worker.metrics.producer_replacements._value.get() >= 1
    assert rig.worker.producer is not rig.producer
    # And t:1 is stopped exactly at offset 3 while t:0 is complete, nothing committed past the refusal
    assert rig.status().partitions[("t", 1)].error.startswith("offset 3:")
    assert rig.consumer.group == {("t", 0): 10, ("t", 1): 3}
    # And every record of t:0 arrived, in order (duplicates allowed after a rewind, no gaps)
    t0 = rig.producer.written[("t", 0)]
    assert sorted(set(t0)) == sorted(values(10, 0)) and t0[-10:] == values(10, 0)


def test_a_purge_replaces_the_producer_and_the_rewind_resends_through_the_fresh_one():
    # Given a worker whose records of t:0 are on the wire to a destination that does not
    # answer, and whose librdkafka never reports them after a purge (they cannot be recalled)
    rig, fresh = held_rig()
    rig.producer.send()
    rig.producer.purge_keeps_wire = True
    # When ZooKeeper is unreachable past the lease and the loop turns fenced
    rig.lose_zookeeper()
    rig.turns(2)
    # Then a fresh producer took the purged one's place
    assert len(fresh) == 1 and rig.worker.producer is fresh[0]
    assert rig.worker.metrics.producer_replacements._value.get() == 1
    assert rig.worker.ledger.in_flight_bytes == 0  # the unreported records no longer count as in flight
    # And when the session holds, t:0 is rewound and resent through the fresh producer,
    # every record once and in order
    rig.regain_zookeeper()
    rig.turns(3)
    assert rig.producer.written[("t", 0)] == values(10, 0)
    assert rig.consumer.group[("t", 0)] == 10
    assert rig.worker.metrics.rewinds._value.get() == 1
    # And should the old requests still land (they were on the wire), they only repeat records
    rig.producer.hold = False
    rig.producer.deliver_wire()
    assert list(dict.fromkeys(rig.producer.written[("t", 0)])) == values(10, 0)
    assert rig.consumer.group[("t", 0)] == 10


def test_a_session_loss_replaces_the_producer_and_the_fresh_one_mirrors_the_next_assignment():
    # Given a worker mirroring t:0 when its session expires
    fresh: list[FakeProducer] = []
    rig = make_rig(fresh)
    rig.assign(1, ("t", 0))
    rig.turns(2)
    rig.zk.expire()
    rig.turns(2)
    # Then its purged producer was closed and replaced
    assert fresh and rig.producer.closed
    # And the partitions it gets back in its new session are mirrored through the newest producer
    rig.zk.connection(KazooState.CONNECTED)
    rig.turns(1)  # re-registers
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    rig.assign(2, ("t", 0))
    rig.turns(3)
    assert rig.worker.producer is fresh[-1]
    assert list(dict.fromkeys(rig.producer.written[("t", 0)])) == values(15, 0)


def test_a_producer_that_acknowledges_nothing_for_the_shutdown_timeout_is_replaced_and_nothing_is_lost():
    # Given a worker whose producer took t:0's records but never reports on them (a wedged
    # client: the destination is fine, librdkafka says nothing)
    rig, fresh = held_rig()
    assert rig.worker.ledger.in_flight_bytes > 0
    # When no acknowledgement comes for longer than worker.producer_stall_s (0.5 s here)
    rig.clock.advance(0.6)
    with capture_logs() as logs:
        rig.turns(2)
    # Then the producer was purged and replaced, and t:0 rewound and resent through the new one
    assert any(e["event"] == "producer_stalled" for e in logs)
    assert len(fresh) == 1 and rig.worker.producer is fresh[0]
    assert rig.producer.written[("t", 0)] == values(10, 0)
    assert rig.consumer.group[("t", 0)] == 10


def test_a_destination_that_acknowledges_slowly_is_not_a_stall(rig):
    # Given a worker whose destination acknowledges a record now and then (exact mode: each
    # record carries its own report, so each acknowledgement is seen)
    rig.worker.ledger.exact_until = float("inf")
    rig.assign(1, ("t", 0))
    rig.producer.hold = True
    rig.turns(1)
    # When acknowledgements keep trickling in for longer than the shutdown timeout
    for _ in range(4):
        rig.clock.advance(0.2)
        msg, callback = rig.producer.queue.pop(0)
        rig.producer._deliver([(msg, callback)])
        rig.turns(1)
    # Then the producer is never purged
    assert rig.producer.purges == 0


def test_the_periodic_status_write_never_waits_for_zookeeper(rig):
    # Given a worker mirroring t:0 and a ZooKeeper that holds back its answers to writes
    rig.assign(1, ("t", 0))
    rig.turns(2)
    rig.zk.deferred = []
    published = rig.zk.nodes[rig.paths.worker_status("w1")]
    # When more records arrive and the loop turns (each turn is past the status interval)
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    rig.turns(3)
    # Then the loop mirrored them while its status writes were still unanswered
    assert rig.producer.written[("t", 0)] == values(15, 0)
    assert rig.zk.deferred and rig.zk.nodes[rig.paths.worker_status("w1")] == published
    # And once ZooKeeper answers, the status shows the new progress
    rig.zk.answer_deferred()
    assert rig.status().partitions[("t", 0)].committed == 15


def test_a_periodic_status_write_recreates_a_missing_status_node(rig):
    rig.assign(1, ("t", 0))
    rig.turns(2)
    del rig.zk.nodes[rig.paths.worker_status("w1")]
    rig.turns(1)
    assert rig.status().owned == {("t", 0)}


def test_a_status_write_answered_in_a_new_session_before_the_worker_registered_again_creates_nothing(rig):
    # Given a periodic status write ZooKeeper has not answered when the worker's session expires
    rig.assign(1, ("t", 0))
    rig.turns(2)
    rig.zk.deferred = []
    rig.turns(1)
    assert rig.zk.deferred
    rig.zk.expire()
    rig.turns(1)  # drops t:0; the new session is not connected yet
    # When kazoo resends it in the new session, before the worker registered again
    rig.zk.connection(KazooState.CONNECTED)
    rig.zk.answer_deferred()
    # Then no status node is created for a worker the leader does not know
    assert rig.paths.worker_status("w1") not in rig.zk.nodes
    # And the worker registers again at once (no node of its own to wait out), and its status is written
    rig.turns(1)
    assert rig.worker.registered.is_set()
    assert rig.status().owned == set()


def test_records_expired_before_mirroring_are_reported_from_one_offsets_request_after_the_assignment(rig):
    # Given t:0 whose group committed offset 2 while retention already deleted records below 6,
    # and t:1 committed at 1 with nothing deleted
    rig.consumer.group.update({("t", 0): 2, ("t", 1): 1})
    rig.consumer.log_start[("t", 0)] = 6
    # When the worker acquires both
    with capture_logs() as logs:
        rig.assign(1, ("t", 0), ("t", 1))
        rig.turns(1)
    # Then one offsets request, after the assignment, asked for both log starts
    asked = [e for e in rig.consumer.events if e[0] == "offsets_for_times"]
    assert asked == [("offsets_for_times", [("t", 0), ("t", 1)])]
    kinds = [e[0] for e in rig.consumer.events]
    assert kinds.index("assign") < kinds.index("offsets_for_times")
    # And the four records t:0 lost are reported, t:1 not
    expired = [e for e in logs if e["event"] == "records_expired_before_mirroring"]
    assert [(e["partition"], e["records"]) for e in expired] == [(0, 4)]
    assert rig.worker.metrics.expired.labels("t")._value.get() == 4


def test_records_already_fetched_are_handed_on_without_waiting_and_an_idle_loop_waits_for_one(rig):
    # Given a worker mirroring t:0, with worker.fetch_wait_ms at its default (50 ms)
    rig.assign(1, ("t", 0))
    rig.turns(1)
    assert rig.producer.written[("t", 0)] == values(10, 0)
    # When records are waiting in the consumer
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    rig.consumer.consume_calls.clear()
    rig.worker.turn()
    # Then one non-blocking call took them all: nothing waited for a batch to fill
    assert rig.consumer.consume_calls == [(1000, 0)]
    assert rig.producer.written[("t", 0)] == values(15, 0)
    # And when nothing is there, the loop waits only for the first record to come
    rig.consumer.consume_calls.clear()
    rig.worker.turn()
    assert rig.consumer.consume_calls == [(1000, 0), (1, 0.05)]


def test_every_turn_of_the_loop_is_counted_so_tests_can_wait_for_rounds_instead_of_seconds(rig):
    def turns() -> float:
        value = rig.worker.metrics.registry.get_sample_value("ureplicator_worker_loop_turns_total",
                                                             {"route": "default"})
        return value or 0.0

    before = turns()
    rig.turns(3)
    assert turns() == before + 3
