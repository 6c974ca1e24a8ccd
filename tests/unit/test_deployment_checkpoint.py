"""The deployment check's checkpoint (verifier/deployment.py): what makes a family unchanged."""

from __future__ import annotations

from pathlib import Path

from verifier.deployment import CHECKPOINT, Edge, Family, family_snapshot, load_checkpoint, save_checkpoint

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
