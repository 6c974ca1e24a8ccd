"""Commit acknowledged source offsets and read committed ones, off the mirror loop, and say when it fails.

Every group-coordinator call of a worker goes through one *commit client*: a
consumer of the worker's group that is never assigned a partition, driven by one
thread. The mirror loop hands it positions and goes on mirroring. Why:

* A synchronous commit on the fetching consumer stopped the loop for as long as
  librdkafka waited for a coordinator: about 46 s per attempt after a source broker
  restart in the 30-minute soak, attempt after attempt, while the worker's ZooKeeper
  lease went stale and it fenced itself each time (docs/operations.md).
* A client that lost its way to the coordinator (it never found it again in that
  soak, while the worker's other clients did) is closed and opened anew after
  ``_REPLACE_AFTER`` failed calls. The fetching consumer holds the assignment and
  positions and cannot be replaced that cheaply; the commit client holds nothing.
* Its ``session.timeout.ms`` is 10 s (``worker.clients``): librdkafka defers a commit
  that finds no coordinator for that long before it fails it with ``_WAIT_COORD``
  (measured: 45 s with the default, 10 s with this setting). The client never joins
  the group, so the setting has no other effect.

A commit only ever names acknowledged positions, so one that lands late (after a
release, or after this worker was fenced) cannot lose a record: at worst the next
owner starts at an older or a newer *acknowledged* position — duplicates, no gap.
Queued work is still dropped when the worker is fenced, so a fenced worker sends
no commit it has not already sent.

A position that does not move is committed again every ``worker.offset_recommit_s``
(:attr:`Committer.recommit_s`; first at the first periodic commit after this worker took
the partition, whose group commit may be days old): the broker expires a standalone
group's offsets ``offsets.retention.minutes`` (7 days by default) after their last commit,
and an idle partition whose offset expired would start again from
``worker.auto_offset_reset`` — the whole log again, or its end.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from tenacity import Retrying, retry_if_exception, retry_if_result, wait_exponential

from ureplicator.common import logs
from ureplicator.worker.acks import TP, AckLedger
from ureplicator.worker.metrics import WorkerMetrics

_REPLACE_AFTER = 2  # consecutive failed calls before the commit client is opened anew
_COORDINATOR_ERRORS = frozenset({
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._WAIT_COORD,
    KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT,
})


class CommitCancelled(Exception):
    """The worker was fenced before this call was sent."""


@dataclass
class _Call:
    """One unit of work for the commit thread: a commit (retried until ``deadline``) or a read."""

    kind: str  # "commit" | "committed"
    offsets: list[TopicPartition]
    deadline: float
    attempts: int
    epochs: dict[TP, int] = field(default_factory=dict)  # commit: the acquisition each position belongs to
    done: threading.Event = field(default_factory=threading.Event)
    committed: dict[TP, int] = field(default_factory=dict)  # commit: what went through
    result: list[TopicPartition] | None = None  # committed: the group's offsets
    error: BaseException | None = None
    cancelled: bool = False
    sent_at: float = 0.0  # commit: the clock when it was handed over (a re-commit counts from here)


@dataclass
class ReleaseCommit:
    """A release's commit under way on the commit thread (:meth:`Committer.begin_release`)."""

    committer: Committer
    partitions: list[TP]
    call: _Call | None  # None: nothing moved since the last commit

    @property
    def done(self) -> bool:
        """The commit answered, or its deadline passed (``worker.release_commit_timeout_s``, plus 1 s).

        A release must not wait longer than its timeout for a coordinator that never answers:
        the commit may sit behind a call that hangs, which its own retry deadline cannot end.
        Past the deadline the call is cancelled (never sent later) and :meth:`finish` surfaces
        every position as not committed, as :meth:`Committer.commit_now` does.
        """
        call = self.call
        if call is None or call.done.is_set() or call.cancelled:
            return True
        if self.committer._clock() < call.deadline + 1.0:
            return False
        call.cancelled = True  # queued behind (or on the wire in) a call that hangs: never send it later
        self.committer._log.warning("commit_timed_out", partitions=len(call.offsets), release=True)
        return True

    def finish(self) -> dict[TP, int]:
        """Account the commit (once it is done); returns and surfaces what was not committed."""
        failed = {} if self.call is None else self.committer._account(self.call)
        return self.committer.release_done(self.partitions, failed)


