"""The deployment check's checkpoint (verifier/deployment.py): what makes a family unchanged."""

from __future__ import annotations

from pathlib import Path

from ureplicator.verifier.deployment import CHECKPOINT, Edge, Family, family_snapshot, load_checkpoint, save_checkpoint

EDGE = Edge("c1", "t", "c2", "t", "c1-c2", "origin", "ureplicator.p.c1-c2")
FAMILY = Family([("c1", "t"), ("c2", "t")], [EDGE])
COMMITTED = {EDGE: {0: 10, 1: None}}
BOUNDS = {("c1", "t"): {0: (0, 10), 1: (0, 0)}, ("c2", "t"): {0: (0, 10), 1: (0, 0)}}


def test_a_saved_snapshot_equals_the_same_offsets_read_again(tmp_path: Path):
    snap = family_snapshot(FAMILY, COMMITTED, BOUNDS)
    save_checkpoint(tmp_path, {FAMILY.name: {"snapshot": snap, "result": {"family": FAMILY.name}, "read_at": "x"}})
    assert load_checkpoint(tmp_path)[FAMILY.name]["snapshot"] == family_snapshot(FAMILY, dict(COMMITTED), dict(BOUNDS))


def test_a_new_record_a_moved_commit_or_another_route_changes_the_snapshot():
    snap = family_snapshot(FAMILY, COMMITTED, BOUNDS)
    grown = {**BOUNDS, ("c2", "t"): {0: (0, 11), 1: (0, 0)}}  # a record more on the destination
    assert family_snapshot(FAMILY, COMMITTED, grown) != snap
    assert family_snapshot(FAMILY, {EDGE: {0: 10, 1: 0}}, BOUNDS) != snap  # a first commit
    transit = Edge("c1", "t", "c2", "t", "c1-c2", "transit", "ureplicator.p.c1-c2")
    assert family_snapshot(Family(FAMILY.nodes, [transit]), {transit: COMMITTED[EDGE]}, BOUNDS) != snap
    expired = {**BOUNDS, ("c1", "t"): {0: (3, 10), 1: (0, 0)}}  # retention moved the log start
    assert family_snapshot(FAMILY, COMMITTED, expired) != snap


def test_an_unreadable_or_other_version_checkpoint_means_read_everything(tmp_path: Path):
    assert load_checkpoint(tmp_path) == {}
    (tmp_path / CHECKPOINT).write_text("{not json")
    assert load_checkpoint(tmp_path) == {}
    (tmp_path / CHECKPOINT).write_text('{"version": 99, "families": {"x": {}}}')
    assert load_checkpoint(tmp_path) == {}


def _mesh(forward: str) -> Family:
    edges = [Edge(a, "t", b, "t", f"{a}-{b}", forward, f"g.{a}-{b}")
             for a in ("c1", "c2", "c3") for b in ("c1", "c2", "c3") if a != b]
    return Family([("c1", "t"), ("c2", "t"), ("c3", "t")], edges)


def test_marks_are_used_only_where_each_origin_has_one_path():
    from ureplicator.verifier.deployment import single_paths

    assert single_paths(_mesh("origin"))  # active-active under origin: one hop each way
    assert not single_paths(_mesh("transit"))  # c1 -> c3 directly and through c2


def test_a_changed_family_is_read_from_its_marks_and_only_if_nothing_went_back():
    from ureplicator.verifier.deployment import usable_marks, windows

    bounds = {("c1", "t"): {0: (0, 50)}, ("c2", "t"): {0: (5, 80)}}
    family = Family([("c1", "t"), ("c2", "t")], [EDGE])
    marks = {("c1-c2", 0): (40, 60)}  # proven below source offset 40; its first copy at or above 40 is at 60
    # The source from P, the destination from R, never below the log start
    assert windows(family, bounds, marks) == {("c1", "t"): {0: (40, 50)}, ("c2", "t"): {0: (60, 80)}}
    snap = family_snapshot(family, {EDGE: {0: 45}}, bounds)
    last = {"snapshot": snap, "marks": [["c1-c2", 0, 40, 60]], "result": {}}
    assert usable_marks(last, snap, family, {EDGE: {0: 45}}) == marks
    # Not after an offset reset below P, nor when the family's routes changed, nor without marks
    assert usable_marks(last, snap, family, {EDGE: {0: 30}}) is None
    other = Edge("c1", "t", "c2", "t", "c1-c2", "transit", "g")
    assert usable_marks(last, family_snapshot(Family(family.nodes, [other]), {other: {0: 45}}, bounds), family,
                        {EDGE: {0: 45}}) is None
    assert usable_marks({**last, "marks": []}, snap, family, {EDGE: {0: 45}}) is None
