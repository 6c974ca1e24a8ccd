"""The admin REST API (Flask app factory) with uReplicator's paths and bodies, JSON everywhere.

Every replica serves it; writes become desired state in ZooKeeper and the
leader turns them into assignments. Errors are
``{"error": {"code": <http status>, "message": ...}}``: 400 malformed input,
401/403 admin token, 404 unknown, 409 duplicate, 503 ZooKeeper or a cluster
unreachable. The OpenAPI document is served at ``/openapi.json``.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaException, TopicPartition
from flask import Blueprint, Flask, Response, current_app, g, jsonify, request
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException

from ureplicator.common import autherrors, httpserve, logs, zk
from ureplicator.common.config import Config, RouteConfig, route_view
from ureplicator.common.errors import ClusterUnavailable, ConfigError, UReplicatorError
from ureplicator.common.zkschema import Paths, RateLimit, SchemaError, TopicRecord, valid_topic_name, valid_worker_id
from ureplicator.controller import status_api, topics
from ureplicator.controller.leader import LeaderState, autobalancing
from ureplicator.controller.openapi import document

log = logs.get(__name__)


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
    from ureplicator.controller import routes_api  # it builds on this module's errors and guards

    scoped = (*_ROUTE_SCOPED, *controller.route_blueprints)
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


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    """uReplicator's scripts send numbers as numbers or numeric strings."""
    if key not in body or body[key] is None:
        return None
    value = body[key]
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value > 1_000_000:
        raise ApiError(400, f"{key} must be a positive integer, got {body[key]!r}")
    return value


def _non_negative_int(body: dict[str, Any], key: str) -> int:
    value = body.get(key, 0)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ApiError(400, f"{key} must be a non-negative integer, got {body.get(key)!r}")
    return value


def _topic_name(value: object, what: str = "topic") -> str:
    if not valid_topic_name(value):
        raise ApiError(400, f"{what} must be a Kafka topic name (1-249 of [a-zA-Z0-9._-]), got {value!r}")
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


# --- topics --------------------------------------------------------------------------------

_topics = Blueprint("topics", __name__)


@_topics.get("/topics")
def list_topics() -> Any:
    ctl = _rt()
    records = zk.read_topics(ctl.zk, ctl.paths)
    return jsonify({"topics": [asdict(r) for _, r in sorted(records.items())]})


def _add(topic: str, body: dict[str, Any]) -> Any:
    ctl = _rt()
    destination = body.get("destination")
    if destination is not None:
        destination = _topic_name(destination, "destination")
    record, outcome = topics.register(
        ctl.config, ctl.zk, ctl.source_admin, ctl.destination_admin,
        topic, _positive_int(body, "numPartitions"), destination,
    )
    _wake()
    return jsonify({**asdict(record), "destination_topic": outcome}), 201


@_topics.post("/topics")
@requires_admin
def add_topic() -> Any:
    """Start mirroring a source topic: ``{"topic": "t", "numPartitions": 8}``."""
    body = _json_body()
    return _add(_topic_name(body.get("topic")), body)


@_topics.post("/topics/<topic>")
@requires_admin
def add_named_topic(topic: str) -> Any:
    return _add(_topic_name(topic), _json_body(optional=True))


@_topics.put("/topics")
@requires_admin
def expand_topic() -> Any:
    """Grow a mirrored topic after its source grew: ``{"topic": "t", "numPartitions": 16}``."""
    ctl = _rt()
    body = _json_body()
    topic = _topic_name(body.get("topic"))
    record = topics.expand(ctl.config, ctl.zk, ctl.source_admin, ctl.destination_admin, topic,
                           _positive_int(body, "numPartitions"))
    _wake()
    return jsonify(asdict(record))


@_topics.get("/topics/<topic>")
def show_topic(topic: str) -> Any:
    ctl = _rt()
    record = _record(topic)
    owners = {
        tp: worker
        for worker, assignment in zk.read_assignments(ctl.zk, ctl.paths).items()
        for tp in assignment.partitions
        if tp[0] == topic
    }
    statuses = zk.read_statuses(ctl.zk, ctl.paths)
    partitions = []
    for p in range(record.partitions):
        applied_by = next((w for w, s in statuses.items() if (topic, p) in s.partitions), None)
        status = statuses[applied_by].partitions[(topic, p)] if applied_by else None
        partitions.append({
            "partition": p,
            "worker": owners.get((topic, p)),
            "applied_by": applied_by,
            "status": asdict(status) if status else None,
        })
    return jsonify({**asdict(record), "assignment": partitions})