class Committer:
    """Commit ``acknowledged position`` (the next offset to mirror) per partition, without blocking the loop."""

    def __init__(
        self,
        make_client: Callable[[], Any],
        ledger: AckLedger,
        metrics: WorkerMetrics,
        log: Any,
        background: bool = True,
        clock: Callable[[], float] = time.monotonic,
        recommit_s: float = 86400.0,
    ) -> None:
        self._make_client = make_client
        self.recommit_s = recommit_s  # worker.offset_recommit_s: an unmoved position is committed again this often
        # When this worker last committed each partition's position (the commit's send time, by the clock)
        self._committed_at: dict[TP, float] = {}
        self._client: Any = None
        self._failures = 0
        self._ledger = ledger
        self._metrics = metrics
        self._log = log
        self._clock = clock
        self._pending: _Call | None = None  # the periodic commit under way
        self._calls: queue.Queue[_Call | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._serve, name="commit-sender", daemon=True)
            self._thread.start()

    # --- the loop's side ------------------------------------------------------------------------

    def commit_soon(self) -> None:
        """Periodic commit: hand the moved positions over, unless the previous commit is still under way."""
        self.collect()
        if self._pending is not None:
            return  # one at a time: a coordinator that does not answer never piles commits up
        call = self._commit_call(None, attempts=1, timeout_s=0.0)
        if call is not None:
            self._pending = call
            self._submit(call)
            self.collect()

    def collect(self) -> None:
        """Account a finished periodic commit (cheap; called every turn)."""
        call = self._pending
        if call is None or not call.done.is_set():
            return
        self._pending = None
        self._account(call)

    def commit_now(self, only: list[TP] | None, timeout_s: float, attempts: int = 5) -> dict[TP, int]:
        """Commit and wait (release, shutdown): returns the positions that were *not* committed."""
        self.collect()
        call = self._commit_call(only, attempts=attempts, timeout_s=timeout_s)
        if call is None:
            return {}
        self._submit(call)
        if not call.done.wait(max(0.0, call.deadline - self._clock()) + 1.0):
            call.cancelled = True  # still queued behind a call that hangs: never send it
            self._log.warning("commit_timed_out", timeout_s=timeout_s, partitions=len(call.offsets))
        return self._account(call)

    def commit_for_release(self, partitions: list[TP], timeout_s: float) -> dict[TP, int]:
        """Commit before giving partitions up, and wait: see :meth:`release_done`."""
        return self.release_done(partitions, self.commit_now(partitions, timeout_s))

    def begin_release(self, partitions: list[TP], timeout_s: float, attempts: int = 5) -> ReleaseCommit:
        """Start a release's commit without waiting (hand-offs beside the loop); poll :attr:`ReleaseCommit.done`."""
        self.collect()
        call = self._commit_call(partitions, attempts=attempts, timeout_s=timeout_s)
        if call is not None:
            self._submit(call)
        return ReleaseCommit(self, partitions, call)

    def release_done(self, partitions: list[TP], failed: dict[TP, int]) -> dict[TP, int]:
        """Surface what a release could not commit: retried already, never dropped silently.

        A position that cannot be committed is not lost data — the next owner starts
        from the older committed offset and mirrors those records again — but it is
        duplicates the operator should know about: an error log line and
        ``ureplicator_worker_release_commit_failures_total``.
        """
        if failed:
            self._metrics.release_commit_failures.inc(len(failed))
            self._log.error("release_commit_failed", partitions=[f"{t}:{p}" for t, p in sorted(failed)],
                            positions={f"{t}:{p}": pos for (t, p), pos in sorted(failed.items())},
                            consequence="the next owner mirrors these records again (duplicates, no loss)")
        return failed

    def committed(self, wanted: list[TopicPartition], timeout_s: float = 30.0) -> list[TopicPartition]:
        """The group's committed offsets; a coordinator that is moving or loading is retried until the deadline."""
        call = _Call("committed", wanted, self._clock() + timeout_s, attempts=1_000)
        self._submit(call)
        if not call.done.wait(timeout_s + 15.0):
            call.cancelled = True
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "committed offsets: the commit client hangs"))
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    def cancel_queued(self) -> None:
        """Fenced: drop what was not sent yet (a call already on the wire cannot be recalled)."""
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                break
            if call is None:
                self._calls.put(None)
                break
            call.cancelled = True
            call.error = CommitCancelled()
            call.done.set()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the commit thread; close its client once nothing uses it."""
        if self._thread is not None:
            self._calls.put(None)
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self._log.warning("commit_client_not_closed", reason="a call still hangs; the process exit ends it")
                return
        if self._client is not None:
            self._client.close()
            self._client = None

    # --- bookkeeping ----------------------------------------------------------------------------

    def _commit_call(self, only: list[TP] | None, attempts: int, timeout_s: float) -> _Call | None:
        positions = self._ledger.to_commit(only)
        if only is None:
            positions.update(self._due_again())
        if not positions:
            return None
        epochs = {tp: acks.epoch for tp in positions if (acks := self._ledger.get(tp)) is not None}
        offsets = [TopicPartition(t, p, pos) for (t, p), pos in sorted(positions.items())]
        return _Call("commit", offsets, self._clock() + timeout_s, attempts, epochs=epochs, sent_at=self._clock())

    def _due_again(self) -> dict[TP, int]:
        """Committed positions that did not move and were not committed by this worker for ``recommit_s``.

        Only moved positions are committed otherwise, so an idle partition's offset would
        expire with the group's offset retention; one this worker never committed is due at
        once (its last commit may be as old as the retention). Forgotten partitions are pruned.
        """
        now = self._clock()
        due = {}
        for tp in [tp for tp in self._committed_at if self._ledger.get(tp) is None]:
            del self._committed_at[tp]  # released: the next acquisition counts from its own first commit
        for tp, acks in self._ledger.partitions.items():
            if acks.committed < 0 or acks.position != acks.committed:
                continue  # nothing committed yet, or moved (to_commit has it)
            last = self._committed_at.get(tp)
            if last is None or now - last >= self.recommit_s:
                due[tp] = acks.committed
        if due:
            self._log.debug("offsets_recommitted", partitions=len(due), recommit_s=self.recommit_s)
        return due

    def _account(self, call: _Call) -> dict[TP, int]:
        """Mark what went through (for the same acquisition only); count and return what did not."""
        done = {tp: pos for tp, pos in call.committed.items()
                if (acks := self._ledger.get(tp)) is not None and acks.epoch == call.epochs.get(tp)}
        self._ledger.mark_committed(done)
        for tp in call.committed:
            self._committed_at[tp] = call.sent_at  # the group's retention counts from this commit
        failed = {(tp.topic, tp.partition): tp.offset for tp in call.offsets
                  if (tp.topic, tp.partition) not in call.committed}
        if not isinstance(call.error, CommitCancelled):
            self._metrics.commits.labels("error" if failed else "ok").inc()
        return failed

    # --- the commit thread's side ---------------------------------------------------------------

    def _submit(self, call: _Call) -> None:
        if self._thread is None:
            self._run(call)  # unit tests: the same work, in the caller's thread
        else:
            self._calls.put(call)

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            self._run(call)

    def _run(self, call: _Call) -> None:
        """Run one call, retried with backoff until it completes, its attempts or its deadline run out."""
        retrying = Retrying(
            stop=lambda state: state.attempt_number >= call.attempts or self._clock() >= call.deadline,
            wait=wait_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_result(lambda complete: not complete) | retry_if_exception(
                lambda exc: isinstance(exc, KafkaException) and self._retriable(call, exc.args[0])),
            retry_error_callback=lambda state: None,  # out of attempts: call.error says why
        )
        try:
            retrying(self._attempt, call)
        except KafkaException:
            pass  # not worth retrying; call.error holds it
        except Exception as exc:  # noqa: BLE001 - never kill the commit thread; the caller sees it
            call.error = exc
            self._log.exception("commit_call_failed")
        finally:
            call.done.set()

    def _attempt(self, call: _Call) -> bool:
        if call.cancelled:
            call.error = CommitCancelled()
            return True
        try:
            return self._once(call)
        except KafkaException as exc:
            error = exc.args[0]
            call.error = exc
            self._failed(call, error.str() if isinstance(error, KafkaError) else str(error))
            raise

    @staticmethod
    def _retriable(call: _Call, error: object) -> bool:
        if call.kind == "commit":
            return True  # a commit is retried whatever failed; the caller bounds it
        return isinstance(error, KafkaError) and (error.retriable() or error.code() in _COORDINATOR_ERRORS)

    def _once(self, call: _Call) -> bool:
        """One call on the commit client; True when the call is complete."""
        if self._client is None:
            self._client = self._make_client()
        client = self._client
        client.poll(0)  # serve its logs and error callbacks: nothing else polls this client
        if call.kind == "committed":
            call.result = client.committed(call.offsets, timeout=max(1.0, min(10.0, call.deadline - self._clock())))
            call.error = None
            self._failures = 0
            return True
        todo = [tp for tp in call.offsets if (tp.topic, tp.partition) not in call.committed]
        result = client.commit(offsets=todo, asynchronous=False)
        errors = []
        for tp in result or []:
            if tp.error is None:
                call.committed[(tp.topic, tp.partition)] = tp.offset
            else:
                errors.append(f"{tp.topic}:{tp.partition} {tp.error}")
        if errors:
            self._failed(call, "; ".join(errors))
            return False
        call.error = None
        self._failures = 0
        return True

    def _failed(self, call: _Call, error: str) -> None:
        self._failures += 1
        event = "commit_failed" if call.kind == "commit" else "committed_offsets_retry"
        self._log.warning(event, error=error, failures=self._failures)
        if self._failures >= _REPLACE_AFTER and self._client is not None:
            # A client can lose its way to the coordinator for good (the soak); a fresh one asks anew.
            old, self._client = self._client, None
            self._failures = 0
            self._metrics.commit_client_replacements.inc()
            self._log.warning("commit_client_replaced", error=error)
            try:
                old.close()
            except (KafkaException, RuntimeError) as exc:
                self._log.warning("commit_client_close_failed", error=logs.error_text(exc))
