"""Track, per source partition, the watermark below which the destination acknowledged everything.

Pure bookkeeping, no Kafka: the mirror loop reports each record it sends and
each acknowledgement; :meth:`OffsetTracker.commit_position` returns
``last contiguously acknowledged offset + 1`` — the only offset it is safe to
commit. Acknowledgements may arrive out of order; the watermark never passes
an offset that is still in flight.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class PartitionOffsets:
    """In-flight source offsets of one partition, in send order."""

    position: int  # next offset to commit: every record below it is acknowledged (or skipped)
    in_flight: deque[int] = field(default_factory=deque)
    acked_early: set[int] = field(default_factory=set)
    committed: int = -1  # what was last committed to Kafka
    acked_records: int = 0  # acknowledged since the last status report (rates)
    acked_bytes: int = 0

    def sent(self, offset: int) -> None:
        self.in_flight.append(offset)

    def skipped(self, offset: int) -> None:
        """A record deliberately not mirrored (loop prevention) counts as done once earlier ones are."""
        self.in_flight.append(offset)
        self.acked(offset)

    def acked(self, offset: int) -> None:
        if self.in_flight and self.in_flight[0] == offset:
            self.in_flight.popleft()
            self.position = offset + 1
            while self.in_flight and self.in_flight[0] in self.acked_early:
                head = self.in_flight.popleft()
                self.acked_early.discard(head)
                self.position = head + 1
        else:
            self.acked_early.add(offset)


class OffsetTracker:
    """Per-partition watermarks for all partitions a worker owns."""

    def __init__(self) -> None:
        self._partitions: dict[tuple[str, int], PartitionOffsets] = {}

    def start(self, tp: tuple[str, int], position: int) -> PartitionOffsets:
        state = PartitionOffsets(position=position, committed=position)
        self._partitions[tp] = state
        return state

    def get(self, tp: tuple[str, int]) -> PartitionOffsets | None:
        return self._partitions.get(tp)

    def stop(self, tp: tuple[str, int]) -> PartitionOffsets | None:
        return self._partitions.pop(tp, None)

    def in_flight(self, tp: tuple[str, int]) -> int:
        state = self._partitions.get(tp)
        return len(state.in_flight) if state else 0

    def to_commit(self) -> dict[tuple[str, int], int]:
        """Positions that moved since the last commit."""
        return {
            tp: st.position
            for tp, st in self._partitions.items()
            if st.position >= 0 and st.position != st.committed
        }

    def mark_committed(self, positions: dict[tuple[str, int], int]) -> None:
        for tp, position in positions.items():
            state = self._partitions.get(tp)
            if state is not None:
                state.committed = position