@_topics.delete("/topics/<topic>")
@requires_admin
def remove_topic(topic: str) -> Any:
    """Stop mirroring; the destination topic and its data stay."""
    ctl = _rt()
    # Blacklisted in the same write, so that auto-whitelisting never re-adds what an operator removed.
    try:
        removed = zk.remove_topic(ctl.zk, ctl.paths, _topic_name(topic))
    except zk.TransactionFailed as exc:
        raise ApiError(409, str(exc)) from None
    if not removed:
        raise ApiError(404, f"topic {topic!r} is not mirrored")
    _wake()
    log.info("topic_removed", topic=topic)
    return jsonify({"topic": topic, "removed": True})


@_topics.post("/topics/<topic>/<action>")
@requires_admin
def pause_or_resume(topic: str, action: str) -> Any:
    if action not in ("pause", "resume"):
        raise ApiError(404, f"unknown topic action {action!r} (use pause or resume)")
    _record(topic)
    record = topics.set_state(_rt().config, _rt().zk, topic, "paused" if action == "pause" else "active")
    _wake()
    return jsonify(asdict(record))


# --- workers -------------------------------------------------------------------------------

_instances = Blueprint("instances", __name__)


@_instances.get("/instances")
def list_instances() -> Any:
    ctl = _rt()
    workers = zk.live_workers(ctl.zk, ctl.paths)
    blacklisted = sorted(ctl.zk.get_children(ctl.paths.blacklist_workers))
    assignments = zk.read_assignments(ctl.zk, ctl.paths)
    statuses = zk.read_statuses(ctl.zk, ctl.paths)
    rows = []
    for worker in sorted(set(workers) | set(blacklisted)):
        status = statuses.get(worker)
        assignment = assignments.get(worker)
        rows.append({
            "worker": worker,
            "live": worker in workers,
            "blacklisted": worker in blacklisted,
            "assigned": len(assignment.partitions) if assignment else 0,
            "applied": len(status.partitions) if status else 0,
            "generation": status.generation if status else None,
            "bytes_per_s": round(sum(s.bytes_per_s for s in status.partitions.values()), 1) if status else 0.0,
            "records_per_s": round(sum(s.records_per_s for s in status.partitions.values()), 1) if status else 0.0,
        })
    return jsonify({"instances": rows})


@_instances.post("/instances")
@requires_admin
def rebalance_now() -> Any:
    """Ask the leader to rebalance now (also when auto-balancing is off)."""
    ctl = _rt()
    _put(ctl, ctl.paths.rebalance_request, str(time.time()).encode())
    _wake()
    return jsonify({"rebalance": "requested"}), 202


@_instances.post("/instances/<worker>")
@requires_admin
def whitelist_worker(worker: str) -> Any:
    ctl = _rt()
    try:
        ctl.zk.delete(ctl.paths.blacklisted_worker(_worker_name(worker)))
    except NoNodeError:
        raise ApiError(404, f"worker {worker!r} is not blacklisted") from None
    _wake()
    return jsonify({"worker": worker, "blacklisted": False})


@_instances.delete("/instances/<worker>")
@requires_admin
def blacklist_worker(worker: str) -> Any:
    """Drain a worker: its partitions are handed off gracefully and it gets no new ones."""
    ctl = _rt()
    name = _worker_name(worker)
    if name not in zk.live_workers(ctl.zk, ctl.paths):
        raise ApiError(404, f"worker {worker!r} is not registered")
    try:
        ctl.zk.create(ctl.paths.blacklisted_worker(name))
    except NodeExistsError:
        raise ApiError(409, f"worker {worker!r} is already blacklisted") from None
    _wake()
    return jsonify({"worker": worker, "blacklisted": True})


