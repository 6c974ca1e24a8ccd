"""Win the controller election and, while leader, reconcile desired topics into worker assignments.

Every controller replica runs a :class:`Leadership`; exactly one holds the
kazoo ``Election`` lock and runs :meth:`Leadership._reconcile` whenever a
watch fires or ``controller.reconcile_interval_s`` passes. Watches never do
work themselves: they only set ``_wake`` (reconcile, don't diff events).

A leader whose ZooKeeper connection is SUSPENDED stops writing at once; one
whose session is LOST leaves the leader function, so it cannot act after a
successor was elected. Every assignment write also checks the leader's own
election node, so a stale leader's write is refused by ZooKeeper itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError

from ureplicator.common import logs, zk
from ureplicator.common.config import Config
from ureplicator.common.errors import UReplicatorError
from ureplicator.common.zkschema import Assignment, Paths, TopicPartition, TopicRecord, WorkerStatus
from ureplicator.controller import fencing, topics
from ureplicator.controller.assignment import Settle, assign, writable
from ureplicator.controller.metrics import ControllerMetrics
from ureplicator.controller.zkview import RouteView


@dataclass
class LeaderState:
    """What the REST API and metrics read about this replica's leadership."""

    is_leader: bool = False
    generation: int = 0
    last_reconcile: float = 0.0
    rebalances: int = 0
    live_workers: int = 0
    assigned: int = 0
    unassigned: int = 0
    withheld: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True)
class Snapshot:
    """What one reconcile round reads from ZooKeeper."""

    topics: dict[str, TopicRecord]
    blocked: frozenset[str]  # "<topic>:<partition>" blacklisted partitions
    registered: list[str]  # live workers, sorted
    blacklisted: frozenset[str]  # workers
    statuses: dict[str, WorkerStatus]
    written: dict[str, Assignment]
    autobalancing: bool = True
    paused: bool = False  # the whole route is paused (POST /routes/<id>/pause): nothing is assigned

    def partitions(self) -> set[TopicPartition]:
        """Active partitions to assign: of active topics, minus blacklisted partitions."""
        if self.paused:
            return set()
        return {
            (name, p)
            for name, record in self.topics.items()
            if record.state == "active"
            for p in range(record.partitions)
            if f"{name}:{p}" not in self.blocked
        }


@dataclass(frozen=True)
class Plan:
    """What one round writes: new assignments of changed live workers, departed workers' nodes to drop."""

    changed: dict[str, Assignment]
    departed: list[str]
    withheld: frozenset[TopicPartition]
    partitions: int


def stand_for_election(election: Any, lead: Callable[[], None], log: Any, errors: Any) -> None:
    """One turn of an election thread: wait for the lock, lead, and survive whatever ends the term.

    Nothing but the caller's stop may end that thread: a dead election thread is a replica that
    answers the API but can never lead again.
    """
    try:
        election.run(lead)
    except KazooException as exc:
        log.warning("election_failed", error=logs.error_text(exc))
    except Exception as exc:  # noqa: BLE001 - survive anything, say what it was
        errors.inc()
        log.exception("election_error", error=repr(exc))


