"""Tell a source partition the consumer silently stopped fetching from one the worker holds back on purpose.

Pure logic, clock-injected; :class:`worker.copyloop.CopyLoop` feeds it and acts on
what it says. librdkafka issue #5153 (open): an ``assign()`` consumer occasionally stops
receiving some partitions after a source broker restarts, with no error; restarting the
consumer resolves it. Both 30-minute soaks stopped that way (docs/operations.md).

A partition is **stalled** when its consumer position has not moved for
``worker.fetch_stall_s`` after the source's end offset was seen to *grow* past the end
seen when the position last moved. Growth is what tells a stall from a partition at its
end: at the end of an exactly-once topic the end offset legitimately stays one or more
ahead of the position (commit markers, aborted records), and that gap does not grow while
the consumer keeps up. The end offsets come from a helper thread
(:mod:`worker.endoffsets`) at the consumer's isolation level (read_committed: the last
stable offset, which an open source transaction holds back).

Nothing is decided while

* the end offset is unknown or older than ``fetch_stall_s`` (the source cluster is away),
  or was read before the position last moved;
* the worker holds the partition back itself (:func:`watched`): stopped after a refused
  record, being released, waiting for a rewind, not routed (an abandoned batch);
* the loop held back fetching (:meth:`FetchWatch.hold`): the in-flight cap, the rate limit,
  a fence, a transaction that cannot commit yet, a full producer queue, or a consumer queue
  the loop never emptied (it is behind: a record fetched now waits its turn there). The
  stall clocks *stop* for the time held, so backpressure is never a stall. Until
  2026-11-29 every clock started again at any hold; an exactly-once loop, whose commit
  waits a few milliseconds for delivery reports every second, then only decided when ten
  seconds in a row had no commit wait (the exactly-once soak's step 85: 28.7 s, not 10 s).

The remedy is :data:`REPLACE`: a new source consumer for every partition, again every
``fetch_stall_s`` while the stall lasts. Assigning the partition again on the same consumer
was tried first until the 20-minute soak of 2026-11-26: at both real stalls it did not help
(partitions newly assigned to the stuck consumer did not fetch either) and only added a
stall period to the recovery; a new consumer cleared both.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

TP = tuple[str, int]

REPLACE = "replace_consumer"


@dataclass(frozen=True)
class Watched:
    """One owned partition as the loop sees it now."""

    acquisition: object  # identity of the acquisition: a new one (a rewind) starts the watch afresh
    position: int  # the offset the loop consumes next (negative: not known yet)
    paused: bool = False  # the worker holds it back itself


@dataclass(frozen=True)
class Stall:
    """A decision: what to do about one stalled partition, and what it was based on."""

    tp: TP
    position: int
    end: int
    stalled_s: float
    action: str


@dataclass
class _Track:
    acquisition: object
    position: int
    since: float  # when the position last moved (or the watch last started again)
    baseline: int | None = None  # the first end offset read after ``since``
    grew_at: float | None = None  # when an end past ``baseline`` was first read
    acted_at: float | None = None  # the last remedy for this stall


def watched(
    acquisitions: Mapping[TP, object],
    positions: Mapping[TP, int],
    stopped: Collection[TP] = (),
    releasing: Collection[TP] = (),
    rewinding: Collection[TP] = (),
    routed: Collection[TP] | None = None,
) -> dict[TP, Watched]:
    """The owned partitions with their positions, each marked paused when the worker holds it back itself.

    ``stopped``: a refused record stopped it (the consumer pauses it); ``releasing``: the
    change under way unassigned it; ``rewinding``: it waits to restart from its acknowledged
    position; ``routed``: the partitions the loop produces (one missing was abandoned).
    """
    out = {}
    for tp, acquisition in acquisitions.items():
        paused = (tp in stopped or tp in releasing or tp in rewinding
                  or (routed is not None and tp not in routed))
        out[tp] = Watched(acquisition, positions.get(tp, -1), paused)
    return out


class FetchWatch:
    """Per owned partition: when its position last moved and how the source's end offset went since."""

    def __init__(self, stall_s: float) -> None:
        if stall_s <= 0:
            raise ValueError("stall_s must be positive (0 disables the watch: do not build one)")
        self.stall_s = stall_s
        self._tracks: dict[TP, _Track] = {}
        self._held_s = 0.0  # seconds the loop held back fetching since the last look
        self._held_throughout = False
        self._looked_at: float | None = None

    def hold(self, seconds: float | None = None) -> None:
        """The loop held back fetching for its own reasons, for ``seconds`` (None: since the last look).

        No position is expected to move meanwhile, so every stall clock stops for that long.
        """
        if seconds is None:
            self._held_throughout = True
        else:
            self._held_s += max(0.0, seconds)

    def observe(self, now: float, partitions: Mapping[TP, Watched],
                ends: Mapping[TP, tuple[int, float]]) -> list[Stall]:
        """Compare the positions with the end offsets (``tp -> (end, when read)``); the remedies due now."""
        since_look = now - self._looked_at if self._looked_at is not None else 0.0
        held_s = since_look if self._held_throughout else min(self._held_s, since_look)
        self._looked_at, self._held_s, self._held_throughout = now, 0.0, False
        # Growth first seen in this look counts from no earlier than its un-held end.
        counts_from = now - (since_look - held_s) if held_s > 0 else float("-inf")
        for tp in [tp for tp in self._tracks if tp not in partitions]:
            del self._tracks[tp]
        due = []
        for tp, seen in partitions.items():
            track = self._tracks.get(tp)
            if (track is None or seen.position < 0
                    or track.acquisition is not seen.acquisition or track.position != seen.position):
                # Moved or newly owned: watch from here, against the first end read from now on.
                self._tracks[tp] = _Track(seen.acquisition, seen.position, now)
                continue
            if seen.paused:
                # The worker holds this partition back: its clock starts again once it is not, but
                # the end it grew past is still the one read when the position last moved.
                track.since, track.grew_at, track.acted_at = now, None, None
                continue
            if held_s > 0:
                # The whole loop held back fetching that long: not a second of the stall.
                if track.grew_at is not None:
                    track.grew_at = min(now, track.grew_at + held_s)
                if track.acted_at is not None:
                    track.acted_at = min(now, track.acted_at + held_s)
            stall = self._judge(tp, track, now, ends.get(tp), counts_from)
            if stall is not None:
                due.append(stall)
        return due

    def _judge(self, tp: TP, track: _Track, now: float, end_read: tuple[int, float] | None,
               counts_from: float) -> Stall | None:
        if end_read is None:
            return None
        end, read_at = end_read
        if read_at < track.since or now - read_at > self.stall_s:
            return None  # read before the position last moved, or too old to speak for now
        if track.baseline is None:
            track.baseline = end  # what "at its end" looks like for this position (markers included)
            return None
        if end <= track.position:
            track.baseline, track.grew_at = end, None  # nothing to fetch (a truncated or recreated log)
            return None
        if end > track.baseline and track.grew_at is None:
            track.grew_at = max(read_at, counts_from)
        if track.grew_at is None:
            return None
        stalled_s = now - track.grew_at
        since_action = now - track.acted_at if track.acted_at is not None else stalled_s
        if stalled_s < self.stall_s or since_action < self.stall_s:
            return None
        track.acted_at = now
        return Stall(tp, track.position, end, round(stalled_s, 1), REPLACE)
