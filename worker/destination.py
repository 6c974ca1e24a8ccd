"""The destination side of a worker: its producer and everything done to it, answered with what happened.

:class:`Destination` owns the producer the loop sends through: poll, flush, purge, its
replacement by a fresh one (a new idempotent producer id; in exactly-once mode a new
``init_transactions``), the watch for a producer that stopped acknowledging, the C loop's
handle to it, and in exactly-once mode the transaction calls (begin, send offsets and
commit, abort; :mod:`worker.transactions` classifies their errors).

It never touches the worker's partitions. Each call that changes the producer returns an
outcome instead — :class:`Replaced`, :class:`Purged`, :class:`Aborted`, :class:`Committed`,
:class:`Retry`, :class:`Stalled` — and the loop acts on it (rewinds, ledger resets,
metrics, logs: :mod:`worker.mirror`). A record ``produce`` refused fatally is the one
thing the loop tells it (:meth:`Destination.mark_broken`); the hot path calls the
producer's own ``produce`` with no wrapper in between.

A replaced producer goes as :mod:`worker.transactions` explains (``retire``, never
``close()``, in exactly-once mode); at-least-once, it is closed when empty and otherwise
dropped, so librdkafka destroys it without a flush and none of its reports can come after
the loop has forgotten what it awaited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from ureplicator.common.errors import ConfigError
from ureplicator.worker import transactions
from ureplicator.worker.clients import FatalErrors


@dataclass(frozen=True)
class Replaced:
    """A fresh producer took over; the old one's unreported records will never be reported."""

    reason: str
    fatal: bool  # a fatal error (the gapless guarantee fired, a fenced producer) caused it


@dataclass(frozen=True)
class Purged:
    """At-least-once: librdkafka's queue was dropped; ``replaced`` unless the worker is stopping."""

    why: str
    replaced: Replaced | None
    error: str | None = None  # librdkafka refused the purge itself (the replacement follows all the same)


@dataclass(frozen=True)
class Aborted:
    """Exactly-once: the open transaction is gone (``ABORTED``), or with its producer (``FATAL``, ``replaced``)."""

    why: str
    outcome: str  # transactions.ABORTED or transactions.FATAL
    replaced: Replaced | None


@dataclass(frozen=True)
class Committed:
    """Exactly-once: the transaction and the positions sent with it are durable."""


@dataclass(frozen=True)
class Retry:
    """Exactly-once: not committed yet (reports still due, or a retriable error): the same call later."""


@dataclass(frozen=True)
class Stalled:
    """The producer holds records yet acknowledged none for ``silent_s``."""

    silent_s: float


TxnOutcome = Committed | Retry | Aborted


