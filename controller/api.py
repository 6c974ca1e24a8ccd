"""The admin REST API (Flask app factory): topics, health, with uReplicator's paths and bodies.

Every replica serves it; writes become desired state in ZooKeeper and the
leader turns them into assignments. Every response is JSON, errors included:
``{"error": {"code": <http status>, "message": ...}}``.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from flask import Blueprint, Flask, current_app, jsonify, request
from kazoo.client import KazooClient, KazooState
from werkzeug.exceptions import HTTPException
from werkzeug.serving import make_server

from common import kafka, logs, zk
from common.config import Config
from common.errors import ClusterUnavailable, UReplicatorError
from common.zkschema import Paths, TopicRecord, valid_topic_name
from controller.leader import Leadership

log = logs.get(__name__)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Controller:
    """What the API needs from the running controller process."""

    config: Config
    zk: KazooClient
    leadership: Leadership
    source_admin: Any
    destination_admin: Any

    @property
    def paths(self) -> Paths:
        return Paths(self.config.root)


def create_app(controller: Controller) -> Flask:
    app = Flask("ureplicator.controller")
    app.config["controller"] = controller
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.register_blueprint(_topics)
    app.register_blueprint(_health)
    app.register_error_handler(ApiError, _api_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    return app


def serve(app: Flask, host: str, port: int) -> tuple[Any, threading.Thread]:
    """Serve ``app`` on a background thread; returns the server (``shutdown()`` stops it)."""
    server = make_server(host, port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="rest-api", daemon=True)
    thread.start()
    return server, thread


def _ctl() -> Controller:
    return current_app.config["controller"]


def _error(status: int, message: str) -> tuple[Any, int]:
    return jsonify({"error": {"code": status, "message": message}}), status


def _api_error(exc: ApiError) -> tuple[Any, int]:
    return _error(exc.status, exc.message)


def _http_error(exc: HTTPException) -> tuple[Any, int]:
    return _error(exc.code or 500, exc.description or exc.name)


def _unexpected_error(exc: Exception) -> tuple[Any, int]:
    if isinstance(exc, ClusterUnavailable):
        return _error(503, str(exc))
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


def _json_body() -> dict[str, Any]:
    body = request.get_json(silent=True, force=True)
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    """uReplicator's scripts send numPartitions as a number or a numeric string."""
    if key not in body or body[key] is None:
        return None
    value = body[key]
    if isinstance(value, bool):
        raise ApiError(400, f"{key} must be a positive integer")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or value <= 0:
        raise ApiError(400, f"{key} must be a positive integer, got {body[key]!r}")
    return value


def _topic_name(value: object, what: str = "topic") -> str:
    if not valid_topic_name(value):
        raise ApiError(400, f"{what} must be a Kafka topic name (1-249 of [a-zA-Z0-9._-]), got {value!r}")
    return str(value)


# --- topics --------------------------------------------------------------------------------

_topics = Blueprint("topics", __name__)


@_topics.get("/topics")
def list_topics() -> Any:
    ctl = _ctl()
    records = zk.read_topics(ctl.zk, ctl.paths)
    return jsonify({"topics": [asdict(r) for _, r in sorted(records.items())]})


@_topics.post("/topics")
@requires_admin
def add_topic() -> Any:
    """Start mirroring a source topic: ``{"topic": "t", "numPartitions": 8}``."""
    ctl = _ctl()
    body = _json_body()
    topic = _topic_name(body.get("topic"))
    requested = _positive_int(body, "numPartitions")
    if zk.read_topic(ctl.zk, ctl.paths, topic) is not None:
        raise ApiError(409, f"topic {topic!r} is already mirrored")
    try:
        source = kafka.describe_topic(ctl.source_admin, ctl.config.source, topic)
    except kafka.TopicNotFound as exc:
        raise ApiError(404, str(exc)) from None
    if requested is not None and requested != source.partitions:
        raise ApiError(
            400,
            f"numPartitions is {requested} but topic {topic!r} has {source.partitions} partitions on "
            f"the source; every partition is mirrored, so send {source.partitions} or leave it out",
        )
    destination = topic
    outcome = kafka.ensure_topic(
        ctl.destination_admin,
        ctl.config.destination,
        kafka.TopicInfo(destination, source.partitions, source.configs),
    )
    record = TopicRecord(
        topic=topic,
        destination=destination,
        partitions=source.partitions,
        added_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    if not zk.create_topic(ctl.zk, ctl.paths, record):
        raise ApiError(409, f"topic {topic!r} is already mirrored")
    ctl.leadership.request_reconcile()
    log.info("topic_added", topic=topic, partitions=source.partitions, destination_topic=outcome)
    return jsonify({**asdict(record), "destination_topic": outcome}), 201


@_topics.get("/topics/<topic>")
def show_topic(topic: str) -> Any:
    ctl = _ctl()
    record = zk.read_topic(ctl.zk, ctl.paths, _topic_name(topic))
    if record is None:
        raise ApiError(404, f"topic {topic!r} is not mirrored")
    owners = {
        tp: worker
        for worker, assignment in zk.read_assignments(ctl.zk, ctl.paths).items()
        for tp in assignment.partitions
        if tp[0] == topic
    }
    statuses = zk.read_statuses(ctl.zk, ctl.paths)
    partitions = []
    for p in range(record.partitions):
        applied_by = [w for w, s in statuses.items() if (topic, p) in s.partitions]
        status = statuses[applied_by[0]].partitions[(topic, p)] if applied_by else None
        partitions.append(
            {
                "partition": p,
                "worker": owners.get((topic, p)),
                "applied_by": applied_by[0] if applied_by else None,
                "status": asdict(status) if status else None,
            }
        )
    return jsonify({**asdict(record), "assignment": partitions})


@_topics.delete("/topics/<topic>")
@requires_admin
def remove_topic(topic: str) -> Any:
    """Stop mirroring; the destination topic and its data stay."""
    ctl = _ctl()
    if not zk.delete_topic(ctl.zk, ctl.paths, _topic_name(topic)):
        raise ApiError(404, f"topic {topic!r} is not mirrored")
    # Blacklisted so that auto-whitelisting never re-adds what an operator removed.
    ctl.zk.ensure_path(ctl.paths.blacklisted_topic(topic))
    ctl.leadership.request_reconcile()
    log.info("topic_removed", topic=topic)
    return jsonify({"topic": topic, "removed": True})


# --- health --------------------------------------------------------------------------------

_health = Blueprint("health", __name__)


@_health.get("/health")
def health() -> Any:
    ctl = _ctl()
    connected = ctl.zk.state == KazooState.CONNECTED
    leader = ctl.leadership.leader_id() if connected else None
    body = {
        "status": "ok" if connected and leader else "unavailable",
        "zookeeper": ctl.zk.state.lower() if isinstance(ctl.zk.state, str) else str(ctl.zk.state),
        "leader": leader,
        "is_leader": ctl.leadership.state.is_leader,
        "generation": ctl.leadership.state.generation,
    }
    return jsonify(body), (200 if connected and leader else 503)
