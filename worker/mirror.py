"""The worker process's lifecycle: register in ZooKeeper, hold the lease, follow the assignment, stop cleanly.

One thread does all Kafka work (librdkafka clients are driven from one
loop); ZooKeeper callbacks only record the latest assignment or connection
state and wake the loop. Lifecycle, as in dramatiq's worker::

    registered -> applying(generation g) -> mirroring -> ... -> stopping -> deregistered

:meth:`MirrorWorker.turn` is one turn of that loop, and reads as its schedule. The
other concerns read alone: the copying (fetch, the C and Python loops, the run rule,
the fetch watch, and what a changed producer means for the partitions) in
:mod:`worker.copyloop`; the producer and every call that changes it in
:mod:`worker.destination`; hand-off in :mod:`worker.handoff`; delivery reports and
watermarks in :mod:`worker.acks`; commits in :mod:`worker.commits`; the status node
in :mod:`worker.status`. Clients come from outside (:mod:`worker.clients`), so unit
tests drive this class with fakes.

* Assignment change: :meth:`Handoff.apply` starts it and :meth:`Handoff.advance`
  moves it on every turn (release, report, acquire), beside the copying: the
  partitions that do not move never wait for a coordinator.
* Fenced — the lease (the last time ZooKeeper answered) is older than the session
  timeout the server granted minus a margin (:func:`lease_s`), e.g. a paused process or a ZooKeeper
  away for too long: no fetch, no commit, and librdkafka's queue is purged so
  nothing more is sent; the purged partitions are rewound to their acknowledged
  position once the fence lifts with the same session. A SUSPENDED connection
  alone fences nothing: while the session lives no other worker can be granted
  these partitions, so a ZooKeeper blip shorter than the lease pauses nothing.
* LOST session: purge, forget every partition without committing (someone else
  may own them now), re-register and wait for a fresh assignment.
* Shutdown: stop fetching, wait for acks up to ``worker.stop_timeout_s``,
  commit, deregister (a fenced worker purges instead of waiting and commits nothing).
* Exactly-once mode (``worker.exactly_once``, :mod:`worker.transactions`), on the C loop
  and the Python loop alike: records and the positions they complete commit in one
  transaction every ``worker.transaction_interval_ms``; a release commits it first; a
  fence, a lost session or a failed transaction aborts it, and every partition goes back
  to its last committed position (:meth:`CopyLoop.aborted`).
"""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from confluent_kafka import TopicPartition
from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, RolledBackError

from ureplicator.common import httpserve, logs
from ureplicator.common.config import Config
from ureplicator.common.errors import ConfigError
from ureplicator.common.zkschema import Assignment, Paths, RateLimit, SchemaError, WorkerInfo
from ureplicator.worker import clients as worker_clients
from ureplicator.worker import forwarding, native, probes, transactions
from ureplicator.worker.acks import TP, AckLedger, PartitionAcks
from ureplicator.worker.commits import Committer
from ureplicator.worker.copyloop import FENCING, CopyLoop
from ureplicator.worker.destination import Destination
from ureplicator.worker.handoff import Beside, Handoff, fmt
from ureplicator.worker.metrics import WorkerMetrics
from ureplicator.worker.ratelimit import RateLimiter
from ureplicator.worker.status import StatusReporter

VERSION = "0.1.0"
# How often the lease is renewed (one ZooKeeper ``exists``), by a timer thread of its own: the lease
# starts when the last answered renewal was asked, so at a disconnection it is up to this much older
# than it could be, and a ZooKeeper restart has that much less time before it pauses the copy.
LEASE_RENEW_S = 0.5
LEASE_MARGIN_SHARE = 0.1  # of the session: see lease_s
LEASE_MARGIN_MIN_S = 1.0
# How long past the session timeout a node of a previous life of our id may still stand: ZooKeeper
# expires sessions in tick-sized buckets and the leader's view follows a little later.
ID_WAIT_MARGIN_S = 5.0


