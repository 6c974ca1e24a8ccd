"""The verifier's checkpoint: when a run may continue, where it starts, how it advances, how it is stored."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from ureplicator.reports import model
from ureplicator.reports.model import Watermarks
from ureplicator.verifier import checkpoint
from ureplicator.verifier.checkpoint import (
    Checkpoint,
    CheckpointFile,
    PartitionCheckpoint,
    TopicCheckpoint,
    TopicIdentity,
)

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)
DAY = 86_400.0
IDENTITY = TopicIdentity("orders.mirror", "src-id", "dst-id")


def _previous(**partitions: PartitionCheckpoint) -> TopicCheckpoint:
    return TopicCheckpoint(
        destination="orders.mirror",
        source_topic_id="src-id",
        destination_topic_id="dst-id",
        last_full_at=checkpoint.iso_time(NOW - timedelta(hours=2)),
        partitions={int(p[1:]): c for p, c in partitions.items()},
    )


def _marks(p: int, log_start: int, end: int, committed: int | None, dst: tuple[int, int] | None = (0, 100)):
    return Watermarks(p, log_start, end, committed, *(dst if dst else (None, None)))


def test_without_a_checkpoint_every_topic_gets_a_full_pass():
    decision = checkpoint.plan(None, IDENTITY, {0: _marks(0, 0, 10, 10)}, NOW)
    assert decision.full and decision.mode == "full" and decision.resume == {}
    assert decision.reason == "no checkpoint for this topic yet"


def test_partitions_continue_from_their_watermark_and_destination_offset():
    previous = _previous(p0=PartitionCheckpoint(40, 38, 0, 0), p1=PartitionCheckpoint(25, 30, 0, 0))
    marks = {0: _marks(0, 0, 60, 60), 1: _marks(1, 0, 50, 50)}
    decision = checkpoint.plan(previous, IDENTITY, marks, NOW, full_every_s=DAY)
    assert not decision.full and decision.mode == "incremental"
    assert decision.resume == {0: (40, 38), 1: (25, 30)}
    assert decision.notes == {}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"full": True}, "--full was given"),
        ({"unusable": "checkpoint x is damaged (checksum mismatch): full pass"},
         "checkpoint x is damaged (checksum mismatch): full pass"),
        ({"identity": TopicIdentity("orders.dr", "src-id", "dst-id")},
         "the destination changed from orders.mirror to orders.dr"),
        ({"identity": TopicIdentity("orders.mirror", "new-id", "dst-id")},
         "the source topic was deleted and created again (topic id src-id -> new-id)"),
        ({"identity": TopicIdentity("orders.mirror", "src-id", "other")},
         "the destination topic was deleted and created again (topic id dst-id -> other)"),
    ],
)
def test_what_forces_a_full_pass(change, reason):
    previous = _previous(p0=PartitionCheckpoint(40, 38, 0, 0))
    identity = change.pop("identity", IDENTITY)
    decision = checkpoint.plan(previous, identity, {0: _marks(0, 0, 60, 60)}, NOW, **change)
    assert decision.full and decision.reason == reason


def test_a_full_pass_is_scheduled_when_the_last_is_older_than_full_every():
    previous = _previous(p0=PartitionCheckpoint(40, 38, 0, 0))
    marks = {0: _marks(0, 0, 60, 60)}
    assert not checkpoint.plan(previous, IDENTITY, marks, NOW, full_every_s=3 * 3600).full
    due = checkpoint.plan(previous, IDENTITY, marks, NOW, full_every_s=3600)
    assert due.full and due.reason.startswith("scheduled full pass (--full-every")
    assert not checkpoint.plan(previous, IDENTITY, marks, NOW, full_every_s=None).full  # never


def test_a_truncated_or_new_partition_starts_over_the_others_continue():
    previous = _previous(p0=PartitionCheckpoint(40, 38, 0, 0), p1=PartitionCheckpoint(40, 40, 0, 0))
    marks = {
        0: _marks(0, 0, 30, 30),  # end below the verified watermark: truncated (unclean election, recreated)
        1: _marks(1, 45, 60, 60),  # retention removed [40, 45) before this run could verify it
        2: _marks(2, 0, 10, 10),  # added since the last run
    }
    decision = checkpoint.plan(previous, IDENTITY, marks, NOW)
    assert decision.resume == {1: (40, 40)}
    assert "log truncated" in decision.notes[0][0]
    assert decision.notes[1] == ["source records [40, 45) expired before they could be verified"]
    assert decision.notes[2] == ["no checkpoint for this partition: verified from its log start"]


def test_a_run_resumed_from_a_checkpoint_reads_from_there():
    w = Watermarks(0, 10, 100, 80, 5, 120, resume_from=40, destination_resume_from=43)
    assert w.incremental and w.verified_range == (40, 80)
    assert w.destination_range == (43, 120)
    # a commit that went back verifies nothing new, and never goes below the resume point
    back = Watermarks(0, 10, 100, 30, 5, 120, resume_from=40, destination_resume_from=43)
    assert back.verified_range == (40, 40)
    # retention beyond the resume points wins
    late = Watermarks(0, 50, 100, 80, 60, 120, resume_from=40, destination_resume_from=43)
    assert late.verified_range == (50, 80) and late.destination_range == (60, 120)


def test_clean_partitions_advance_failing_ones_keep_their_entry():
    previous = _previous(p0=PartitionCheckpoint(40, 38, 0, 0), p1=PartitionCheckpoint(40, 41, 0, 0))
    marks = {
        0: Watermarks(0, 0, 70, 60, 0, 75, resume_from=40, destination_resume_from=38),
        1: Watermarks(1, 0, 70, 60, 0, 75, resume_from=40, destination_resume_from=41),
        2: Watermarks(2, 0, 9, 9, 0, 9),
    }
    statuses = {0: model.WARN, 1: model.FAIL, 2: model.OK}
    after = checkpoint.advance(previous, IDENTITY, marks, statuses, {0: 61}, full=False, now=NOW)
    # p0: verified up to 60; copies of 60 and later start at destination offset 61 (pending records seen there)
    assert after.partitions[0] == PartitionCheckpoint(60, 61, 0, 0)
    assert after.partitions[1] == previous.partitions[1]  # FAIL: looked at again next run
    assert after.partitions[2] == PartitionCheckpoint(9, 9, 0, 0)  # nothing pending: the destination end
    assert after.last_full_at == previous.last_full_at  # an incremental run does not reset the schedule
    assert checkpoint.advance(previous, IDENTITY, marks, statuses, {}, full=True, now=NOW).last_full_at == (
        "2026-11-23T12:00:00Z")


def test_a_partition_without_destination_does_not_advance():
    marks = {0: Watermarks(0, 0, 10, 10)}
    after = checkpoint.advance(None, IDENTITY, marks, {0: model.OK}, {}, full=True, now=NOW)
    assert after.partitions == {}


def _stored() -> Checkpoint:
    stored = Checkpoint("dr", "ureplicator.dr", "src", "dst")
    stored.topics["orders"] = _previous(p0=PartitionCheckpoint(40, 38, 0, 0), p3=PartitionCheckpoint(7, 9, 2, 1))
    return stored


def test_the_file_round_trips_and_is_replaced_atomically(tmp_path):
    path = tmp_path / "nested" / "checkpoint.json"
    CheckpointFile(path).save(_stored())
    loaded, problem = CheckpointFile(path).load()
    assert problem is None and loaded == _stored()
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.json"]  # no temporary file left


def test_a_missing_file_is_no_checkpoint_and_no_problem(tmp_path):
    assert CheckpointFile(tmp_path / "none.json").load() == (None, None)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda text: text[: len(text) // 2], "is damaged ("),
        (lambda text: text.replace('"pipeline": "dr"', '"pipeline": "xx"'), "is damaged (checksum mismatch)"),
        (lambda text: json.dumps({**json.loads(text), "format_version": 9}), "unknown format version 9"),
        (lambda text: "[]", "is damaged ("),
    ],
)
def test_a_damaged_file_is_detected_never_trusted(tmp_path, damage, expected):
    path = tmp_path / "checkpoint.json"
    CheckpointFile(path).save(_stored())
    path.write_text(damage(path.read_text()))
    loaded, problem = CheckpointFile(path).load()
    assert loaded is None and expected in problem and problem.endswith(": full pass")


def test_a_checkpoint_of_another_pipeline_or_hash_version_does_not_fit():
    stored = _stored()
    assert stored.matches("dr", "ureplicator.dr", "src", "dst") is None
    assert "belongs to pipeline dr" in stored.matches("dr", "ureplicator.other", "src", "dst")
    stored.hash_version = 1
    assert stored.matches("dr", "ureplicator.dr", "src", "dst") == "it was written with record hash version 1"


def test_two_verifiers_cannot_share_a_checkpoint(tmp_path):
    path = tmp_path / "checkpoint.json"
    with CheckpointFile(path).exclusive():
        with pytest.raises(checkpoint.CheckpointBusy, match="another verifier is running with checkpoint"):
            with CheckpointFile(path).exclusive():
                pass
    with CheckpointFile(path).exclusive():  # released when the first run ends
        pass


def test_the_file_s_model_names_what_is_wrong_in_one_line(tmp_path):
    from ureplicator.verifier.checkpoint import from_dict

    body = {"pipeline": "p", "group": "g", "source_alias": "a", "destination_alias": "b", "hash_version": 2,
            "topics": {"t": {"destination": "t", "source_topic_id": None, "destination_topic_id": None,
                             "last_full_at": "2026-01-01T00:00:00Z", "partitions": {"1": [1, -2, 3, 4]}}}}
    with pytest.raises(ValueError, match=r"^topics\.t\.partitions\.1\.1: Input should be greater than or equal to 0$"):
        from_dict(body)
    body["topics"]["t"]["partitions"] = {"1": [1, 2, 3, 4]}
    assert from_dict(body).topics["t"].partitions[1].destination_offset == 2
