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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Blueprint, jsonify, request
from kazoo.client import KazooClient

from ureplicator.common import zk
from ureplicator.common.config import IMPLICIT_ROUTE, Config
from ureplicator.common.zkschema import Paths
from ureplicator.controller.api import ApiError, requires_admin, route_of_request
from ureplicator.controller.leader import Leadership
from ureplicator.failover.groups import GroupNotFound, GroupOffsets
from ureplicator.failover.sync import GroupSync, GroupSyncMetrics

_MAX_GROUP = 255


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
        if not isinstance(body, dict) or not isinstance(body.get("force", False), bool):
            raise ApiError(400, 'the body is optional; when sent it is {"force": true|false}')
        try:
            outcome = route_groups().sync(checked(group), force=body.get("force", False))
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


@dataclass
class Running:
    """The first route's :class:`GroupOffsets` (made at start, synced periodically) and the others', made on use."""

    groups: GroupOffsets
    sync: GroupSync | None
    route_id: str = ""
    _others: dict[tuple[str, str, str], GroupOffsets] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def for_route(self, route: Any) -> GroupOffsets:
        """The route's translator: its clients (the API's shared admins) and its mirrored topics."""
        if route.config.route_id == self.route_id:
            return self.groups
        # Keyed by the clusters too: a deleted route's id may come back between other clusters.
        key = (route.config.route_id, route.config.source.alias, route.config.destination.alias)
        with self._lock:
            if key not in self._others:
                self._others[key] = GroupOffsets(
                    route.config, _destinations(route.zk, route.paths), route.source_admin, route.destination_admin)
            return self._others[key]

    def stop(self) -> None:
        if self.sync is not None:
            self.sync.stop()
        self.groups.close()
        with self._lock:
            for groups in self._others.values():
                groups.close()


def start(config: Config, client: KazooClient, leadership: Leadership, blueprints: list[Blueprint]) -> Running:
    """Wire failover into a controller: the route-scoped blueprint always, the periodic sync when enabled.

    ``config`` is the view of the deployment's first route; the periodic sync serves that route.
    """
    groups = GroupOffsets(config, _destinations(client, Paths(config.root)))
    sync = None
    if config.controller.group_sync.enabled:
        metrics = GroupSyncMetrics(leadership.metrics.registry, config.route_id or IMPLICIT_ROUTE)
        sync = GroupSync(config.controller.group_sync, groups, lambda: leadership.state.is_leader, metrics,
                         config.pipeline)
        sync.start()
    running = Running(groups, sync, config.route_id)
    blueprints.append(make_blueprint(running.for_route))
    return running
