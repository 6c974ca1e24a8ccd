"""The admin REST API's Flask app factory: route contexts, JSON errors, the admin guard, health and metrics.

The endpoints are Blueprints of their own modules: ``topics_api`` (topics,
offsets, progress), ``instances_api`` (workers, validation), ``admin_api``
(blacklist, admin operations), ``routes_api``, ``groups_api``,
``verification_api`` and ``status_api``.

Every replica serves it; writes become desired state in ZooKeeper and the
leader turns them into assignments. Errors are
``{"error": {"code": <http status>, "message": ...}}``: 400 malformed input,
401/403 admin token, 404 unknown, 409 duplicate, 503 ZooKeeper or a cluster
unreachable. The OpenAPI document is served at ``/openapi.json``.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from werkzeug.exceptions import HTTPException

from ureplicator.common import httpserve, logs, zk
from ureplicator.common.config import Config, RouteConfig, route_view
from ureplicator.common.errors import ClusterUnavailable, ConfigError, UReplicatorError
from ureplicator.common.zkschema import Paths, TopicRecord, valid_worker_id
from ureplicator.controller import schemas, status_api, topics
from ureplicator.controller.leader import LeaderState
from ureplicator.controller.openapi import document

log = logs.get(__name__)
_M = TypeVar("_M", bound=BaseModel)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Reconciler(Protocol):
    state: LeaderState

    def request_reconcile(self) -> None: ...


@dataclass
class _Idle:
    """A route's loop on a replica that does not lead: nothing to wake, nothing withheld."""

    state: LeaderState = field(default_factory=LeaderState)

    def request_reconcile(self) -> None:
        pass


@dataclass
class RouteContext:
    """What a route-scoped endpoint works with: one route's config view, clients and loop."""

    config: Config
    zk: KazooClient
    leadership: _Reconciler
    source_admin: Any
    destination_admin: Any
    source_consumer: Any = None
    consumer_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def paths(self) -> Paths:
        return Paths(self.config.root)


