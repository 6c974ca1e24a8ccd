"""Rollout settle (issue 48 §2): joining workers wait for more joins, on a fake clock."""

from __future__ import annotations

from tests.unit.test_leader import FakeKazoo, snapshot
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Assignment
from ureplicator.controller.assignment import Settle
from ureplicator.controller.leader import Leadership, Snapshot


def test_the_first_worker_of_a_route_waits_and_each_join_restarts_the_wait():
    settle = Settle(3.0)
    assert settle.hold([], [], 0.0) == frozenset()  # a term starting with nobody: nothing to hold
    # When w1 joins a route where nobody holds anything, it waits
    assert settle.hold(["w1"], [], 10.0) == {"w1"}
    assert settle.remaining(10.0) == 3.0
    # And w2 joining 2 s later restarts the wait: both are held until 3 s after w2
    assert settle.hold(["w1", "w2"], [], 12.0) == {"w1", "w2"}
    assert settle.hold(["w1", "w2"], [], 14.9) == {"w1", "w2"}
    assert settle.hold(["w1", "w2"], [], 15.0) == frozenset()
    assert settle.remaining(15.0) is None


def test_a_trickling_rollout_cannot_postpone_assignment_past_five_delays():
    settle = Settle(1.0)
    live: list[str] = []
    holding: list[str] = []
    held = []
    for i in range(20):  # a join every 0.9 s, each inside the previous wait
        live.append(f"w{i}")
        held.append(settle.hold(live, holding, 100.0 + 0.9 * i))
        holding = [w for w in live if w not in held[-1]]  # the leader assigns whoever is not held
    assert held[0] == {"w0"} and held[5] == frozenset(f"w{i}" for i in range(6))
    assert held[6] == frozenset()  # 5.4 s after the first join: past 5 x 1 s
    assert all(h == frozenset() for h in held[6:])  # later joins, one at a time beside holders, go at once


def test_one_worker_joining_beside_holders_is_not_held_but_several_at_once_are():
    settle = Settle(2.0)
    assert settle.hold(["a", "b"], ["a", "b"], 0.0) == frozenset()  # a term start: all hold, nobody joins
    assert settle.hold(["a", "b", "c"], ["a", "b"], 1.0) == frozenset()  # one join: assigned at once
    assert settle.hold(["a", "b", "c", "d", "e"], ["a", "b", "c"], 2.0) == {"d", "e"}
    assert settle.hold(["a", "b", "c", "d", "e"], ["a", "b", "c"], 4.0) == frozenset()


def test_a_new_term_settles_the_workers_that_hold_nothing():
    settle = Settle(2.0)
    assert settle.hold(["a", "b", "c"], ["a"], 0.0) == {"b", "c"}
    assert settle.hold(["a", "b", "c"], ["a"], 2.0) == frozenset()


def test_a_zero_delay_never_holds():
    settle = Settle(0.0)
    assert settle.hold(["a", "b"], [], 0.0) == frozenset() and settle.remaining(0.0) is None


SETTLE = config_module.from_dict({
    "pipeline": "unit",
    "zookeeper": {"connect": "127.0.0.1:1"},
    "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
    "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
    "controller": {"initial_assignment_delay_s": 3, "reconcile_interval_s": 5},
})


def test_the_leader_writes_the_first_worker_nothing_until_the_rollout_settled():
    now = [50.0]
    leader = Leadership(SETTLE, FakeKazoo(), "c1", cache=False, clock=lambda: now[0])  # type: ignore[arg-type]
    plans = []
    snaps: list[Snapshot] = []
    leader._read = lambda: snaps.pop(0)  # type: ignore[method-assign]
    leader._write = lambda plan, snap, fence: plans.append(plan)  # type: ignore[method-assign]
    for t, workers in [(50.0, []), (51.0, ["w1"]), (52.0, ["w1", "w2"]), (54.9, ["w1", "w2"])]:
        now[0] = t
        snaps.append(snapshot(workers, {}))
        leader._reconcile("/election/n-0001")
    assert [p.changed for p in plans] == [{}, {}, {}, {}]
    assert abs(leader._wait_s() - 0.11) < 1e-6  # the loop wakes when the settle ends, not 5 s later
    now[0] = 55.0
    snaps.append(snapshot(["w1", "w2"], {}))
    leader._reconcile("/election/n-0001")
    assert {w: len(a.partitions) for w, a in plans[-1].changed.items()} == {"w1": 2, "w2": 2}


def test_a_crashed_workers_partitions_move_at_once_while_newcomers_settle():
    now = [0.0]
    leader = Leadership(SETTLE, FakeKazoo(), "c1", cache=False, clock=lambda: now[0])  # type: ignore[arg-type]
    written = {"a": Assignment(1, frozenset({("t", 0), ("t", 1)})), "b": Assignment(1, frozenset({("t", 2), ("t", 3)}))}
    held = leader._settling(snapshot(["a", "b"], written), 0.0)
    assert held == frozenset()
    # When b crashes while two new workers join at once
    now[0] = 1.0
    snap = snapshot(["a", "n1", "n2"], written)
    plan = leader._plan(snap, 1.0, held=leader._settling(snap, 1.0))
    # Then a takes b's partitions now, and the newcomers wait
    assert plan.changed["a"].partitions == frozenset(("t", p) for p in range(4))
    assert "n1" not in plan.changed and "n2" not in plan.changed
