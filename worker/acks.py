"""Match each destination delivery report to the source records it acknowledges, per acquisition.

Pure bookkeeping, no Kafka client: the shape follows Brooklin's
``FlushlessEventProducerHandler`` (per partition: records in flight, highest
safe checkpoint), kept apart from the mirror loop.

Every time the worker acquires a source partition it gets a fresh
:class:`PartitionAcks` (an *acquisition*, numbered by ``epoch``). A delivery
report carries the identity of what it acknowledges: the acquisition it was
sent under and the source offsets. Once an acquisition is retired (released,
session lost, rewound) its late reports change nothing: a report from before a
session loss can never acknowledge a record of a later acquisition of the same
partition.

Two ways of sending, both with that identity:

* **Runs** (the fast path): of each run of consecutive records of one
  partition in a fetched batch, only the last carries a callback,
  ``partial(acks.report_run, first, through, count, nbytes)``. The producer is
  idempotent with ``enable.gapless.guarantee``: the broker accepts a
  partition's records only in sequence, and a record that fails for good makes
  the producer fail fatally instead of skipping it. So a successful report of
  the run's last record proves every earlier record of the partition was
  written; any error on a run (which record failed is unknown) rewinds the
  partition and switches the ledger to exact reports for a while.
* **Exact** (after trouble): every record carries
  ``partial(acks.report, offset, size)``, so a refused record is named and its
  partition stopped in front of it, as a production replicator must.

A record whose report is an error is never acknowledged, so the commit
position stops in front of it: either the partition is stopped (the
destination refused it) or, when librdkafka purged it on fencing or failed it
after a fatal error, the partition is *rewound* — restarted from its
acknowledged position.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError

from ureplicator.worker.offsets import PartitionOffsets

TP = tuple[str, int]
# Records librdkafka dropped (producer.purge, or its own purge after a fatal error) or failed
# because the producer is fatally broken: never written, to be sent again on a sound producer.
# The producer, not the record, failed: the record is not written (or its transaction aborts),
# so a new producer sends it again from the watermark. A fenced transactional producer reports
# each record with an epoch error, not always with a fatal flag; that is not a poison record.
# The producer's sequence state broke (a destination restart mid-transaction, then an abort
# and a rewind): the broker refuses the *producer*, not the record.
PRODUCER_GONE = frozenset({KafkaError._FATAL, KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                           KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
                           KafkaError.UNKNOWN_PRODUCER_ID})
RESEND = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}) | PRODUCER_GONE


def resend(err: KafkaError) -> bool:
    """Whether a failed record is sent again (the producer failed) rather than named as refused (it did).

    A fatal error is the producer's by definition, whatever code the record carries.
    """
    return err.code() in RESEND or err.fatal()


LATENCY_SAMPLE_MASK = 63  # exact mode: observe the latency of one acknowledgement in 64
EXACT_FOR_S = 300.0  # after an error on a run, report every record individually this long


@dataclass(eq=False, slots=True)
class PartitionAcks(PartitionOffsets):
    """One acquisition of one source partition: what was sent under it and what is acknowledged."""

    topic: str = ""
    partition: int = -1
    destination: str = ""
    epoch: int = 0
    ledger: AckLedger | None = None
    outstanding: int = 0  # delivery reports still due
    outstanding_bytes: int = 0
    error: str | None = None  # the destination refused a record: the partition is stopped
    retired: bool = False
    # Exactly-once mode: the position last committed in a transaction (an abort rewinds to it)
    txn_position: int = -1
    report_cb: Callable[..., None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.report_cb = self.report  # the bound method, made once: the hot path reuses it

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)

    def sent_record(self, offset: int, size: int) -> None:
        """A record handed to the producer (the hot path inlines this; tests call it)."""
        self.in_flight.append(offset)
        self.outstanding += 1
        self.outstanding_bytes += size
        if self.ledger is not None:
            self.ledger.in_flight_bytes += size

    def sent_run(self, through: int, count: int, nbytes: int) -> None:
        """A run of ``count`` records ending at source offset ``through`` (the hot path inlines this)."""
        self.in_flight.append(through)
        self.outstanding += count
        self.outstanding_bytes += nbytes
        if self.ledger is not None:
            self.ledger.in_flight_bytes += nbytes

    def report_run(self, first: int, through: int, count: int, nbytes: int, err: KafkaError | None,
                   msg: Any) -> None:
        """The report of the last record of the run ``[first, through]``: it speaks for the whole run."""
        if self.retired:
            return  # an earlier acquisition's records: acknowledge nothing now
        ledger = self.ledger
        self.outstanding -= count
        self.outstanding_bytes -= nbytes
        if ledger is not None:
            ledger.in_flight_bytes -= nbytes
        if err is not None:
            if ledger is not None:
                # Not known which record of the run failed: send the partition again from its
                # watermark, with a callback per record, so a refused record is named exactly.
                ledger.needs_rewind.add(self.tp)
                ledger.note_error(err)
                if not resend(err):
                    ledger.go_exact(self, first, err.str())
            return
        in_flight = self.in_flight
        if in_flight and in_flight[0] == through and not self.acked_early:
            in_flight.popleft()  # the common case: runs are acknowledged in send order
            self.position = through + 1
        else:
            self.acked(through)
        self.acked_records += count
        self.acked_bytes += nbytes
        if ledger is not None:
            ledger.acks += count
            ts_type, ts = msg.timestamp()
            if ts > 0:
                ledger.on_latency(ts)

    def report(self, offset: int, size: int, err: KafkaError | None, msg: Any) -> None:
        """The delivery report of the record at source ``offset`` sent under this acquisition (exact mode)."""
        if self.retired:
            return  # an earlier acquisition's record: acknowledges nothing now
        ledger = self.ledger
        self.outstanding -= 1
        self.outstanding_bytes -= size
        if ledger is not None:
            ledger.in_flight_bytes -= size
        if err is not None:
            if ledger is None:
                return
            ledger.note_error(err)
            if resend(err):
                ledger.needs_rewind.add(self.tp)  # not written: send again from the watermark
            else:
                ledger.refused = True
                ledger.on_failure(self, offset, err.str())
            return
        in_flight = self.in_flight
        if in_flight and in_flight[0] == offset and not self.acked_early:
            in_flight.popleft()  # the common case: acks arrive in send order
            self.position = offset + 1
        else:
            self.acked(offset)
        self.acked_records += 1
        self.acked_bytes += size
        if ledger is not None:
            ledger.acks += 1
            if not ledger.acks & LATENCY_SAMPLE_MASK:
                ts_type, ts = msg.timestamp()
                if ts > 0:
                    ledger.on_latency(ts)


class AckLedger:
    """Every live acquisition of one worker, and the bytes sent but not yet acknowledged."""

    def __init__(
        self,
        on_failure: Callable[[PartitionAcks, int, str], None] | None = None,
        on_latency: Callable[[int], None] | None = None,
    ) -> None:
        self.partitions: dict[TP, PartitionAcks] = {}
        self.in_flight_bytes = 0
        self.acks = 0
        self.needs_rewind: set[TP] = set()  # records were purged or abandoned: restart from the watermark
        self.exact_until = 0.0  # monotonic time until which every record carries its own callback
        self.producer_failed: str | None = None  # a fatal producer error seen in a report
        # A record was refused for good (its partition stops). In exactly-once mode the open
        # transaction is then in an abortable state: librdkafka holds every other record of it
        # until it is aborted, so the loop aborts at once instead of waiting for the stall watch.
        # Read only in exactly-once mode, and reset by the abort (CopyLoop.aborted); at-least-once
        # mode sets it and never reads it (a stopped partition does not hold the others there).
        self.refused = False
        self._epoch = 0
        self.on_failure = on_failure or (lambda acks, offset, reason: None)
        self.on_latency = on_latency or (lambda ts_ms: None)
        self.on_exact: Callable[[PartitionAcks, int, str], None] = lambda acks, first, reason: None
        self.clock: Callable[[], float] = time.monotonic

    def note_error(self, err: KafkaError) -> None:
        """Remember a fatal producer error: the worker replaces the producer on its next turn."""
        if err.fatal() or err.code() in PRODUCER_GONE:
            self.producer_failed = err.str()

    def exact(self, now: float) -> bool:
        """Whether records sent now must each carry their own delivery callback."""
        return now < self.exact_until

    def go_exact(self, acks: PartitionAcks, first: int, reason: str) -> None:
        """A run failed: report every record individually for a while, so the culprit is named."""
        self.exact_until = self.clock() + EXACT_FOR_S
        self.on_exact(acks, first, reason)

    def acquire(self, tp: TP, destination: str, position: int) -> PartitionAcks:
        """Start a new acquisition of ``tp`` at ``position`` (-1: nothing committed yet)."""
        self.release(tp)
        self._epoch += 1
        acks = PartitionAcks(position=position, committed=position, topic=tp[0], partition=tp[1],
                             destination=destination, epoch=self._epoch, ledger=self, txn_position=position)
        self.partitions[tp] = acks
        return acks

    def release(self, tp: TP) -> PartitionAcks | None:
        """Retire ``tp``'s acquisition: its reports, errors and purges stop counting."""
        acks = self.partitions.pop(tp, None)
        self.needs_rewind.discard(tp)
        if acks is not None:
            acks.retired = True
            self.in_flight_bytes -= acks.outstanding_bytes
        return acks

    def forget_outstanding(self) -> None:
        """The producer was replaced: the old one's reports will never come, nothing is awaited."""
        for acks in self.partitions.values():
            acks.outstanding = 0
            acks.outstanding_bytes = 0
            acks.in_flight.clear()
            acks.acked_early.clear()
        self.in_flight_bytes = 0

    def release_all(self) -> list[TP]:
        released = list(self.partitions)
        for tp in released:
            self.release(tp)
        self.needs_rewind.clear()
        self.in_flight_bytes = 0
        return released

    def get(self, tp: TP) -> PartitionAcks | None:
        return self.partitions.get(tp)

    def outstanding(self, tps: Iterable[TP]) -> int:
        """Delivery reports still due for ``tps`` (stopped partitions are not waited for)."""
        total = 0
        for tp in tps:
            acks = self.partitions.get(tp)
            if acks is not None and acks.error is None:
                total += acks.outstanding
        return total

    def to_commit(self, only: Iterable[TP] | None = None) -> dict[TP, int]:
        """Positions that moved since the last commit."""
        wanted = None if only is None else set(only)
        return {
            tp: acks.position
            for tp, acks in self.partitions.items()
            if (wanted is None or tp in wanted) and acks.position >= 0 and acks.position != acks.committed
        }

    def mark_committed(self, positions: dict[TP, int]) -> None:
        for tp, position in positions.items():
            acks = self.partitions.get(tp)
            if acks is not None:
                acks.committed = position
