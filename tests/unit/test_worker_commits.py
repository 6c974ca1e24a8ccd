"""The commit thread: commits never hold the loop, a lost commit client is replaced, fencing drops queued work."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from structlog.testing import capture_logs

from ureplicator.common import logs
from ureplicator.worker.acks import AckLedger
from ureplicator.worker.commits import Committer
from ureplicator.worker.metrics import WorkerMetrics


class Coordinator:
    """The source cluster's group coordinator, as the commit clients see it."""

    def __init__(self) -> None:
        self.group: dict[tuple[str, int], int] = {}
        self.sent: list[list[tuple[str, int, int]]] = []  # every commit that reached the coordinator
        self.hang = threading.Event()  # set: calls block until ``answer`` is set
        self.answer = threading.Event()
        self.inside = threading.Event()  # a call is blocked inside the client now
        self.fail_next = 0
        self.clients: list[CommitClient] = []

    def client(self) -> CommitClient:
        self.clients.append(CommitClient(self))
        return self.clients[-1]


class CommitClient:
    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.closed = False

    def _wait(self) -> None:
        if self.coordinator.hang.is_set():
            self.coordinator.inside.set()
            self.coordinator.answer.wait(20)
            self.coordinator.inside.clear()

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> list[TopicPartition]:
        assert not self.closed and not asynchronous
        self._wait()
        if self.coordinator.fail_next:
            self.coordinator.fail_next -= 1
            raise KafkaException(KafkaError(KafkaError._WAIT_COORD))
        self.coordinator.sent.append(sorted((tp.topic, tp.partition, tp.offset) for tp in offsets))
        for tp in offsets:
            self.coordinator.group[(tp.topic, tp.partition)] = tp.offset
        return [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in offsets]

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        assert not self.closed
        self._wait()
        if self.coordinator.fail_next:
            self.coordinator.fail_next -= 1
            raise KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
        return [TopicPartition(tp.topic, tp.partition, self.coordinator.group.get((tp.topic, tp.partition), -1001))
                for tp in partitions]

    def poll(self, timeout: float = 0) -> None:
        return None

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def coordinator() -> Coordinator:
    return Coordinator()


def make(coordinator: Coordinator, background: bool = True) -> tuple[Committer, AckLedger, WorkerMetrics]:
    ledger = AckLedger()
    metrics = WorkerMetrics()
    committer = Committer(coordinator.client, ledger, metrics, logs.get("test"), background=background)
    return committer, ledger, metrics


def hanging_commit(coordinator: Coordinator) -> tuple[Committer, AckLedger, WorkerMetrics]:
    """A committer whose periodic commit of t:0 at 10 hangs in the client (no coordinator answers)."""
    committer, ledger, metrics = make(coordinator)
    coordinator.hang.set()
    acknowledged(ledger, ("t", 0), 10)
    committer.commit_soon()
    assert coordinator.inside.wait(10), "the commit thread never sent the commit"
    return committer, ledger, metrics


def acknowledged(ledger: AckLedger, tp: tuple[str, int], position: int) -> None:
    acks = ledger.get(tp) or ledger.acquire(tp, tp[0], -1)
    acks.position = position


def test_a_commit_that_hangs_never_holds_the_loop_and_commits_do_not_pile_up(coordinator):
    # Given a coordinator that does not answer (librdkafka waiting for it after a broker restart)
    committer, ledger, _ = make(coordinator)
    coordinator.hang.set()
    acknowledged(ledger, ("t", 0), 10)
    # When the loop asks for its periodic commit
    committer.commit_soon()
    assert coordinator.inside.wait(10), "the commit thread never sent the commit"
    # Then the loop is back while the commit still hangs in the client
    assert not coordinator.answer.is_set()
    # And later periodic commits are not queued behind it
    acknowledged(ledger, ("t", 0), 20)
    committer.commit_soon()
    committer.commit_soon()
    coordinator.answer.set()
    committer.close(timeout_s=10)
    assert coordinator.sent == [[("t", 0, 10)]]
    # And the position is marked committed once the loop collects the answer
    committer.collect()
    assert ledger.to_commit() == {("t", 0): 20}


def test_a_client_that_keeps_failing_is_replaced_and_the_next_one_commits(coordinator):
    committer, ledger, metrics = make(coordinator, background=False)
    acknowledged(ledger, ("t", 0), 5)
    # Given two failed periodic commits (a client that lost its way to the coordinator)
    coordinator.fail_next = 2
    with capture_logs() as logs_seen:
        committer.commit_soon()
        committer.commit_soon()
    # Then that client was closed and a fresh one is used for the next commit
    assert coordinator.clients[0].closed
    assert metrics.commit_client_replacements._value.get() == 1
    assert [e["event"] for e in logs_seen].count("commit_failed") == 2
    assert "commit_client_replaced" in [e["event"] for e in logs_seen]
    committer.commit_soon()
    assert len(coordinator.clients) == 2 and not coordinator.clients[1].closed
    assert coordinator.group == {("t", 0): 5}
    assert ledger.to_commit() == {}


