"""Publish the worker's applied generation and per-partition progress in its ``status/`` node."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from kazoo.exceptions import KazooException, NoNodeError

from ureplicator.common import logs
from ureplicator.common.zkschema import PartitionStatus, WorkerStatus
from ureplicator.worker.acks import TP, AckLedger
from ureplicator.worker.metrics import WorkerMetrics

# How long a note (records expired before they were mirrored, a truncated source log) stays in the
# partition's status: an hour of "needs attention" for a person to see, not the partition's life.
NOTE_KEEP_S = 3600.0


class StatusReporter:
    """Build and write ``status/<worker>``: what the leader's hand-off gate and the API read."""

    def __init__(self, zk: Any, path: str, consumer: Any, ledger: AckLedger, metrics: WorkerMetrics,
                 log: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._zk = zk
        self._path = path
        self._consumer = consumer
        self._ledger = ledger
        self._metrics = metrics
        self._log = log
        self._clock = clock
        self.last_written = clock()
        # The ZooKeeper session this worker registered in; None while it is not registered.
        self.session: int | None = None
        self._progress: dict[TP, tuple[int, float]] = {}  # position, epoch seconds it last moved
        # A partition's note for the operator while it mirrors on (records deleted before they were
        # mirrored, a truncated source log): shown as its status error for NOTE_KEEP_S, then dropped,
        # so one past event does not keep the pipeline "needs attention" for the partition's life
        # (records_expired_total and its alert keep the count).
        self._notes: dict[TP, tuple[str, float]] = {}

    def use_consumer(self, consumer: Any) -> None:
        """Read the cached end offsets from ``consumer`` from now on (the fetch watch replaced the old one)."""
        self._consumer = consumer

    def due(self, now: float, interval_s: float) -> bool:
        return now - self.last_written >= interval_s

    def soon(self) -> None:
        """Publish at the next turn of the loop (an error the operator should see)."""
        self.last_written = 0.0

    def note(self, tp: TP, text: str) -> None:
        """Show ``text`` as ``tp``'s status error from the next write on, though it is not stopped."""
        self._notes[tp] = (text, self._clock())
        self.soon()

    def _note(self, tp: TP, now: float) -> str | None:
        found = self._notes.get(tp)
        if found is None:
            return None
        if now - found[1] > NOTE_KEEP_S:
            del self._notes[tp]
            return None
        return found[0]

    def forget(self, tp: TP) -> None:
        self._progress.pop(tp, None)
        self._notes.pop(tp, None)
        try:
            self._metrics.lag.remove(tp[0], str(tp[1]))
        except KeyError:
            pass  # never had a lag sample

    def build(self, generation: int, now: float) -> WorkerStatus:
        """The status document; resets the per-window acknowledgement counters (rates)."""
        elapsed = max(now - self.last_written, 1e-3)
        self.last_written = now
        parts: dict[TP, PartitionStatus] = {}
        wall = time.time()
        for tp, acks in self._ledger.partitions.items():
            records, size = acks.acked_records, acks.acked_bytes
            acks.acked_records = acks.acked_bytes = 0
            lag = -1
            try:
                _, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
                if acks.position >= 0 and high >= 0:
                    lag = max(0, high - acks.position)
                    self._metrics.lag.labels(tp[0], str(tp[1])).set(lag)
            except KafkaException:
                pass
            last = self._progress.get(tp)
            if last is None or last[0] != acks.position or lag == 0:
                self._progress[tp] = last = (acks.position, wall)
            if records:
                self._metrics.records.labels(tp[0]).inc(records)
                self._metrics.bytes.labels(tp[0]).inc(size)
            parts[tp] = PartitionStatus(
                committed=acks.committed,
                records_per_s=round(records / elapsed, 1),
                bytes_per_s=round(size / elapsed, 1),
                lag=lag,
                error=acks.error or self._note(tp, now),
                last_progress_at=round(last[1], 3),
            )
        self._metrics.in_flight.set(self._ledger.in_flight_bytes)
        return WorkerStatus(generation, parts, datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def publish(self, generation: int) -> None:
        """The periodic write, without waiting for ZooKeeper: the mirror loop never stands still for it.

        A synchronous ``set`` every ``worker.commit_interval_s`` stopped the loop for a
        ZooKeeper round trip, a visible tail in the end-to-end latency on a busy machine.
        ZooKeeper applies one session's requests in order, so a hand-off's status written
        later (also through here) lands after this one.
        """
        data = self.build(generation, self._clock()).encode()
        try:
            self._zk.set_async(self._path, data).rawlink(partial(self._published, data))
        except KazooException as exc:
            self._log.warning("status_write_failed", error=logs.error_text(exc))

    def _current_session(self) -> int | None:
        client_id = self._zk.client_id
        return client_id[0] if client_id else None

    def _published(self, data: bytes, result: Any) -> None:
        """ZooKeeper's answer to :meth:`publish` (kazoo's thread): create the node if our session has none.

        Only for a worker registered in the session that answers. A write sent just before
        a session expired is answered NoNode once kazoo resends it in the new session,
        before the worker registered again: a node created then would be an ephemeral
        status in the new session of a worker the leader does not know, which its own
        register() would have to clear away (it still does, for any other late write).
        """
        if result.successful():
            return
        error = result.exception
        if isinstance(error, NoNodeError):
            session = self._current_session()
            if self.session is None or session != self.session:
                self._log.info("status_not_recreated", reason="not registered in this ZooKeeper session",
                               registered_session=hex(self.session or 0), session=hex(session or 0))
                return
            try:
                self._zk.create_async(self._path, data, ephemeral=True)
            except KazooException as exc:
                self._log.warning("status_write_failed", error=logs.error_text(exc))
        else:
            self._log.warning("status_write_failed", error=logs.error_text(error))