class Destination:
    """The producer a worker sends through, and every call that changes it."""

    def __init__(
        self,
        producer: Any,
        make_producer: Callable[[], Any],
        errors: FatalErrors,
        *,
        stall_s: float,
        native: Any = None,
        native_mode: str = "off",
        native_reason: str = "",
        on_loop: Callable[[bool, str], None] | None = None,
        txn: transactions.Transactions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.producer = producer
        self._make_producer = make_producer
        self.errors = errors  # the producers' error_cb: fatal errors and refused credentials
        self.txn = txn
        self._stall_s = stall_s
        self._native = native
        self._native_mode = native_mode
        self._native_reason = native_reason  # why there is no C loop, when ``native`` is None
        self._on_loop = on_loop  # told the loop at every (re)bind: the gauge and the registration follow
        self.loop_reason = ""  # why the current producer is served by the Python loop ("" on the C loop)
        self._clock = clock
        self._broken: str | None = None  # produce() said the producer is fatally broken
        self.native_target: Any = None  # the confluent_kafka.Producer the C loop drives, if any
        self._bind()
        # Liveness: the acknowledgement count, and when it last moved (None: take it at the next look).
        self._acks_seen: int | None = None
        self._acks_moved_at = clock()

    def _bind(self) -> None:
        """Point the C loop at the current producer (None: the Python loop serves it)."""
        client = getattr(self.producer, "client", None)
        client_id = getattr(self.producer, "client_id", "")
        usable = (self._native is not None and client is not None and bool(client_id)
                  and self._native.is_producer(client, client_id))
        if self._native is not None and not usable and self._native_mode == "on":
            raise ConfigError("worker.native_loop", "is 'on' but the producer is not a confluent_kafka.Producer")
        self.native_target = client if usable else None
        if usable:
            self.loop_reason = ""
        elif self._native is None:
            self.loop_reason = self._native_reason or "no C loop"
        else:
            self.loop_reason = "the destination producer is not one the C loop can drive (is_producer refused it)"
        if self._on_loop is not None:
            self._on_loop(usable, self.loop_reason)

    # --- plain calls ---------------------------------------------------------------------------

    def poll(self, timeout: float) -> None:
        self.producer.poll(timeout)

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` for the reports still due; returns how many are still due."""
        return int(self.producer.flush(timeout))

    def queued(self) -> int:
        """Records the producer holds (queued or in flight)."""
        return len(self.producer)

    @property
    def broken(self) -> str | None:
        """Why the producer accepts nothing more (a fatal error), or None."""
        return self._broken or self.errors.failed

    def mark_broken(self, reason: str) -> None:
        """``produce`` raised a fatal error: the loop replaces the producer on its next turn."""
        self._broken = reason

    # --- replacement, purge and the stall watch ------------------------------------------------

    def replace(self, reason: str, purged: bool = False) -> Replaced:
        """A fresh producer for the current one, after a purge (``purged``) or a fatal error.

        Purging in-flight records leaves a gap in the idempotent producer's sequence
        numbers; librdkafka then drains and bumps its epoch, a state machine that was seen
        to stay silent after a destination restart (the soak stall, docs/operations.md).
        A fatal error (the gap-less guarantee fired) leaves a producer that accepts
        nothing. A producer built afresh carries none of it. The old one's purged records
        are reported first (up to 1 s), so the loop knows which partitions to rewind.
        """
        fatal = self.broken is not None
        old = self.producer
        if not purged:
            old.purge(in_queue=True, in_flight=True, blocking=True)  # GuardedProducer: fatal errors become state
        deadline = time.monotonic() + 1.0
        old.poll(0)
        while len(old) and time.monotonic() < deadline:
            old.poll(0.05)  # the purged records' reports, so their partitions are marked for a rewind
        self.producer = self._make_producer()
        self._bind()
        if self.txn is not None:
            # The new producer's init_transactions aborts whatever the old one left open. The old
            # one is never closed (close() aborts and flushes without a bound: worker/transactions.py)
            # and is destroyed beside the loop; nothing polls it, so none of its reports arrives.
            self.txn.reset()
            last = [old]
            del old
            transactions.retire(last)
        else:
            if not len(old):
                old.close()  # nothing left to flush; otherwise dropping it destroys it without a flush
            # The last reference: librdkafka's handle is destroyed here, so none of its reports can
            # arrive after the loop forgot what it awaited.
            del old
        self._broken = self.errors.failed = self.errors.coordinator_lost = None
        # The stall watch starts again with the new producer: counted from before the replacement,
        # it would call a producer stalled that has not had a turn yet (seen: an abort of its
        # first transaction right after transactions_ready).
        self._acks_seen = None
        self._acks_moved_at = self._clock()
        return Replaced(reason, fatal)

    def purge(self, why: str, replace: bool = True) -> Purged | Aborted | None:
        """Drop what librdkafka still holds, so nothing more is sent (a fence, a stall, a lost session).

        Queued records are never sent; in-flight ones are no longer *retried* (a retry
        after the partition was given away would land behind the new owner's writes).
        Requests already on the wire cannot be recalled: the broker handles them before
        any new owner, who needs round trips to that broker first. The purged records come
        back as delivery reports with ``_PURGE_QUEUE``/``_PURGE_INFLIGHT``. At-least-once the
        producer is then replaced (unless not ``replace``); exactly-once the open transaction
        is aborted instead, as none of its records will ever be read committed (None: none
        was open, nothing was sent since the last commit).
        """
        if self.txn is not None:
            if not self.txn.open:
                return None
            # An abort that fails replaced the producer; the new one's init_transactions aborts it.
            return self.abort(why, timeout_s=5.0)
        error = None
        try:
            self.producer.purge(in_queue=True, in_flight=True, blocking=False)
        except KafkaException as exc:
            error = str(exc.args[0])
        self.producer.poll(0)  # run the purged records' reports now
        return Purged(why, self.replace(why, purged=True) if replace else None, error)

    def watch(self, now: float, acks: int, in_flight_bytes: int) -> Stalled | None:
        """Whether the producer holds records yet acknowledged none for ``worker.producer_stall_s``.

        librdkafka can stay silent after a destination broker restart: records queued,
        no delivery report, no error, while the broker serves other clients (seen in the
        soak and in the destination-outage test). With ``message.timeout.ms=0`` nothing
        would ever fail, so the partitions would never move again. The loop treats a stall
        like a release that timed out: purge, a fresh producer, rewind to the acknowledged
        positions. While the destination is really down this repeats every stall period.
        """
        if self._acks_seen is None:
            self._acks_seen = acks
        if acks != self._acks_seen or in_flight_bytes <= 0 or not len(self.producer):
            self._acks_seen = acks
            self._acks_moved_at = now
            return None
        silent_s = now - self._acks_moved_at
        if silent_s < self._stall_s:
            return None
        self._acks_moved_at = now
        return Stalled(silent_s)

    # --- exactly-once mode -----------------------------------------------------------------------

    def ready(self) -> bool:
        """Exactly-once: ``init_transactions`` ran on the current producer (tried now if not)."""
        if self.txn is None or self.txn.ready_on(self.producer):
            return True
        if not self.txn.ready(self.producer):
            return False
        # The connection errors of the way here (a destination still down while it was made)
        # say nothing about the coordinators this producer found: serve them, then forget them.
        self.producer.poll(0)
        self.errors.coordinator_lost = None
        return True

    def silent_s(self, now: float, acks: int) -> float:
        """How long the producer has held records without a delivery report (0: one came since the last look)."""
        if self._acks_seen is None or acks != self._acks_seen or not len(self.producer):
            return 0.0
        return now - self._acks_moved_at

    def renew(self, why: str, silent_s: float = 0.0) -> Aborted | None:
        """Exactly-once, at a commit: a fresh producer if the destination's coordinators were lost since
        the current one became ready (:attr:`FatalErrors.coordinator_lost`), or if it owes reports and
        has had none for :data:`transactions.RENEW_SILENT_S` (``silent_s``); None otherwise.

        The old producer's ``send_offsets_to_transaction`` would wait for ever, costing the
        bound of :data:`transactions.OFFSETS_TIMEOUT_S` plus the overrun (10 s, every partition
        of the worker waiting) and then the producer anyway. Its open transaction is aborted by
        the successor's ``init_transactions``; the loop rewinds to the last committed positions.
        """
        lost = self.errors.coordinator_lost
        if self.txn is None:
            return None
        if lost is not None:
            reason = f"destination coordinators lost ({lost}); renewed before sending the positions"
        elif silent_s >= transactions.RENEW_SILENT_S:
            reason = f"no delivery report for {silent_s:.1f} s; renewed instead of waited for"
        else:
            return None
        return Aborted(why, transactions.FATAL, self.replace(f"transaction {why}: {reason}"))

    def begin(self) -> None:
        """Exactly-once: open a transaction before the first record of an interval."""
        if self.txn is not None:
            self.txn.begin(self.producer)

    def commit(self, offsets: list[TopicPartition], why: str) -> TxnOutcome:
        """Send ``offsets`` (destination topic/partition -> next source offset) and commit the transaction."""
        assert self.txn is not None
        outcome = self.txn.commit(self.producer, offsets)
        if outcome == transactions.COMMITTED:
            return Committed()
        if outcome == transactions.RETRY:
            return Retry()
        return self._ended(outcome, why)

    def abortable(self) -> bool:
        """Whether the open transaction can only be aborted (:meth:`Transactions.abortable`)."""
        return self.txn is not None and self.txn.abortable(self.producer)

    def abort(self, why: str, timeout_s: float | None = None) -> Aborted:
        """Abort the open transaction: none of its records is ever visible to a read_committed reader."""
        assert self.txn is not None
        return self._ended(self.txn.abort(self.producer, timeout_s), why)

    def _ended(self, outcome: str, why: str) -> Aborted:
        """After an abort: the aborted records' reports (they acknowledge nothing), or a new producer if fatal."""
        if outcome == transactions.FATAL:
            return Aborted(why, outcome, self.replace(f"transaction {why}: producer fenced or failed"))
        deadline = time.monotonic() + 5.0
        self.producer.poll(0)
        while len(self.producer) and time.monotonic() < deadline:
            self.producer.poll(0.05)
        return Aborted(why, outcome, None)
