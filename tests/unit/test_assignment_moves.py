"""``max_moves``: a round moves at most that many partitions between live workers (issue 48 §2)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_leader import FakeKazoo, snapshot
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Assignment, PartitionStatus, WorkerStatus
from ureplicator.controller.assignment import assign, moves
from ureplicator.controller.leader import Leadership

PARTS = {(f"t{t}", p) for t in range(10) for p in range(10)}


def test_a_joining_worker_takes_at_most_the_cap_and_the_rest_stays_put():
    # Given 100 partitions on 4 workers, and 6 workers joining at once
    before = assign({}, ["w0", "w1", "w2", "w3"], PARTS)
    workers = [f"w{i}" for i in range(10)]
    # When the next plan may move 15
    after = assign(before, workers, PARTS, max_moves=15)
    # Then 15 moved, every partition has one owner, and each newcomer got some (round-robin)
    assert moves(before, after) == 15
    assert sorted(tp for tps in after.values() for tp in tps) == sorted(PARTS)
    assert all(2 <= len(after[w]) <= 3 for w in workers[4:])
    # And later plans from there finish the balance, 15 at a time
    plans = [after]
    while True:
        nxt = assign(plans[-1], workers, PARTS, max_moves=15)
        assert moves(plans[-1], nxt) <= 15
        if nxt == plans[-1]:
            break
        plans.append(nxt)
    loads = [len(tps) for tps in plans[-1].values()]
    assert max(loads) - min(loads) <= 1
    assert len(plans) == 1 + -(-(moves(before, plans[-1]) - 15) // 15)


def test_new_and_orphaned_partitions_are_placed_not_moved_so_the_cap_never_holds_them():
    # Given w1 and w2 with 40 each, w3 crashed with 20, and 10 partitions of a new topic
    workers = ["w1", "w2", "w3"]
    held = assign({}, workers, PARTS)
    survivors = {w: held[w] for w in ("w1", "w2")}
    grown = PARTS | {("new", p) for p in range(10)}
    # When the next plan may move nothing at all
    after = assign(survivors, ["w1", "w2"], grown, max_moves=0)
    # Then every partition is owned anyway, and nothing left its live owner
    assert sorted(tp for tps in after.values() for tp in tps) == sorted(grown)
    assert all(held[w] <= after[w] for w in ("w1", "w2"))


def test_no_cap_is_the_plain_assignment():
    before = assign({}, ["w0", "w1"], PARTS)
    workers = ["w0", "w1", "w2", "w3"]
    assert assign(before, workers, PARTS, max_moves=None) == assign(before, workers, PARTS)


@settings(max_examples=150)
@given(st.sets(st.sampled_from([f"w{i}" for i in range(8)]), min_size=1, max_size=6),
       st.sets(st.sampled_from([f"w{i}" for i in range(8)]), min_size=1, max_size=8),
       st.integers(min_value=0, max_value=30))
def test_any_cap_keeps_one_owner_per_partition_and_never_exceeds_the_cap(first, second, cap):
    before = assign({}, sorted(first), PARTS)
    after = assign(before, sorted(second), PARTS, max_moves=cap)
    assert sorted(tp for tps in after.values() for tp in tps) == sorted(PARTS)
    live_before = {w: tps for w, tps in before.items() if w in second}
    assert moves(live_before, after) <= cap


CAPPED = config_module.from_dict({
    "pipeline": "unit",
    "zookeeper": {"connect": "127.0.0.1:1"},
    "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
    "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
    "controller": {"max_moves_per_round": 3},
})


def test_the_leader_counts_moves_under_way_against_the_cap():
    # Given one worker holding 12 partitions and two joining
    leader = Leadership(CAPPED, FakeKazoo(), "c1", cache=False)  # type: ignore[arg-type]
    all12 = frozenset(("t", p) for p in range(12))
    written = {"w1": Assignment(1, all12)}
    # When rounds run while w1 has confirmed nothing since
    first = leader._plan(snapshot(["w1", "w2", "w3"], written, topics={"t": 12}), now=1.0)
    again = leader._plan(snapshot(["w1", "w2", "w3"], written, topics={"t": 12}), now=2.0)
    # Then w1 is asked to release 3, and no second round asks for more while those are under way
    assert len(first.changed["w1"].partitions) == 9
    assert leader._last_desired["w1"] == first.changed["w1"].partitions
    assert again.changed["w1"].partitions == first.changed["w1"].partitions
    # When w1 confirms the release and w2/w3 are granted (and confirm) the 3
    shrunk = first.changed["w1"]
    moved = all12 - shrunk.partitions
    granted = {w: leader._last_desired[w] for w in ("w2", "w3")}
    assert frozenset().union(*granted.values()) == moved
    written = {"w1": shrunk, **{w: Assignment(2, tps) for w, tps in granted.items()}}
    statuses = {w: WorkerStatus(a.generation, {tp: PartitionStatus() for tp in a.partitions})
                for w, a in written.items()}
    nxt = leader._plan(snapshot(["w1", "w2", "w3"], written, statuses=statuses, topics={"t": 12}), now=3.0)
    # Then the next 3 start
    assert len(nxt.changed["w1"].partitions) == 6
