"""Exactly-once mode's destination side: the open transaction, its commit or abort, and what each outcome asks.

Records and the source positions they complete commit in one transaction on the
destination (KIP-618's shape): the positions go to the pipeline's group *on the
destination* through ``send_offsets_to_transaction``, keyed by destination topic and
partition, so a ``read_committed`` reader sees a record exactly when the position after
it is committed. librdkafka's transactional producer sorts errors into three classes
(``INTRODUCTION.md``, "Transactional Producer"), and each outcome here names what the
mirror loop does next:

* ``COMMITTED``: the positions sent are durable; copy them to the source group (best effort).
* ``RETRY``: a retriable error sending the positions (a coordinator moving, a timeout): the
  same call again later. A *commit* that times out (:data:`COMMIT_TIMEOUT_S`) is ``FATAL``
  instead: after a frozen destination thawed, two commits sat their full 30 s although the
  coordinator answered new producers within a second, and asking again resumes the same
  stuck call. Its outcome is in doubt, which the successor settles (below).
* ``ABORTED``: an abortable error; the transaction was aborted: rewind every partition to
  its last committed position and go on.
* ``FATAL``: the producer is fenced (another producer took its transactional id) or
  fatally broken: a new producer, ``init_transactions``, rewind.

A commit whose outcome is not known (``commit_transaction`` timed out or failed, and
nothing committed or aborted that transaction since) is *in doubt*: its EndTxn may have
reached the coordinator, and then the successor producer's ``init_transactions`` completes
the commit instead of aborting it. A producer replaced in doubt therefore leaves
:attr:`Transactions.settle_due`: before any partition is rewound, the loop reads the
positions back from the destination's group, which commits them in the same transaction
(``CopyLoop.positions_known``); a rewind to the in-memory position would send the
committed records a second time.

Each call has a bound of its own, capped at ``timeout_s``: ``init_transactions``
:data:`INIT_TIMEOUT_S` (5 s; resumed on the next turn), the positions :data:`OFFSETS_TIMEOUT_S`
(5 s, and the loop waits :data:`OVERRUN_S` more for its helper thread), the commit
:data:`COMMIT_TIMEOUT_S` (10 s) and an abort :data:`ABORT_TIMEOUT_S` (5 s, unless its caller
gives another bound). The loop calls them only at a transaction boundary (every
``worker.transaction_interval_ms``), on a release, a fence and a stop.

``send_offsets_to_transaction`` is the exception librdkafka makes: it waits for the group
coordinator without a limit, and once its coordinator lookup waits on a broker state change
that never comes (the destination restarted, and nothing else changes state) it never
returns, whatever its timeout (confluentinc/librdkafka#5456 and #5511, both open). That is
what stalled exactly-once mirroring after two destination restarts. So that call runs on a
helper thread and the loop waits :data:`OFFSETS_TIMEOUT_S` (or ``timeout_s`` when shorter) plus
:data:`OVERRUN_S`; past that the outcome is ``FATAL``: the loop replaces the producer, whose
successor's ``init_transactions`` fences the stuck one. That bound is short because every
partition of the worker waits for it, and a healthy call takes two round trips: with the
full 30 s + 5 s bound a destination restart paused every partition for the outage plus
about 46 s (docs/operations.md, "Destination restarts"). The stuck call's thread keeps its
producer alive until the call returns, so the client is never destroyed under it.

A replaced producer is let go with :func:`retire`, never ``close()``: confluent-kafka's
``close()`` aborts the open transaction and flushes, neither bounded by anything the loop
controls. After destination restarts one worker never came out of a producer replacement
whose last step was that ``close()`` (no stack was taken), and the successor's
``init_transactions`` aborts that transaction anyway.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

COMMITTED = "committed"
RETRY = "retry"
ABORTED = "aborted"
FATAL = "fatal"

# How much longer than its own timeout a transactional call may run before the loop gives up on
# its producer: librdkafka's own timeout, when it works, always wins.
OVERRUN_S = 5.0
# librdkafka's own timeout for send_offsets_to_transaction: AddOffsetsToTxn and TxnOffsetCommit, two
# round trips (a coordinator still loading answers "retry" within it). When it fires the call returns
# a retriable error and the next turn sends the positions again; only a call that ignores it (the hang
# above) costs the producer.
OFFSETS_TIMEOUT_S = 5.0
# A commit's own timeout: EndTxn, one round trip once the records are acknowledged (the loop flushes
# first). In the exactly-once soak of 2026-11-29 no healthy commit took 2 s; the two that hit the
# 30 s transactional timeout were stuck. One that times out costs the producer, and the successor
# reads the positions back (the commit is in doubt), so a short bound is safe.
COMMIT_TIMEOUT_S = 10.0
# init_transactions' own timeout. One that times out is asked again on the next turn and resumes the
# same initialisation (checked on librdkafka's mock cluster: 1 s timeout at a 2.5 s round trip, then
# 0.05 s to complete), so while the destination is away the loop turns every few seconds instead of
# sitting in the call for the full transactional timeout.
INIT_TIMEOUT_S = 5.0
# Exactly-once: a producer that lost the destination's coordinators (FatalErrors.coordinator_lost) and
# still owes delivery reports this long after its transaction was due is renewed without them. Its
# records are in a transaction the successor aborts, so this costs one rewind; waiting cost up to the
# stalled-producer watch (30 s) in the soak of 2026-11-29 05:50 (steps 60 and 76).
RENEW_AFTER_S = 3.0
# Exactly-once: a producer that owes delivery reports and has had none for this long is renewed the
# same way, even though nothing said the coordinators were lost. A destination frozen and resumed
# keeps its connections, so no error comes until librdkafka's request timeout (30 s): in the soak
# of 2026-11-29 06:49 (step 65) two workers' producers stayed silent that long after the freeze.
# No commit was asked for that transaction, so the successor's init_transactions aborts it and
# the loop rewinds to the committed positions; at-least-once keeps worker.producer_stall_s (30 s),
# where a replacement re-sends records a reader has seen.
RENEW_SILENT_S = 10.0
# An abort's own timeout (unless the caller gives one): one EndTxn round trip. One that times out costs
# the producer, whose successor's init_transactions aborts the transaction on the coordinator anyway;
# with the full 30 s the loop sat that long in an abort after a destination restart.
ABORT_TIMEOUT_S = 5.0
# A transactional call that took this long is logged (``transaction_call_slow``, with its duration):
# every partition of the worker waits for it. In the exactly-once soak of 2026-11-29 two workers that
# were not faulted logged nothing for about 12 s after a frozen destination came back; this says
# which call held them next time.
SLOW_CALL_S = 2.0


# The pipeline's delivery mode, recorded by the controller (controller/fencing.py writes the same node).
MODE_NODE = "mode"


def mode_path(root: str) -> str:
    return f"{root}/{MODE_NODE}"


def decode_mode(data: bytes | None) -> bool | None:
    """``{"exactly_once": true|false}`` -> the flag; None when the node says nothing readable."""
    try:
        value = json.loads(data or b"null")
    except ValueError:
        return None
    flag = value.get("exactly_once") if isinstance(value, dict) else None
    return flag if isinstance(flag, bool) else None


def classify(exc: KafkaException) -> str:
    """Which of librdkafka's error classes a transactional call's error is in."""
    err = exc.args[0]
    if not isinstance(err, KafkaError):
        return FATAL
    if err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                     KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FATAL):
        return FATAL
    if err.txn_requires_abort():
        return ABORTED
    if err.retriable():
        return RETRY
    return FATAL  # neither retriable nor abortable: start again on a new producer


class Transactions:
    """The transaction state of the worker's current producer (one per producer; reset on replacement)."""

    def __init__(self, interval_s: float, max_bytes: int, group_metadata: Callable[[], Any], log: Any,
                 timeout_s: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 overrun_s: float = OVERRUN_S) -> None:
        self.interval_s = interval_s
        self.max_bytes = max_bytes
        self._group_metadata = group_metadata  # the source consumer's: the offsets' group
        self._log = log
        self._timeout_s = timeout_s
        self._clock = clock
        self._overrun_s = overrun_s
        self._ready: Any = None  # the producer init_transactions ran on
        self.open = False
        self.opened_at = 0.0
        self.bytes = 0  # sent in the open transaction
        self.commits = 0
        self.aborts = 0
        # commit_transaction was called, and since then neither a commit nor an abort succeeded
        self.in_doubt = False
        # A producer was replaced while in doubt: the committed positions must be read back
        # from the destination's group before a rewind (cleared by settled()).
        self.settle_due = False

    def reset(self) -> None:
        """The producer was replaced: the new one needs ``init_transactions`` (which completes or aborts
        what the old one left open; a commit in doubt becomes :attr:`settle_due`)."""
        self._ready = None
        self.open = False
        self.bytes = 0
        if self.in_doubt:
            self.settle_due = True
            self.in_doubt = False

    def ready_on(self, producer: Any) -> bool:
        """Whether ``init_transactions`` completed on ``producer`` (no call made)."""
        return self._ready is producer

    def settled(self) -> None:
        """The positions were read back after a replacement in doubt: rewinds may start from them."""
        self.settle_due = False

    def ready(self, producer: Any) -> bool:
        """``init_transactions`` on this producer, once; False (logged) when the destination did not answer."""
        if self._ready is producer:
            return True
        try:
            self._timed(producer.init_transactions, min(self._timeout_s, INIT_TIMEOUT_S))
        except KafkaException as exc:
            self._log.warning("transactions_init_failed", error=str(exc.args[0]), outcome=classify(exc))
            return False
        self._ready = producer
        self.open = False
        self._log.info("transactions_ready")
        return True

    def begin(self, producer: Any) -> None:
        """Open a transaction before the first record of an interval."""
        if not self.open:
            producer.begin_transaction()
            self.open = True
            self.opened_at = self._clock()
            self.bytes = 0

    def abortable(self, producer: Any) -> bool:
        """Whether librdkafka holds the open transaction in its abortable-error state (a local call, no request).

        A record that failed inside a transaction (a refused record, a purge) puts it there, and
        librdkafka then holds the transaction's other records until it is aborted: their reports
        never come, so waiting for them only ends at the stalled-producer watch. ``begin_transaction``
        asks without side effects: on an open, healthy transaction it fails with a state error;
        in the abortable state it fails with the transaction's own error, marked as requiring an abort.
        """
        if not self.open:
            return False
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            err = exc.args[0]
            return isinstance(err, KafkaError) and err.txn_requires_abort()
        return False  # librdkafka had no open transaction: it has one now, as this object thinks

    def overdue_s(self, now: float) -> float:
        """How long past its interval the open transaction is (0 when not yet due or none is open)."""
        return max(0.0, now - self.opened_at - self.interval_s) if self.open else 0.0

    def due(self, now: float) -> bool:
        return self.open and (now - self.opened_at >= self.interval_s or self.bytes >= self.max_bytes)

    def commit(self, producer: Any, offsets: list[TopicPartition]) -> str:
        """Send ``offsets`` (destination topic/partition -> next source offset) and commit, all records included."""
        committing = False
        try:
            if offsets and not self._bounded(producer.send_offsets_to_transaction,
                                             min(self._timeout_s, OFFSETS_TIMEOUT_S), offsets,
                                             self._group_metadata()):
                self.reset()
                return FATAL
            self.in_doubt = committing = True  # from here the EndTxn may reach the coordinator, whatever the call says
            self._timed(producer.commit_transaction, min(self._timeout_s, COMMIT_TIMEOUT_S))
        except KafkaException as exc:
            outcome = classify(exc)
            if outcome == RETRY and committing:
                outcome = FATAL  # the commit timed out: asking again resumes the same call (see above)
            self._log.warning("transaction_commit_failed", error=str(exc.args[0]), outcome=outcome)
            if outcome == ABORTED:
                return self.abort(producer)
            if outcome == FATAL:
                self.reset()
            return outcome
        self.open = False
        self.in_doubt = False
        self.commits += 1
        return COMMITTED

    def _timed(self, call: Callable[..., None], *args: Any) -> None:
        """``call(*args)``; logged as ``transaction_call_slow`` when it took :data:`SLOW_CALL_S` or more."""
        started = self._clock()
        try:
            call(*args)
        finally:
            self._note_slow(call, self._clock() - started)

    def _note_slow(self, call: Callable[..., None], took_s: float) -> None:
        if took_s >= SLOW_CALL_S:
            self._log.warning("transaction_call_slow", call=getattr(call, "__name__", str(call)),
                              took_s=round(took_s, 2))

    def _bounded(self, call: Callable[..., None], timeout_s: float, *args: Any) -> bool:
        """``call(*args, timeout_s)`` on a helper thread; False (logged) when it is still running past
        ``timeout_s`` plus the overrun.

        The call's own exception is raised here, in the loop's thread. A call that does not
        return is left running: its thread holds the producer (``call`` is bound to it), so
        the client outlives the call whatever the loop does with it.
        """
        raised: list[BaseException] = []

        def run() -> None:
            try:
                call(*args, timeout_s)
            except BaseException as exc:  # handed over to the loop's thread below
                raised.append(exc)

        thread = threading.Thread(target=run, name="transaction-call", daemon=True)
        thread.start()
        waited_s = timeout_s + self._overrun_s
        started = self._clock()
        thread.join(waited_s)
        if not thread.is_alive():
            self._note_slow(call, self._clock() - started)
        if thread.is_alive():
            self._log.error("transaction_call_hung", call=getattr(call, "__name__", str(call)),
                            waited_s=waited_s, outcome=FATAL)
            return False
        if raised:
            raise raised[0]
        return True

    def abort(self, producer: Any, timeout_s: float | None = None) -> str:
        """Abort the open transaction: none of its records is ever visible to a read_committed reader.

        Waits at most ``timeout_s`` (default: :data:`ABORT_TIMEOUT_S`, or the transactional timeout when
        shorter); an abort that did not finish by then is ``FATAL``.
        """
        self.aborts += 1
        try:
            self._timed(producer.abort_transaction,
                        min(self._timeout_s, ABORT_TIMEOUT_S) if timeout_s is None else timeout_s)
        except KafkaException as exc:
            self._log.warning("transaction_abort_failed", error=str(exc.args[0]), outcome=classify(exc))
            self.reset()  # a new producer's init_transactions aborts it on the broker
            return FATAL
        self.open = False
        self.in_doubt = False  # the coordinator aborted the transaction: nothing of it committed
        return ABORTED


def retire(producer: list[Any]) -> None:
    """Let go of a replaced transactional producer on a thread of its own, without ``close()``.

    ``producer`` is a one-item list holding the last reference the loop has; the thread
    empties it, so librdkafka's handle is destroyed there and a slow destroy never holds
    the loop. Nobody polls the client any more, so none of its delivery reports runs.
    """
    threading.Thread(target=producer.clear, name="producer-retire", daemon=True).start()
