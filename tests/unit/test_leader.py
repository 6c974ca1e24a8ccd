"""The leader's reconcile planning, fencing, election thread and topic sync, with fake clients."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError

from ureplicator.common import config as config_module
from ureplicator.common import zk
from ureplicator.common.zkschema import Assignment, PartitionStatus, TopicRecord, WorkerStatus
from ureplicator.controller import leader as leader_module
from ureplicator.controller.leader import Leadership, Snapshot

CONFIG = config_module.from_dict({
    "pipeline": "unit",
    "zookeeper": {"connect": "127.0.0.1:1"},
    "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
    "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
    "controller": {"reconcile_interval_s": 0.05, "topic_sync_interval_s": 0.05},
})


class FakeElection:
    """kazoo's Election: ``run`` calls the leader function (scripted by the test)."""

    def __init__(self, runs: list[Any] | None = None) -> None:
        self.runs = runs or []
        self.calls = 0
        self.cancelled = threading.Event()
        self.lock = SimpleNamespace(path="/election", node="n-0001")

    def run(self, func: Any) -> None:
        self.calls += 1
        step = self.runs.pop(0) if self.runs else None
        if isinstance(step, BaseException):
            raise step
        if step == "lead":
            func()
            return
        self.cancelled.wait(0.05)

    def cancel(self) -> None:
        self.cancelled.set()

    def contenders(self) -> list[str]:
        return []


class FakeKazoo:
    """Just what Leadership touches outside _read/_write: elections, listeners, watches."""

    def __init__(self, election: FakeElection | None = None) -> None:
        self.election = election or FakeElection()

    def Election(self, path: str, identifier: str) -> FakeElection:  # noqa: N802 - kazoo's name
        return self.election

    def add_listener(self, listener: Any) -> None:
        pass

    def ChildrenWatch(self, path: str, func: Any) -> None:  # noqa: N802
        pass

    def DataWatch(self, path: str, func: Any) -> None:  # noqa: N802
        pass

    def create(self, path: str, value: bytes = b"", makepath: bool = False) -> str:
        return path  # the delivery-mode node (controller/fencing.py)


def leadership(**kwargs: Any) -> Leadership:
    return Leadership(CONFIG, FakeKazoo(**kwargs), "c1", cache=False)  # type: ignore[arg-type]


def snapshot(workers: list[str], written: dict[str, Assignment], statuses: dict[str, WorkerStatus] | None = None,
             topics: dict[str, int] | None = None, **extra: Any) -> Snapshot:
    topics = {"t": 4} if topics is None else topics
    return Snapshot(
        topics={name: TopicRecord(name, name, n) for name, n in topics.items()},
        blocked=extra.pop("blocked", frozenset()),
        registered=sorted(workers),
        blacklisted=extra.pop("blacklisted", frozenset()),
        statuses=statuses if statuses is not None else {
            w: WorkerStatus(a.generation, {tp: PartitionStatus() for tp in a.partitions}) for w, a in written.items()
            if w in workers
        },
        written=written,
        **extra,
    )


ALL = frozenset({("t", 0), ("t", 1), ("t", 2), ("t", 3)})


def test_first_round_assigns_every_active_partition_once():
    # Given two live workers and nothing written yet
    plan = leadership()._plan(snapshot(["w1", "w2"], {}), now=1000.0)
    # Then every partition goes to exactly one of them, balanced
    got = [a.partitions for a in plan.changed.values()]
    assert sorted(len(p) for p in got) == [2, 2] and frozenset().union(*got) == ALL
    assert {a.generation for a in plan.changed.values()} == {1}


def test_a_joining_worker_gets_partitions_only_after_the_old_owner_released_them():
    # Given w1 owns everything and w2 joins
    leader = leadership()
    written = {"w1": Assignment(1, ALL)}
    first = leader._plan(snapshot(["w1", "w2"], written), now=1000.0)
    # Then w1 is shrunk first and the moving partitions are withheld from w2
    moving = ALL - first.changed["w1"].partitions
    assert len(moving) == 2 and first.withheld == moving
    assert first.changed.get("w2", Assignment(2)).partitions == frozenset()
    # When w1 reports the new generation without them
    written = {"w1": first.changed["w1"], **({"w2": first.changed["w2"]} if "w2" in first.changed else {})}
    second = leader._plan(snapshot(["w1", "w2"], written), now=1001.0)
    # Then w2 gets them, and nothing is withheld any more
    assert second.changed["w2"].partitions == moving and second.withheld == frozenset()