@_instances.get("/validation")
def validation() -> Any:
    """Desired (written) vs applied (status) assignment per worker."""
    ctl = _rt()
    assignments = zk.read_assignments(ctl.zk, ctl.paths)
    statuses = zk.read_statuses(ctl.zk, ctl.paths)
    rows, mismatched = [], 0
    for worker in sorted(set(assignments) | set(statuses)):
        desired = assignments[worker].partitions if worker in assignments else frozenset()
        applied = statuses[worker].owned if worker in statuses else frozenset()
        ok = desired == applied and (
            worker not in statuses or worker not in assignments
            or statuses[worker].generation == assignments[worker].generation
        )
        mismatched += not ok
        rows.append({
            "worker": worker,
            "desired_generation": assignments[worker].generation if worker in assignments else None,
            "applied_generation": statuses[worker].generation if worker in statuses else None,
            "missing": [f"{t}:{p}" for t, p in sorted(desired - applied)],
            "extra": [f"{t}:{p}" for t, p in sorted(applied - desired)],
            "ok": ok,
        })
    state = ctl.leadership.state
    return jsonify({
        "ok": mismatched == 0,
        "mismatched_workers": mismatched,
        "withheld": [f"{t}:{p}" for t, p in state.withheld] if state.is_leader else None,
        "workers": rows,
    })


# --- offsets -------------------------------------------------------------------------------

_offsets = Blueprint("offsets", __name__)


def _offset_rows(pairs: list[tuple[str, int]]) -> list[dict[str, Any]]:
    ctl = _rt()
    if ctl.source_consumer is None:
        raise ApiError(503, "no source consumer configured")
    rows = []
    with ctl.consumer_lock:  # librdkafka handles are not for concurrent use
        try:
            committed = ctl.source_consumer.committed([TopicPartition(t, p) for t, p in pairs], timeout=10)
            for tp in committed:
                low, high = ctl.source_consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                                      timeout=10)
                offset = tp.offset if tp.offset >= 0 else None
                rows.append({
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "committed": offset,
                    "log_start": low,
                    "end": high,
                    "lag": high - (offset if offset is not None else low),
                })
        except KafkaException as exc:
            src = ctl.config.source  # the source admin client's error watch knows a refused credential
            raise ApiError(503, autherrors.describe(src.alias, src.bootstrap_servers, exc.args[0],
                                                    autherrors.watch_of(ctl.source_admin))) from None
    return rows


@_offsets.get("/offset")
def all_offsets() -> Any:
    ctl = _rt()
    pairs = [(name, p) for name, r in sorted(zk.read_topics(ctl.zk, ctl.paths).items()) for p in range(r.partitions)]
    rows = _offset_rows(pairs) if pairs else []
    return jsonify({"group": ctl.config.consumer_group, "offsets": rows, "total_lag": sum(r["lag"] for r in rows)})


@_offsets.get("/offset/<topic>/<partition>")
def one_offset(topic: str, partition: str) -> Any:
    record = _record(topic)
    if not partition.isdigit() or int(partition) >= record.partitions:
        raise ApiError(404, f"topic {topic!r} has no partition {partition!r}")
    return jsonify({"group": _rt().config.consumer_group, **_offset_rows([(topic, int(partition))])[0]})


@_offsets.get("/noprogress")
def no_progress() -> Any:
    """Partitions with lag whose position has not moved for ``controller.noprogress_threshold_s``,
    and active partitions no worker reports owning."""
    ctl = _rt()
    threshold = ctl.config.controller.noprogress_threshold_s
    now = time.time()
    statuses = zk.read_statuses(ctl.zk, ctl.paths)
    owned = {}
    stalled = []
    for worker, status in statuses.items():
        for (t, p), st in status.partitions.items():
            owned[(t, p)] = worker
            if st.error or (st.lag > 0 and st.last_progress_at and now - st.last_progress_at > threshold):
                stalled.append({
                    "topic": t, "partition": p, "worker": worker, "lag": st.lag, "error": st.error,
                    "stalled_for_s": round(now - st.last_progress_at, 1) if st.last_progress_at else None,
                })
    unowned = [
        {"topic": name, "partition": p}
        for name, record in sorted(zk.read_topics(ctl.zk, ctl.paths).items())
        if record.state == "active"
        for p in range(record.partitions)
        if (name, p) not in owned
    ]
    return jsonify({"threshold_s": threshold, "stalled": stalled, "unowned": unowned})


# --- blacklist and admin -------------------------------------------------------------------

_admin = Blueprint("admin", __name__)


