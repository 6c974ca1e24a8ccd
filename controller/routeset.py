"""One elected leader, many routes: each route is reconciled on a thread of its own.

The deployment's controllers contend in one election (``<pipeline root>/election``,
where a single pipeline's controllers always contended). The leader reads the
route registry (``<pipeline root>/routes/<id>``, :mod:`common.zkschema`) and runs
one :class:`controller.leader.Leadership` per route with :meth:`Leadership.run_term`:
the per-pipeline reconcile loop, unchanged, with its own watches, memory,
hand-off gate and topic-sync thread. One route's slow or unreachable cluster
therefore never delays another route's hand-offs. All routes write under the
same fence (the leader's election node).

Routes declared in the config are registered at start (:func:`register_declared`);
routes added through ``POST /routes`` exist in the registry only. A registry
change (a route added, deleted or redefined) starts or stops route threads
without touching the others.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from ureplicator.common import logs, zk
from ureplicator.common.config import (
    Config,
    RouteConfig,
    check_topology,
    parse_route,
    route_root,
    route_view,
)
from ureplicator.common.errors import ConfigError
from ureplicator.common.zkschema import Paths, RouteRecord
from ureplicator.controller.leader import Leadership, LeaderState, stand_for_election
from ureplicator.controller.metrics import ControllerMetrics
from ureplicator.controller.pooling import PoolKeeper


@dataclass
class _Term:
    leader: Leadership
    definition: dict[str, Any]
    over: threading.Event
    thread: threading.Thread


def registry(config: Config, client: KazooClient | Any) -> dict[str, tuple[RouteConfig, RouteRecord]]:
    """Every route of the deployment: the registry's, and the config's ones not registered yet."""
    routes: dict[str, tuple[RouteConfig, RouteRecord]] = {}
    for route in config.routes:
        routes[route.id] = (route, RouteRecord(route.definition(), declared_in="config"))
    try:
        registered = zk.read_routes(client, Paths(config.pipeline_root))
    except KazooException:
        registered = {}
    for route_id, record in registered.items():
        try:
            routes[route_id] = (parse_route(record.definition, f"routes/{route_id}"), record)
        except ConfigError:
            continue  # written by a newer version, or by hand: not ours to run
    return routes


def register_declared(config: Config, client: KazooClient) -> None:
    """Put the config's routes into the registry; refuse a start that would change a route's clusters.

    The topology check runs over the config's routes together with those added through the
    API, so a config that loops with them fails here, with the same message.
    """
    paths = Paths(config.pipeline_root)
    existing = zk.read_routes(client, paths)
    declared = {r.id for r in config.routes}
    union = list(config.routes)
    for route_id, record in sorted(existing.items()):
        if route_id in declared:
            old = record.definition
            route = next(r for r in config.routes if r.id == route_id)
            if (old.get("source"), old.get("destination")) != (route.source, route.destination):
                raise ConfigError(
                    "routes", f"route {route_id!r} goes {old.get('source')} -> {old.get('destination')} in ZooKeeper "
                              f"but {route.source} -> {route.destination} in the config: a route id names its offsets "
                              "group and cannot change clusters; give the new pair a new id")
        else:
            try:
                union.append(parse_route(record.definition, f"routes/{route_id}"))
            except ConfigError:
                continue
    check_topology(config.clusters, union)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for route in config.routes:
        record = existing.get(route.id)
        if record is None:
            fresh = RouteRecord(route.definition(), declared_in="config", created_at=now)
            if not zk.create_route(client, paths, fresh, route_root(config.pipeline_root, route.id)):
                # The node exists without a record: created as the parent of the route's state
                # (zk.connect of the route's own config) before it was registered.
                zk.update_route(client, paths, fresh)
                for parent in Paths(route_root(config.pipeline_root, route.id)).all_parents():
                    client.ensure_path(parent)
        elif record.definition != route.definition() or record.declared_in != "config":
            zk.update_route(client, paths, replace(record, definition=route.definition(), declared_in="config"))


class RouteSet:
    """Contend for leadership of the deployment; while leader, reconcile every route on its own thread.

    It offers what the REST API uses of a :class:`Leadership` (``state``, ``metrics``,
    ``request_reconcile``, ``leader_id``, ``alive``) and :meth:`route` for one route's loop.
    """

    def __init__(
        self,
        config: Config,
        client: KazooClient,
        identifier: str,
        admins: Callable[[str], Any] | None = None,
        metrics: ControllerMetrics | None = None,
        cache: bool = True,
    ) -> None:
        self._config = config
        self._cache = cache  # False: each round re-reads the route's nodes (the benchmark's "before")
        self._client = client
        self._identifier = identifier
        self._paths = Paths(config.pipeline_root)
        self._election = client.Election(self._paths.election, identifier)
        self._admins = admins  # cluster alias -> Kafka AdminClient; None: no topic sync
        self.metrics = metrics or ControllerMetrics()
        self._is_leader = False
        self._terms: dict[str, _Term] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._session_lost = threading.Event()
        self._log = logs.get(__name__, pipeline=config.pipeline, controller=identifier)
        self._thread = threading.Thread(target=self._contend, name="leader-election", daemon=True)
        self.pool = PoolKeeper(config, client, lambda: registry(self._config, self._client),
                               rounds=self.metrics.pool_rounds)
        client.add_listener(self._on_connection)

    # --- what the API reads ------------------------------------------------------------------

    @property
    def state(self) -> LeaderState:
        with self._lock:
            leaders = [t.leader for t in self._terms.values()]
        return LeaderState(
            is_leader=self._is_leader,
            generation=max((leader.state.generation for leader in leaders), default=0),
            live_workers=sum(leader.state.live_workers for leader in leaders),
            assigned=sum(leader.state.assigned for leader in leaders),
            unassigned=sum(leader.state.unassigned for leader in leaders),
        )

    def route(self, route_id: str) -> Leadership | None:
        """The loop of ``route_id`` while this replica leads, else None."""
        with self._lock:
            term = self._terms.get(route_id)
        return term.leader if term is not None else None

    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._terms)

    def request_reconcile(self) -> None:
        self._changed.set()
        with self._lock:
            leaders = [t.leader for t in self._terms.values()]
        for leader in leaders:
            leader.request_reconcile()

    def leader_id(self) -> str | None:
        try:
            contenders = self._election.contenders()
        except KazooException:
            return None
        return contenders[0] if contenders else None

    def alive(self) -> bool:
        return self._thread.is_alive()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._changed.set()
        self._election.cancel()
        self._thread.join(timeout_s)

    def _on_connection(self, state: str) -> None:
        # kazoo's event thread: flags only.
        if state == KazooState.LOST:
            self._session_lost.set()
        self._changed.set()

    def _contend(self) -> None:
        while not self._stop.is_set():
            stand_for_election(self._election, self._lead, self._log, self.metrics.election_errors)
            self._is_leader = False
            if not self._stop.is_set():
                time.sleep(1.0)

    def _lead(self) -> None:
        self._session_lost.clear()
        fence = f"{self._election.lock.path}/{self._election.lock.node}"
        self._is_leader = True
        self._log.info("deployment_leadership_acquired", fence=fence)
        self._client.ChildrenWatch(self._paths.routes, self._on_registry)
        # The shared pool's bindings, on a thread of their own (a drain waits on a route's hand-off).
        pool_over = threading.Event()
        pool_thread = threading.Thread(target=self._run_pool, args=(fence, pool_over), name="pool", daemon=True)
        pool_thread.start()
        try:
            while not self._stop.is_set() and not self._session_lost.is_set():
                try:
                    self._follow_registry(fence)
                except KazooException as exc:
                    self._log.warning("route_registry_unreadable", error=logs.error_text(exc))
                with self._lock:
                    if any(t.leader.fenced for t in self._terms.values()):
                        self._log.warning("leadership_fenced")
                        return
                # Registry changes signal (children watch, a data watch per route); the timeout is a safety net.
                self._changed.wait(30.0)
                self._changed.clear()
        finally:
            pool_over.set()
            self.pool.request_round()
            pool_thread.join(5.0)
            self._is_leader = False
            for route_id in self.running():
                self._end(route_id)
            self._log.info("deployment_leadership_released")

    def _on_registry(self, children: list[str]) -> bool:
        self._changed.set()
        self.pool.request_round()
        return self._is_leader

    def _run_pool(self, fence: str, over: threading.Event) -> None:
        try:
            self.pool.run(fence, over)
        except Exception as exc:  # noqa: BLE001 - the pool's bug must not end the routes' loops
            self._log.exception("pool_error", error=repr(exc))

    def _follow_registry(self, fence: str) -> None:
        """Start the routes that are new or redefined, end those deleted; leave the others alone."""
        wanted = registry(self._config, self._client) if self._client.exists(self._paths.routes) else {}
        for route_id in self.running():
            with self._lock:
                term = self._terms[route_id]
            gone = route_id not in wanted
            if gone or wanted[route_id][0].definition() != term.definition or not term.thread.is_alive():
                self._end(route_id)
        for route_id, (route, _) in sorted(wanted.items()):
            if route_id not in self._terms:
                self._begin(route, fence)

    def _begin(self, route: RouteConfig, fence: str) -> None:
        try:
            view = route_view(self._config, route=route)
        except ConfigError as exc:
            self._log.warning("route_not_served", route=route.id, error=exc.reason)
            return
        admins = (self._admins(route.source), self._admins(route.destination)) if self._admins else None
        leader = Leadership(view, self._client, self._identifier, admins=admins, metrics=self.metrics, elect=False,
                            route_node=self._paths.route(route.id), cache=self._cache,
                            max_workers=route.workers.max)
        over = threading.Event()
        thread = threading.Thread(target=self._run_route, args=(leader, fence, over), name=f"route-{route.id}",
                                  daemon=True)
        with self._lock:
            self._terms[route.id] = _Term(leader, route.definition(), over, thread)
        thread.start()

        def on_definition(data: bytes | None, stat: object) -> bool:
            self._changed.set()  # redefined (PATCH) or deleted: _follow_registry decides
            return not over.is_set()

        self._client.DataWatch(self._paths.route(route.id), on_definition)
        self._log.info("route_started", route=route.id, source=route.source, destination=route.destination)

    def _run_route(self, leader: Leadership, fence: str, over: threading.Event) -> None:
        try:
            leader.run_term(fence, over)
        except Exception as exc:  # noqa: BLE001 - one route's bug must not end the others
            self._log.exception("route_loop_error", error=repr(exc))
        self._changed.set()

    def _end(self, route_id: str) -> None:
        with self._lock:
            term = self._terms.pop(route_id)
        term.over.set()
        term.leader.request_reconcile()
        term.thread.join(5.0)
        term.leader.close()
        self.metrics.forget_route(route_id)
        self._log.info("route_stopped", route=route_id)