def test_a_status_still_listing_a_partition_keeps_it_withheld():
    # Given w1 was shrunk (generation 2) but its status still shows generation 1 with everything
    leader = leadership()
    first = leader._plan(snapshot(["w1", "w2"], {"w1": Assignment(1, ALL)}), now=1000.0)
    stale = {"w1": WorkerStatus(1, {tp: PartitionStatus() for tp in ALL})}
    written = {"w1": first.changed["w1"]}
    second = leader._plan(snapshot(["w1", "w2"], written, statuses=stale), now=1001.0)
    # Then w2 still gets nothing (never two live owners)
    assert "w2" not in second.changed or second.changed["w2"].partitions == frozenset()


def test_a_worker_still_acquiring_its_first_assignment_is_not_rewritten_so_nothing_is_granted_twice():
    # Given w1 was written everything (generation 1) and is still acquiring it, and w2 joined:
    # both statuses show generation 0 for several rounds (acquisitions read committed offsets)
    leader = leadership()
    written = {"w1": Assignment(1, ALL)}
    granted_w2: list[frozenset] = []

    def round_(statuses: dict[str, WorkerStatus], now: float) -> None:
        nonlocal written
        plan = leader._plan(snapshot(["w1", "w2"], written, statuses=statuses), now=now)
        written = {**written, **plan.changed}
        if "w2" in plan.changed:
            granted_w2.append(plan.changed["w2"].partitions)

    for now in (1000.0, 1000.02, 1000.04):
        round_({"w1": WorkerStatus(0, {}), "w2": WorkerStatus(0, {})}, now)
        # Then w2 gets none of it
        assert granted_w2 == []
    # (because w1 keeps generation 1 unchanged: any of it may still be acquired)
    assert written["w1"] == Assignment(1, ALL)
    # When w1 reports generation 1 applied (it owns everything now)
    round_({"w1": WorkerStatus(1, {tp: PartitionStatus() for tp in ALL}), "w2": WorkerStatus(0, {})}, 1000.06)
    # Then it is shrunk, and w2 still waits for the release
    kept = written["w1"].partitions
    assert len(kept) == 2 and granted_w2 == []
    # When w1 reports the shrunk generation
    round_({"w1": WorkerStatus(written["w1"].generation, {tp: PartitionStatus() for tp in kept}),
            "w2": WorkerStatus(0, {})}, 1000.08)
    # Then w2 is granted the rest once, never withheld and re-granted
    assert granted_w2 == [ALL - kept]


def test_a_crashed_workers_partitions_move_at_once():
    # Given w2 crashed: not registered, no status, its assignment node still written
    leader = leadership()
    written = {"w1": Assignment(3, frozenset({("t", 0), ("t", 1)})),
               "w2": Assignment(3, frozenset({("t", 2), ("t", 3)}))}
    plan = leader._plan(snapshot(["w1"], written), now=1000.0)
    # Then w1 gets everything in this very round and w2's node is dropped
    assert plan.changed["w1"].partitions == ALL and plan.departed == ["w2"]


def test_a_registered_worker_whose_status_cannot_be_read_keeps_its_assignment_and_nothing_of_it_moves():
    # Given w1 is live (registered) and was written everything, but its status did not decode,
    # and w2 is live with nothing
    leader = leadership()
    written = {"w1": Assignment(1, ALL)}
    for now in (1000.0, 1000.02):
        plan = leader._plan(snapshot(["w1", "w2"], written, statuses={"w2": WorkerStatus(0, {})}), now=now)
        # Then w1 may be applying it right now: it is not rewritten, and w2 is granted none of it
        assert "w1" not in plan.changed
        assert plan.changed.get("w2", Assignment(0)).partitions == frozenset()
        assert plan.withheld == ALL - leader._last_desired["w1"]
    # When w1's status is readable again and shows generation 1 applied
    plan = leader._plan(snapshot(["w1", "w2"], written), now=1000.04)
    # Then the hand-off proceeds as usual: w1 is shrunk first
    assert len(plan.changed["w1"].partitions) == 2


