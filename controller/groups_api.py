"""REST view of consumer-group failover: list groups, translate one, sync one (a Flask Blueprint).

``GET /groups``, ``GET /groups/<group>/translation`` and
``POST /groups/<group>/sync`` (admin; body ``{"force": true}`` allows moving a
destination group backwards), served bare and under ``/routes/<id>/``: each
route translates between its own source and destination, over its own mirrored
topics. The work is :class:`failover.groups.GroupOffsets`, one per route;
errors follow the API's JSON error body: 404 unknown group, 409 active on the
destination, 503 a cluster did not answer, 502 a cluster refused (see
:func:`failover.groups.cluster_failure`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flask import Blueprint, jsonify, request
from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry, Metric

from ureplicator.common import logs, zk
from ureplicator.common.config import Config, route_view
from ureplicator.common.errors import ConfigError
from ureplicator.common.zkschema import Paths
from ureplicator.controller.api import ApiError, requires_admin, route_of_request
from ureplicator.controller.leader import Leadership
from ureplicator.controller.schemas import BodyError, GroupSyncRequest, parse
from ureplicator.failover.groups import GroupNotFound, GroupOffsets
from ureplicator.failover.sync import GroupSync, GroupSyncMetrics

_MAX_GROUP = 255
_SYNC_BODY = 'the body is optional; when sent it is {"force": true|false}'


def make_blueprint(groups_for: Callable[[Any], GroupOffsets]) -> Blueprint:
    """The endpoints; ``groups_for(route context)`` is the route's :class:`GroupOffsets`."""
    blueprint = Blueprint("groups", __name__)

    def route_groups() -> GroupOffsets:
        return groups_for(route_of_request())

    def checked(group: str) -> str:
        if not group.strip() or len(group) > _MAX_GROUP:
            raise ApiError(400, f"a group id is 1-{_MAX_GROUP} characters, got {len(group)}")
        return group

    @blueprint.get("/groups")
    def list_groups() -> Any:
        return jsonify({"groups": route_groups().list_groups()})

    @blueprint.get("/groups/<path:group>/translation")
    def translation(group: str) -> Any:
        try:
            return jsonify(route_groups().translate(checked(group)).as_dict())
        except GroupNotFound as exc:
            raise ApiError(404, str(exc)) from None

    @blueprint.post("/groups/<path:group>/sync")
    @requires_admin
    def sync(group: str) -> Any:
        raw = request.get_data(cache=True)
        body = request.get_json(silent=True, force=True) if raw.strip() else {}
        if not isinstance(body, dict):
            raise ApiError(400, _SYNC_BODY)
        try:
            options = parse(GroupSyncRequest, body)
        except BodyError:
            raise ApiError(400, _SYNC_BODY) from None
        try:
            outcome = route_groups().sync(checked(group), force=options.force)
        except GroupNotFound as exc:
            raise ApiError(404, str(exc)) from None
        if outcome.plan.refused:
            raise ApiError(409, f"group {group!r} not synced: {outcome.plan.refused}")
        return jsonify(outcome.as_dict())

    return blueprint


def _destinations(client: KazooClient, paths: Paths) -> Callable[[], dict[str, str]]:
    def destinations() -> dict[str, str]:
        # The names recorded when each topic was added: identity, prefix and mapping alike.
        return {name: record.destination for name, record in zk.read_topics(client, paths).items()}

    return destinations


class _RouteSyncMetrics:
    """The ``ureplicator_groupsync_*`` families of every route's sync, served as one set of families.

    :class:`GroupSyncMetrics` registers its families in the registry it is given, so a second
    route's would collide with the first's there: each route's sync gets a registry of its own,
    and this collector (registered once in the controller's registry) merges their samples.
    """

    def __init__(self) -> None:
        self._registries: dict[str, CollectorRegistry] = {}
        self._lock = threading.Lock()

    def add(self, route_id: str) -> GroupSyncMetrics:
        registry = CollectorRegistry()
        with self._lock:
            self._registries[route_id] = registry
        return GroupSyncMetrics(registry, route_id)

    def drop(self, route_id: str) -> None:
        with self._lock:
            self._registries.pop(route_id, None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            registries = list(self._registries.values())
        merged: dict[str, Metric] = {}
        for registry in registries:
            for family in registry.collect():
                into = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type,
                                                             family.unit))
                into.samples.extend(family.samples)
        yield from merged.values()


