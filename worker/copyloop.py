"""The copy loop: fetch the owned partitions from the source and send them through the destination.

:class:`CopyLoop` is what one turn of the worker does with records, and what it does to its
partitions when the destination side changed:

* :meth:`CopyLoop.fetch` takes what the source consumer holds; :meth:`CopyLoop.mirror` sends it,
  on the C loop (:mod:`worker.native`) or on the Python loop (:meth:`CopyLoop._mirror_py`), the
  C loop's plain specification. Both follow one **run rule**: a run is consecutive records of
  one partition that need no decision, and only its last record carries a delivery callback.
* A consume error stops its partition when nothing else can help; a batch that cannot be
  sent (a stop or a fence while the local queue is full) is abandoned and its partitions rewound.
* A record whose destination partition the producer does not know yet (``_UNKNOWN_PARTITION``)
  pauses its partition while that is awaited beside the loop (:meth:`Handoff.await_beside`);
  the others keep flowing.
* The fetch watch (``worker.fetch_stall_s``, :mod:`worker.fetchwatch`): a partition whose source
  end offset grew while the consumer's position stood still (librdkafka #5153, after a source
  broker restart) gets a new source consumer, assigned at the offsets the loop consumes next.
  Every turn that holds back fetching on purpose calls :meth:`CopyLoop.hold`, so backpressure
  is no stall.
* What :class:`worker.destination.Destination` answers — a replaced producer, a purge, an
  aborted or committed transaction — is applied to the partitions here: rewinds, the
  ledger's outstanding counts, exact mode, metrics and logs.

The process around it (registration, lease and fence, assignment, shutdown) is
:class:`worker.mirror.MirrorWorker`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, TopicPartition

from ureplicator.common import logs, provenance
from ureplicator.common.config import Config
from ureplicator.worker import fetchwatch, transactions
from ureplicator.worker.acks import EXACT_FOR_S, TP, AckLedger, PartitionAcks
from ureplicator.worker.commits import Committer
from ureplicator.worker.destination import Aborted, Committed, Destination, Purged, Replaced, Retry
from ureplicator.worker.endoffsets import EndOffsets
from ureplicator.worker.handoff import Handoff, fmt
from ureplicator.worker.metrics import WorkerMetrics
from ureplicator.worker.ratelimit import RateLimiter
from ureplicator.worker.status import StatusReporter

FENCING = frozenset({"fenced", "session_lost", "stopping_while_fenced"})  # purges that mean "not ours any more"
# A fetch position the source does not hold: librdkafka's error with auto.offset.reset=error
# (_AUTO_OFFSET_RESET, naming the broker's OFFSET_OUT_OF_RANGE or a detected truncation), or the
# broker's own code should a client report it unwrapped. Handoff.out_of_range resolves them.
_OUT_OF_RANGE = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})


class CopyLoop:
    """Records from the source consumer to the destination, and the partitions' state kept right on the way."""

    def __init__(
        self,
        config: Config,
        consumer: Any,
        destination: Destination,
        handoff: Handoff,
        ledger: AckLedger,
        committer: Committer,
        status: StatusReporter,
        limiter: RateLimiter,
        metrics: WorkerMetrics,
        log: Any,
        *,
        may_write: Callable[[], bool],
        stopping: threading.Event,
        native: Any = None,
        make_consumer: Callable[[], Any] | None = None,
        end_offsets: Callable[[list[TP], float], dict[TP, int]] | None = None,
        watch_thread: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.consumer = consumer
        self.destination = destination
        self._txn = destination.txn
        self.handoff = handoff
        self.ledger = ledger
        self.committer = committer
        self.status = status
        self.limiter = limiter
        self.metrics = metrics
        self.log = log
        self._may_write = may_write  # not fenced and the lease fresh: asked again before every C-loop call
        self._stopping = stopping
        self._native = native
        self._clock = clock
        self.produced = 0  # records handed to the producer (tests watch it stop when fenced)
        self._fetch_wait_s = config.worker.fetch_wait_ms / 1000.0
        self._source_alias = config.source.alias
        # urep value for records that start here: origin and this hop's source are both the source
        self._stamp = provenance.encoder(config.source.alias, config.source.alias)
        self._alias_bytes = config.source.alias.encode()  # the same, for the C loop
        self._destination_alias = config.destination.alias
        self._only_origin = config.forward == "origin"  # the route's forwarding policy (worker/forwarding.py)
        # The fetch watch (worker/fetchwatch.py): a source consumer that stops fetching is noticed and replaced.
        stall_s = config.worker.fetch_stall_s
        self._make_consumer = make_consumer  # its remedy: a new source consumer
        self._fetch_watch: fetchwatch.FetchWatch | None = None
        self._ends: EndOffsets | None = None
        if stall_s > 0 and end_offsets is not None and make_consumer is not None:
            self._fetch_watch = fetchwatch.FetchWatch(stall_s)
            # One ListOffsets a second: growth is seen within about a second, so a stall is acted on
            # about fetch_stall_s after it began (every 3.3 s until 2026-11-29: up to 6.6 s later).
            self._ends = EndOffsets(end_offsets, interval_s=min(1.0, stall_s / 3), log=log, clock=clock,
                                    timeout_s=min(10.0, max(1.0, stall_s / 2)), background=watch_thread)
        self._watch_every_s = min(1.0, stall_s / 4)
        self._watch_at = 0.0
        # Where the watch last assigned a partition (its acquisition, the offset): the consumer's
        # position is unknown again until a record of it is consumed.
        self._fetch_from: dict[TP, tuple[PartitionAcks, int]] = {}
        # Whether a consume since the last look came back short: librdkafka's queue was empty then.
        self._queue_drained = False
        # Since when the loop has held back fetching (None: it fetched since): the fetch watch's
        # stall clocks stop for that time.
        self._held_from: float | None = None
        # Exactly-once, after a replacement in doubt: the read of the committed positions under way
        # (its job and the acquisitions it asked about), and when a failed read is tried again.
        self._settling: tuple[Any, dict[TP, PartitionAcks]] | None = None
        self._settle_retry_at = 0.0
        # A partition whose destination partition appeared restarts from its position: exactly-once,
        # not before the positions of a commit in doubt are read back (positions_known).
        txn = self._txn
        handoff.may_resume = lambda: txn is None or not txn.settle_due

    def close(self) -> None:
        """Stop reading the source's end offsets (the consumer is the worker's to close)."""
        if self._ends is not None:
            self._ends.close()


    def fetch(self, limit: int) -> list[Any]:
        """What the consumer already holds, at once; only when it holds nothing, wait for the first record.

        librdkafka's batch consume returns when the batch is full or the wait is over, so
        at low rates every record waited ``worker.fetch_wait_ms`` (the issue's replicator
        leg: 7.7 ms median against MirrorMaker 2's 1.7 ms). Here a record is handed on as
        soon as it is there: a non-blocking drain first; when that is empty, a wait for one
        record, then a non-blocking drain of what arrived with it (a fetch brings many).
        Under load the first drain is a full batch, so throughput is unchanged.
        """
        if self._held_from is not None:
            self._end_hold(self._clock())
        consume = self.consumer.consume
        messages = consume(limit, 0)
        if len(messages) < limit:
            self._queue_drained = True  # the fetch watch: no fetched record waits behind this batch
        if messages or self._fetch_wait_s <= 0:
            return messages
        messages = consume(1, self._fetch_wait_s)
        if messages and limit > 1:
            messages.extend(consume(limit - 1, 0))
        return messages

    def mirror(self, messages: list[Any]) -> None:
        """The hot path: per record only what correctness needs (header, produce, bookkeeping).

        Records are sent in *runs*: consecutive records of one partition. Only the last
        record of a run carries a delivery callback, which speaks for the whole run
        (:meth:`PartitionAcks.report_run`; the gapless idempotent producer makes that
        sound). A run ends where the next record belongs to another partition, carries
        a ``urep`` header (it may be skipped by loop prevention), or the batch ends. In exact
        mode (for a while after an error on a run) every record carries its own callback.

        The C loop (:mod:`worker.native`) copies every record it can; it stops in front of
        a record that needs a decision (a consume error, no route, a ``urep`` header, a
        failed produce), with that record's run still open, and :meth:`_mirror_py` handles
        that one record and closes the run. Exact mode is the Python loop's alone.
        """
        n = len(messages)
        if not n:
            return
        target = self.destination.native_target
        if target is None or self.ledger.exact(self._clock()):
            fetched = self._mirror_py(messages, 0, n)
        else:
            mirror = self._native.mirror
            routes = self.handoff.routes
            alias = self._alias_bytes
            fetched = i = 0
            while i < n:
                if not self._may_write():
                    self._abandon(messages[i:])  # fenced mid-batch: the rest is rewound once the fence lifts
                    return
                i, err, produced, nbytes, run_first, run_count, run_bytes = mirror(target, messages, i, routes, alias)
                self.produced += produced
                fetched += nbytes
                if i >= n:
                    break
                more = self._mirror_py(messages, i, i + 1, run_first, run_count, run_bytes)
                if more is None:
                    return  # the batch was abandoned (stop or fence while the queue was full)
                fetched += more
                i += 1
        if fetched is not None and self._txn is not None:
            self._txn.bytes += fetched
        if fetched is not None and not self.limiter.unlimited:
            self.limiter.spend(n, fetched, self._clock())

    def _mirror_py(self, messages: list[Any], start: int, stop: int, run_first: int = 0, run_count: int = 0,
                   run_bytes: int = 0) -> int | None:
        """The Python loop over ``messages[start:stop]``; the run given is open in front of ``start``.

        This is the specification of the C loop (worker/_native.c), with the same **run rule**:
        a run is consecutive records of one partition that need no decision. A record needs
        a decision when it is a consume error, has no route, or carries a ``urep`` header
        (the forwarding policy decides: :func:`worker.forwarding.copies`); the run in front
        of it closes before it, and if it is copied it is a run of its own. Other headers
        need no decision: they are copied within the run. The run open at ``stop`` is
        closed on its last record. Returns the bytes of the runs it closed, or None when it
        abandoned the rest of the batch.
        """
        produce = self.destination.producer.produce
        routes = self.handoff.routes
        source_alias = self._source_alias
        only_origin = self._only_origin
        skip_origin = self._destination_alias
        header = provenance.HEADER
        encode = provenance.encode
        stamp = self._stamp
        no_timestamp = TIMESTAMP_NOT_AVAILABLE
        bind = partial
        exact = self.ledger.exact(self._clock())
        fetched_bytes = 0  # bytes of closed runs: what delivery reports will give back
        produced = 0
        # run_*: the open run, sent but not yet covered by a callback.
        # One record of look-ahead: whether the next record continues this record's run.
        nxt = messages[start]
        nxt_err = nxt.error()
        nxt_route = routes.get((nxt.topic(), nxt.partition())) if nxt_err is None else None
        nxt_headers = nxt.headers() if nxt_route is not None else None
        nxt_urep = nxt_headers is not None and _carries(nxt_headers, header)
        for i in range(start + 1, stop + 1):
            msg = nxt
            err = nxt_err
            route = nxt_route
            headers = nxt_headers
            urep = nxt_urep
            if i < stop:
                nxt = messages[i]
                nxt_err = nxt.error()
                nxt_route = routes.get((nxt.topic(), nxt.partition())) if nxt_err is None else None
                nxt_headers = nxt.headers() if nxt_route is not None else None
                nxt_urep = nxt_headers is not None and _carries(nxt_headers, header)
            else:
                nxt_route = None
            if err is not None:
                self._on_consume_error(msg, err)
                continue
            if route is None:
                continue  # fetched before a release or after an error; resumed from the commit
            destination, acks, topic, partition = route
            offset = msg.offset()
            if urep:
                # A copy from an earlier hop: the forwarding policy decides (no run is open here).
                origin = source_alias
                kept = []
                for name, value in headers:
                    if name == header:
                        origin = provenance.origin_of(value) or source_alias
                    else:
                        kept.append((name, value))
                if (origin != source_alias) if only_origin else (origin == skip_origin):
                    acks.skipped(offset)
                    self.metrics.skipped.labels(topic).inc()
                    continue
                headers = kept
                headers.append((header, stamp(offset, partition) if origin == source_alias
                                else encode(offset, partition, origin, source_alias)))
            elif headers:
                headers = [*headers, (header, stamp(offset, partition))]
            else:
                headers = [(header, stamp(offset, partition))]
            key = msg.key()
            value = msg.value()
            size = (len(key) if key else 0) + (len(value) if value else 0)
            ts_type, ts = msg.timestamp()
            if not run_count:
                run_first = offset
            run_count += 1
            run_bytes += size
            if exact:
                callback = bind(acks.report_cb, offset, size)
            elif urep or nxt_route is not route or nxt_urep:
                callback = bind(acks.report_run, run_first, offset, run_count, run_bytes)
            else:
                callback = None
            while True:
                try:
                    # The report carries the records' identity (acquisition, offsets), not a
                    # place in a queue: a stale report can never acknowledge a later record.
                    produce(destination, value, key, partition, callback, None,
                            ts if ts_type != no_timestamp else 0, headers)
                except BufferError:
                    self.hold()
                    self.destination.poll(0.05)  # local queue full: wait for acks, never drop
                    if self._stopping.is_set() or not self._may_write():
                        self.ledger.in_flight_bytes += fetched_bytes
                        self.produced += produced
                        self._abandon(messages[i - 1:])
                        return None
                    continue
                except KafkaException as exc:
                    kerr = exc.args[0]
                    run_count = run_bytes = 0  # the open run will never be reported
                    fatal = kerr.fatal() or kerr.code() == KafkaError._FATAL
                    # Exactly-once: the open transaction failed (a purge, a sequence gap after a
                    # destination restart) and librdkafka takes no record until it is aborted. The
                    # producer's state, not a refusal of this record: the rest of the batch is rewound,
                    # and the loop aborts the transaction before anything is sent again.
                    txn_failed = self._txn is not None and (kerr.code() == KafkaError._STATE
                                                            or kerr.txn_requires_abort())
                    if fatal or txn_failed:
                        if fatal:
                            self.destination.mark_broken(kerr.str())
                        else:
                            self.log.warning("produce_refused_until_abort", topic=topic, partition=partition,
                                             offset=offset, error=kerr.str())
                        self.ledger.in_flight_bytes += fetched_bytes
                        self.produced += produced
                        self._abandon(messages[i - 1:])
                        return None
                    if self._txn is not None and run_first != offset:
                        # Exactly-once: the run's earlier records are in the open transaction, and
                        # no report will ever move the position over them; committed so, a restart
                        # would send them again, visible twice. As for a failed run: abort (the
                        # loop does, before any rewind), send again with a report per record, and
                        # the partition stops exactly at this record.
                        # An unknown partition too: the exact resend comes back here with no run open.
                        self._refused_in_run(acks, run_first, offset, kerr.str())
                    elif kerr.code() == KafkaError._UNKNOWN_PARTITION:
                        # The destination was just grown (or is still to be): its partition is awaited
                        # beside the loop, so the other partitions keep flowing, and this one restarts
                        # from its acknowledged position once the producer knows it. At-least-once, an
                        # open run's records are sent again then: duplicates, as after any rewind.
                        self.handoff.await_beside(acks, offset, kerr.str())
                    else:
                        self.handoff.stop_partition(acks, offset, kerr.str())
                    if nxt_route is route:
                        nxt_route = None  # the look-ahead saw the route before it was stopped
                    break
                produced += 1
                if callback is not None:
                    # PartitionAcks.sent_run, inlined: hot path
                    acks.in_flight.append(offset)
                    acks.outstanding += run_count
                    acks.outstanding_bytes += run_bytes
                    fetched_bytes += run_bytes
                    run_count = run_bytes = 0
                break
        self.produced += produced
        self.ledger.in_flight_bytes += fetched_bytes
        return fetched_bytes

    def _abandon(self, messages: list[Any]) -> None:
        """Stop or fence while the local queue is full: leave the rest of the batch unsent.

        The consumer has moved past these records, so their partitions stop producing and
        are rewound to their acknowledged position once the fence lifts; a stopping worker
        simply never commits past them.
        """
        abandoned = {(m.topic(), m.partition()) for m in messages if m.error() is None}
        for tp in abandoned:
            if self.handoff.routes.pop(tp, None) is not None:
                self.ledger.needs_rewind.add(tp)
        self.log.warning("batch_abandoned", records=len(messages), partitions=fmt(list(abandoned)),
                         stopping=self._stopping.is_set())

    def _refused_in_run(self, acks: PartitionAcks, first: int, offset: int, reason: str) -> None:
        """Exactly-once: ``produce()`` refused the record at ``offset`` with the run from ``first`` open in front of it.

        The partition is not stopped here, where its position stands in front of the run: it
        is rewound, which aborts the open transaction first (the run's records go with it), and
        sent again with a report per record, so it stops at ``offset`` with everything before it
        acknowledged and committed once. Nothing after the refused record is sent meanwhile.
        """
        tp = acks.tp
        if self.handoff.routes.get(tp, (None, None))[1] is acks:
            del self.handoff.routes[tp]
        self.ledger.needs_rewind.add(tp)
        self.ledger.go_exact(acks, first, reason)
        self.log.warning("produce_refused_in_run", topic=tp[0], partition=tp[1], run_first=first, offset=offset,
                         error=reason)

    def _on_consume_error(self, msg: Any, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        tp = (msg.topic(), msg.partition()) if msg.topic() else None
        if tp and not err.fatal() and err.code() in _OUT_OF_RANGE:
            # The consumer never resets a position by itself (auto.offset.reset=error): the
            # partition's fetch stopped at msg.offset(); its log bounds decide where it goes on.
            acks = self.ledger.get(tp)
            if acks is not None:
                self.handoff.out_of_range(acks, msg.offset(), err.str())
                return
        if err.fatal() or (tp and not err.retriable() and err.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART,
        )):
            acks = self.ledger.get(tp) if tp is not None else None
            if acks is not None:
                self.handoff.stop_partition(acks, msg.offset(), err.str())
                return
        self.log.warning("consume_error", topic=msg.topic(), partition=msg.partition(), error=err.str())

    def hold(self) -> None:
        """This turn held back fetching on purpose (backpressure, a fence): the fetch watch's clocks stop meanwhile."""
        if self._fetch_watch is not None and self._held_from is None:
            self._held_from = self._clock()

    def _end_hold(self, now: float) -> None:
        """Tell the fetch watch how long the loop held back fetching, up to ``now``."""
        if self._fetch_watch is not None and self._held_from is not None:
            self._fetch_watch.hold(now - self._held_from)
        self._held_from = None

    def watch(self, now: float) -> None:
        """About once a second: compare the positions with the source's end offsets and remedy a silent stall.

        librdkafka #5153: an ``assign()`` consumer occasionally stops receiving some partitions
        after a source broker restart, with no error (both 30-minute soaks stopped so). The
        end offsets are read beside the loop (:class:`EndOffsets`); the decision is
        :class:`fetchwatch.FetchWatch`'s; the remedies are here.
        """
        watch = self._fetch_watch
        if watch is None or self._ends is None or now < self._watch_at:
            return
        self._watch_at = now + self._watch_every_s
        if self._held_from is not None:
            self._end_hold(now)
            self._held_from = now  # still holding: the rest counts towards the next look
        if not self._queue_drained:
            # The loop is behind its consumer's queue (up to queued.max.messages.kbytes): a record
            # fetched now waits its turn there, which is lag, not a stall.
            watch.hold()
        self._queue_drained = False
        partitions = self.ledger.partitions
        self._ends.want(partitions)
        for tp in [tp for tp, (acks, _) in self._fetch_from.items() if partitions.get(tp) is not acks]:
            del self._fetch_from[tp]
        seen = fetchwatch.watched(
            partitions, self._positions(list(partitions)),
            stopped=[tp for tp, acks in partitions.items() if acks.error is not None],
            releasing=self.handoff.releasing, rewinding=self.ledger.needs_rewind, routed=self.handoff.routes,
        )
        stalls = watch.observe(now, seen, self._ends.snapshot())
        if not stalls:
            return
        for stall in stalls:
            self.log.warning("fetch_stalled", topic=stall.tp[0], partition=stall.tp[1], position=stall.position,
                             end_offset=stall.end, stalled_s=stall.stalled_s, action=stall.action)
            self.metrics.fetch_stalls.labels(stall.action).inc()
        self._replace_consumer()

    def _positions(self, partitions: list[TP]) -> dict[TP, int]:
        """The offset the loop consumes next per partition (negative: not known).

        The consumer's position moves when ``consume`` returns a record (or skips a
        transaction marker); until then it is unknown, and the partition's next offset is
        where the watch or the acquisition last assigned it.
        """
        if not partitions:
            return {}
        try:
            found = self.consumer.position([TopicPartition(t, p) for t, p in partitions])
        except KafkaException:
            return {}
        out = {}
        for tp in found:
            key = (tp.topic, tp.partition)
            offset = tp.offset
            if offset < 0:
                assigned = self._fetch_from.get(key)
                start = self.handoff.start_of(key)
                if assigned is not None:
                    offset = assigned[1]
                elif start is not None and start >= 0:
                    offset = start
            out[key] = offset
        return out

    def _replace_consumer(self) -> None:
        """The fetch watch's remedy: a new source consumer, assigned every partition at its next offset.

        The next offset, not the acknowledged or committed one: every record before it was
        handed to the producer already (in exactly-once mode, to the open transaction), so
        nothing is skipped and nothing is sent twice.

        What the old consumer held goes with it; everything that reads the consumer (the
        hand-off, the status, the transactions' group metadata) is pointed at the new one.
        The old one is closed on a thread of its own, so a close that waits on a broker
        never holds the loop.
        """
        assert self._make_consumer is not None
        partitions = self.ledger.partitions
        assigned = self.handoff.assigned()
        positions = self._positions(assigned)
        assign = []
        for tp in assigned:
            offset = positions.get(tp, -1)
            if offset < 0:
                # Nothing consumed since the acquisition started at a logical offset: start there again.
                start = self.handoff.start_of(tp)
                offset = start if start is not None else OFFSET_BEGINNING
            assign.append(TopicPartition(tp[0], tp[1], offset))
        try:
            new = self._make_consumer()
            if assign:
                new.incremental_assign(assign)
            waiting = self.handoff.waiting
            stopped = [TopicPartition(t, p) for t, p in assigned
                       if partitions[(t, p)].error is not None or (t, p) in waiting]
            if stopped:
                new.pause(stopped)  # a refused record stopped them, or they wait for a destination partition
        except KafkaException as exc:
            self.log.error("consumer_replace_failed", error=str(exc.args[0]))
            return
        old = [self.consumer]
        self.consumer = new
        self.handoff.use_consumer(new)
        self.status.use_consumer(new)
        for tp in assign:
            if tp.offset >= 0:
                self._fetch_from[(tp.topic, tp.partition)] = (partitions[(tp.topic, tp.partition)], tp.offset)
        threading.Thread(target=_close_consumer, args=(old, self.log), name="consumer-retire", daemon=True).start()
        self.log.warning("consumer_replaced", partitions=len(assign))

    def settle(self, outcome: Purged | Aborted | None) -> None:
        """Apply a purge's outcome (:meth:`Destination.purge`) to the partitions: rewinds, logs."""
        if isinstance(outcome, Aborted):
            self.aborted(outcome)
        elif isinstance(outcome, Purged):
            if outcome.error is not None:
                self.log.warning("purge_failed", error=outcome.error)
            self.log.warning("producer_purged", reason=outcome.why, partitions=len(self.ledger.partitions))
            if outcome.replaced is not None:
                self.replaced(outcome.replaced)

    def replaced(self, replaced: Replaced) -> None:
        """A fresh producer took over (:meth:`Destination.replace`): rewind what the old one never reported.

        Reports the old one never delivered cannot come any more: their partitions are
        rewound from their acknowledged position (duplicates at worst, never a gap). After a
        fatal error every partition that is not stopped is rewound, in exact mode, so a
        record the destination refuses is named and its partition stopped in front of it.
        In exactly-once mode every partition goes back to its last committed position.
        """
        fatal = replaced.fatal or self.ledger.producer_failed is not None
        partitions = self.ledger.partitions
        unreported = sum(acks.outstanding for acks in partitions.values())
        releasing = self.handoff.releasing  # their release commits the acknowledged position: no rewind
        self.handoff.use_producer(self.destination.producer)
        self.ledger.producer_failed = None
        if self._txn is not None:
            rewind = self._revert_uncommitted()
        else:
            rewind = {tp for tp, acks in partitions.items()
                      if tp not in releasing and acks.error is None and (fatal or acks.outstanding)}
        self.ledger.forget_outstanding()
        self.ledger.needs_rewind.update(rewind)
        if fatal:
            self.ledger.exact_until = self._clock() + EXACT_FOR_S
        self.metrics.producer_replacements.inc()
        log = self.log.error if fatal else self.log.warning
        log("producer_replaced", reason=replaced.reason, unreported=unreported, partitions_rewound=len(rewind),
            exact=fatal)

    def commit_transaction(self, why: str) -> bool:
        """Commit the open transaction with the positions its records complete; True when none is open any more.

        Every delivery report is in first, so each partition's acknowledged position names
        exactly what the transaction holds. The positions go to the destination's group,
        keyed by destination topic and partition; once committed they are copied to the
        source group (best effort: lag tools, the verifier, a switch back to at-least-once).
        """
        txn = self._txn
        if txn is None or not txn.open:
            return True
        remaining = self.destination.flush(min(1.0, txn.interval_s))
        if self.rewinds_due() or self.ledger.refused or self.destination.broken or self.ledger.producer_failed:
            self.abort_transaction(why)  # a record failed: the transaction cannot hold all it should
            return True
        if remaining:
            if self.destination.abortable():
                # A record of it failed without a report reaching us (one run's report speaks for
                # all its records, and librdkafka holds the rest): nothing more will come.
                self.abort_transaction("abortable")
                return True
            if txn.overdue_s(self._clock()) < transactions.RENEW_AFTER_S:
                return False
            # Overdue: if the destination went away under this producer its reports may never come
            # (seen: 30 s until the stalled-producer watch), and none of its records is visible.
        silent_s = self.destination.silent_s(self._clock(), self.ledger.acks) if remaining else 0.0
        renewed = self.destination.renew(why, silent_s)
        if renewed is not None:
            self.aborted(renewed)  # the successor aborts the open transaction; every partition rewinds
            return True
        if remaining:
            return False
        moved = [(acks, acks.position) for acks in self.ledger.partitions.values()
                 if acks.position >= 0 and acks.position != acks.txn_position]
        offsets = [TopicPartition(acks.destination, acks.partition, position) for acks, position in moved]
        outcome = self.destination.commit(offsets, why)
        if isinstance(outcome, Committed):
            for acks, position in moved:
                acks.txn_position = position
            self.metrics.transactions.labels(transactions.COMMITTED).inc()
            self.committer.commit_soon()  # the copy to the source group; never waits
            return True
        if isinstance(outcome, Retry):
            return False
        self.aborted(outcome)
        return True

    def rewinds_due(self) -> bool:
        """Whether a partition that can be sent again waits for a rewind (exactly-once mode: abort first).

        A stopped partition (the destination refused a record) is never rewound, so it is
        dropped from the set here; left in it, it would abort every transaction from now on.
        """
        ledger = self.ledger
        for tp in [tp for tp in ledger.needs_rewind
                   if (acks := ledger.partitions.get(tp)) is None or acks.error is not None]:
            ledger.needs_rewind.discard(tp)
        return bool(ledger.needs_rewind)

    def abort_transaction(self, why: str, timeout_s: float | None = None) -> None:
        """Abort the open transaction and rewind every partition to its last committed position."""
        self.aborted(self.destination.abort(why, timeout_s))

    def aborted(self, aborted: Aborted) -> None:
        """The transaction is gone (:class:`Aborted`): every partition back to its last committed position."""
        self.metrics.transactions.labels(aborted.outcome).inc()
        if aborted.replaced is not None:
            self.replaced(aborted.replaced)  # it rewinds all
            return
        rewound = self._revert_uncommitted()
        self.ledger.refused = False
        self.ledger.forget_outstanding()
        self.ledger.needs_rewind.update(rewound)
        why = aborted.why
        exact = why not in FENCING
        if exact:
            # Which record failed is not known from a run's report (nor from a failed commit): send
            # again with a report per record, so a record the destination refuses is named and
            # only its partition stops (then the next transaction commits without it).
            self.ledger.exact_until = max(self.ledger.exact_until, self._clock() + EXACT_FOR_S)
        self.log.warning("transaction_aborted", reason=why, partitions_rewound=len(rewound), exact=exact)

    def positions_known(self) -> bool:
        """Exactly-once: whether every partition's last committed position is known, so rewinds may start.

        A producer replaced while its commit was in doubt (``commit_transaction`` timed out,
        then the abort met that commit still under way: ``_CONFLICT``, seen in the soak after a
        frozen destination thawed) leaves ``txn_position`` possibly behind: if that commit's
        EndTxn reached the coordinator, the successor's ``init_transactions`` completed it, and a
        rewind to the in-memory position would send its records again, visible twice to a
        ``read_committed`` reader. The destination's group knows, since the positions commit in
        the same transaction: they are read back beside the loop (the successor is ready by
        then, so the outcome is final), and the loop fetches nothing until they are in.
        """
        txn = self._txn
        if txn is None or not txn.settle_due:
            return True
        if self._settling is None:
            if self._clock() < self._settle_retry_at or not txn.ready_on(self.destination.producer):
                return False  # the successor's init_transactions (next turn) settles the old transaction first
            asked = {tp: acks for tp, acks in self.ledger.partitions.items() if acks.error is None}
            job = self.handoff.read_positions({tp: (acks.destination, acks.txn_position)
                                               for tp, acks in asked.items()})
            self._settling = (job, asked)
        job, asked = self._settling
        if not job.done.is_set():
            return False
        self._settling = None
        if job.error is not None:
            self._settle_retry_at = self._clock() + 1.0
            self.log.warning("positions_unsettled", partitions=len(asked), error=logs.error_text(job.error))
            return False
        moved = {}
        for tp, offset in job.result.items():
            acks = asked[tp]
            # A committed position never goes back; the group saying less than the loop knows it
            # committed (its offsets deleted meanwhile) must not send committed records again.
            if self.ledger.partitions.get(tp) is acks and offset > acks.txn_position:
                moved[f"{tp[0]}:{tp[1]}"] = [acks.txn_position, offset]
                acks.txn_position = offset
                if acks.position < offset:
                    acks.position = offset
        txn.settled()
        self.log.warning("positions_settled", partitions=len(asked), moved=moved)
        return True

    def _revert_uncommitted(self) -> set[TP]:
        """Every partition's position back to what its last transaction committed; returns those to rewind.

        Stopped partitions stay stopped; releasing ones are not fetched again (their release
        then copies the committed position to the source group).
        """
        releasing = self.handoff.releasing
        rewind = set()
        for tp, acks in self.ledger.partitions.items():
            acks.position = acks.txn_position
            if tp not in releasing and acks.error is None:
                rewind.add(tp)
        return rewind


def _close_consumer(holder: list[Any], log: Any) -> None:
    """Close a replaced source consumer beside the loop (``holder`` has the last reference; it is emptied)."""
    consumer = holder.pop()
    try:
        consumer.close()
    except (KafkaException, RuntimeError) as exc:
        log.warning("consumer_close_failed", error=logs.error_text(exc))


def _carries(headers: list[tuple[str, Any]], name: str) -> bool:
    """Whether a record's headers include ``name`` (the ``urep`` header: the record needs a decision)."""
    for key, _ in headers:
        if key == name:
            return True
    return False
