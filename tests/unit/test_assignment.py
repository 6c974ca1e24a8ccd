"""Assignment properties: exactly one owner, balanced, spread, sticky, bounded moves; gated hand-off."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.assignment import assign, gate_handoff, moves

topics = st.dictionaries(st.sampled_from(list("abcdefgh")), st.integers(min_value=1, max_value=24), max_size=6)
worker_sets = st.sets(st.sampled_from([f"w{i}" for i in range(10)]), min_size=1, max_size=8)


def partitions_of(spec):
    return {(t, p) for t, n in spec.items() for p in range(n)}


def check_valid(plan, workers, partitions):
    owners = [tp for tps in plan.values() for tp in tps]
    assert sorted(owners) == sorted(partitions), "every partition exactly once"
    assert set(plan) == set(workers)
    loads = [len(tps) for tps in plan.values()]
    assert max(loads) - min(loads) <= 1, "balanced within one partition"


@given(topics, worker_sets)
def test_fresh_assignment_is_complete_balanced_and_spread(spec, workers):
    parts = partitions_of(spec)
    plan = assign({}, sorted(workers), parts)
    check_valid(plan, workers, parts)
    for topic in spec:
        per_worker = [sum(1 for t, _ in tps if t == topic) for tps in plan.values()]
        assert max(per_worker) - min(per_worker) <= 1, f"topic {topic} spread evenly"


@settings(max_examples=200)
@given(topics, worker_sets, st.sampled_from([f"w{i}" for i in range(10, 13)]))
def test_adding_a_worker_moves_about_p_over_w(spec, workers, newcomer):
    parts = partitions_of(spec)
    before = assign({}, sorted(workers), parts)
    after = assign(before, sorted(workers | {newcomer}), parts)
    check_valid(after, workers | {newcomer}, parts)
    fair = len(parts) // (len(workers) + 1)
    assert moves(before, after) <= fair + 1
    assert len(after[newcomer]) >= fair


@given(topics, worker_sets.filter(lambda w: len(w) >= 2))
def test_removing_a_worker_moves_only_its_partitions(spec, workers):
    parts = partitions_of(spec)
    before = assign({}, sorted(workers), parts)
    gone = sorted(workers)[0]
    after = assign(before, sorted(workers - {gone}), parts)
    check_valid(after, workers - {gone}, parts)
    for worker in workers - {gone}:
        assert before[worker] <= after[worker], "survivors keep everything they had"


@given(topics, worker_sets, st.integers(min_value=1, max_value=16))
def test_adding_a_topic_moves_nothing(spec, workers, n):
    parts = partitions_of(spec)
    before = assign({}, sorted(workers), parts)
    new_topic = {("zz", p) for p in range(n)}
    after = assign(before, sorted(workers), parts | new_topic)
    check_valid(after, workers, parts | new_topic)
    assert moves(before, after) == 0


def test_removed_topic_partitions_are_dropped():
    before = assign({}, ["w1", "w2"], {("a", 0), ("a", 1), ("b", 0)})
    after = assign(before, ["w1", "w2"], {("a", 0), ("a", 1)})
    assert {tp for tps in after.values() for tp in tps} == {("a", 0), ("a", 1)}


def test_no_live_workers_means_no_assignment():
    assert assign({"w1": {("a", 0)}}, [], {("a", 0)}) == {}


def test_handoff_withholds_a_partition_until_the_old_owner_released_it():
    desired = {"w1": frozenset(), "w2": frozenset({("a", 0), ("a", 1)})}
    applied = {"w1": {("a", 0)}, "w2": {("a", 1)}}
    plan = gate_handoff(desired, applied)
    assert plan == {"w1": frozenset(), "w2": frozenset({("a", 1)})}
    # w1 confirmed the release (status no longer lists a:0): now w2 gets it.
    assert gate_handoff(desired, {"w1": set(), "w2": {("a", 1)}})["w2"] == {("a", 0), ("a", 1)}


def test_crashed_owner_has_no_status_so_its_partitions_move_at_once():
    desired = {"w2": frozenset({("a", 0)})}
    assert gate_handoff(desired, {"w2": set()}) == desired


def test_weights_spread_the_heavy_partitions():
    # Given two heavy partitions that a count-only assignment put on one worker
    parts = {("a", p) for p in range(4)}
    current = {"w1": {("a", 0), ("a", 1)}, "w2": {("a", 2), ("a", 3)}}
    weights = {("a", 0): 1000.0, ("a", 1): 1000.0, ("a", 2): 10.0, ("a", 3): 10.0}
    plan = assign(current, ["w1", "w2"], parts, weights=weights)
    loads = sorted(sum(weights[tp] for tp in tps) for tps in plan.values())
    assert loads == [1010.0, 1010.0]
    assert all(len(tps) == 2 for tps in plan.values())


def test_weights_are_ignored_when_autobalancing_is_off():
    parts = {("a", p) for p in range(4)}
    current = {"w1": {("a", 0), ("a", 1)}, "w2": {("a", 2), ("a", 3)}}
    weights = {("a", 0): 1000.0, ("a", 1): 1000.0}
    assert assign(current, ["w1", "w2"], parts, weights=weights, rebalance=False) == {
        w: frozenset(tps) for w, tps in current.items()
    }


@given(topics, worker_sets, st.data())
def test_lagging_partitions_are_spread_first(spec, workers, data):
    parts = sorted(partitions_of(spec))
    lagging = set(data.draw(st.lists(st.sampled_from(parts), unique=True))) if parts else set()
    # Worst case start: one worker holds every lagging partition.
    first = sorted(workers)[0]
    current = {first: lagging}
    plan = assign(current, sorted(workers), parts, lagging=lagging)
    check_valid(plan, workers, parts)
    cap = -(-len(lagging) // len(workers))
    assert all(len(tps & lagging) <= cap for tps in plan.values())


@given(topics, worker_sets, st.integers(min_value=1, max_value=5))
def test_max_partitions_per_worker_is_a_hard_cap(spec, workers, cap):
    parts = partitions_of(spec)
    plan = assign({}, sorted(workers), parts, max_per_worker=cap)
    owners = [tp for tps in plan.values() for tp in tps]
    assert len(owners) == len(set(owners)) == min(len(parts), cap * len(workers))
    assert all(len(tps) <= cap for tps in plan.values())


@settings(max_examples=150)
@given(topics, st.lists(st.tuples(st.sampled_from(["join", "leave", "crash", "apply"]),
                                  st.sampled_from([f"w{i}" for i in range(5)])), max_size=30))
def test_gated_handoff_never_lets_two_live_workers_own_a_partition(spec, events):
    """Simulate leader rounds and workers applying (or not yet applying) what was written."""
    parts = partitions_of(spec)
    live: set[str] = {"w0"}
    written: dict[str, frozenset] = {}
    applied: dict[str, set] = {"w0": set()}

    def leader_round() -> None:
        desired = assign(written, sorted(live), parts)
        plan = gate_handoff(desired, {w: applied[w] for w in live})
        written.clear()
        written.update(plan)

    for kind, worker in events:
        if kind == "join" and worker not in live:
            live.add(worker)
            applied[worker] = set()
        elif kind in ("leave", "crash") and worker in live and len(live) > 1:
            live.discard(worker)
            written.pop(worker, None)
            applied.pop(worker)  # a graceful leave releases first; a crash loses its status node
        elif kind == "apply" and worker in live:
            applied[worker] = set(written.get(worker, frozenset()))  # the worker catches up
        leader_round()
        owners: dict = {}
        for w in live:
            for tp in applied[w]:
                assert tp not in owners, f"{tp} applied by {owners[tp]} and {w}"
                owners[tp] = w
            # a worker is never told to own what another live worker still applies
            for tp in written.get(w, frozenset()):
                assert all(tp not in applied[v] for v in live if v != w)
    # Once every worker has caught up, every partition is owned
    for _ in range(3):
        for w in live:
            applied[w] = set(written.get(w, frozenset()))
        leader_round()
    assert set().union(*applied.values()) == parts
