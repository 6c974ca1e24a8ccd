"""A run is repeated only when retention moved a log start while Spark read, never for reading incrementally."""

from __future__ import annotations

from reports.model import Watermarks
from verifier import run
from verifier.watermarks import TopicSnapshot


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
    assert run._log_starts_moved(clusters, snap) == ""
    assert clusters.asked == {"source": [0, 1], "destination": [0, 1]}


def test_a_moved_log_start_is_named_per_side_and_partition():
    snap = _incremental_snapshot()
    snap.destination_only[2] = (5, 9)  # a destination partition the source does not have
    clusters = _LogStarts({0: 0, 1: 7}, {0: 3, 1: 0, 2: 5})
    assert run._log_starts_moved(clusters, snap) == "source 1, destination 0"
