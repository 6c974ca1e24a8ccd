"""Offset watermarks never pass an unacknowledged record."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ureplicator.worker.acks import AckLedger


def test_in_order_acks_advance_the_watermark():
    tracker = AckLedger()
    state = tracker.acquire(("t", 0), "t", position=-1)
    for offset in (10, 11, 12):
        state.sent(offset)
    state.acked(10)
    state.acked(11)
    assert tracker.to_commit() == {("t", 0): 12}


def test_an_early_ack_waits_for_the_records_before_it():
    tracker = AckLedger()
    state = tracker.acquire(("t", 0), "t", position=5)
    for offset in (5, 6, 7):
        state.sent(offset)
    state.acked(7)
    state.acked(6)
    assert tracker.to_commit() == {}
    state.acked(5)
    assert tracker.to_commit() == {("t", 0): 8}


def test_skipped_records_count_once_earlier_ones_are_acked():
    tracker = AckLedger()
    state = tracker.acquire(("t", 0), "t", position=0)
    state.sent(0)
    state.skipped(1)
    assert tracker.to_commit() == {}
    state.acked(0)
    assert tracker.to_commit() == {("t", 0): 2}


def test_committed_positions_are_not_repeated():
    tracker = AckLedger()
    state = tracker.acquire(("t", 1), "t", position=0)
    state.sent(0)
    state.acked(0)
    tracker.mark_committed(tracker.to_commit())
    assert tracker.to_commit() == {}


@given(st.lists(st.integers(min_value=0, max_value=40), unique=True), st.randoms())
def test_watermark_is_never_past_an_unacked_offset(offsets, rnd):
    offsets = sorted(offsets)
    tracker = AckLedger()
    state = tracker.acquire(("t", 0), "t", position=-1)
    for offset in offsets:
        state.sent(offset)
    acks = list(offsets)
    rnd.shuffle(acks)
    acked: set[int] = set()
    for offset in acks:
        state.acked(offset)
        acked.add(offset)
        position = state.position
        assert all(o in acked for o in offsets if o < position)
        unacked = [o for o in offsets if o not in acked]
        if unacked:
            assert position <= min(unacked)
    if offsets:
        assert state.position == offsets[-1] + 1
