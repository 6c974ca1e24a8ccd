"""Translate a consumer group's committed source offset into the exact destination offset (pure, no I/O).

Every mirrored record carries its source offset in the ``urep`` header, and a
destination partition holds its source partition's records in source order,
except where a crashed worker's successor replayed from the last commit
(at-least-once). So, for a committed source offset ``C``:

    translate(C) = the first destination offset after the last record whose source offset is < C

A consumer that starts there reads nothing it consumed on the source and
misses nothing it did not. Without replays that is exactly "the first
destination record whose source offset is >= C" (the rule in issue 11). When a
replay crosses ``C`` (``... 48 49 50 | 45 46 ... 60``) the first copy of ``C``
is followed by records the group already consumed; the copy of ``C`` that
starts the unbroken tail is the one to resume from. Compaction gaps (no
record at some destination or source offsets) and records skipped by loop
prevention (no destination record for some source offsets) need nothing
special: they only make both sequences sparser. When no destination record
has a source offset >= C yet, the answer is the destination end offset and
the group is *ahead of mirroring*.

:func:`search` finds it with a bounded binary search over reads of a few
records at a time (the Kafka edge supplies ``read``); an :class:`AnchorIndex`
remembers (source offset, destination offset) pairs seen, so the next
translation of the same partition starts from a narrow range.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

BEHIND, AT, AHEAD = "behind", "at", "ahead"

# Groups that are never translated or synced: Kafka's and Connect's own, and every replicator's.
_INTERNAL_GROUP = re.compile(r"^(__.*|_confluent.*|connect-.*|ureplicator\..*)$")


@dataclass(frozen=True, slots=True)
class Seen:
    """One destination record as the search sees it: its offset and the source offset from ``urep``."""

    destination_offset: int
    source_offset: int


# read(offset) -> the next few records at destination offsets >= offset (ascending), [] at the end.
# Records without a readable urep header for this source partition are left out by the reader.
Reader = Callable[[int], Sequence[Seen]]


@dataclass
class AnchorIndex:
    """Per-partition (source offset -> destination offset) pairs learned by earlier reads.

    An anchor whose source offset is below ``C`` proves the answer lies after it
    (exactly, even with replays); one at or above ``C`` bounds the search from
    above on the first try. Anchors below the log start (retention) or beyond
    the end (topic recreated) are dropped by :meth:`trim`.
    """

    limit: int = 4096
    _pairs: list[tuple[int, int]] = field(default_factory=list)  # sorted by destination offset

    def __len__(self) -> int:
        return len(self._pairs)

    def add(self, records: Iterable[Seen]) -> None:
        for r in records:
            pair = (r.destination_offset, r.source_offset)
            i = bisect.bisect_left(self._pairs, pair)
            if i == len(self._pairs) or self._pairs[i] != pair:
                self._pairs.insert(i, pair)
        if len(self._pairs) > self.limit:
            # Keep an even spread: every other anchor still halves the remaining range.
            self._pairs = self._pairs[::2]

    def trim(self, log_start: int, end: int) -> None:
        if self._pairs and self._pairs[-1][0] >= end:
            self._pairs.clear()  # the partition is shorter than what we saw: recreated, start over
        self._pairs = [p for p in self._pairs if p[0] >= log_start]

    def bounds(self, source_offset: int, low: int, high: int) -> tuple[int, int]:
        """Narrow [low, high]: after the last anchor below ``source_offset``, up to the next one at or above it."""
        below = [d for d, s in self._pairs if s < source_offset]
        if below:
            low = max(low, below[-1] + 1)
        above = [d for d, s in self._pairs if s >= source_offset and d >= low]
        if above:
            high = min(high, above[0])
        return low, max(low, high)


@dataclass(frozen=True, slots=True)
class Found:
    """Where a committed source offset lands on one destination partition."""

    destination_offset: int  # a consumer starting here reads exactly the records the group has not consumed
    first_source_offset: int | None  # source offset of the record there (None: at the end)
    reads: int  # how many reads it took (the cost the anchor index saves)


class SearchError(RuntimeError):
    """The destination changed under the search faster than it could converge."""


def search(source_offset: int, log_start: int, end: int, read: Reader, anchors: AnchorIndex | None = None,
           verify_window: int = 1, max_reads: int = 200) -> Found:
    """Find where a consumer that committed ``source_offset`` on the source resumes on the destination.

    ``read`` returns a few records from a destination offset on; each read
    either proves the answer lies after a record below ``source_offset``
    (always exact) or, if it shows only records at or above it, that the
    answer lies at or before the read position (exact unless a replay comes
    later; the final check catches that). The final check reads
    ``verify_window`` batches from the answer: a record below
    ``source_offset`` in them restarts the search after it.
    """
    anchors = anchors if anchors is not None else AnchorIndex()
    anchors.trim(log_start, end)
    low, high = anchors.bounds(source_offset, log_start, end)
    reads = probes = 0
    while True:
        while low < high:
            mid = (low + high) // 2
            batch = read(mid)
            reads += 1
            probes += 1
            batch = [r for r in batch if r.destination_offset < end]
            anchors.add(batch[:1])
            below = [r.destination_offset for r in batch if r.source_offset < source_offset]
            if below:
                low = max(low, below[-1] + 1)
                if low > high:  # a replay inside this batch: the upper bound was a first copy, not the answer
                    high = end
            elif not batch or batch[0].source_offset >= source_offset:
                high = mid
            if probes > max_reads:
                raise SearchError(f"no convergence after {probes} reads between {low} and {high}")
        # Confirm: nothing below source_offset follows (a replay further out than one batch).
        position, tail, first = low, [], None
        for _ in range(max(1, verify_window)):
            batch = [r for r in read(position) if r.destination_offset < end]
            reads += 1
            if not batch:
                break
            if first is None:
                first = batch[0]
            tail.extend(batch)
            position = batch[-1].destination_offset + 1
        rewinds = [r.destination_offset for r in tail if r.source_offset < source_offset]
        if not rewinds:
            anchors.add(tail[:1])
            return Found(first.destination_offset if first else end, first.source_offset if first else None, reads)
        low, high = rewinds[-1] + 1, end
        probes += 1
        if probes > max_reads:
            raise SearchError(f"no convergence after {probes} reads")


def reference(source_offset: int, records: Sequence[Seen], end: int) -> int:
    """The definition, by a full scan (the oracle for tests; never used on a real partition)."""
    last_below = max((r.destination_offset for r in records if r.source_offset < source_offset), default=None)
    after = [r.destination_offset for r in records
             if last_below is None or r.destination_offset > last_below]
    return after[0] if after else end


# --- one group's answer -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionTranslation:
    """A group's position on one mirrored partition, on both clusters."""

    topic: str
    partition: int
    destination_topic: str
    source_committed: int
    destination_offset: int
    destination_end: int
    mirrored_through: int  # source offsets below this are on the destination (or were skipped/compacted)
    source_end: int | None  # None when the source did not answer its end offset

    @property
    def state(self) -> str:
        """behind: the destination holds records the group has not read; ahead: it committed past the mirror."""
        if self.destination_offset < self.destination_end:
            return BEHIND
        return AHEAD if self.source_committed > self.mirrored_through else AT

    @property
    def ahead_by(self) -> int:
        """Source offsets the group consumed that are not on the destination yet."""
        return max(0, self.source_committed - self.mirrored_through)

    @property
    def unmirrored(self) -> tuple[int, int] | None:
        """Source offsets [first, last] not yet on the destination and not yet consumed by the group.

        If the source were lost now, the group would never read these: exactly
        what a disaster failover costs it on this partition.
        """
        if self.source_end is None:
            return None
        first = max(self.source_committed, self.mirrored_through)
        return (first, self.source_end - 1) if first < self.source_end else None

    def as_dict(self) -> dict[str, object]:
        unmirrored = self.unmirrored
        return {
            "topic": self.topic,
            "partition": self.partition,
            "destination_topic": self.destination_topic,
            "source_committed": self.source_committed,
            "destination_offset": self.destination_offset,
            "destination_end": self.destination_end,
            "mirrored_through": self.mirrored_through,
            "source_end": self.source_end,
            "state": self.state,
            "ahead_by": self.ahead_by,
            "destination_lag": self.destination_end - self.destination_offset,
            "unmirrored": list(unmirrored) if unmirrored else None,
            "unmirrored_records": unmirrored[1] - unmirrored[0] + 1 if unmirrored else 0,
        }