def test_a_release_commit_stuck_behind_a_hanging_call_is_surfaced_and_never_sent_later(coordinator):
    committer, ledger, metrics = hanging_commit(coordinator)
    acknowledged(ledger, ("t", 0), 12)
    # When t:0 is released while the periodic commit still hangs
    with capture_logs() as logs_seen:
        failed = committer.commit_for_release([("t", 0)], timeout_s=0.2)
    # Then the release goes on and says which position it could not commit
    assert failed == {("t", 0): 12}
    assert metrics.release_commit_failures._value.get() == 1
    assert [e for e in logs_seen if e["event"] == "release_commit_failed"][0]["positions"] == {"t:0": 12}
    # And once the coordinator answers, the abandoned release commit is not sent after the fact
    coordinator.answer.set()
    committer.close(timeout_s=10)
    assert coordinator.sent == [[("t", 0, 10)]]


def test_fencing_drops_queued_commits(coordinator):
    committer, ledger, _ = hanging_commit(coordinator)
    acknowledged(ledger, ("t", 1), 7)
    released = threading.Thread(target=committer.commit_now, args=([("t", 1)], 30.0))
    released.start()
    # When the worker is fenced while a commit is queued behind the hanging one
    while committer._calls.empty():  # the release call is queued
        threading.Event().wait(0.01)
    committer.cancel_queued()
    released.join(10)
    # Then the queued commit is never sent, even when the coordinator comes back
    assert not released.is_alive()
    coordinator.answer.set()
    committer.close(timeout_s=10)
    assert coordinator.sent == [[("t", 0, 10)]]


def test_an_answer_for_an_earlier_acquisition_does_not_mark_the_new_one_committed(coordinator):
    committer, ledger, _ = hanging_commit(coordinator)
    # Given t:0 was rewound (a new acquisition at 10) while its commit of 10 was under way
    new = ledger.acquire(("t", 0), "t", 10)
    new.position = 10
    new.committed = 4  # pretend the group held 4 when the new acquisition read it
    coordinator.answer.set()
    committer.close(timeout_s=10)
    committer.collect()
    # Then the old answer does not count for the new acquisition: it commits its own position
    assert ledger.to_commit() == {("t", 0): 10}


def test_committed_offsets_are_read_through_the_commit_client_and_a_loading_coordinator_retried(coordinator):
    committer, _, _ = make(coordinator)
    coordinator.group[("t", 0)] = 42
    coordinator.fail_next = 3
    found = committer.committed([TopicPartition("t", 0), TopicPartition("t", 1)], timeout_s=10)
    assert [(tp.partition, tp.offset) for tp in found] == [(0, 42), (1, -1001)]
    committer.close()


def test_committed_offsets_that_never_come_raise_after_the_deadline(coordinator):
    committer, _, _ = make(coordinator)
    coordinator.fail_next = 10_000
    with pytest.raises(KafkaException):
        committer.committed([TopicPartition("t", 0)], timeout_s=0.3)
    committer.close()


def test_a_release_beside_the_loop_ends_at_its_timeout_behind_a_hanging_call(coordinator):
    # Given a periodic commit that hangs in the client, and the loop's clock
    now = [0.0]
    ledger, metrics = AckLedger(), WorkerMetrics()
    committer = Committer(coordinator.client, ledger, metrics, logs.get("test"), clock=lambda: now[0])
    coordinator.hang.set()
    acknowledged(ledger, ("t", 0), 10)
    committer.commit_soon()
    assert coordinator.inside.wait(10), "the commit thread never sent the commit"
    acknowledged(ledger, ("t", 0), 12)
    # When a hand-off starts releasing t:0 with a 5 s commit timeout
    release = committer.begin_release([("t", 0)], timeout_s=5.0)
    # Then it waits while the timeout runs
    now[0] = 5.5
    assert not release.done
    # And once it has run out, the release goes on and says what it could not commit
    now[0] = 6.5
    with capture_logs() as logs_seen:
        assert release.done
        failed = release.finish()
    assert failed == {("t", 0): 12}
    assert metrics.release_commit_failures._value.get() == 1
    assert "commit_timed_out" in [e["event"] for e in logs_seen]
    # And the abandoned release commit is never sent once the coordinator answers
    coordinator.answer.set()
    committer.close(timeout_s=10)
    assert coordinator.sent == [[("t", 0, 10)]]