@dataclass
class Running:
    """Each route's :class:`GroupOffsets` (the first route's made at start, the others' on use) and syncs."""

    groups: GroupOffsets
    route_id: str = ""
    syncs: _Schedule | None = None
    _others: dict[tuple[str, str, str], GroupOffsets] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def for_route(self, route: Any) -> GroupOffsets:
        """The route's translator: its clients (the API's shared admins) and its mirrored topics."""
        return self.for_view(route.config, route.zk, route.source_admin, route.destination_admin)

    def for_view(self, view: Config, client: KazooClient, source_admin: Any, destination_admin: Any) -> GroupOffsets:
        if view.route_id == self.route_id:
            return self.groups
        # Keyed by the clusters too: a deleted route's id may come back between other clusters.
        key = (view.route_id, view.source.alias, view.destination.alias)
        with self._lock:
            if key not in self._others:
                self._others[key] = GroupOffsets(view, _destinations(client, Paths(view.root)), source_admin,
                                                 destination_admin, timeout_s=view.controller.group_sync.timeout_s)
            return self._others[key]

    def stop(self) -> None:
        if self.syncs is not None:
            self.syncs.stop()
        self.groups.close()
        with self._lock:
            for groups in self._others.values():
                groups.close()


class _Schedule:
    """The periodic sync of every route: one :class:`GroupSync` thread per route in the registry.

    It follows the route registry (routes declared in the file and added through
    ``POST /routes``) every ``refresh_s``: a new route gets its sync, a deleted one's stops
    and its series go. A route's sync runs its rounds while this replica leads that route,
    so one route's slow cluster never delays another's sync.
    """

    def __init__(self, config: Config, client: KazooClient, leadership: Any, running: Running,
                 admins_for: Callable[[str], Any] | None, registry: CollectorRegistry,
                 refresh_s: float = 5.0) -> None:
        self._config = config
        self._client = client
        self._leadership = leadership
        self._running = running
        self._admins_for = admins_for
        self._metrics = _RouteSyncMetrics()
        registry.register(self._metrics)
        self._refresh_s = refresh_s
        self._syncs: dict[tuple[str, str, str], GroupSync] = {}
        self._skipped: set[str] = set()  # routes said to be unservable here (said once, not every refresh)
        self._stop = threading.Event()
        self._log = logs.get(__name__, pipeline=config.pipeline)
        self._thread = threading.Thread(target=self._follow, name="group-sync-routes", daemon=True)

    def start(self) -> None:
        self.refresh()
        self._thread.start()

    def _follow(self) -> None:
        while not self._stop.wait(self._refresh_s):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - a ZooKeeper hiccup: the next refresh tries again
                self._log.exception("group_sync_refresh_failed")

    def refresh(self) -> None:
        """Start a sync for each route in the registry that has none; stop those of deleted routes."""
        from ureplicator.controller.routeset import registry

        wanted: dict[tuple[str, str, str], Config] = {}
        for route_id, (route, _) in sorted(registry(self._config, self._client).items()):
            try:
                view = route_view(self._config, route=route)
            except ConfigError as exc:  # its clusters are not in this file: no clients to sync with
                if route_id not in self._skipped:
                    self._skipped.add(route_id)
                    self._log.warning("group_sync_route_skipped", route=route_id, error=exc.reason)
                continue
            wanted[(route_id, route.source, route.destination)] = view
        for key in [k for k in self._syncs if k not in wanted]:
            self._syncs.pop(key).stop()
            self._metrics.drop(key[0])
        for key, view in wanted.items():
            if key in self._syncs:
                continue
            route_id = key[0]
            admins = (self._admins_for(view.source.alias), self._admins_for(view.destination.alias)) \
                if self._admins_for is not None else (None, None)  # None: the translator opens its own
            groups = self._running.for_view(view, self._client, *admins)
            sync = GroupSync(self._config.controller.group_sync, groups, self._leads(route_id),
                             self._metrics.add(route_id), self._config.pipeline)
            sync.start()
            self._syncs[key] = sync
            self._log.info("group_sync_route_started", route=route_id)

    def _leads(self, route_id: str) -> Callable[[], bool]:
        route_loop = getattr(self._leadership, "route", None)
        if route_loop is None:  # a single Leadership: today's one route
            return lambda: self._leadership.state.is_leader
        return lambda: route_loop(route_id) is not None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10.0)
        for sync in self._syncs.values():
            sync.stop()


def start(config: Config, client: KazooClient, leadership: Leadership | Any, blueprints: list[Blueprint],
          admins_for: Callable[[str], Any] | None = None) -> Running:
    """Wire failover into a controller: the route-scoped blueprint always, the periodic sync when enabled.

    ``config`` is the view of the deployment's first route, whose translator has clients of its
    own; every other route's uses ``admins_for`` (cluster alias -> the controller's shared
    AdminClient). The periodic sync covers every route (:class:`_Schedule`).
    """
    groups = GroupOffsets(config, _destinations(client, Paths(config.root)),
                          timeout_s=config.controller.group_sync.timeout_s)
    running = Running(groups, config.route_id)
    if config.controller.group_sync.enabled:
        running.syncs = _Schedule(config, client, leadership, running, admins_for, leadership.metrics.registry)
        running.syncs.start()
    blueprints.append(make_blueprint(running.for_route))
    return running
