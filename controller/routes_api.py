"""REST view of the deployment's clusters and routes (a Flask Blueprint the API always registers).

``GET /clusters``; ``GET|POST /routes``; ``GET|PATCH|DELETE /routes/<id>``;
``POST /routes/<id>/pause|resume``. Every other endpoint is also served under
``/routes/<id>/`` by :mod:`controller.api`. A change is checked (aliases, one
route per pair, id, topology) before anything is written, and answered with a 400
that names the problem; the same check refuses a config file at start-up.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from flask import Blueprint, jsonify
from kazoo.exceptions import NoNodeError

from ureplicator.common import zk
from ureplicator.common.config import RouteConfig, check_topology, parse_route, route_group, route_root
from ureplicator.common.errors import ConfigError
from ureplicator.common.zkschema import Paths, RouteRecord
from ureplicator.controller.api import ApiError, _ctl, _json_body, requires_admin
from ureplicator.controller.schemas import RouteChange, RouteRequest

blueprint = Blueprint("routes", __name__)

# The keys come from the models the OpenAPI document is generated from; the values are checked by
# common.config's route parser, the one that checks a config file (test_generated_schemas pins the two together).
_POST_KEYS = frozenset(RouteRequest.model_fields)
_PATCH_KEYS = frozenset(RouteChange.model_fields)


def _routes() -> dict[str, tuple[RouteConfig, RouteRecord]]:
    return _ctl().routes()


def _one(route_id: str) -> tuple[RouteConfig, RouteRecord]:
    routes = _routes()
    if route_id not in routes:
        raise ApiError(404, f"unknown route {route_id!r} (routes: {', '.join(sorted(routes))})")
    return routes[route_id]


def _declared(route_id: str) -> bool:
    return any(r.id == route_id for r in _ctl().config.routes)


def _view(route: RouteConfig, record: RouteRecord) -> dict[str, Any]:
    """A route's definition with what it is doing: paused, waiting for workers, or running."""
    ctl = _ctl()
    paths = Paths(route_root(ctl.config.pipeline_root, route.id))
    try:
        workers = len(ctl.zk.get_children(paths.workers))
        topic_count = len(ctl.zk.get_children(paths.topics))
    except NoNodeError:
        workers, topic_count = 0, 0
    if record.state == "paused":
        state = "paused"
    elif workers == 0:
        state = "waiting_for_workers"  # a state, not an error: workers may come later
    else:
        state = "running"
    return {
        **route.definition(),
        "state": state,
        "live_workers": workers,
        "topics": topic_count,
        "declared_in": "config" if _declared(route.id) else "api",
        "zookeeper_root": paths.root,
        "consumer_group": route_group(ctl.config.pipeline, route.id),
        "created_at": record.created_at,
    }


def _checked(routes: list[RouteConfig]) -> None:
    try:
        check_topology(_ctl().config.clusters, routes)
    except ConfigError as exc:
        raise ApiError(400, exc.reason) from None


def _parse(body: dict[str, Any], key: str = "route") -> RouteConfig:
    try:
        return parse_route(body, key)
    except ConfigError as exc:
        raise ApiError(400, f"{exc.key}: {exc.reason}") from None


@blueprint.get("/clusters")
def list_clusters() -> Any:
    """The clusters this deployment knows (secrets stay in the config and environment)."""
    clusters = _ctl().config.clusters
    return jsonify({"clusters": [{"alias": alias, "bootstrap_servers": c.bootstrap_servers}
                                 for alias, c in sorted(clusters.items())]})


@blueprint.get("/routes")
def list_routes() -> Any:
    return jsonify({"routes": [_view(route, record) for _, (route, record) in sorted(_routes().items())]})