def test_paused_topics_and_blacklisted_partitions_are_not_assigned():
    leader = leadership()
    snap = snapshot(["w1"], {}, topics={"t": 4, "p": 2}, blocked=frozenset({"t:3"}))
    snap.topics["p"] = TopicRecord("p", "p", 2, state="paused")
    plan = leader._plan(snap, now=1000.0)
    assert plan.changed["w1"].partitions == frozenset({("t", 0), ("t", 1), ("t", 2)})


def test_bookkeeping_of_a_removed_topic_is_pruned():
    # Given rates and lag history observed for topics t and gone
    leader = leadership()
    busy = PartitionStatus(bytes_per_s=100.0, lag=5)
    statuses = {"w1": WorkerStatus(1, {("t", 0): busy, ("gone", 0): busy}, updated_at="a")}
    leader._plan(snapshot(["w1"], {"w1": Assignment(1, frozenset({("t", 0), ("gone", 0)}))}, statuses=statuses,
                          topics={"t": 1, "gone": 1}), now=1000.0)
    assert ("gone", 0) in leader._weights and ("gone", 0) in leader._lag_history
    # When the topic is removed
    leader._plan(snapshot(["w1"], {"w1": Assignment(2, frozenset({("t", 0)}))}, topics={"t": 1}), now=1001.0)
    # Then nothing about it is kept
    assert ("gone", 0) not in leader._weights and ("gone", 0) not in leader._lag_history
    assert all(key[1] != ("gone", 0) for key in leader._sampled)


class FakeTransaction:
    def __init__(self, results: list[Any]) -> None:
        self.results = results

    def commit(self) -> list[Any]:
        return self.results


def test_a_failed_fence_check_means_step_down():
    with pytest.raises(zk.Fenced):
        zk.commit(FakeTransaction([NoNodeError(), RolledBackError()]), "writing", fenced=True)


def test_a_failed_write_behind_a_passing_fence_is_an_ordinary_race():
    with pytest.raises(zk.TransactionFailed) as raised:
        zk.commit(FakeTransaction([RolledBackError(), NodeExistsError()]), "writing", fenced=True)
    assert not isinstance(raised.value, zk.Fenced)


def test_a_race_in_the_write_does_not_end_leadership(monkeypatch):
    # Given a leader whose first write races a worker and whose second round succeeds
    election = FakeElection(runs=["lead"])
    leader = leadership(election=election)
    rounds: list[int] = []

    def reconcile(fence: str) -> None:
        rounds.append(1)
        if len(rounds) == 1:
            raise zk.TransactionFailed("writing assignments: NodeExistsError")
        if len(rounds) == 3:
            raise zk.Fenced("writing assignments: fence check failed (NoNodeError)")

    monkeypatch.setattr(leader, "_reconcile", reconcile)
    # When it leads
    leader._lead()
    # Then the race led to another round, and only the failed fence ended the term
    assert len(rounds) == 3 and not leader.state.is_leader


def test_the_election_thread_survives_an_unexpected_error():
    # Given an election whose first run raises a bug, not a ZooKeeper error
    election = FakeElection(runs=[RuntimeError("bug"), None, None])
    leader = leadership(election=election)
    leader.start()
    try:
        # Then the thread goes on contending and says it is alive
        deadline = threading.Event()
        for _ in range(200):
            if election.calls >= 3:
                break
            deadline.wait(0.05)
        assert election.calls >= 3 and leader.alive()
        assert leader.metrics.election_errors._value.get() == 1
    finally:
        leader.stop()
    assert not leader.alive()