@_admin.get("/blacklist")
def get_blacklist() -> Any:
    ctl = _rt()
    parts = []
    for entry in sorted(ctl.zk.get_children(ctl.paths.blacklist_partitions)):
        topic, _, partition = entry.rpartition(":")
        parts.append({"topic": topic, "partition": int(partition)})
    return jsonify({
        "topics": sorted(ctl.zk.get_children(ctl.paths.blacklist_topics)),
        "partitions": parts,
        "workers": sorted(ctl.zk.get_children(ctl.paths.blacklist_workers)),
    })


@_admin.post("/blacklist")
@requires_admin
def change_blacklist() -> Any:
    """``{"topic": t, "partition": p?, "op": "blacklist"|"whitelist"}`` (query parameters work too)."""
    ctl = _rt()
    body = _json_body(optional=True) or dict(request.args)
    op = body.get("op")
    if op not in ("blacklist", "whitelist"):
        raise ApiError(400, "op must be 'blacklist' or 'whitelist'")
    topic = _topic_name(body.get("topic"))
    partition = body.get("partition")
    if partition is not None:
        partition = _non_negative_int(body, "partition")
        path = ctl.paths.blacklisted_partition(topic, partition)
    else:
        path = ctl.paths.blacklisted_topic(topic)
    if op == "blacklist":
        ctl.zk.ensure_path(path)
    else:
        try:
            ctl.zk.delete(path)
        except NoNodeError:
            raise ApiError(404, f"{topic}{'' if partition is None else f':{partition}'} is not blacklisted") from None
    _wake()
    return jsonify({"topic": topic, "partition": partition, "blacklisted": op == "blacklist"})


_ADMIN_GET = ("autobalancing_status", "workloadinfo", "rate_limit")
_ADMIN_POST = ("enable_autobalancing", "disable_autobalancing", "rate_limit")


@_admin.get("/admin/<op>")
def admin_get(op: str) -> Any:
    ctl = _rt()
    if op not in _ADMIN_GET:
        raise ApiError(404, f"unknown admin operation {op!r} (GET: {', '.join(_ADMIN_GET)})")
    if op == "autobalancing_status":
        return jsonify({"autobalancing": autobalancing(ctl.zk, ctl.paths)})
    if op == "rate_limit":
        return jsonify(asdict(_rate_limit(ctl)))
    statuses = zk.read_statuses(ctl.zk, ctl.paths)
    return jsonify({
        "workers": {
            w: {
                "bytes_per_s": round(sum(p.bytes_per_s for p in s.partitions.values()), 1),
                "records_per_s": round(sum(p.records_per_s for p in s.partitions.values()), 1),
                "partitions": len(s.partitions),
                "lag": sum(max(p.lag, 0) for p in s.partitions.values()),
            }
            for w, s in sorted(statuses.items())
        }
    })


@_admin.post("/admin/<op>")
@requires_admin
def admin_post(op: str) -> Any:
    ctl = _rt()
    if op not in _ADMIN_POST:
        raise ApiError(404, f"unknown admin operation {op!r} (POST: {', '.join(_ADMIN_POST)})")
    if op == "rate_limit":
        body = _json_body()
        unknown = set(body) - {"records_per_s", "bytes_per_s"}
        if unknown:
            raise ApiError(400, f"unknown rate limit keys: {', '.join(sorted(map(str, unknown)))}")
        limit = RateLimit(_non_negative_int(body, "records_per_s"), _non_negative_int(body, "bytes_per_s"))
        _put(ctl, ctl.paths.rate_limit, limit.encode())
        return jsonify(asdict(limit))
    enabled = op == "enable_autobalancing"
    _put(ctl, ctl.paths.autobalancing, b"true" if enabled else b"false")
    _wake()
    return jsonify({"autobalancing": enabled})


def _put(ctl: Any, path: str, data: bytes) -> None:
    try:
        ctl.zk.set(path, data)
    except NoNodeError:
        ctl.zk.create(path, data, makepath=True)


def _rate_limit(ctl: Any) -> RateLimit:
    try:
        return RateLimit.decode(ctl.zk.get(ctl.paths.rate_limit)[0])
    except (NoNodeError, SchemaError):
        return RateLimit(ctl.config.worker.max_records_per_s, ctl.config.worker.max_bytes_per_s)


_ROUTE_SCOPED = (_topics, _instances, _offsets, _admin)


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
