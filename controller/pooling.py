"""The leader's side of the shared worker pool: bind pool workers to routes, each move through the hand-off gate.

A worker started with ``worker.pool: true`` registers ``pool/workers/<id>`` (ephemeral, at the
pipeline root) and serves whatever route ``pool/bindings/<id>`` names (``worker/main.py``).
While it leads, the :class:`controller.routeset.RouteSet` runs :meth:`PoolKeeper.run` on a thread
of its own. A round:

1. sizes every route's :class:`controller.pool.Demand`: its ``workers: {min, max}`` less the
   workers pinned to it (``worker.route``), its partitions, and the rate and lag its workers'
   status nodes carry (a paused route wants none);
2. asks :func:`controller.pool.allocate` for the binding it wants;
3. carries it out. A free worker is bound at once. A bound worker that must move is drained
   first: an entry ``blacklist/workers/<id>`` (data ``pool``) in its route makes that route's
   loop hand its partitions to the others through the ordinary gate. Only once it holds none
   of them (its assignment and its status both empty) is its binding rewritten; the worker
   then stops its mirror loop and starts one for the new route, in-process. A move the
   allocator no longer wants is cancelled (the entry removed), and the entry of a worker that
   left the route is removed.

Every binding write carries the leader's fence, like assignment writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from prometheus_client import Counter

from ureplicator.common import logs, zk
from ureplicator.common.config import Config, RouteConfig, route_root
from ureplicator.common.zkschema import (
    POOL_DRAIN,
    Assignment,
    Paths,
    PoolBinding,
    RouteRecord,
    SchemaError,
    WorkerStatus,
)
from ureplicator.controller.pool import Demand, allocate

Registry = Callable[[], dict[str, tuple[RouteConfig, RouteRecord]]]


class PoolKeeper:
    """Bind the deployment's pool workers to routes, one round per change or ``reconcile_interval_s``."""

    def __init__(self, config: Config, client: KazooClient, registry: Registry,
                 rounds: Counter | None = None) -> None:
        self._config = config
        self._rounds = rounds  # completed rounds: "N pool rounds later, nothing moved" is observable
        self._client = client
        self._registry = registry
        self._paths = Paths(config.pipeline_root)
        self._wake = threading.Event()
        self._log = logs.get(__name__, pipeline=config.pipeline)
        self.bindings: dict[str, str | None] = {}  # the pool members' bindings as the last round left them
        self._active = False  # the last round found pool members or bindings

    def request_round(self) -> None:
        self._wake.set()

    def run(self, fence: str, over: threading.Event) -> None:
        """Rounds until ``over``; ZooKeeper trouble skips a round, a fence failure ends the term."""
        for path in (self._paths.pool_workers, self._paths.pool_bindings):
            self._client.ensure_path(path)

        def on_members(children: list[str]) -> bool:
            self._wake.set()
            return not over.is_set()

        self._client.ChildrenWatch(self._paths.pool_workers, on_members)
        while not over.is_set():
            try:
                self.round(fence)
                if self._rounds is not None:
                    self._rounds.inc()
            except zk.Fenced as exc:
                self._log.warning("pool_fenced", error=logs.error_text(exc))
                return
            except (KazooException, zk.TransactionFailed) as exc:
                self._log.warning("pool_round_failed", error=logs.error_text(exc))
            # Without a pool only a member joining (the watch) wakes this thread: no reads at all.
            self._wake.wait(self._config.controller.reconcile_interval_s if self._active else None)
            self._wake.clear()

    # --- one round ---------------------------------------------------------------------------

    def round(self, fence: str) -> None:
        members = sorted(self._client.get_children(self._paths.pool_workers))
        written = self._read_bindings()
        self._active = bool(members or written)
        if not self._active:
            self.bindings = {}
            return  # no pool: nothing to read (the routes' status nodes are the leader's costliest reads)
        routes = self._registry()
        roots = {rid: Paths(route_root(self._config.pipeline_root, rid)) for rid in routes}
        demand = {rid: self._demand(route, record, roots[rid], set(members)) for rid, (route, record) in routes.items()}
        current = {w: written.get(w) for w in members}
        wanted = allocate(members, current, demand, max_moves=self._config.controller.pool_max_moves,
                          hysteresis=self._config.controller.pool_hysteresis)
        for worker in members:
            old, new = current[worker], wanted[worker]
            if old == new:
                continue
            if old in roots and self._registered(roots[old], worker):
                # Drained even when it holds nothing now: the entry keeps the route from giving it
                # partitions until it has left.
                self._drain(roots[old], worker, old)
                if not self._drained(roots[old], worker):
                    continue
            self._bind(worker, new, fence, roots)
            written[worker] = new
        # A binding whose worker left the pool stays while it may still serve that route.
        for worker, route in list(written.items()):
            if worker not in members and (route not in roots or not self._registered(roots[route], worker)):
                self._unbind(worker, fence)
                del written[worker]
        self._tidy_drains(roots, written, wanted)
        self.bindings = {w: written.get(w) for w in members}

    def _demand(self, route: RouteConfig, record: RouteRecord, paths: Paths, members: set[str]) -> Demand:
        registered = _or_empty(lambda: self._client.get_children(paths.workers), [])
        topics = _or_empty(lambda: zk.read_topics(self._client, paths), {})
        statuses = _or_empty(lambda: zk.read_statuses(self._client, paths), {})
        if record.state == "paused":
            return Demand(min=0, partitions=0)
        pinned = len([w for w in registered if w not in members])
        partitions = sum(t.partitions for t in topics.values() if t.state == "active")
        rate = sum(st.records_per_s for s in statuses.values() for st in s.partitions.values())
        lag = sum(max(st.lag, 0) for s in statuses.values() for st in s.partitions.values())
        if route.workers.max and route.workers.max <= pinned:
            return Demand(min=0, partitions=0)  # its pinned workers fill it
        return Demand(
            min=max(0, route.workers.min - pinned),
            max=route.workers.max - pinned if route.workers.max else 0,
            partitions=max(0, partitions - pinned),
            records_per_s=rate,
            lag=lag,
        )

    # --- reading -----------------------------------------------------------------------------

    def _read_bindings(self) -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        for worker in self._client.get_children(self._paths.pool_bindings):
            try:
                found[worker] = PoolBinding.decode(self._client.get(self._paths.pool_binding(worker))[0]).route
            except NoNodeError:
                continue
            except SchemaError as exc:
                self._log.warning("pool_binding_unreadable", worker=worker, error=logs.error_text(exc))
                found[worker] = None
        return found

    def _registered(self, paths: Paths, worker: str) -> bool:
        return self._client.exists(paths.worker(worker)) is not None

    def _drained(self, paths: Paths, worker: str) -> bool:
        """The worker holds none of the route's partitions: asked for none, and reports owning none."""
        try:
            assignment = Assignment.decode(self._client.get(paths.assignment(worker))[0])
        except NoNodeError:
            assignment = Assignment(0)
        try:
            status = WorkerStatus.decode(self._client.get(paths.worker_status(worker))[0])
        except NoNodeError:
            return not assignment.partitions
        return not assignment.partitions and not status.owned and status.generation >= assignment.generation

    # --- writing -----------------------------------------------------------------------------

    def _drain(self, paths: Paths, worker: str, route: str) -> None:
        if self._client.exists(paths.blacklisted_worker(worker)):
            return  # draining already (or blacklisted by an operator: drained all the same)
        try:
            self._client.create(paths.blacklisted_worker(worker), POOL_DRAIN, makepath=True)
            self._log.info("pool_draining", worker=worker, route=route)
        except NodeExistsError:
            pass

    def _bind(self, worker: str, route: str | None, fence: str, roots: dict[str, Paths]) -> None:
        node = self._paths.pool_binding(worker)
        data = PoolBinding(route, datetime.now(timezone.utc).isoformat(timespec="seconds")).encode()
        tx = self._client.transaction()
        tx.check(fence, -1)
        if self._client.exists(node):
            tx.set_data(node, data)
        else:
            tx.create(node, data)
        zk.commit(tx, f"binding pool worker {worker}", fenced=True)
        if route is not None:  # a drain entry left from an earlier move away from this route
            self._remove_drain(roots[route], worker)
        self._log.info("pool_bound", worker=worker, route=route)

    def _unbind(self, worker: str, fence: str) -> None:
        tx = self._client.transaction()
        tx.check(fence, -1)
        tx.delete(self._paths.pool_binding(worker))
        zk.commit(tx, f"unbinding pool worker {worker}", fenced=True)
        self._log.info("pool_unbound", worker=worker)

    def _tidy_drains(self, roots: dict[str, Paths], written: dict[str, str | None],
                     wanted: dict[str, str | None]) -> None:
        """Remove the pool's drain entries that no move needs any more."""
        for route, paths in roots.items():
            try:
                entries = self._client.get_children(paths.blacklist_workers)
            except NoNodeError:
                continue
            for worker in entries:
                staying = written.get(worker) == route and wanted.get(worker, route) == route
                left = written.get(worker) != route and not self._registered(paths, worker)
                if staying or left:
                    self._remove_drain(paths, worker)

    def _remove_drain(self, paths: Paths, worker: str) -> None:
        try:
            data, stat = self._client.get(paths.blacklisted_worker(worker))
            if data == POOL_DRAIN:  # an operator's entry stays
                self._client.delete(paths.blacklisted_worker(worker), version=stat.version)
        except NoNodeError:
            pass


T = TypeVar("T")


def _or_empty(read: Callable[[], T], empty: T) -> T:
    """A route's children; ``empty`` while its node does not exist yet (or any more)."""
    try:
        return read()
    except NoNodeError:
        return empty