class WorkerIdInUse(ConfigError):
    """Another process holds this worker id with a live session: two workers must never share one."""

    def __init__(self, worker_id: str, path: str, holder: str, waited_s: float) -> None:
        super().__init__("worker.id", f"{worker_id!r} is in use by a live worker ({holder}): its node {path} "
                                      f"outlived {waited_s:.0f} s of waiting, longer than a previous session of "
                                      "this id could; give every worker process its own id")
        self.worker_id = worker_id
        self.holder = holder


def describe_holder(data: bytes | None, owner: int | None) -> str:
    """The live holder of a worker id, for the refusal: host, pid and start from its WorkerInfo."""
    session = f"session {hex(owner)}" if owner else "session unknown"
    try:
        info = WorkerInfo.decode(data or b"")
    except SchemaError:
        return f"registration unreadable, {session}"
    return f"host {info.host}, pid {info.pid}, started_at {info.started_at}, {session}"


class IdHolderWatch:
    """Decides, from repeated reads of the node holding our id, whether to wait on or to refuse.

    A node of a previous life of this id (a crash, a pod restarted within the session timeout)
    vanishes once its session expires; one whose owning session outlives that is held by another
    live process. Its host and pid settle nothing sooner: a restarted pod keeps its hostname and
    often its pid (1 in a container), a replacement pod of a Deployment has a new host while the
    dead one's session still counts down, and a node that merely stays for a few seconds is what a
    dead session's node does too. So the clock runs per owning session, from when we first saw it.
    """

    def __init__(self, wait_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_s = wait_s
        self._clock = clock
        self.owner: int | None = None
        self.since = clock()

    def seen(self, owner: int | None) -> float:
        """Seconds the current owner has held the node (a new owner restarts the clock)."""
        now = self._clock()
        if owner != self.owner:
            self.owner, self.since = owner, now
        return now - self.since

    def expired(self, owner: int | None) -> bool:
        return self.seen(owner) > self.wait_s


def lease_s(session_timeout_s: float) -> float:
    """How long a ZooKeeper answer keeps this worker allowed to write: the session minus a margin.

    The leader can give this worker's partitions away only once its session expired on
    the server, at least a session timeout after the last request the server answered,
    which was sent after the lease's start; then the leader writes a new assignment and
    the next owner reads its committed offsets before it writes anything. The margin (a
    tenth of the session, at least 1 s) covers the copy loop's last turn and the
    produce requests already on the wire when the lease ran out (the loop checks the
    lease before every fetch and purges librdkafka's queue once it is stale). It used
    to be a third of the session (6.7 s of a 10 s one), and a ZooKeeper restart that
    kept the session but took 7-9 s paused every partition for 1-2 s.
    """
    return max(session_timeout_s - max(LEASE_MARGIN_MIN_S, session_timeout_s * LEASE_MARGIN_SHARE),
               session_timeout_s / 2)


def _load_native(mode: str) -> tuple[Any, str]:
    """The C loop for ``worker.native_loop`` = mode, or None; and why, for the start-up log."""
    if mode == "off":
        return None, "worker.native_loop is off"
    try:
        return native.load(), "built, and its self-test passed on this confluent-kafka"
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
        if config.forward not in forwarding.POLICIES:
            raise ConfigError("forward", f"must be one of {', '.join(forwarding.POLICIES)}, got {config.forward!r}")

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
        self._lease_s = lease_s(config.zookeeper.session_timeout_s)  # the granted session's, once known
        # Renewed by a timer thread (run() starts it), not by the loop: a loop that waits longer than
        # the lease (a destination's metadata, a rewind's reports, a slow commit) while ZooKeeper
        # answers would otherwise fence itself, purge and send everything in flight again.
        self._lease_timer: threading.Thread | None = None
        self._lease_timer_stop = threading.Event()
        self.last_turn = time.monotonic()  # when the loop last came round (/healthz)
        self.registered = threading.Event()  # /ready: registered and not fenced
        self._registered_session: int | None = None  # the session our nodes were created in
        self.limiter = RateLimiter(config.worker.max_records_per_s, config.worker.max_bytes_per_s)

        clients = clients or worker_clients.connect(config, worker_id)
        self.zk = clients.zk
        self.zk.add_listener(self._on_connection)

        self.ledger = AckLedger(on_latency=self._observe_latency)
        self.ledger.clock = clock
        self.status = StatusReporter(self.zk, self.paths.worker_status(worker_id), clients.consumer, self.ledger,
                                     self.metrics, self.log, clock=clock)
        self.committer = Committer(clients.make_commit_client, self.ledger, self.metrics, self.log,
                                   background=clients.commit_thread, clock=clock)
        self.beside = Beside(background=clients.handoff_thread, log=self.log)
        self.handoff = Handoff(config, clients.consumer, clients.producer, self.zk, self.ledger, self.committer,
                               self.status, self.metrics, self.log, beside=self.beside,
                               make_offsets_client=clients.make_offsets_client, clock=clock,
                               latest_offsets=clients.latest_offsets)
        # A release that timed out purged the producer: a fresh one, and the partitions set right.
        self.handoff.after_purge = lambda why: self.loop.replaced(self.destination.replace(why, purged=True))
        txn: transactions.Transactions | None = None
        if config.worker.exactly_once:
            if clients.make_offsets_client is None:
                raise ConfigError("worker.exactly_once", "is on but the clients were opened for at-least-once mode")
            txn = transactions.Transactions(config.worker.transaction_interval_ms / 1000.0,
                                            config.worker.max_in_flight_bytes,
                                            # the current consumer's: the fetch watch may replace it
                                            lambda: self.consumer.consumer_group_metadata(),
                                            self.log, clock=clock)
            self.handoff.before_release = lambda: self.loop.commit_transaction("release")
        # Both loops serve exactly-once mode: the transaction's calls (begin, send offsets, commit,
        # abort) are made at the batch and interval boundaries, never per record, and a produce
        # inside a transaction is the same librdkafka call.
        self._native, native_reason = _load_native(config.worker.native_loop)
        self.destination = Destination(clients.producer, clients.make_producer, clients.producer_errors,
                                       stall_s=config.worker.producer_stall_s, native=self._native,
                                       native_mode=config.worker.native_loop, native_reason=native_reason,
                                       on_loop=self.metrics.show_loop, txn=txn, clock=clock)
        self._txn = txn
        self.loop = CopyLoop(config, clients.consumer, self.destination, self.handoff, self.ledger, self.committer,
                             self.status, self.limiter, self.metrics, self.log, may_write=self._may_write,
                             stopping=self._stop, native=self._native, make_consumer=clients.make_consumer,
                             end_offsets=clients.end_offsets, watch_thread=clients.watch_thread, clock=clock)
        if self.destination.native_target is not None:
            self.log.info("mirror_loop", loop="native", reason=native_reason, exactly_once=txn is not None)
        else:  # a warning: every record through the Python loop is the slow path (docs/operations.md)
            self.log.warning("mirror_loop", loop="python", reason=self.destination.loop_reason,
                             exactly_once=txn is not None)
        if config.worker.shutdown_timeout_s > 0:
            self.log.warning("config_deprecated", key="worker.shutdown_timeout_s",
                             replaced_by=["worker.stop_timeout_s", "worker.release_ack_timeout_s",
                                          "worker.release_commit_timeout_s", "worker.producer_stall_s"],
                             applied=config.worker.shutdown_timeout_s)
        self._last_commit = clock()

    @property
    def consumer(self) -> Any:
        """The source consumer in use now (the fetch watch may replace it)."""
        return self.loop.consumer

    @property
    def produced(self) -> int:
        """Records handed to the producer (tests watch it stop when fenced)."""
        return self.loop.produced

    @property
    def lease_window_s(self) -> float:
        """How long the worker copies without an answer from ZooKeeper: :func:`lease_s` of the granted session."""
        return self._lease_s

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
            self._follow_granted_session()
            self._lease_asked = float("-inf")  # renew now: a lease that ran out meanwhile lifts one answer later
        self._wake.set()

    def _follow_granted_session(self) -> float | None:
        """The lease of the session the server granted (it clamps the one asked for); that session, if known."""
        granted = getattr(self.zk, "granted_session_s", None)
        if granted:
            self._lease_s = lease_s(granted)
        return granted

    def _on_assignment(self, data: bytes | None, stat: object) -> bool:
        assignment: Assignment | None = None
        if data:
            try:
                assignment = Assignment.decode(data)
            except SchemaError as exc:
                self.log.error("assignment_unreadable", error=logs.error_text(exc))
                return not self._stop.is_set()
        with self._desired_lock:
            self._desired = assignment or Assignment(self.handoff.generation, frozenset())
        self._wake.set()
        return not self._stop.is_set()

    def register(self, wait_s: float | None = None) -> None:
        """Announce this worker; a node of a previous session with our id is waited out.

        ``wait_s`` (default: the session timeout, asked or granted, plus ``ID_WAIT_MARGIN_S``) is
        how long one other session may hold our id before we refuse with :class:`WorkerIdInUse`:
        a previous life's session has expired by then, so its holder is another live process.
        Its nodes are only ever read, never deleted or written.
        """
        info = WorkerInfo(
            host=socket.gethostname(),
            pid=os.getpid(),
            version=VERSION,
            started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            metrics_port=self.config.worker.metrics_port,
            loop="native" if self.destination.native_target is not None else "python",
            loop_reason=self.destination.loop_reason,
        )
        self._check_mode()
        if wait_s is None:
            wait_s = max(self.config.zookeeper.session_timeout_s,
                         getattr(self.zk, "granted_session_s", None) or 0.0) + ID_WAIT_MARGIN_S
        holder = IdHolderWatch(wait_s)
        # The registration and the first status in one write: the leader pins a worker's written
        # assignment only while it can read that worker's status, so a registered worker without
        # one would let it hand the same partitions to another worker while this one applies them.
        status = self.status.build(self.handoff.generation, self._clock()).encode()
        assignment = self.paths.assignment(self.worker_id)
        while True:
            tx = self.zk.transaction()
            tx.create(self.paths.worker(self.worker_id), info.encode(), ephemeral=True)
            tx.create(self.paths.worker_status(self.worker_id), status, ephemeral=True)
            # An assignment left from an earlier life of this id may already be given away: it goes
            # in the same write, so the leader writes one for this registration, and only once the
            # id is ours (deleted before, it was a live holder's assignment, released at once).
            dropping = bool(self.zk.exists(assignment))
            if dropping:
                tx.delete(assignment)
            results = tx.commit()
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failures:
                break
            if dropping and isinstance(failures[0], NoNodeError):
                continue  # the assignment went meanwhile (the leader's clean-up): try again without it
            if not isinstance(failures[0], NodeExistsError) or self._stop.is_set():
                raise failures[0]
            if self._drop_own_stale_nodes():
                continue
            self._wait_for_id(holder)
            time.sleep(0.5)
        self.zk.DataWatch(assignment, self._on_assignment)
        self.zk.DataWatch(self.paths.rate_limit, self._on_rate_limit)
        self._lease_at = self._clock()
        granted = self._follow_granted_session()
        self.status.session = self.zk.client_id[0] if self.zk.client_id else None
        self._registered_session = self.status.session
        self.registered.set()
        self.log.info("worker_registered", session_s=granted, lease_s=round(self._lease_s, 2))

    def _wait_for_id(self, holder: IdHolderWatch) -> None:
        """One look at the node holding our id: wait on while a previous session of ours may own it, else refuse."""
        # The status node too: one another session holds without its registration blocks us as well,
        # and must not be waited on for ever (it goes with its session).
        for path in (self.paths.worker(self.worker_id), self.paths.worker_status(self.worker_id)):
            try:
                data, stat = self.zk.get(path)
                break
            except NoNodeError:
                continue
        else:
            return  # gone meanwhile (its session expired): the next attempt takes the id
        owner = getattr(stat, "ephemeralOwner", None)
        first = holder.owner != owner
        if holder.expired(owner):
            text = describe_holder(data, owner)
            self.log.error("worker_id_in_use", holder=text, waited_s=round(holder.wait_s, 1))
            raise WorkerIdInUse(self.worker_id, path, text, holder.wait_s)
        if first:
            self.log.warning("worker_id_held", holder=describe_holder(data, owner), wait_s=round(holder.wait_s, 1),
                             why="a previous session of this id expires by then; a live one means a duplicate id")

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
                self.log.error("rate_limit_unreadable", error=logs.error_text(exc))
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
            self.start_lease_timer()
            while not self._stop.is_set():
                self.turn()
        finally:
            self._shutdown()
            if server is not None:
                server.shutdown()

    def turn(self) -> None:
        """One turn of the loop: apply, fetch and produce (or wait), serve reports, commit, report."""
        self.last_turn = time.monotonic()  # /healthz compares it with real time, from its own thread
        self.metrics.turns.inc()
        now = self._clock()
        if self._session_lost:
            self.loop.hold()
            self._recover_session()
            return
        fenced = not self._may_write()
        settling = False
        if fenced:
            self.loop.hold()
            if not self._purged:
                self._purge("fenced")
        else:
            self._purged = False
            failed = self.destination.broken or self.ledger.producer_failed
            if failed:
                self.loop.replaced(self.destination.replace(failed))
            txn = self._txn
            if not self.destination.ready():
                self.loop.hold()
                self.destination.poll(0.5)  # init_transactions found no coordinator: ask again (nothing sent meanwhile)
                return
            if self._wake.is_set() and self.handoff.change is None and self._connected:
                self._wake.clear()
                self._apply_desired()
            if self.handoff.advance():
                self._wake.set()  # a change finished: a newer assignment may be waiting
            if self.ledger.refused and txn is not None and txn.open:
                self.loop.abort_transaction("refused")  # the partition stopped; the others start again
            if self.ledger.needs_rewind:
                if txn is not None and self.loop.rewinds_due() and txn.open:
                    self.loop.abort_transaction("rewind")  # an error taints the whole transaction
                if self.loop.positions_known():
                    self.handoff.rewind(sorted(self.ledger.needs_rewind))
                else:
                    settling = True  # a commit was in doubt: no rewind, and no fetch, before the positions are in
        owned = self.handoff.routes
        txn = self._txn
        destination = self.destination
        if txn is not None and not fenced and txn.due(now) and not self.loop.commit_transaction("interval"):
            self.loop.hold()
            destination.poll(0.05)  # reports still due, or a retriable error: no new records meanwhile
        elif (fenced or settling or not owned or self.ledger.in_flight_bytes >= self.config.worker.max_in_flight_bytes
              or (txn is not None and not txn.ready_on(destination.producer))):
            # Backpressure or fencing: no new fetches; keep serving delivery reports. Exactly-once:
            # a commit above that cost the producer left one without init_transactions (the next
            # turn's), on which begin_transaction fails (_STATE) and the records wait for a rewind.
            self.loop.hold()
            destination.poll(0.05)
            if not owned and not fenced and self.handoff.change is None:
                self._wake.wait(0.2)
        elif (wait := self.limiter.wait_s(now)) > 0:
            self.loop.hold()
            destination.poll(min(wait, 0.1))  # rate limit: hold off fetching
        elif self._may_write():  # the fence and the lease again, right before the fetch
            messages = self.loop.fetch(self.limiter.max_batch(self.config.worker.batch_size))
            if messages:
                destination.begin()
                self.loop.mirror(messages)
            destination.poll(0)
        else:
            self.loop.hold()
        if fenced:
            return
        if self.handoff.change is not None and self.handoff.advance():
            self._wake.set()
        now = self._clock()
        self._watch_producer(now)
        self.loop.watch(now)
        interval = self.config.worker.commit_interval_s
        if now - self._last_commit >= interval and self._txn is None:
            self.committer.commit_soon()  # never waits: the commit thread talks to the coordinator
            self._last_commit = now
        if self.status.due(now, interval):
            self.status.publish(self.handoff.generation)  # never waits for ZooKeeper

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

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

    def _may_write(self) -> bool:
        """Not fenced and the lease is fresh: checked before every consume and every C-loop call."""
        return not self._fenced and self._lease_valid()

    def _lease_valid(self) -> bool:
        """Whether the ZooKeeper lease is younger than :func:`lease_s`; asks for a renewal when one is overdue.

        The timer thread (:meth:`start_lease_timer`) renews on schedule, so the loop's own ask
        only fills a gap: right after a reconnection, or when no timer runs (unit tests).
        """
        now = self._clock()
        self._renew_lease(now)
        return now - self._lease_at < self._lease_s

    def _renew_lease(self, now: float) -> None:
        """Ask ZooKeeper, asynchronously, whether our registration exists, unless asked within LEASE_RENEW_S.

        An answer moves the lease's start to when it was asked. Called from the loop and the
        timer thread without a lock: a race costs at most one extra ``exists``.
        """
        if now - self._lease_asked < LEASE_RENEW_S:
            return
        self._lease_asked = now

        def renewed(result: Any) -> None:
            if result.successful() and result.get() is not None:
                self._lease_at = max(self._lease_at, now)

        try:
            self.zk.exists_async(self.paths.worker(self.worker_id)).rawlink(renewed)
        except KazooException:
            pass

    def start_lease_timer(self) -> None:
        """Renew the lease every LEASE_RENEW_S on a daemon thread until the worker stops (:meth:`_shutdown`).

        The lease then reflects ZooKeeper's answers, not the loop's pace. A paused process
        pauses this thread too, so it still wakes with a stale lease and fences itself.
        """
        if self._lease_timer is not None:
            return
        self._lease_timer_stop.clear()
        self._lease_timer = threading.Thread(target=self._renew_on_schedule, name=f"lease-{self.worker_id}",
                                             daemon=True)
        self._lease_timer.start()

    def _renew_on_schedule(self) -> None:
        while not self._lease_timer_stop.wait(LEASE_RENEW_S / 2):  # a renewal is at most LEASE_RENEW_S / 2 late
            try:
                self._renew_lease(self._clock())
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any one failed ask
                self.log.warning("lease_renewal_failed", error=logs.error_text(exc))

    def _stop_lease_timer(self) -> None:
        timer, self._lease_timer = self._lease_timer, None
        if timer is not None:
            self._lease_timer_stop.set()
            timer.join(5.0)

    def _observe_latency(self, ts_ms: int) -> None:
        self.metrics.latency.observe(max(0.0, time.time() - ts_ms / 1000.0))

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
        if why in FENCING:
            self.committer.cancel_queued()  # a fenced worker sends no commit it has not sent already
        self.loop.settle(self.destination.purge(why, replace=why != "stopping_while_fenced"))

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
            self.log.warning("reregister_failed", error=logs.error_text(exc))

    def _deregister(self) -> None:
        """Delete the status and the registration in one write, as register() created them.

        Between two separate deletes the leader would see a live worker without a status and
        keep its partitions pinned for a round. When the transaction cannot run (a node is
        already gone, ZooKeeper trouble) each node is deleted on its own; the session's end
        removes whatever is left, as both are ephemeral.
        """
        session = self.zk.client_id[0] if self.zk.client_id else None
        if self._registered_session is None or session != self._registered_session:
            return  # never registered in this session: nodes with our id are another's (or its expired one's)
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
            while not fenced and self._txn is not None and not self.loop.commit_transaction("stopping"):
                if time.monotonic() > deadline:
                    self.loop.abort_transaction("stopping", timeout_s=5.0)
                    break
            if not fenced:
                # One budget for the whole stop, so an orchestrator's grace period can cover it;
                # the commit always gets a few seconds, even after a flush that used it all.
                self.committer.commit_now(None, timeout_s=max(5.0, deadline - time.monotonic()))
        finally:
            self.committer.close()
            self.handoff.close()
            self._stop_lease_timer()  # before deregistering: nothing renews a lease we are giving up
            self._deregister()
            self.loop.close()
            self.consumer.close()
            self.zk.stop()
            self.zk.close()
            log.info("worker_stopped")
