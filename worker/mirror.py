"""The worker's loop: fetch the owned partitions, produce them to the destination, commit, report.

One thread does all Kafka work (librdkafka clients are driven from one
loop); ZooKeeper callbacks only record the latest assignment or connection
state and wake the loop. Lifecycle, as in dramatiq's worker::

    registered -> applying(generation g) -> mirroring -> ... -> stopping -> deregistered

The other concerns read alone: hand-off in :mod:`worker.handoff`, delivery
reports and watermarks in :mod:`worker.acks`, commits in :mod:`worker.commits`,
the status node in :mod:`worker.status`. Clients come from outside
(:mod:`worker.clients`), so unit tests drive this class with fakes.

* Assignment change: :meth:`Handoff.apply` starts it and :meth:`Handoff.advance`
  moves it on every turn (release, report, acquire), beside the copying: the
  partitions that do not move never wait for a coordinator.
* Fenced — the lease (the last time ZooKeeper answered) is older than the session
  timeout minus a margin (:func:`lease_s`), e.g. a paused process or a ZooKeeper
  away for too long: no fetch, no commit, and librdkafka's queue is purged so
  nothing more is sent; the purged partitions are rewound to their acknowledged
  position once the fence lifts with the same session. A SUSPENDED connection
  alone fences nothing: while the session lives no other worker can be granted
  these partitions, so a ZooKeeper blip shorter than the lease pauses nothing.
* LOST session: purge, forget every partition without committing (someone else
  may own them now), re-register and wait for a fresh assignment.
* Shutdown: stop fetching, wait for acks up to ``worker.stop_timeout_s``,
  commit, deregister (a fenced worker purges instead of waiting and commits nothing).
* Fetch watch (``worker.fetch_stall_s``, :mod:`worker.fetchwatch`): a partition whose source
  end offset grew while the consumer's position stood still (librdkafka #5153, after a source
  broker restart) gets a new source consumer, assigned at the offsets the loop consumes next.
  Every turn that holds back fetching on purpose tells the watch, so backpressure is no stall.
* Exactly-once mode (``worker.exactly_once``, :mod:`worker.transactions`), on the Python
  loop only: records and the positions they complete commit in one transaction every
  ``worker.transaction_interval_ms``; a release commits it first; a fence, a lost session
  or a failed transaction aborts it, and every partition goes back to its last committed
  position (:meth:`MirrorWorker._revert_uncommitted`).
"""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, TopicPartition
from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, RolledBackError

from ureplicator.common import httpserve, logs, provenance
from ureplicator.common.config import Config
from ureplicator.common.errors import ConfigError
from ureplicator.common.zkschema import Assignment, Paths, RateLimit, SchemaError, WorkerInfo
from ureplicator.worker import clients as worker_clients
from ureplicator.worker import fetchwatch, forwarding, native, probes, transactions
from ureplicator.worker.acks import EXACT_FOR_S, TP, AckLedger, PartitionAcks
from ureplicator.worker.commits import Committer
from ureplicator.worker.destination import Aborted, Committed, Destination, Purged, Replaced, Retry
from ureplicator.worker.endoffsets import EndOffsets
from ureplicator.worker.handoff import Beside, Handoff, fmt
from ureplicator.worker.metrics import WorkerMetrics
from ureplicator.worker.ratelimit import RateLimiter
from ureplicator.worker.status import StatusReporter

_FENCING = frozenset({"fenced", "session_lost", "stopping_while_fenced"})  # purges that mean "not ours any more"

VERSION = "0.1.0"


def lease_s(session_timeout_s: float) -> float:
    """How long a ZooKeeper answer keeps this worker allowed to write: the session minus a margin.

    The leader can give this worker's partitions away only once its session expired on
    the server, at least a session timeout after the last request the server answered,
    which was sent after the lease's start. The margin (a third of the session, at
    least 2 s) covers what is already queued in librdkafka when the lease runs out.
    """
    return max(session_timeout_s - max(2.0, session_timeout_s / 3), session_timeout_s / 3)


