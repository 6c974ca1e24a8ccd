"""REST view of consumer-group failover: list groups, translate one, sync one (a Flask Blueprint).

``GET /groups``, ``GET /groups/<group>/translation`` and
``POST /groups/<group>/sync`` (admin; body ``{"force": true}`` allows moving a
destination group backwards). The work is :class:`failover.groups.GroupOffsets`;
errors follow the API's JSON error body: 404 unknown group, 409 active on the
destination, 503 a cluster did not answer, 502 a cluster refused (see
:func:`failover.groups.cluster_failure`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import Blueprint, jsonify, request
from kazoo.client import KazooClient

from common import zk
from common.config import Config
from common.zkschema import Paths
from controller.api import ApiError, requires_admin
from controller.leader import Leadership
from failover.groups import GroupNotFound, GroupOffsets
from failover.sync import GroupSync, GroupSyncMetrics

_MAX_GROUP = 255


def make_blueprint(groups: GroupOffsets) -> Blueprint:
    blueprint = Blueprint("groups", __name__)

    def checked(group: str) -> str:
        if not group.strip() or len(group) > _MAX_GROUP:
            raise ApiError(400, f"a group id is 1-{_MAX_GROUP} characters, got {len(group)}")
        return group

    @blueprint.get("/groups")
    def list_groups() -> Any:
        return jsonify({"groups": groups.list_groups()})

    @blueprint.get("/groups/<path:group>/translation")
    def translation(group: str) -> Any:
        try:
            return jsonify(groups.translate(checked(group)).as_dict())
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
            outcome = groups.sync(checked(group), force=body.get("force", False))
        except GroupNotFound as exc:
            raise ApiError(404, str(exc)) from None
        if outcome.plan.refused:
            raise ApiError(409, f"group {group!r} not synced: {outcome.plan.refused}")
        return jsonify(outcome.as_dict())

    return blueprint


@dataclass
class Running:
    groups: GroupOffsets
    sync: GroupSync | None

    def stop(self) -> None:
        if self.sync is not None:
            self.sync.stop()
        self.groups.close()


def start(config: Config, client: KazooClient, leadership: Leadership, blueprints: list[Blueprint]) -> Running:
    """Wire failover into a controller: the blueprint always, the periodic sync when enabled."""
    paths = Paths(config.root)

    def destinations() -> dict[str, str]:
        # The names recorded when each topic was added: identity, prefix and mapping alike.
        return {name: record.destination for name, record in zk.read_topics(client, paths).items()}

    groups = GroupOffsets(config, destinations)
    blueprints.append(make_blueprint(groups))
    sync = None
    if config.controller.group_sync.enabled:
        sync = GroupSync(config.controller.group_sync, groups, lambda: leadership.state.is_leader,
                         GroupSyncMetrics(leadership.metrics.registry), config.pipeline)
        sync.start()
    return Running(groups, sync)
