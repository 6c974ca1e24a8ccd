"""Issue 48 §7: an idle partition's committed position is committed again, inside the broker's offset retention."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from tests.unit.fakes import FakeCommitClient, FakeConsumer
from ureplicator.common import logs
from ureplicator.worker.acks import AckLedger
from ureplicator.worker.commits import Committer
from ureplicator.worker.metrics import WorkerMetrics

TP = ("t", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _rig(recommit_s: float) -> tuple[Committer, AckLedger, FakeConsumer, Clock]:
    consumer = FakeConsumer({TP: []})
    ledger = AckLedger()
    clock = Clock()
    committer = Committer(lambda: FakeCommitClient(consumer), ledger, WorkerMetrics(CollectorRegistry()),
                          logs.get("test"), background=False, clock=clock, recommit_s=recommit_s)
    return committer, ledger, consumer, clock


def _commits(consumer: FakeConsumer) -> list[list[tuple[str, int, int]]]:
    return [e[1] for e in consumer.events if e[0] == "commit"]


def test_an_unmoved_position_is_committed_again_after_offset_recommit_s():
    # Given a partition acquired at committed offset 42 that never moves (an idle source)
    committer, ledger, consumer, clock = _rig(recommit_s=86400)
    ledger.acquire(TP, "t", 42)
    with capture_logs():
        # When the periodic commit runs: the first one after taking the partition commits it
        # (the group's last commit may be as old as the broker's retention)
        committer.commit_soon()
        assert len(_commits(consumer)) == 1
        # Then nothing again within offset_recommit_s
        for _ in range(10):
            clock.now += 8000
            committer.commit_soon()
        assert len(_commits(consumer)) == 1
        # and once offset_recommit_s passed since that commit, the same position again
        clock.now += 86400 - 80000
        committer.commit_soon()
    commits = _commits(consumer)
    assert len(commits) == 2
    assert commits[0] == commits[1]


def test_a_moving_position_is_committed_as_before_and_restarts_the_recommit_clock():
    committer, ledger, consumer, clock = _rig(recommit_s=100)
    acks = ledger.acquire(TP, "t", 42)
    committer.commit_soon()
    acks.position = 50  # acknowledged records moved it
    clock.now += 60
    committer.commit_soon()
    clock.now += 60  # 60 s after the last commit: not due
    committer.commit_soon()
    assert len(_commits(consumer)) == 2
    clock.now += 41
    committer.commit_soon()
    assert len(_commits(consumer)) == 3