def _load_native(mode: str) -> tuple[Any, str]:
    """The C loop for ``worker.native_loop`` = mode, or None; and why, for the start-up log."""
    if mode == "off":
        return None, "worker.native_loop is off"
    try:
        return native.load(), "built and checked against this confluent-kafka"
    except native.Unavailable as exc:
        if mode == "on":
            raise ConfigError("worker.native_loop", f"is 'on' but the C loop cannot run here: {exc}") from None
        return None, str(exc)


class MirrorWorker:
    """A stateless worker: everything it owns comes from ``assignments/<id>``."""

    def __init__(
        self,
        config: Config,
        worker_id: str,
        metrics: WorkerMetrics | None = None,
        clients: worker_clients.WorkerClients | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        # The time the loop decides by (lease, intervals, deadlines, stall watch); unit tests pass
        # a fake. Waits for a cluster's answer (a flush, a drain, a registration) use real time.
        self._clock = clock
        self.worker_id = worker_id
        self.paths = Paths(config.root)
        self.metrics = metrics or WorkerMetrics()
        self.log = logs.get("worker", pipeline=config.pipeline, worker=worker_id)
        self._source_alias = config.source.alias
        # urep value for records that start here: origin and this hop's source are both the source
        self._stamp = provenance.encoder(config.source.alias, config.source.alias)
        self._alias_bytes = config.source.alias.encode()  # the same, for the C loop
        self._destination_alias = config.destination.alias
        if config.forward not in forwarding.POLICIES:
            raise ConfigError("forward", f"must be one of {', '.join(forwarding.POLICIES)}, got {config.forward!r}")
        self._only_origin = config.forward == "origin"  # the route's forwarding policy (worker/forwarding.py)

        self._stop = threading.Event()
        self._wake = threading.Event()
        self._desired: Assignment | None = None
        self._desired_lock = threading.Lock()
        self._fenced = False  # the session was LOST (until the connection is back); the lease fences too
        self._session_lost = False
        self._connected = True  # kazoo's connection state (SUSPENDED: False); acquisitions need it
        self._purged = False  # librdkafka's queue was purged for the current fence
        # Lease: the last time ZooKeeper answered us. A process that was paused (GC, SIGSTOP,
        # a frozen VM) wakes with a stale lease and fences itself before kazoo even notices
        # its session expired, so it cannot write partitions given to someone else meanwhile.
        self._lease_at = clock()
        self._lease_asked = 0.0
        self._lease_s = lease_s(config.zookeeper.session_timeout_s)
        self.produced = 0  # records handed to the producer (tests watch it stop when fenced)
        self.last_turn = time.monotonic()  # when the loop last came round (/healthz)
        self.registered = threading.Event()  # /ready: registered and not fenced
        self.limiter = RateLimiter(config.worker.max_records_per_s, config.worker.max_bytes_per_s)

        clients = clients or worker_clients.connect(config, worker_id)
        self.zk = clients.zk
        self.consumer = clients.consumer
        self._make_consumer = clients.make_consumer  # the fetch watch's remedy: a new source consumer
        self.zk.add_listener(self._on_connection)

        self.ledger = AckLedger(on_latency=self._observe_latency)
        self.ledger.clock = clock
        self.status = StatusReporter(self.zk, self.paths.worker_status(worker_id), self.consumer, self.ledger,
                                     self.metrics, self.log, clock=clock)
        self.committer = Committer(clients.make_commit_client, self.ledger, self.metrics, self.log,
                                   background=clients.commit_thread, clock=clock)
        self.beside = Beside(background=clients.handoff_thread, log=self.log)
        self.handoff = Handoff(config, self.consumer, clients.producer, self.zk, self.ledger, self.committer,
                               self.status, self.metrics, self.log, beside=self.beside,
                               make_offsets_client=clients.make_offsets_client, clock=clock)
        self.handoff.after_purge = lambda why: self._replaced(self.destination.replace(why, purged=True))
        txn: transactions.Transactions | None = None
        if config.worker.exactly_once:
            if clients.make_offsets_client is None:
                raise ConfigError("worker.exactly_once", "is on but the clients were opened for at-least-once mode")
            txn = transactions.Transactions(config.worker.transaction_interval_ms / 1000.0,
                                            config.worker.max_in_flight_bytes,
                                            # the current consumer's: the fetch watch may replace it
                                            lambda: self.consumer.consumer_group_metadata(),
                                            self.log, clock=clock)
            self.handoff.before_release = partial(self._commit_transaction, "release")
        # Both loops serve exactly-once mode: the transaction's calls (begin, send offsets, commit,
        # abort) are made at the batch and interval boundaries, never per record, and a produce
        # inside a transaction is the same librdkafka call.
        self._native, native_reason = _load_native(config.worker.native_loop)
        self.destination = Destination(clients.producer, clients.make_producer, clients.producer_errors,
                                       stall_s=config.worker.producer_stall_s, native=self._native,
                                       native_mode=config.worker.native_loop, txn=txn, clock=clock)
        self._txn = txn
        self.log.info("mirror_loop", loop="native" if self.destination.native_target is not None else "python",
                      reason=native_reason, exactly_once=txn is not None)
        if config.worker.shutdown_timeout_s > 0:
            self.log.warning("config_deprecated", key="worker.shutdown_timeout_s",
                             replaced_by=["worker.stop_timeout_s", "worker.release_ack_timeout_s",
                                          "worker.release_commit_timeout_s", "worker.producer_stall_s"],
                             applied=config.worker.shutdown_timeout_s)
        self._last_commit = clock()
        self._fetch_wait_s = config.worker.fetch_wait_ms / 1000.0
        # The fetch watch (worker/fetchwatch.py): a source consumer that stops fetching is noticed and replaced.
        stall_s = config.worker.fetch_stall_s
        self._fetch_watch: fetchwatch.FetchWatch | None = None
        self._ends: EndOffsets | None = None
        if stall_s > 0 and clients.end_offsets is not None and clients.make_consumer is not None:
            self._fetch_watch = fetchwatch.FetchWatch(stall_s)
            self._ends = EndOffsets(clients.end_offsets, interval_s=min(5.0, stall_s / 3), log=self.log, clock=clock,
                                    timeout_s=min(10.0, max(1.0, stall_s / 2)), background=clients.watch_thread)
        self._watch_every_s = min(1.0, stall_s / 4)
        self._watch_at = 0.0
        # Where the watch last assigned a partition (its acquisition, the offset): the consumer's
        # position is unknown again until a record of it is consumed.
        self._fetch_from: dict[TP, tuple[PartitionAcks, int]] = {}
        # Whether a consume since the last look came back short: librdkafka's queue was empty then.
        self._queue_drained = False

    @property
    def producer(self) -> Any:
        """The destination producer in use now (:class:`Destination` replaces it)."""
        return self.destination.producer

    @property
    def owned(self) -> dict[TP, PartitionAcks]:
        """The partitions this worker mirrors now (a stopped partition stays owned until released)."""
        return self.ledger.partitions

    @property
    def ready(self) -> bool:
        """Registered and allowed to write: what ``/ready`` reports."""
        lease_fresh = self._clock() - self._lease_at < self._lease_s  # no renewal from the probe's thread
        return (self.registered.is_set() and not self._fenced and not self._session_lost and lease_fresh
                and self.not_ready_reason is None)

    @property
    def not_ready_reason(self) -> str | None:
        """Why the destination refuses this worker (credentials, TLS, ACLs), for ``/ready``; None when it does not."""
        failure = self.destination.errors.auth.failure(within_s=30)
        if failure is None:
            return None
        return f"cluster {self.config.destination.alias} refused our credentials: {failure[0]} failed: {failure[1]}"

    @property
    def session_lost(self) -> bool:
        """The ZooKeeper session expired and the worker has not re-registered yet."""
        return self._session_lost

    # --- ZooKeeper side (callbacks only set state) --------------------------------------------

    def _on_connection(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            self._connected = False  # not fenced: the lease decides (a blip pauses nothing)
        elif state == KazooState.LOST:
            self.status.session = None  # not registered any more: a late status write creates nothing
            self._connected = False
            self._fenced = True
            self._session_lost = True
        else:
            self._connected = True
            self._fenced = self._session_lost  # CONNECTED: resume unless the session is new
        self._wake.set()

    def _on_assignment(self, data: bytes | None, stat: object) -> bool:
        assignment: Assignment | None = None
        if data:
            try:
                assignment = Assignment.decode(data)
            except SchemaError as exc:
                self.log.error("assignment_unreadable", error=str(exc))
                return not self._stop.is_set()
        with self._desired_lock:
            self._desired = assignment or Assignment(self.handoff.generation, frozenset())
        self._wake.set()
        return not self._stop.is_set()

    def register(self, wait_s: float | None = None) -> None:
        """Announce this worker; a stale node of a previous session with our id is waited out."""
        info = WorkerInfo(
            host=socket.gethostname(),
            pid=os.getpid(),
            version=VERSION,
            started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            metrics_port=self.config.worker.metrics_port,
        )
        self._check_mode()
        # An assignment left from an earlier life of this id may already be given away:
        # drop it and wait for one the leader writes for this registration.
        try:
            self.zk.delete(self.paths.assignment(self.worker_id))
        except NoNodeError:
            pass
        deadline = time.monotonic() + (wait_s if wait_s is not None else self.config.zookeeper.session_timeout_s + 5)
        # The registration and the first status in one write: the leader pins a worker's written
        # assignment only while it can read that worker's status, so a registered worker without
        # one would let it hand the same partitions to another worker while this one applies them.
        status = self.status.build(self.handoff.generation, self._clock()).encode()
        while True:
            tx = self.zk.transaction()
            tx.create(self.paths.worker(self.worker_id), info.encode(), ephemeral=True)
            tx.create(self.paths.worker_status(self.worker_id), status, ephemeral=True)
            results = tx.commit()
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failures:
                break
            # A previous session's nodes with our id are still there until it expires: wait it out.
            if not isinstance(failures[0], NodeExistsError) or time.monotonic() > deadline or self._stop.is_set():
                raise failures[0]
            if self._drop_own_stale_nodes():
                continue
            time.sleep(0.5)
        self.zk.DataWatch(self.paths.assignment(self.worker_id), self._on_assignment)
        self.zk.DataWatch(self.paths.rate_limit, self._on_rate_limit)
        self._lease_at = self._clock()
        self.status.session = self.zk.client_id[0] if self.zk.client_id else None
        self.registered.set()
        self.log.info("worker_registered")

    def _drop_own_stale_nodes(self) -> bool:
        """Delete our id's nodes that *this* session created before registering; True if one was.

        A status write sent before a session expired is answered after the new session is
        up: its NoNode answer makes the status publisher create the node, ephemeral, in the
        new session (the soak's worker-and-destination freeze, exactly-once mode). That
        node never expires while we live, so waiting it out would refuse the registration
        for good. A node of another session (our previous life) is still waited out.
        """
        session = self.zk.client_id[0] if self.zk.client_id else None
        dropped = False
        for path in (self.paths.worker(self.worker_id), self.paths.worker_status(self.worker_id)):
            try:
                _, stat = self.zk.get(path)
                if session is not None and stat.ephemeralOwner == session:
                    self.zk.delete(path, version=stat.version)
                    dropped = True
            except (NoNodeError, BadVersionError):
                pass  # gone or rewritten meanwhile: the next attempt tells
        if dropped:
            self.log.info("stale_own_nodes_dropped", session=hex(session or 0))
        return dropped

    def _check_mode(self) -> None:
        """Refuse to start when the pipeline's recorded delivery mode is not this worker's ``worker.exactly_once``."""
        path = transactions.mode_path(self.paths.root)
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return  # no controller recorded one yet (it writes the node when its term starts)
        recorded = transactions.decode_mode(data)
        if recorded is not None and recorded != self.config.worker.exactly_once:
            raise ConfigError("worker.exactly_once",
                              f"is {str(self.config.worker.exactly_once).lower()} but the pipeline runs "
                              f"{'exactly-once' if recorded else 'at-least-once'} ({path}, written by the "
                              "controller): set the same worker.exactly_once on the controller and every worker")

    def _on_rate_limit(self, data: bytes | None, stat: object) -> bool:
        limit = RateLimit(self.config.worker.max_records_per_s, self.config.worker.max_bytes_per_s)
        if data:
            try:
                limit = RateLimit.decode(data)
            except SchemaError as exc:
                self.log.error("rate_limit_unreadable", error=str(exc))
        # Plain attribute writes: the loop reads them on its next turn.
        self.limiter.update(limit.records_per_s, limit.bytes_per_s)
        self.log.info("rate_limit_applied", records_per_s=limit.records_per_s, bytes_per_s=limit.bytes_per_s)
        return not self._stop.is_set()

    # --- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        """Mirror until :meth:`stop` is called; then release everything cleanly."""
        server = None
        if self.config.worker.metrics_port:
            server = httpserve.serve(
                httpserve.logged(probes.app(self, self.metrics.registry, self.config.worker.health_stall_s),
                                 "worker", quiet_paths=frozenset({"/metrics", "/healthz", "/ready"})),
                self.config.worker.metrics_host, self.config.worker.metrics_port, "worker-probes",
            )
        # The mirror loop allocates a few short-lived objects per record; the default gen-0
        # threshold (700) made the cyclic GC ~6% of the loop's time in profiles. Long-lived
        # startup objects are frozen out of collection; cycles are still collected.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)
        try:
            self.register()
            while not self._stop.is_set():
                self.turn()
        finally:
            self._shutdown()
            if server is not None:
                server.shutdown()

    def turn(self) -> None:
        """One turn of the loop: apply, fetch and produce (or wait), serve reports, commit, report."""
        self.last_turn = time.monotonic()  # /healthz compares it with real time, from its own thread
        now = self._clock()
        if self._session_lost:
            self._hold_fetch()
            self._recover_session()
            return
        fenced = not self._may_write()
        if fenced:
            self._hold_fetch()
            if not self._purged:
                self._purge("fenced")
        else:
            self._purged = False
            failed = self.destination.broken or self.ledger.producer_failed
            if failed:
                self._replaced(self.destination.replace(failed))
            txn = self._txn
            if not self.destination.ready():
                self._hold_fetch()
                self.destination.poll(0.5)  # init_transactions found no coordinator: ask again (nothing sent meanwhile)
                return
            if self._wake.is_set() and self.handoff.change is None and self._connected:
                self._wake.clear()
                self._apply_desired()
            if self.handoff.advance():
                self._wake.set()  # a change finished: a newer assignment may be waiting
            if self.ledger.needs_rewind:
                if txn is not None and self._rewinds_due() and txn.open:
                    self._abort_transaction("rewind")  # an error taints the whole transaction
                self.handoff.rewind(sorted(self.ledger.needs_rewind))
        owned = self.handoff.routes
        txn = self._txn
        destination = self.destination
        if txn is not None and not fenced and txn.due(now) and not self._commit_transaction("interval"):
            self._hold_fetch()
            destination.poll(0.05)  # reports still due, or a retriable error: no new records meanwhile
        elif fenced or not owned or self.ledger.in_flight_bytes >= self.config.worker.max_in_flight_bytes:
            # Backpressure or fencing: no new fetches; keep serving delivery reports.
            self._hold_fetch()
            destination.poll(0.05)
            if not owned and not fenced and self.handoff.change is None:
                self._wake.wait(0.2)
        elif (wait := self.limiter.wait_s(now)) > 0:
            self._hold_fetch()
            destination.poll(min(wait, 0.1))  # rate limit: hold off fetching
        elif self._may_write():  # the fence and the lease again, right before the fetch
            messages = self._fetch(self.limiter.max_batch(self.config.worker.batch_size))
            if messages:
                destination.begin()
                self._mirror(messages)
            destination.poll(0)
        else:
            self._hold_fetch()
        if fenced:
            return
        if self.handoff.change is not None and self.handoff.advance():
            self._wake.set()
        now = self._clock()
        self._watch_producer(now)
        self._watch_fetch(now)
        interval = self.config.worker.commit_interval_s
        if now - self._last_commit >= interval and self._txn is None:
            self.committer.commit_soon()  # never waits: the commit thread talks to the coordinator
            self._last_commit = now
        if self.status.due(now, interval):
            self.status.publish(self.handoff.generation)  # never waits for ZooKeeper

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _fetch(self, limit: int) -> list[Any]:
        """What the consumer already holds, at once; only when it holds nothing, wait for the first record.

        librdkafka's batch consume returns when the batch is full or the wait is over, so
        at low rates every record waited ``worker.fetch_wait_ms`` (the issue's replicator
        leg: 7.7 ms median against MirrorMaker 2's 1.7 ms). Here a record is handed on as
        soon as it is there: a non-blocking drain first; when that is empty, a wait for one
        record, then a non-blocking drain of what arrived with it (a fetch brings many).
        Under load the first drain is a full batch, so throughput is unchanged.
        """
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

    def _watch_producer(self, now: float) -> None:
        """Purge and replace a producer that holds records yet acknowledged none (:meth:`Destination.watch`).

        The partitions it held go back to their acknowledged positions (duplicates at
        worst, never a gap).
        """
        stalled = self.destination.watch(now, self.ledger.acks, self.ledger.in_flight_bytes)
        if stalled is not None:
            self.log.warning("producer_stalled", silent_s=round(stalled.silent_s, 1),
                             in_flight_bytes=self.ledger.in_flight_bytes)
            self._purge("producer_stalled")

    def _hold_fetch(self) -> None:
        """This turn held back fetching on purpose (backpressure, a fence): the fetch watch starts its clocks again."""
        if self._fetch_watch is not None:
            self._fetch_watch.hold()

    def _watch_fetch(self, now: float) -> None:
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
            stopped = [TopicPartition(t, p) for t, p in assigned if partitions[(t, p)].error is not None]
            if stopped:
                new.pause(stopped)  # a refused record stopped them: they stay stopped
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

    def _may_write(self) -> bool:
        """Not fenced and the lease is fresh: checked before every consume and every C-loop call."""
        return not self._fenced and self._lease_valid()

    def _lease_valid(self) -> bool:
        """Renew the ZooKeeper lease asynchronously; valid while younger than :func:`lease_s`."""
        now = self._clock()
        if now - self._lease_asked >= 1.0:
            self._lease_asked = now
            asked = now

            def renewed(result: Any) -> None:
                if result.successful() and result.get() is not None:
                    self._lease_at = max(self._lease_at, asked)

            try:
                self.zk.exists_async(self.paths.worker(self.worker_id)).rawlink(renewed)
            except KazooException:
                pass
        return now - self._lease_at < self._lease_s

    def _mirror(self, messages: list[Any]) -> None:
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
                    self._hold_fetch()
                    self.destination.poll(0.05)  # local queue full: wait for acks, never drop
                    if self._stop.is_set() or not self._may_write():
                        self.ledger.in_flight_bytes += fetched_bytes
                        self.produced += produced
                        self._abandon(messages[i - 1:])
                        return None
                    continue
                except KafkaException as exc:
                    kerr = exc.args[0]
                    if kerr.code() == KafkaError._UNKNOWN_PARTITION and self.handoff.await_partition(
                        destination, partition
                    ):
                        continue  # the destination just grew; the producer's metadata now knows it
                    run_count = run_bytes = 0  # the open run will never be reported
                    if kerr.fatal() or kerr.code() == KafkaError._FATAL:
                        self.ledger.in_flight_bytes += fetched_bytes
                        self.produced += produced
                        self.destination.mark_broken(kerr.str())
                        self._abandon(messages[i - 1:])
                        return None
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
                         stopping=self._stop.is_set())

    def _observe_latency(self, ts_ms: int) -> None:
        self.metrics.latency.observe(max(0.0, time.time() - ts_ms / 1000.0))

    def _on_consume_error(self, msg: Any, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        tp = (msg.topic(), msg.partition()) if msg.topic() else None
        if err.fatal() or (tp and not err.retriable() and err.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.OFFSET_OUT_OF_RANGE,
        )):
            acks = self.ledger.get(tp) if tp is not None else None
            if acks is not None:
                self.handoff.stop_partition(acks, msg.offset(), err.str())
                return
        self.log.warning("consume_error", topic=msg.topic(), partition=msg.partition(), error=err.str())

    # --- assignment ----------------------------------------------------------------------------

    def _apply_desired(self) -> None:
        with self._desired_lock:
            desired = self._desired
        if desired is None or self._fenced:
            return
        self.handoff.apply(desired)  # starts the change; Handoff.advance moves it on each turn

    # --- fencing, session loss and shutdown -------------------------------------------------------

    def _purge(self, why: str) -> None:
        """Stop sending: a fenced worker sends nothing more (:meth:`Destination.purge`).

        The purged records come back as delivery reports and mark their partitions for a
        rewind (duplicates at worst, never a gap); in exactly-once mode the open
        transaction is aborted instead and every partition goes back to its last commit.
        """
        self._purged = True
        if why in _FENCING:
            self.committer.cancel_queued()  # a fenced worker sends no commit it has not sent already
        outcome = self.destination.purge(why, replace=why != "stopping_while_fenced")
        if isinstance(outcome, Aborted):
            self._aborted(outcome)
        elif isinstance(outcome, Purged):
            if outcome.error is not None:
                self.log.warning("purge_failed", error=outcome.error)
            self.log.warning("producer_purged", reason=why, partitions=len(self.ledger.partitions))
            if outcome.replaced is not None:
                self._replaced(outcome.replaced)

    def _replaced(self, replaced: Replaced) -> None:
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

    # --- exactly-once mode (worker/transactions.py) -------------------------------------------------

    def _commit_transaction(self, why: str) -> bool:
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
        if self._rewinds_due() or self.destination.broken or self.ledger.producer_failed:
            self._abort_transaction(why)  # a record failed: the transaction cannot hold all it should
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
        self._aborted(outcome)
        return True

    def _rewinds_due(self) -> bool:
        """Whether a partition that can be sent again waits for a rewind (exactly-once mode: abort first).

        A stopped partition (the destination refused a record) is never rewound, so it is
        dropped from the set here; left in it, it would abort every transaction from now on.
        """
        ledger = self.ledger
        for tp in [tp for tp in ledger.needs_rewind
                   if (acks := ledger.partitions.get(tp)) is None or acks.error is not None]:
            ledger.needs_rewind.discard(tp)
        return bool(ledger.needs_rewind)

    def _abort_transaction(self, why: str, timeout_s: float | None = None) -> None:
        """Abort the open transaction and rewind every partition to its last committed position."""
        self._aborted(self.destination.abort(why, timeout_s))

    def _aborted(self, aborted: Aborted) -> None:
        """The transaction is gone (:class:`Aborted`): every partition back to its last committed position."""
        self.metrics.transactions.labels(aborted.outcome).inc()
        if aborted.replaced is not None:
            self._replaced(aborted.replaced)  # it rewinds all
            return
        rewound = self._revert_uncommitted()
        self.ledger.forget_outstanding()
        self.ledger.needs_rewind.update(rewound)
        why = aborted.why
        exact = why not in _FENCING
        if exact:
            # Which record failed is not known from a run's report (nor from a failed commit): send
            # again with a report per record, so a record the destination refuses is named and
            # only its partition stops (then the next transaction commits without it).
            self.ledger.exact_until = max(self.ledger.exact_until, self._clock() + EXACT_FOR_S)
        self.log.warning("transaction_aborted", reason=why, partitions_rewound=len(rewound), exact=exact)

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

    def _recover_session(self) -> None:
        """After a LOST session: purge, forget all partitions uncommitted, then re-register."""
        self.registered.clear()
        if self.ledger.partitions or not self._purged:
            self._purge("session_lost")
            dropped = self.handoff.drop_all()
            if dropped:
                self.log.warning("session_lost_partitions_dropped", partitions=fmt(dropped))
        if self.zk.state != KazooState.CONNECTED:
            time.sleep(0.2)
            return
        try:
            self._session_lost = False
            self._fenced = False
            self._purged = False
            with self._desired_lock:
                self._desired = None
            self.register()
        except KazooException as exc:
            self._session_lost = True
            self.log.warning("reregister_failed", error=str(exc))

    def _deregister(self) -> None:
        """Delete the status and the registration in one write, as register() created them.

        Between two separate deletes the leader would see a live worker without a status and
        keep its partitions pinned for a round. When the transaction cannot run (a node is
        already gone, ZooKeeper trouble) each node is deleted on its own; the session's end
        removes whatever is left, as both are ephemeral.
        """
        paths = (self.paths.worker_status(self.worker_id), self.paths.worker(self.worker_id))
        try:
            tx = self.zk.transaction()
            for path in paths:
                tx.delete(path)
            if not any(isinstance(r, Exception) for r in tx.commit()):
                return
        except KazooException:
            pass
        for path in paths:
            try:
                self.zk.delete(path)
            except (NoNodeError, KazooException):
                pass

    def _shutdown(self) -> None:
        """Graceful stop: no more fetches, wait for acks, commit, deregister, close."""
        log = self.log.bind(partitions=len(self.ledger.partitions))
        log.info("worker_stopping")
        self.registered.clear()
        self.status.session = None  # deregistering: a status write answered later creates nothing
        try:
            assigned = self.handoff.assigned()
            self.handoff.abandon()  # a change under way: its releases are committed below with the rest
            self.beside.close()
            if assigned:
                self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in assigned])
            fenced = self._fenced or self._session_lost or not self._lease_valid()
            if fenced:
                self._purge("stopping_while_fenced")
            budget_s = self.config.worker.stop_timeout_s
            deadline = time.monotonic() + budget_s
            remaining = self.destination.flush(budget_s)
            if remaining:
                log.warning("shutdown_unacknowledged", records=remaining)
            while not fenced and self._txn is not None and not self._commit_transaction("stopping"):
                if time.monotonic() > deadline:
                    self._abort_transaction("stopping", timeout_s=5.0)
                    break
            if not fenced:
                # One budget for the whole stop, so an orchestrator's grace period can cover it;
                # the commit always gets a few seconds, even after a flush that used it all.
                self.committer.commit_now(None, timeout_s=max(5.0, deadline - time.monotonic()))
        finally:
            self.committer.close()
            self.handoff.close()
            self._deregister()
            if self._ends is not None:
                self._ends.close()
            self.consumer.close()
            self.zk.stop()
            self.zk.close()
            log.info("worker_stopped")


def _close_consumer(holder: list[Any], log: Any) -> None:
    """Close a replaced source consumer beside the loop (``holder`` has the last reference; it is emptied)."""
    consumer = holder.pop()
    try:
        consumer.close()
    except (KafkaException, RuntimeError) as exc:
        log.warning("consumer_close_failed", error=str(exc))


def _carries(headers: list[tuple[str, Any]], name: str) -> bool:
    """Whether a record's headers include ``name`` (the ``urep`` header: the record needs a decision)."""
    for key, _ in headers:
        if key == name:
            return True
    return False