class Leadership:
    """Contend for leadership in a background thread; reconcile while leader.

    With ``elect=False`` it only reconciles one route when told to: a
    :class:`controller.routeset.RouteSet` holds the election and calls :meth:`run_term`
    for each route on a thread of its own. ``route_node`` is the route's registry node,
    read each round for its state (a paused route assigns nothing).
    """

    def __init__(
        self,
        config: Config,
        client: KazooClient,
        identifier: str,
        admins: tuple[Any, Any] | None = None,
        metrics: ControllerMetrics | None = None,
        elect: bool = True,
        route_node: str | None = None,
        cache: bool = True,
        max_workers: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        # Durations (restart grace, rebalance interval, hand-off times) are measured on this clock:
        # a wall-clock step (NTP, a VM resumed) must not end a restarting worker's grace early.
        self._clock = clock
        self._settle = Settle(config.controller.initial_assignment_delay_s)
        self._client = client
        self._paths = Paths(config.root)
        self._identifier = identifier
        self._route_node = route_node
        self._election = client.Election(self._paths.election, identifier) if elect else None
        self.fenced = False  # the last term ended because the fence check failed
        self._cache = cache  # follow the route's nodes with a RouteView (False: read them every round)
        self._view: RouteView | None = None
        self._paused = False  # the route's registry node says paused (followed by a DataWatch)
        self._route_label = config.route_id or "default"
        if max_workers is None:  # the route's workers.max, when the config declares the route
            max_workers = next((r.workers.max for r in config.routes if r.id == config.route_id), 0)
        self._max_workers = max_workers  # 0: every registered worker takes partitions
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._connected = threading.Event()
        self._connected.set()
        self._session_lost = threading.Event()
        self._status_watched: set[str] = set()
        self.state = LeaderState()
        self.metrics = metrics or ControllerMetrics()
        self._admins = admins  # (source, destination) AdminClients for the periodic topic sync
        self._memory: dict[str, frozenset[TopicPartition]] = {}  # last written, survives node deletion
        self._departed: dict[str, float] = {}
        self._lag_history: dict[TopicPartition, list[int]] = {}
        self._weights: dict[TopicPartition, float] = {}
        self._last_desired: dict[str, frozenset[TopicPartition]] = {}
        self._last_balance = 0.0
        self._sampled: dict[tuple[str, TopicPartition], str] = {}
        self._withheld_since: dict[TopicPartition, float] = {}
        self._rebalance_seen: bytes | None = None
        self._force_rebalance = False
        self._log = logs.get(__name__, pipeline=config.pipeline, controller=identifier,
                             **({"route": config.route_id} if config.route_id else {}))
        self._thread = threading.Thread(target=self._contend, name="leader-election", daemon=True)
        client.add_listener(self._on_connection)
        # --- exactly-once mode hook (issue 26, controller/fencing.py): fences join the gate ---
        self._fencer = (fencing.Fencer(config, client, self._paths.root, self.request_reconcile, self._log)
                        if config.worker.exactly_once else None)

    def close(self) -> None:
        """Stop listening to the session (a route removed while this replica leads)."""
        self._client.remove_listener(self._on_connection)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._election is not None:
            self._election.cancel()
            self._thread.join(timeout_s)

    def request_reconcile(self) -> None:
        self._wake.set()

    def leader_id(self) -> str | None:
        if self._election is None:
            return None
        try:
            contenders = self._election.contenders()
        except KazooException:
            return None
        return contenders[0] if contenders else None

    # --- election ----------------------------------------------------------------------------

    def _on_connection(self, state: str) -> None:
        # Runs on kazoo's event thread: set flags only, never block.
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
            if state == KazooState.LOST:
                self._session_lost.set()
        self._wake.set()

    def alive(self) -> bool:
        """The election thread is running (``/health`` fails when it is not)."""
        return self._thread.is_alive()

    def _contend(self) -> None:
        # Nothing may end this thread but stop(): a dead election thread is a replica that
        # answers the API but can never lead again.
        while not self._stop.is_set():
            stand_for_election(self._election, self._lead, self._log, self.metrics.election_errors)
            self.state.is_leader = False
            if not self._stop.is_set():
                self._connected.wait(1.0)
                time.sleep(0.2)

    def _lead(self) -> None:
        self.run_term(f"{self._election.lock.path}/{self._election.lock.node}", threading.Event())

    def run_term(self, fence: str, term_over: threading.Event) -> None:
        """Reconcile until ``term_over``, stop, a lost session or a failed fence (then ``fenced``)."""
        self._session_lost.clear()
        self.fenced = False
        self._last_desired = {}  # a new term starts from what ZooKeeper holds
        self._last_balance = self._clock()
        self._settle = Settle(self._config.controller.initial_assignment_delay_s)  # a term's first round settles
        self.state.is_leader = True
        self.metrics.leader.labels(self._route_label).set(1)
        self._log.info("leadership_acquired", fence=fence)
        # --- exactly-once mode hook (issue 26, controller/fencing.py): the delivery mode for workers ---
        fencing.record_mode(self._client, self._paths.root, self._config.worker.exactly_once, self._log)
        self._watch()
        syncer = None
        if self._admins is not None:
            syncer = threading.Thread(target=self._sync_topics, args=(term_over,), name="topic-sync", daemon=True)
            syncer.start()
        try:
            if self._view is not None:
                self._view.start()
            while not self._stop.is_set() and not self._session_lost.is_set() and not term_over.is_set():
                if self._connected.is_set():
                    try:
                        self._reconcile(fence)
                    except zk.Fenced as exc:
                        # Our election node is gone: someone else may lead now.
                        self._log.warning("leadership_fenced", error=logs.error_text(exc))
                        self.fenced = True
                        return
                    except zk.TransactionFailed as exc:
                        # A worker came or went between our read and our write: plan again.
                        self._log.info("assignment_write_raced", error=logs.error_text(exc))
                        if self._view is not None:
                            self._view.forget_written()
                        self._wake.set()
                    except KazooException as exc:
                        self._log.warning("reconcile_failed", error=logs.error_text(exc))
                self._wake.wait(self._wait_s())
                self._wake.clear()
        finally:
            term_over.set()
            if self._view is not None:
                self._view.close()
                self._view = None
            self.state.is_leader = False
            self.metrics.forget_route(self._route_label)
            self._log.info("leadership_released")
            if syncer is not None:
                syncer.join(1.0)  # admin calls may be in flight; the thread exits after them

    def _sync_topics(self, term_over: threading.Event) -> None:
        """Topic sync (Kafka admin calls) on its own thread: a slow cluster never delays a hand-off."""
        interval = self._config.controller.topic_sync_interval_s
        first = True  # a new term syncs at once: growth may have happened while nobody led
        while not term_over.wait(0 if first else interval):
            first = False
            if not self._connected.is_set():
                continue
            try:
                changes = topics.sync(self._config, self._client, *self._admins)  # type: ignore[misc]
            except (UReplicatorError, KazooException) as exc:
                self._log.warning("topic_sync_failed", error=logs.error_text(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - a bug here must not end syncing
                self._log.exception("topic_sync_error", error=repr(exc))
                continue
            if any(changes.values()):
                self._log.info("topics_synced", **changes)
                self._wake.set()  # new or grown partitions to assign
            self.metrics.topic_sync_rounds.labels(self._route_label).inc()

    def _watch(self) -> None:
        self._client.DataWatch(self._paths.rebalance_request, self._on_rebalance_request)
        if self._route_node is not None:  # pause/resume of the route
            self._client.DataWatch(self._route_node, self._on_route_node)
        if self._cache:
            self._view = RouteView(self._client, self._paths, self._wake.set,
                                   own_root=self._route_node == self._paths.root)
            return
        # ChildrenWatch re-arms itself and passes the full list; we only need the signal.
        self._status_watched = set()
        for path in (self._paths.workers, self._paths.topics):
            self._client.ChildrenWatch(path, self._signal_children)
        self._client.ChildrenWatch(self._paths.status, self._signal_status)

    def _on_route_node(self, data: bytes | None, stat: object) -> bool:
        self._paused = data is not None and zk.route_state(data) == "paused"
        self._wake.set()
        return self.state.is_leader

    def _on_rebalance_request(self, data: bytes | None, stat: object) -> bool:
        if data is not None and data != self._rebalance_seen:
            self._rebalance_seen = data
            self._force_rebalance = True
            self._wake.set()
        return self.state.is_leader

    def _signal_children(self, children: list[str]) -> bool:
        self._wake.set()
        return self.state.is_leader

    def _signal_status(self, children: list[str]) -> bool:
        # Status data changes (a worker confirming a release) drive the hand-off: watch each once.
        for child in set(children) - self._status_watched:
            self._status_watched.add(child)
            self._client.DataWatch(f"{self._paths.status}/{child}", self._signal_data(child))
        self._wake.set()
        return self.state.is_leader

    def _signal_data(self, child: str):  # noqa: ANN202 - returns a kazoo callback
        def on_change(data: bytes | None, stat: object) -> bool:
            self._wake.set()
            if data is None or not self.state.is_leader:
                self._status_watched.discard(child)
                return False
            return True

        return on_change

    # --- reconcile ---------------------------------------------------------------------------

    def _reconcile(self, fence: str) -> None:
        """One round: read ZooKeeper, plan the assignment, write what changed (fenced)."""
        if self._view is not None and not self._view.ready:
            return  # planning from a half-loaded view would take partitions from their owners
        snapshot = self._read()
        now = self._clock()
        plan = self._plan(snapshot, now, held=self._settling(snapshot, now))
        self._write(plan, snapshot, fence)
        self.metrics.reconcile_rounds.labels(self._route_label).inc()

    def _read(self) -> Snapshot:
        client, paths, view = self._client, self._paths, self._view
        if view is not None:
            registered = view.children(paths.workers)
            autobalancing_data = view.data(paths.autobalancing)
            return Snapshot(
                topics=view.topics(),
                blocked=frozenset(view.children(paths.blacklist_partitions)),
                registered=registered,
                blacklisted=frozenset(view.children(paths.blacklist_workers)),
                statuses=view.statuses(),
                written=view.written(registered),
                autobalancing=autobalancing_data != b"false",
                paused=self._paused,
            )
        return Snapshot(
            topics=zk.read_topics(client, paths),
            blocked=frozenset(client.get_children(paths.blacklist_partitions)),
            registered=zk.live_workers(client, paths),
            blacklisted=frozenset(client.get_children(paths.blacklist_workers)),
            statuses=zk.read_statuses(client, paths),
            written=zk.read_assignments(client, paths),
            autobalancing=self._autobalancing(),
            paused=self._route_paused(),
        )

    def _route_paused(self) -> bool:
        return self._paused

    def _wait_s(self) -> float:
        """Until the next round: the reconcile interval, or less when a settle ends sooner."""
        interval = self._config.controller.reconcile_interval_s
        remaining = self._settle.remaining(self._clock())
        return interval if remaining is None else min(interval, remaining + 0.01)

    def _settling(self, snap: Snapshot, now: float) -> frozenset[str]:
        """Joining workers kept without partitions while a rollout settles (:class:`Settle`)."""
        live = set(snap.registered) - snap.blacklisted
        holding = {w for w in live if _partitions(snap.written.get(w)) or self._memory.get(w)
                   or (w in snap.statuses and snap.statuses[w].owned)}
        was = self._settle.since
        held = self._settle.hold(live, holding, now)
        if was is None and self._settle.since is not None:
            self._log.info("assignment_settling", joining=len(held), holding=len(holding),
                           delay_s=self._settle.delay_s)
        elif was is not None and self._settle.since is None:
            self._log.info("assignment_settled", waited_s=round(now - was, 3), joined=len(live - holding))
        return held

    def _plan(self, snap: Snapshot, now: float, held: frozenset[str] = frozenset()) -> Plan:
        """Desired and gated assignment from a snapshot; updates the leader's memory, no I/O.

        ``held``: live workers that get nothing this round (a rollout settling; :meth:`_settling`).
        """
        ctl = self._config.controller
        partitions = snap.partitions()
        self._prune(partitions)
        written = snap.written
        self.state.generation = max([self.state.generation, *(a.generation for a in written.values())])

        # Workers that just left keep their partitions reserved for the restart grace period.
        for worker in snap.registered:
            self._departed.pop(worker, None)
        for worker in set(written) | set(self._memory):
            if worker not in snap.registered and worker not in self._departed:
                self._departed[worker] = now
        grace = ctl.worker_restart_grace_s
        in_grace = {w for w, t in self._departed.items() if now - t < grace and w not in snap.blacklisted}
        for worker in [w for w, t in self._departed.items() if now - t >= grace]:
            del self._departed[worker]
            self._memory.pop(worker, None)
        assignable = sorted((set(snap.registered) - snap.blacklisted - self._spare(snap) - held) | in_grace)

        base = {w: self._memory.get(w, frozenset()) for w in assignable}
        base.update({w: a.partitions for w, a in written.items()})
        # The previous round's *desired* plan, not the gated one: a partition in hand-off is
        # in nobody's written assignment and must stay headed for the owner chosen for it.
        base.update({w: tps for w, tps in self._last_desired.items() if w in assignable})
        weights, lagging = self._observe(snap.statuses)
        # Moving partitions that need not move (weights, lag) happens on a slow tick only:
        # rates right after a move are catch-up bursts, and every move is a hand-off.
        balance_now = self._force_rebalance or (
            now - self._last_balance >= ctl.rebalance_interval_s and snap.autobalancing
        )
        if balance_now:
            self._last_balance = now
        desired = assign(
            base, assignable, partitions,
            weights=weights, lagging=lagging,
            max_per_worker=ctl.max_partitions_per_worker,
            rebalance=balance_now,
            max_moves=self._move_budget(base, snap),
        )
        self._force_rebalance = False
        self._last_desired = desired
        gated = writable(desired, _reported(snap), {w: (a.generation, a.partitions) for w, a in written.items()})
        live = set(snap.registered)
        # --- exactly-once mode hook (issue 26, controller/fencing.py): a departed worker's partitions, and
        # its assignment node, wait until its transactional id is fenced (a zombie cannot commit then);
        # a worker that registered again while its fence runs gets nothing until the fence ends ---
        unfenced: set[str] = set()
        if self._fencer is not None:
            unfenced = self._fencer.unfenced({w for w in written if w not in live}, live)
            held = frozenset().union(*(_partitions(written.get(w)) for w in unfenced))
            gated = {w: frozenset() if w in unfenced else tps - held for w, tps in gated.items()}
        changed = [w for w in snap.registered if gated.get(w, frozenset()) != _partitions(written.get(w))]
        departed = [w for w in written if w not in live and w not in in_grace and w not in unfenced]
        withheld = {tp for w in snap.registered for tp in desired.get(w, frozenset()) - gated.get(w, frozenset())}
        self._track_handoffs(withheld, now)
        self.state.withheld = sorted(withheld)
        self.state.assigned = sum(len(gated.get(w, ())) for w in snap.registered)
        self.state.unassigned = len(partitions) - self.state.assigned
        self.state.live_workers = len(snap.registered)
        self.state.last_reconcile = now
        self.metrics.observe(self._route_label, self.state, snap.paused)
        generation = self.state.generation + 1
        return Plan(
            changed={w: Assignment(generation, gated.get(w, frozenset())) for w in changed},
            departed=departed,
            withheld=frozenset(withheld),
            partitions=len(partitions),
        )

    def _write(self, plan: Plan, snap: Snapshot, fence: str) -> None:
        if not plan.changed and not plan.departed:
            return
        zk.write_assignments(self._client, self._paths, plan.changed, snap.written.keys(), plan.departed, fence)
        if self._view is not None:
            self._view.note_written(plan.changed, plan.departed)
        for worker, assignment in plan.changed.items():
            self._memory[worker] = assignment.partitions
        generation = next(iter(plan.changed.values())).generation if plan.changed else self.state.generation + 1
        self.state.generation = generation
        self.state.rebalances += 1
        self.metrics.rebalances.labels(self._route_label).inc()
        self.metrics.generation.labels(self._route_label).set(generation)
        self._log.info(
            "assignment_written",
            generation=generation,
            workers=len(snap.registered),
            changed=sorted(plan.changed),
            departed=plan.departed,
            partitions=plan.partitions,
            withheld=len(plan.withheld),
        )

    def _move_budget(self, base: dict[str, frozenset[TopicPartition]], snap: Snapshot) -> int | None:
        """How many more partitions may start a move this round (None: no cap).

        ``controller.max_moves_per_round`` bounds the moves *under way*, not only those a round starts:
        rounds run on every status change, so a per-round count alone would let them pile up. A move
        is under way while a live worker other than the one the last plan chose for the partition still
        has it written or in its status (its release is not written yet, or not confirmed).
        """
        cap = self._config.controller.max_moves_per_round
        if not cap:
            return None
        live = set(snap.registered)
        held: dict[TopicPartition, set[str]] = {}
        for worker, assignment in snap.written.items():
            if worker in live:
                for tp in assignment.partitions:
                    held.setdefault(tp, set()).add(worker)
        for worker, status in snap.statuses.items():
            if worker in live:
                for tp in status.owned:
                    held.setdefault(tp, set()).add(worker)
        under_way = sum(1 for w, tps in base.items() for tp in tps if held.get(tp, set()) - {w})
        return max(0, cap - under_way)

    def _spare(self, snap: Snapshot) -> set[str]:
        """Workers beyond the route's ``workers.max``: they get nothing (drained like blacklisted ones).

        Those already holding partitions keep their place, so the cap never moves a partition by itself.
        """
        active = sorted(set(snap.registered) - snap.blacklisted)
        if not self._max_workers or len(active) <= self._max_workers:
            return set()
        holding = [w for w in active if _partitions(snap.written.get(w)) or self._memory.get(w)]
        ranked = holding + [w for w in active if w not in holding]
        return set(ranked[self._max_workers:])

    def _prune(self, partitions: set[TopicPartition]) -> None:
        """Forget rates, lag history and hand-off clocks of partitions whose topic went away."""
        for book in (self._lag_history, self._weights, self._withheld_since):
            for tp in [tp for tp in book if tp not in partitions]:
                del book[tp]
        for key in [k for k in self._sampled if k[1] not in partitions]:
            del self._sampled[key]

    def _autobalancing(self) -> bool:
        return autobalancing(self._client, self._paths)

    def _observe(self, statuses: dict[str, WorkerStatus]) -> tuple[dict[TopicPartition, float], set[TopicPartition]]:
        """Weights (bytes/s) from status, and partitions whose lag kept growing past the threshold."""
        ctl = self._config.controller
        weights: dict[TopicPartition, float] = {}
        for worker, status in statuses.items():
            for tp, st in status.partitions.items():
                if st.bytes_per_s > 0:
                    # Smoothed: one status window is a second or so of traffic and jitters.
                    previous = self._weights.get(tp)
                    smoothed = st.bytes_per_s if previous is None else 0.7 * previous + 0.3 * st.bytes_per_s
                    if self._sampled.get((worker, tp)) != status.updated_at:
                        self._weights[tp] = smoothed
                    weights[tp] = self._weights.get(tp, smoothed)
                if self._sampled.get((worker, tp)) == status.updated_at:
                    continue  # same status document as last time: not a new sample
                self._sampled[(worker, tp)] = status.updated_at
                history = self._lag_history.setdefault(tp, [])
                history.append(st.lag)
                del history[: -(ctl.lag_rounds + 1)]
        lagging = {
            tp
            for tp, h in self._lag_history.items()
            if len(h) > ctl.lag_rounds
            and all(lag > ctl.lag_threshold_records for lag in h[1:])
            and all(b > a for a, b in zip(h, h[1:], strict=False))
        }
        return weights, lagging

    def _track_handoffs(self, withheld: set[TopicPartition], now: float) -> None:
        for tp in withheld:
            self._withheld_since.setdefault(tp, now)
        for tp in [tp for tp in self._withheld_since if tp not in withheld]:
            elapsed = now - self._withheld_since.pop(tp)
            self.metrics.handoff.labels(self._route_label).observe(elapsed)


def autobalancing(client: KazooClient, paths: Paths) -> bool:
    """Whether moves that need not happen (weights, lag) are allowed; on unless switched off."""
    try:
        data, _ = client.get(paths.autobalancing)
    except NoNodeError:
        return True
    return data != b"false"


def _reported(snap: Snapshot) -> dict[str, tuple[int, frozenset[TopicPartition]]]:
    """(applied generation, owned partitions) of every live worker, for the hand-off gate.

    A registered worker whose status cannot be read (it does not decode, or a worker of an
    older version wrote its registration first) counts as having applied nothing yet: its
    written assignment stays pinned and counted as its own until it reports, because it may
    be applying it right now. Treating it as crashed would hand those partitions on.
    """
    reported = {w: (s.generation, frozenset(s.owned)) for w, s in snap.statuses.items()}
    for worker in snap.registered:
        reported.setdefault(worker, (-1, frozenset()))
    return reported


def _partitions(assignment: Assignment | None) -> frozenset[TopicPartition]:
    return assignment.partitions if assignment is not None else frozenset()
