"""The leader times durations on a monotonic clock: a wall-clock step ends no restart grace (issue 48 §6)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.unit.test_leader import FakeKazoo, snapshot
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Assignment
from ureplicator.controller.leader import Leadership, Plan, Snapshot

GRACE = config_module.from_dict({
    "pipeline": "unit",
    "zookeeper": {"connect": "127.0.0.1:1"},
    "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
    "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
    "controller": {"worker_restart_grace_s": 60},
})
HALF = {"w1": Assignment(1, frozenset({("t", 0), ("t", 1)})), "w2": Assignment(1, frozenset({("t", 2), ("t", 3)}))}


def rounds_of(leader: Leadership, snapshots: list[Snapshot]) -> list[Plan]:
    """Run one real ``_reconcile`` per snapshot (its clock is the leader's own), keeping each plan."""
    plans: list[Plan] = []
    leader._read = lambda: snapshots.pop(0)  # type: ignore[method-assign]
    leader._write = lambda plan, snap, fence: plans.append(plan)  # type: ignore[method-assign]
    while snapshots:
        leader._reconcile("/election/n-0001")
    return plans


def test_a_wall_clock_step_does_not_end_a_departed_workers_restart_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a leader with a 60 s restart grace, on its default clock, and two workers holding half each
    leader = Leadership(GRACE, FakeKazoo(), "c1", cache=False)  # type: ignore[arg-type]
    rounds_of(leader, [snapshot(["w1", "w2"], HALF)])
    # When w2 departs, and then the wall clock steps an hour ahead (NTP, a resumed VM)
    rounds_of(leader, [snapshot(["w1"], HALF)])
    stepped = time.time() + 3600
    monotonic = time.monotonic()
    monkeypatch.setattr(time, "time", lambda: stepped)
    assert time.monotonic() - monotonic < 60  # only the wall clock jumped
    plans = rounds_of(leader, [snapshot(["w1"], HALF)])
    # Then w2 is still within its grace: its partitions stay reserved and its node is kept
    assert all(plan.changed.get("w1", HALF["w1"]).partitions == HALF["w1"].partitions for plan in plans)
    assert all("w2" not in plan.departed for plan in plans)


def test_the_grace_ends_on_the_injected_clock() -> None:
    # Given a leader whose clock the test moves
    now = [100.0]
    leader = Leadership(GRACE, FakeKazoo(), "c1", cache=False, clock=lambda: now[0])  # type: ignore[arg-type]
    rounds_of(leader, [snapshot(["w1", "w2"], HALF), snapshot(["w1"], HALF)])
    # When 59 s pass on that clock, w2 is still reserved; after 61 s its partitions go to w1
    now[0] += 59
    assert [p.changed for p in rounds_of(leader, [snapshot(["w1"], HALF)])] == [{}]
    now[0] += 2
    plans: list[Any] = rounds_of(leader, [snapshot(["w1"], HALF)])
    assert plans[0].changed["w1"].partitions == HALF["w1"].partitions | HALF["w2"].partitions
    assert plans[0].departed == ["w2"]
