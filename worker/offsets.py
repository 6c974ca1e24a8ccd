"""The watermark of one source partition: below it the destination acknowledged everything.

Pure bookkeeping, no Kafka: records are reported as sent and as acknowledged;
``position`` is ``last contiguously acknowledged offset + 1`` — the only offset
it is safe to commit. Acknowledgements may arrive out of order; the watermark
never passes an offset that is still in flight. :mod:`worker.acks` builds the
per-acquisition delivery-report handling on it.
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
