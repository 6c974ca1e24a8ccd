"""A run is repeated only when retention moved a log start while Spark read, never for reading incrementally."""

from __future__ import annotations

from ureplicator.reports.model import Watermarks
from ureplicator.verifier import run
from ureplicator.verifier.watermarks import TopicSnapshot


class _LogStarts:
    """The one admin request the re-run check makes: the log starts as they are now."""

    def __init__(self, source: dict[int, int], destination: dict[int, int]) -> None:
        self.now = {"source": source, "destination": destination}
        self.asked: dict[str, list[int]] = {}

    def log_starts(self, side: str, topic: str, partitions: list[int]) -> dict[int, int]:
        self.asked[side] = partitions
        return {p: self.now[side][p] for p in partitions if p in self.now[side]}


def _incremental_snapshot() -> TopicSnapshot:
    # Both logs start at 0; the checkpoint resumes the source at 1,000,000 and the destination at 990,000.
    marks = {
        p: Watermarks(p, 0, 1_010_000, 1_010_000, 0, 1_010_001, resume_from=1_000_000,
                      destination_resume_from=990_000)
        for p in range(2)
    }
    return TopicSnapshot("orders", "orders.mirror", marks, {})


def test_an_incremental_run_whose_log_starts_did_not_move_is_not_repeated():
    # Given an incremental run that read the destination from its checkpoint, far above the log start
    snap = _incremental_snapshot()
    # When the log starts are read again and are unchanged
    clusters = _LogStarts({0: 0, 1: 0}, {0: 0, 1: 0})
    # Then nothing moved: the run is not repeated and its report gets no note
    assert run._log_starts_moved(clusters, snap) == {}
    assert clusters.asked == {"source": [0, 1], "destination": [0, 1]}


def test_a_moved_log_start_is_named_per_side_and_partition():
    snap = _incremental_snapshot()
    snap.destination_only[2] = (5, 9)  # a destination partition the source does not have
    clusters = _LogStarts({0: 0, 1: 7}, {0: 3, 1: 0, 2: 5})
    assert run._log_starts_moved(clusters, snap) == {0: "destination 0", 1: "source 1"}


class _Retention:
    """A source whose partition 1 loses its first records to retention while the first attempt reads."""

    def __init__(self) -> None:
        self.log_start = {0: 0, 1: 0}
        self.snapshots: list[list[int]] = []

    def snapshot(self, topic: str, destination: str, group: str) -> TopicSnapshot:
        marks = {p: Watermarks(p, self.log_start[p], 100, 100, 0, 100) for p in (0, 1)}
        return TopicSnapshot(topic, destination, marks, {})

    def log_starts(self, side: str, topic: str, partitions: list[int]) -> dict[int, int]:
        if side == "source" and len(self.snapshots) == 1:
            self.log_start[1] = 5  # retention ran during the first attempt
        return {p: self.log_start[p] if side == "source" else 0 for p in partitions}


def test_only_the_partitions_whose_log_start_moved_are_verified_again(monkeypatch):
    from ureplicator.reports.model import BucketAggregate
    from ureplicator.verifier import pass1, pass2
    from ureplicator.verifier.pass1 import BucketPass
    from ureplicator.verifier.route import KafkaSide

    clusters = _Retention()

    def bucket_pass(spark, source, destination, snap, bucket_size, rule=None):
        clusters.snapshots.append(sorted(snap.partitions))
        # partition 1's first bucket differs: records vanished while they were read
        found = BucketPass(verified={p: 100 for p in snap.partitions})
        for p in snap.partitions:
            found.source[(p, 0)] = BucketAggregate(100, 1, 1)
            found.destination[(p, 0)] = BucketAggregate(100 if p == 0 else 95, 1, 1)
        return found

    monkeypatch.setattr(pass1, "bucket_pass", bucket_pass)
    monkeypatch.setattr(pass2, "record_pass", lambda *args: {})
    # Given a run whose partition 1 differs while retention moves its log start
    job = run._TopicJob(clusters, (KafkaSide("s"), KafkaSide("d")), run.Target("t", "t"), "g", 1000, "t",
                        lambda message: None)
    report = run.TopicReport("t", "t")
    # When the topic is verified
    run._passes(None, job, report)
    # Then the first attempt read both partitions, the second only partition 1, from its new log start
    assert clusters.snapshots == [[0, 1], [1]]
    assert [p.partition for p in report.partitions] == [0, 1]
    assert report.partitions[1].watermarks.log_start == 5
    # and nothing says a log start kept moving: it moved once, and the second attempt saw it stay
    assert not [n for p in report.partitions for n in p.notes if "kept moving" in n]
    assert report.records_read == {"source": 0, "destination": 0}
