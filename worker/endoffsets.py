"""Read the source's end offsets of the owned partitions every few seconds, on a thread beside the mirror loop.

The fetch watch (:mod:`worker.fetchwatch`) compares them with the consumer's positions.
The question is asked through a client of its own (``clients.end_offsets_query``: one
batched ``ListOffsets`` at the fetching consumer's isolation level), never through the
fetching consumer, and never on the loop's thread: a source cluster that is away makes
the question fail or time out here, the answers grow old, and the watch does not decide.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ureplicator.common import logs

TP = tuple[str, int]
# The partitions asked about -> their end offsets; a partition whose answer failed is left out.
Query = Callable[[list[TP], float], dict[TP, int]]


class EndOffsets:
    """The latest end offset read per partition, with the (loop's) clock time its question was sent."""

    def __init__(self, query: Query, interval_s: float, log: Any, clock: Callable[[], float] = time.monotonic,
                 timeout_s: float = 10.0, background: bool = True) -> None:
        self._query = query
        self._background = background  # False (unit tests): each want() asks once, in the caller's thread
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._log = log
        self._clock = clock
        self._wanted: frozenset[TP] = frozenset()
        self._ends: dict[TP, tuple[int, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def want(self, partitions: Iterable[TP]) -> None:
        """The partitions to ask about from now on (the loop's owned set; one reference swap, no lock)."""
        self._wanted = frozenset(partitions)
        if not self._background:
            self.ask_once()
        elif self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._serve, name="fetch-watch-ends", daemon=True)
            self._thread.start()

    def snapshot(self) -> dict[TP, tuple[int, float]]:
        """``tp -> (end offset, when asked)`` for the wanted partitions answered so far."""
        ends = self._ends
        return {tp: ends[tp] for tp in self._wanted if tp in ends}

    def ask_once(self) -> None:
        """One round: ask about every wanted partition, keep what came back (the thread's body; tests call it)."""
        wanted = sorted(self._wanted)
        if not wanted:
            return
        asked_at = self._clock()
        try:
            found = self._query(wanted, self._timeout_s)
        except Exception as exc:  # noqa: BLE001 - any failure only means "not known now"
            if not self._failing:
                self._log.warning("end_offsets_unknown", partitions=len(wanted), error=logs.error_text(exc))
            self._failing = True
            return
        if self._failing:
            self._log.info("end_offsets_known_again", partitions=len(found))
        self._failing = False
        ends = {tp: end for tp, end in self._ends.items() if tp in self._wanted}
        ends.update((tp, (end, asked_at)) for tp, end in found.items() if end >= 0)
        self._ends = ends  # one reference swap: the loop reads a whole round or the previous one

    def close(self) -> None:
        self._stop.set()

    def _serve(self) -> None:
        while not self._stop.is_set():
            self.ask_once()
            self._stop.wait(self._interval_s)