@dataclass
class Controller:
    """What the API needs from the running controller process.

    ``config`` is normalised to a view of the deployment's first route (for today's
    configs: the implicit route, identical to the file); ``source_admin``,
    ``destination_admin`` and ``source_consumer`` are that route's. Other routes get a
    :class:`RouteContext` from :meth:`route_context`, with clients from ``admins_for``
    (cluster alias -> AdminClient) and ``consumer_for`` (route config -> Consumer).
    """

    config: Config
    zk: KazooClient
    leadership: Any  # Leadership, or a controller.routeset.RouteSet
    source_admin: Any
    destination_admin: Any
    source_consumer: Any = None  # group ureplicator.<pipeline>: reads committed offsets, never commits
    consumer_lock: threading.Lock = field(default_factory=threading.Lock)
    extra_blueprints: list[Blueprint] = field(default_factory=list)
    # Blueprints of one route's endpoints (groups, verification): served bare and under /routes/<id>/.
    route_blueprints: list[Blueprint] = field(default_factory=list)
    admins_for: Callable[[str], Any] | None = None
    consumer_for: Callable[[Config], Any] | None = None
    _consumers: dict[str, tuple[Any, threading.Lock]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.config is not None and not self.config.route_id:
            self.config = route_view(self.config, route=self.config.routes[0])

    @property
    def paths(self) -> Paths:
        return Paths(self.config.root)

    @property
    def pipeline_paths(self) -> Paths:
        return Paths(self.config.pipeline_root)

    def routes(self) -> dict[str, tuple[RouteConfig, Any]]:
        from ureplicator.controller.routeset import registry

        return registry(self.config, self.zk)

    def route_context(self, route_id: str | None) -> Any:
        """The route an endpoint works on: named, or the only one (a 400 listing them when there are several)."""
        routes = self.routes()
        if route_id is None:
            if len(routes) != 1:
                raise ApiError(400, f"this deployment has {len(routes)} routes ({', '.join(sorted(routes))}): name "
                                    "one with /routes/<id>/..., ?route=<id> or ?src=<alias>&dst=<alias>")
            route_id = next(iter(routes))
        if route_id not in routes:
            raise ApiError(404, f"unknown route {route_id!r} (routes: {', '.join(sorted(routes))})")
        route_loop = getattr(self.leadership, "route", None)
        if route_id == self.config.route_id:
            if route_loop is None:
                return self  # a single Leadership: today's objects
            return RouteContext(self.config, self.zk, route_loop(route_id) or _Idle(), self.source_admin,
                                self.destination_admin, self.source_consumer, self.consumer_lock)
        try:
            view = route_view(self.config, route=routes[route_id][0])
        except ConfigError as exc:
            raise ApiError(409, f"route {route_id!r} cannot be served by this controller: {exc.reason}") from None
        if self.admins_for is None:
            raise ApiError(503, f"this controller has no Kafka clients for route {route_id!r}")
        consumer, lock = self._consumer(view)
        loop = (route_loop(route_id) if route_loop else None) or _Idle()
        return RouteContext(view, self.zk, loop, self.admins_for(view.source.alias),
                            self.admins_for(view.destination.alias), consumer, lock)

    def _consumer(self, view: Config) -> tuple[Any, threading.Lock]:
        if view.route_id not in self._consumers:
            consumer = self.consumer_for(view) if self.consumer_for else None
            self._consumers[view.route_id] = (consumer, threading.Lock())
        return self._consumers[view.route_id]


def create_app(controller: Controller) -> Flask:
    app = Flask("ureplicator.controller")
    app.config["controller"] = controller
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.strict_slashes = False
    # They build on this module's errors and guards, hence imported here.
    from ureplicator.controller import admin_api, instances_api, routes_api, topics_api

    own = (topics_api.blueprint, instances_api.blueprint, topics_api.offsets, admin_api.blueprint)
    scoped = (*own, *controller.route_blueprints)
    for blueprint in (*scoped, _meta, routes_api.blueprint, *controller.extra_blueprints):
        app.register_blueprint(blueprint)
    for blueprint in scoped:  # every route's endpoints, also under /routes/<id>/
        app.register_blueprint(blueprint, url_prefix="/routes/<route_id>", name=f"route_{blueprint.name}")
    app.url_value_preprocessor(_pop_route)
    # --- the operator's view: GET /status, the /ui page (controller/status_api.py) ---
    app.register_blueprint(status_api.make_blueprint())
    app.register_error_handler(ApiError, _api_error)
    app.register_error_handler(topics.TopicError, lambda exc: _error(exc.status, str(exc)))
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    return app


def serve(app: Flask, host: str, port: int, timeout_s: int = 30) -> httpserve.Server | httpserve.TlsServer:
    """Serve ``app`` with waitress on a background thread, one log event per request."""
    quiet = frozenset({"/metrics", "/health", "/healthz"})  # probes and scrapes: logged only when failing
    # --- REST TLS (controller.rest_tls_*, common/httpserve.TlsServer): HTTPS only when configured ---
    rest = app.config["controller"].config.controller
    tls = (rest.rest_tls_certfile, rest.rest_tls_keyfile) if rest.rest_tls_certfile else None
    return httpserve.serve(httpserve.logged(app, "controller", quiet_paths=quiet), host, port, "rest-api",
                           tls=tls, timeout_s=timeout_s)


def _ctl() -> Controller:
    return current_app.config["controller"]


def _pop_route(endpoint: str | None, values: dict[str, Any] | None) -> None:
    if values and "route_id" in values and endpoint and endpoint.startswith("route_"):
        g.route_id = values.pop("route_id")


def route_of_request() -> Any:
    """The route context of this request (for blueprints of other modules): see :func:`_rt`."""
    return _rt()


def _rt() -> Any:
    """The route this request works on: ``/routes/<id>/...``, ``?route=<id>``, ``?src=&dst=``, or the only one."""
    if "route" not in g:
        ctl = _ctl()
        route_id = g.get("route_id") or request.args.get("route")
        src, dst = request.args.get("src"), request.args.get("dst")
        if route_id is None and (src or dst):
            if not (src and dst):
                raise ApiError(400, "name a route by both src and dst (cluster aliases)")
            matches = [r.id for r, _ in ctl.routes().values() if (r.source, r.destination) == (src, dst)]
            if not matches:
                raise ApiError(404, f"no route from {src!r} to {dst!r}")
            route_id = matches[0]
        g.route = ctl.route_context(route_id)
    return g.route


def _error(status: int, message: str) -> tuple[Any, int]:
    return jsonify({"error": {"code": status, "message": message}}), status


def _api_error(exc: ApiError) -> tuple[Any, int]:
    return _error(exc.status, exc.message)


def _http_error(exc: HTTPException) -> tuple[Any, int]:
    return _error(exc.code or 500, exc.description or exc.name)


def _unexpected_error(exc: Exception) -> tuple[Any, int]:
    if isinstance(exc, ClusterUnavailable | KazooException):
        return _error(503, f"a dependency is unavailable: {exc}")
    if isinstance(exc, UReplicatorError):
        return _error(502, str(exc))
    log.exception("request_failed", path=request.path)
    return _error(500, f"internal error: {type(exc).__name__}")


def requires_admin(view: Callable[..., Any]) -> Callable[..., Any]:
    """Refuse mutating calls without the bearer token when ``controller.admin_token`` is set."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        token = _ctl().config.controller.admin_token
        if token:
            header = request.headers.get("Authorization", "")
            if not header.startswith("Bearer "):
                raise ApiError(401, "this endpoint needs 'Authorization: Bearer <admin token>'")
            if not hmac.compare_digest(header[len("Bearer "):].encode(), token.encode()):
                raise ApiError(403, "the admin token is wrong")
        return view(*args, **kwargs)

    guarded.__name__ = view.__name__
    guarded.__doc__ = view.__doc__
    return guarded


def _json_body(optional: bool = False) -> dict[str, Any]:
    raw = request.get_data(cache=True)
    if optional and not raw.strip():
        return {}
    body = request.get_json(silent=True, force=True)
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def body_as(model: type[_M], optional: bool = False, fallback: dict[str, Any] | None = None) -> _M:
    """The request's JSON body as ``model`` (``controller.schemas``); an empty optional body is ``fallback``."""
    try:
        return schemas.parse(model, _json_body(optional) or fallback or {})
    except schemas.BodyError as exc:
        raise ApiError(400, str(exc)) from None


def _topic_name(value: object, what: str = "topic") -> str:
    problem = schemas.topic_name_problem(value, what)
    if problem:
        raise ApiError(400, problem)
    return str(value)


def _worker_name(value: object) -> str:
    if not valid_worker_id(value):
        raise ApiError(400, f"worker id must be 1-200 of [a-zA-Z0-9._:-], got {value!r}")
    return str(value)


def _record(topic: str) -> TopicRecord:
    ctl = _rt()
    record = zk.read_topic(ctl.zk, ctl.paths, _topic_name(topic))
    if record is None:
        raise ApiError(404, f"topic {topic!r} is not mirrored")
    return record


def _wake() -> None:
    _rt().leadership.request_reconcile()


def _put(ctl: Any, path: str, data: bytes) -> None:
    try:
        ctl.zk.set(path, data)
    except NoNodeError:
        ctl.zk.create(path, data, makepath=True)


# --- health, metrics, OpenAPI --------------------------------------------------------------

_meta = Blueprint("meta", __name__)


@_meta.get("/health")
def health() -> Any:
    """Readiness: ZooKeeper connected, a leader elected, and no cluster refusing this controller's
    credentials. A refused credential is "credentials refused" (503), never "ok"; liveness
    (/healthz) stays 200, since a restart cannot fix a password (docs/api.md)."""
    ctl = _ctl()
    connected = ctl.zk.state == KazooState.CONNECTED
    leader = ctl.leadership.leader_id() if connected else None
    refused = status_api.auth_failures(ctl)
    status = "unavailable" if not connected or leader is None else "credentials refused" if refused else "ok"
    body = {
        "status": status,
        "zookeeper": str(ctl.zk.state).lower(),
        "leader": leader,
        "is_leader": ctl.leadership.state.is_leader,
        "generation": ctl.leadership.state.generation,
        "auth_failures": refused,
    }
    return jsonify(body), (200 if status == "ok" else 503)


@_meta.get("/healthz")
def liveness() -> Any:
    """Liveness: the election thread runs. Unlike /health it does not depend on ZooKeeper,
    so a ZooKeeper outage does not get every controller restarted."""
    alive = _ctl().leadership.alive()
    return jsonify({"status": "ok" if alive else "election thread stopped", "election_thread": alive}), (
        200 if alive else 503
    )


@_meta.get("/metrics")
def metrics() -> Any:
    return Response(generate_latest(_ctl().leadership.metrics.registry), mimetype=CONTENT_TYPE_LATEST)


@_meta.get("/openapi.json")
def openapi() -> Any:
    return jsonify(document())