def mirrored_through(last_source_offset: int | None, replicator_committed: int | None) -> int:
    """The source position the destination has reached: after its newest record, or the replicator's commit.

    The replicator's commit also covers records loop prevention skipped, which
    leave nothing on the destination.
    """
    candidates = [o for o in (None if last_source_offset is None else last_source_offset + 1,
                              replicator_committed) if o is not None and o >= 0]
    return max(candidates, default=0)


def mirrored_partitions(committed: Mapping[tuple[str, int], int], destinations: Mapping[str, str]
                        ) -> dict[tuple[str, int], tuple[str, int]]:
    """The group's committed partitions that this pipeline mirrors, each with its destination topic-partition.

    ``destinations`` is source topic -> destination topic as recorded when the
    topic was added (identity, prefix or mapping naming); partitions keep their number.
    Partitions without a valid commit (negative: none yet) have nothing to translate.
    """
    return {
        (topic, p): (destinations[topic], p)
        for (topic, p), offset in committed.items()
        if topic in destinations and offset >= 0
    }


def eligible_group(group: str, include: str | None = None, exclude: str | None = None) -> bool:
    """A group the sync may touch: not internal, not a replicator's, and passing the filters."""
    if _INTERNAL_GROUP.match(group):
        return False
    if include is not None and not re.fullmatch(include, group):
        return False
    return not (exclude is not None and re.fullmatch(exclude, group))


# --- sync plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncPlan:
    """What to commit for a group on the destination, and why the rest is left alone."""

    commit: dict[tuple[str, int], int]
    kept: dict[tuple[str, int], str]
    refused: str | None = None  # the whole group is left alone (active members)


def plan_sync(targets: Mapping[tuple[str, int], int], current: Mapping[tuple[str, int], int | None],
              active_members: int, force: bool = False) -> SyncPlan:
    """Offsets to write for a group on the destination: never while it has members, never backwards unless forced.

    ``targets`` and ``current`` are keyed by destination topic-partition; a
    group with members there already failed over and owns its position.
    """
    if active_members > 0:
        return SyncPlan({}, {}, f"the group has {active_members} active member(s) on the destination")
    commit: dict[tuple[str, int], int] = {}
    kept: dict[tuple[str, int], str] = {}
    for tp, target in sorted(targets.items()):
        now = current.get(tp)
        if now is not None and now >= 0 and target < now and not force:
            kept[tp] = f"would move back from {now} to {target} (use --force)"
        elif now == target:
            kept[tp] = "unchanged"
        else:
            commit[tp] = target
    return SyncPlan(commit, kept)