@blueprint.post("/routes")
@requires_admin
def add_route() -> Any:
    """``{"id", "source", "destination", "topic_naming", "forward"}`` -> 201; nothing changes on a 400."""
    body = _json_body()
    unknown = set(body) - _POST_KEYS
    if unknown:
        raise ApiError(400, f"unknown route keys: {', '.join(sorted(map(str, unknown)))} "
                            f"(known: {', '.join(sorted(_POST_KEYS))})")
    route = _parse(body)
    existing = _routes()
    if route.id in existing:
        raise ApiError(400, f"route id {route.id!r} is already taken")
    _checked([r for r, _ in existing.values()] + [route])
    ctl = _ctl()
    record = RouteRecord(route.definition(), declared_in="api",
                         created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    if not zk.create_route(ctl.zk, ctl.pipeline_paths, record, route_root(ctl.config.pipeline_root, route.id)):
        raise ApiError(400, f"route id {route.id!r} is already taken")
    ctl.leadership.request_reconcile()
    return jsonify(_view(route, record)), 201


@blueprint.get("/routes/<route_id>")
def show_route(route_id: str) -> Any:
    return jsonify(_view(*_one(route_id)))


@blueprint.patch("/routes/<route_id>")
@requires_admin
def change_route(route_id: str) -> Any:
    """Change naming, forwarding, worker bounds or ``shared``; id, source and destination are immutable."""
    route, record = _one(route_id)
    body = _json_body()
    fixed = set(body) & {"id", "source", "destination"}
    if fixed:
        raise ApiError(400, f"{', '.join(sorted(fixed))} of a route cannot change (the id names its offsets group); "
                            "add a new route instead")
    unknown = set(body) - _PATCH_KEYS
    if unknown:
        raise ApiError(400, f"unknown route keys: {', '.join(sorted(map(str, unknown)))}")
    if _declared(route_id):
        raise ApiError(409, f"route {route_id!r} is declared in the config file: change it there")
    changed = _parse({**route.definition(), **body})
    _checked([changed if r.id == route_id else r for r, _ in _routes().values()])
    ctl = _ctl()
    updated = replace(record, definition=changed.definition())
    zk.update_route(ctl.zk, ctl.pipeline_paths, updated)
    ctl.leadership.request_reconcile()
    return jsonify(_view(changed, updated))


@blueprint.delete("/routes/<route_id>")
@requires_admin
def delete_route(route_id: str) -> Any:
    """Drop a route and its state (topics, assignments); its offsets group stays on the source cluster."""
    route, _ = _one(route_id)
    ctl = _ctl()
    if _declared(route_id):
        raise ApiError(409, f"route {route_id!r} is declared in the config file: remove it there")
    root = route_root(ctl.config.pipeline_root, route_id)
    if root == ctl.config.pipeline_root:
        raise ApiError(409, f"route {route_id!r} keeps its state at the pipeline's root and cannot be deleted")
    try:
        live = ctl.zk.get_children(Paths(root).workers)
    except NoNodeError:
        live = []
    if live:
        raise ApiError(409, f"route {route_id!r} has {len(live)} live workers ({', '.join(sorted(live)[:5])}): "
                            "stop them (or pause the route and stop them) first")
    zk.delete_route(ctl.zk, ctl.pipeline_paths, route_id)
    ctl.leadership.request_reconcile()
    return jsonify({"route": route.id, "deleted": True})


@blueprint.post("/routes/<route_id>/pause")
@requires_admin
def pause_route(route_id: str) -> Any:
    return _set_state(route_id, "paused")


@blueprint.post("/routes/<route_id>/resume")
@requires_admin
def resume_route(route_id: str) -> Any:
    return _set_state(route_id, "active")


def _set_state(route_id: str, state: str) -> Any:
    """Pausing takes every partition of the route back (offsets are committed); the other routes go on."""
    route, record = _one(route_id)
    ctl = _ctl()
    updated = replace(record, state=state)
    try:
        zk.update_route(ctl.zk, ctl.pipeline_paths, updated)
    except NoNodeError:
        zk.create_route(ctl.zk, ctl.pipeline_paths, updated, route_root(ctl.config.pipeline_root, route_id))
    ctl.leadership.request_reconcile()
    return jsonify(_view(route, updated))
