"""The lease's timer thread: ZooKeeper's answers keep it fresh whatever the loop's pace; no answers fence.

The loop blocked past the lease on real services is tests/integration/test_worker_lease.py; a
ZooKeeper that stops answering is here, with fakes (the shared stack's ZooKeeper is not frozen).
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.unit.test_worker_mirror import Rig, make_rig, values


@pytest.fixture
def rig() -> Rig:
    rig = make_rig()
    rig.assign(1, ("t", 0))
    rig.turns(1)
    assert rig.producer.written[("t", 0)] == values(10, 0)
    rig.worker.start_lease_timer()
    yield rig
    rig.worker._stop_lease_timer()


def _wait(predicate, timeout_s: float = 5.0) -> bool:  # noqa: ANN001 - a test helper
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_a_loop_that_does_not_turn_for_longer_than_the_lease_keeps_it_while_zookeeper_answers(rig):
    # Given a worker whose loop does not turn for longer than its lease, while ZooKeeper answers
    rig.clock.advance(rig.worker.lease_window_s + 5)
    # When the timer thread renews meanwhile
    assert _wait(lambda: rig.worker._lease_at == rig.clock.now), "the timer did not renew the lease"
    # Then the loop's next turn finds the lease fresh: no purge, the new records are sent once
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    rig.turns(3)
    assert rig.producer.purges == 0
    assert rig.producer.written[("t", 0)] == values(15, 0)
    assert rig.worker.metrics.producer_replacements._value.get() == 0


def test_a_zookeeper_that_stops_answering_still_fences_the_worker_with_the_timer_running(rig):
    # Given a worker whose ZooKeeper stops answering (kazoo still says CONNECTED), timer running
    rig.zk.answering = False
    produced = rig.producer.produced_total
    # When the lease runs out, the timer asking all along
    rig.clock.advance(rig.worker.lease_window_s + 1)
    time.sleep(0.6)  # a few of the timer's asks, none answered
    rig.consumer.append(("t", 0), *values(5, 0, start=10))
    rig.turns(2)
    # Then the worker fences itself: nothing fetched or sent, librdkafka's queue purged
    assert rig.producer.produced_total == produced
    assert rig.producer.purges == 1
    assert not rig.worker.ready
    # And once ZooKeeper answers again, the timer lifts the fence and the records go out once
    rig.zk.answering = True
    rig.clock.advance(1.0)
    assert _wait(lambda: rig.worker._lease_at == rig.clock.now)
    rig.turns(5)
    assert rig.producer.written[("t", 0)] == values(15, 0)


def test_the_timer_thread_stops_with_the_worker(rig):
    # Given a running timer
    assert any(t.name == "lease-w1" for t in threading.enumerate())
    # When the worker shuts down
    rig.worker.stop()
    rig.worker._shutdown()
    # Then its thread is gone
    assert not any(t.name == "lease-w1" for t in threading.enumerate())