def test_topic_sync_never_delays_reconcile(monkeypatch):
    # Given a leader whose Kafka admin calls hang
    election = FakeElection(runs=["lead"])
    leader = Leadership(CONFIG, FakeKazoo(election), "c1", admins=(object(), object()),  # type: ignore[arg-type]
                        cache=False)
    release = threading.Event()
    syncing = threading.Event()

    def hanging_sync(*args: Any) -> dict[str, list[str]]:
        syncing.set()
        release.wait(30)
        return {"grown": [], "configs": [], "added": []}

    monkeypatch.setattr(leader_module.topics, "sync", hanging_sync)
    rounds: list[int] = []

    def reconcile(fence: str) -> None:
        rounds.append(1)
        if len(rounds) >= 5:
            leader._stop.set()

    monkeypatch.setattr(leader, "_reconcile", reconcile)
    # When it leads
    runner = threading.Thread(target=leader._lead)
    runner.start()
    runner.join(30)
    release.set()
    # Then reconcile rounds went on while the sync hung
    assert syncing.is_set() and len(rounds) >= 5 and not runner.is_alive()


def test_a_route_capped_at_two_workers_leaves_the_third_idle_and_never_moves_a_partition_for_it():
    # Given a route with workers.max 2 whose two workers hold every partition
    leader = Leadership(CONFIG, FakeKazoo(), "c1", cache=False, max_workers=2)  # type: ignore[arg-type]
    written = {"w1": Assignment(1, frozenset({("t", 0), ("t", 1)})),
               "w2": Assignment(1, frozenset({("t", 2), ("t", 3)}))}
    # When a third worker registers (its name sorts first)
    plan = leader._plan(snapshot(["a0", "w1", "w2"], written), now=1000.0)
    # Then it gets nothing and nobody else is rewritten
    assert plan.changed.get("a0", Assignment(0)).partitions == frozenset()
    assert "w1" not in plan.changed and "w2" not in plan.changed
    # and when a holder leaves, the spare takes its partitions
    plan = leader._plan(snapshot(["a0", "w1"], {"w1": written["w1"]}), now=1001.0)
    assert plan.changed["a0"].partitions == frozenset({("t", 2), ("t", 3)})


def test_every_controller_series_names_its_route_and_a_routes_series_go_when_it_stops():
    from prometheus_client import generate_latest

    from ureplicator.controller.metrics import ControllerMetrics

    # Given the implicit route (today's config) and a declared route reconciled by one replica
    metrics = ControllerMetrics()
    routed = config_module.route_view(config_module.from_dict({
        "pipeline": "unit", "zookeeper": {"connect": "127.0.0.1:1"},
        "clusters": {"a": {"bootstrap_servers": "127.0.0.1:1"}, "b": {"bootstrap_servers": "127.0.0.1:2"}},
        "routes": [{"id": "a2b", "source": "a", "destination": "b"}],
    }), "a2b")
    today = Leadership(CONFIG, FakeKazoo(), "c1", cache=False, metrics=metrics)  # type: ignore[arg-type]
    other = Leadership(routed, FakeKazoo(), "c1", cache=False, metrics=metrics,  # type: ignore[arg-type]
                       elect=False)
    # When each plans a round: two workers on one, none on the other
    today._plan(snapshot(["w1", "w2"], {}), now=1000.0)
    other._plan(snapshot([], {}, topics={"t": 3}), now=1000.0)
    text = generate_latest(metrics.registry).decode()
    # Then every series carries its route, the implicit one as "default" (but the one election's errors
    # and the one pool's rounds)
    samples = [line for line in text.splitlines() if line.startswith("ureplicator_controller_")
               and not line.startswith(("ureplicator_controller_election_errors",
                                        "ureplicator_controller_pool_rounds"))]
    assert samples and all('route="' in line for line in samples), samples
    assert 'ureplicator_controller_live_workers{route="default"} 2.0' in text
    assert 'ureplicator_controller_unassigned_partitions{route="a2b"} 3.0' in text
    assert 'ureplicator_controller_route_waiting_for_workers{route="a2b"} 1.0' in text
    assert 'ureplicator_controller_route_waiting_for_workers{route="default"} 0.0' in text
    assert 'ureplicator_controller_leader{route="a2b"} 1.0' in text
    # And once a route stops, its series are gone and the other's stay
    metrics.forget_route("a2b")
    text = generate_latest(metrics.registry).decode()
    assert 'route="a2b"' not in text and 'ureplicator_controller_live_workers{route="default"} 2.0' in text
