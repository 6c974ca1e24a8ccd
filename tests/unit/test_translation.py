"""Offset translation: the search agrees with the definition on any mirror history, and a consumer resumes exactly."""

from __future__ import annotations

import bisect
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ureplicator.failover.translation import (
    AHEAD,
    AT,
    BEHIND,
    AnchorIndex,
    PartitionTranslation,
    Seen,
    eligible_group,
    mirrored_partitions,
    mirrored_through,
    plan_sync,
    reference,
    search,
)


@st.composite
def mirror_histories(draw):
    """A destination partition as the replicator writes it.

    Source offsets 0..n-1; some never reach the destination (loop prevention
    or source compaction); a worker killed with -9 is succeeded by one that
    replays from the last commit; destination compaction drops records whose
    source offset has a later copy, and sometimes a source offset entirely.
    """
    n = draw(st.integers(min_value=0, max_value=120))
    skipped = draw(st.sets(st.integers(min_value=0, max_value=max(0, n - 1)), max_size=n // 3))
    sent = [o for o in range(n) if o not in skipped]
    written: list[int] = []
    committed = 0
    position = 0
    while position < len(sent):
        crash_at = draw(st.integers(min_value=position + 1, max_value=len(sent)))
        written.extend(sent[position:crash_at])
        if crash_at == len(sent):
            break
        # The successor starts from the last commit: at or after the previous one, at or before the crash.
        committed = draw(st.integers(min_value=committed, max_value=crash_at))
        position = committed
    last_copy = {s: i for i, s in enumerate(written)}
    compacted = draw(st.sets(st.integers(min_value=0, max_value=max(0, len(written) - 1)), max_size=len(written) // 3))
    log_start = draw(st.integers(min_value=0, max_value=5))
    superseded = draw(st.sets(st.sampled_from(written), max_size=len(written) // 4)) if written else set()
    # Compaction keeps a key's newest record: an older copy may go, the last only with the whole key.
    records = [
        Seen(log_start + i, s) for i, s in enumerate(written)
        if s not in superseded and (i not in compacted or last_copy[s] == i)
    ]
    return records, log_start, log_start + len(written), n


def reader(records: list[Seen], batch: int):
    """A fake destination partition: the next ``batch`` records at or after an offset, and a log of reads."""
    reads: list[int] = []
    offsets = [r.destination_offset for r in records]

    def read(offset: int) -> list[Seen]:
        reads.append(offset)
        start = bisect.bisect_left(offsets, offset)
        return records[start:start + batch]

    return read, reads


@settings(max_examples=200, deadline=None)
@given(history=mirror_histories(), batch=st.integers(min_value=1, max_value=8), data=st.data())
def test_search_agrees_with_the_definition_with_and_without_anchors(history, batch, data):
    records, log_start, end, n = history
    read, _ = reader(records, batch)
    anchors = AnchorIndex()
    for committed in data.draw(st.lists(st.integers(min_value=0, max_value=n + 3), min_size=1, max_size=6)):
        expected = reference(committed, records, end)
        fresh = search(committed, log_start, end, read, verify_window=200)
        warm = search(committed, log_start, end, read, anchors, verify_window=200)
        assert fresh.destination_offset == expected
        assert warm.destination_offset == expected


@settings(max_examples=200, deadline=None)
@given(history=mirror_histories(), data=st.data())
def test_a_consumer_resuming_there_reads_each_unread_record_and_nothing_it_read(history, data):
    records, _, end, n = history
    committed = data.draw(st.integers(min_value=0, max_value=n + 1))
    start = reference(committed, records, end)
    delivered = [r.source_offset for r in records if r.destination_offset >= start]
    on_destination = Counter(r.source_offset for r in records)
    # Nothing the group consumed on the source comes again
    assert all(s >= committed for s in delivered)
    # Nothing after its commit that the destination holds is lost
    assert {s for s in on_destination if s >= committed} <= set(delivered)
    # And a record comes twice only where the destination itself holds it twice after that point
    assert all(count <= on_destination[s] for s, count in Counter(delivered).items())


def test_a_replay_crossing_the_commit_resumes_at_the_copy_that_starts_the_unbroken_tail():
    # Given 0..50 mirrored, a kill -9, and the successor replaying from the commit at 45
    records = [Seen(d, s) for d, s in enumerate([*range(51), *range(45, 61)])]
    read, _ = reader(records, 4)
    # When a group that committed 48 on the source is translated
    found = search(48, 0, len(records), read)
    # Then it resumes at the second copy of 48 (destination offset 54): 48..60, once each
    assert (found.destination_offset, found.first_source_offset) == (54, 48)
    assert [r.source_offset for r in records[54:]] == list(range(48, 61))


def test_compaction_gaps_and_skipped_records_resume_at_the_next_record_there_is():
    # Destination offsets 3 and 4 compacted away; source offsets 5-7 were skipped by loop prevention
    records = [Seen(0, 0), Seen(1, 1), Seen(2, 2), Seen(5, 8), Seen(6, 9)]
    read, _ = reader(records, 2)
    assert search(5, 0, 7, read).destination_offset == 5
    assert search(3, 0, 7, read).destination_offset == 5
    assert search(10, 0, 7, read).destination_offset == 7  # ahead of mirroring: the end


def test_anchors_make_the_second_translation_of_a_partition_cheap():
    records = [Seen(d, d) for d in range(100_000)]
    read, reads = reader(records, 1)
    anchors = AnchorIndex()
    first = search(61_234, 0, 100_000, read, anchors)
    cold = len(reads)
    reads.clear()
    again = search(61_234, 0, 100_000, read, anchors)
    assert first.destination_offset == again.destination_offset == 61_234
    assert cold <= 20  # a binary search: log2(100k) reads plus the confirmation
    assert len(reads) == 1  # the anchor pins it: only the confirmation read


def test_anchors_of_a_recreated_topic_are_forgotten():
    anchors = AnchorIndex()
    anchors.add([Seen(500, 500)])
    records = [Seen(d, d) for d in range(10)]
    read, _ = reader(records, 1)
    assert search(5, 0, 10, read, anchors).destination_offset == 5
    assert len(anchors) >= 1 and all(d < 10 for d, _ in anchors._pairs)


def _translation(committed: int, dest_offset: int, dest_end: int, through: int, source_end: int | None = 100):
    return PartitionTranslation("orders", 0, "src.orders", committed, dest_offset, dest_end, through, source_end)


def test_a_group_behind_at_and_ahead_of_mirroring():
    behind = _translation(committed=40, dest_offset=40, dest_end=90, through=90)
    assert (behind.state, behind.ahead_by, behind.unmirrored) == (BEHIND, 0, (90, 99))
    at = _translation(committed=90, dest_offset=90, dest_end=90, through=90)
    assert (at.state, at.ahead_by, at.unmirrored) == (AT, 0, (90, 99))
    ahead = _translation(committed=95, dest_offset=90, dest_end=90, through=90)
    assert (ahead.state, ahead.ahead_by, ahead.unmirrored) == (AHEAD, 5, (95, 99))
    caught_up = _translation(committed=100, dest_offset=100, dest_end=100, through=100)
    assert caught_up.unmirrored is None
    assert caught_up.as_dict()["unmirrored_records"] == 0
    assert ahead.as_dict()["unmirrored_records"] == 5


def test_mirrored_through_counts_records_loop_prevention_skipped():
    assert mirrored_through(41, None) == 42
    assert mirrored_through(41, 50) == 50  # 42-49 came from the destination: nothing to write
    assert mirrored_through(None, None) == 0


@pytest.mark.parametrize("naming", ["identity", "prefix", "mapping"])
@given(topics=st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), min_size=1, max_size=5, unique=True),
       partitions=st.integers(min_value=1, max_value=4))
def test_each_committed_partition_maps_to_its_recorded_destination_topic(naming, topics, partitions):
    rule = {"identity": lambda t: t, "prefix": lambda t: f"src.{t}", "mapping": lambda t: f"{t}-dr"}[naming]
    destinations = {t: rule(t) for t in topics[:-1]}  # the last topic is not mirrored by this pipeline
    committed = {(t, p): 10 * p for t in topics for p in range(partitions)}
    committed[(topics[0], partitions)] = -1001  # no commit yet on that partition
    mapped = mirrored_partitions(committed, destinations)
    assert mapped == {(t, p): (rule(t), p) for t in topics[:-1] for p in range(partitions)}


def test_internal_and_replicator_groups_are_never_synced():
    for group in ("__consumer_offsets", "connect-mm2", "ureplicator.dr", "ureplicator.other", "_confluent-ksql"):
        assert not eligible_group(group)
    assert eligible_group("billing")
    assert not eligible_group("billing", include="orders-.*")
    assert eligible_group("orders-eu", include="orders-.*", exclude=".*-test")
    assert not eligible_group("orders-test", include="orders-.*", exclude=".*-test")


def test_sync_never_touches_a_group_with_members_and_never_rewinds_unless_forced():
    tp1, tp2, tp3 = ("o", 0), ("o", 1), ("o", 2)
    targets = {tp1: 50, tp2: 30, tp3: 7}
    current = {tp1: 40, tp2: 35, tp3: 7}
    refused = plan_sync(targets, current, active_members=2).refused
    assert refused == "the group has 2 active member(s) on the destination"
    assert plan_sync(targets, current, active_members=2, force=True).commit == {}
    plan = plan_sync(targets, current, active_members=0)
    assert plan.commit == {tp1: 50}
    assert plan.kept == {tp2: "would move back from 35 to 30 (use --force)", tp3: "unchanged"}
    assert plan_sync(targets, current, active_members=0, force=True).commit == {tp1: 50, tp2: 30}
    assert plan_sync({tp1: 5}, {}, active_members=0).commit == {tp1: 5}
