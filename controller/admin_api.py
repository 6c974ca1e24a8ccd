"""The admin REST API's blacklist and admin operations: auto-balancing, rate limit, workload (a Blueprint).

``/blacklist`` (topics, partitions, workers) and ``/admin/<op>``; served bare
and under ``/routes/<id>/`` by :func:`controller.api.create_app`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flask import Blueprint, jsonify, request
from kazoo.exceptions import NoNodeError

from ureplicator.common import zk
from ureplicator.common.zkschema import RateLimit, SchemaError
from ureplicator.controller.api import ApiError, _put, _rt, _wake, body_as, requires_admin
from ureplicator.controller.leader import autobalancing
from ureplicator.controller.schemas import BlacklistRequest, RateLimitRequest

blueprint = Blueprint("admin", __name__)


@blueprint.get("/blacklist")
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


@blueprint.post("/blacklist")
@requires_admin
def change_blacklist() -> Any:
    """``{"topic": t, "partition": p?, "op": "blacklist"|"whitelist"}`` (query parameters work too)."""
    ctl = _rt()
    body = body_as(BlacklistRequest, optional=True, fallback=dict(request.args))
    op, topic, partition = body.op, body.topic, body.partition
    if partition is not None:
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


@blueprint.get("/admin/<op>")
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


@blueprint.post("/admin/<op>")
@requires_admin
def admin_post(op: str) -> Any:
    ctl = _rt()
    if op not in _ADMIN_POST:
        raise ApiError(404, f"unknown admin operation {op!r} (POST: {', '.join(_ADMIN_POST)})")
    if op == "rate_limit":
        limit = body_as(RateLimitRequest).limit()
        _put(ctl, ctl.paths.rate_limit, limit.encode())
        return jsonify(asdict(limit))
    enabled = op == "enable_autobalancing"
    _put(ctl, ctl.paths.autobalancing, b"true" if enabled else b"false")
    _wake()
    return jsonify({"autobalancing": enabled})


def _rate_limit(ctl: Any) -> RateLimit:
    try:
        return RateLimit.decode(ctl.zk.get(ctl.paths.rate_limit)[0])
    except (NoNodeError, SchemaError):
        return RateLimit(ctl.config.worker.max_records_per_s, ctl.config.worker.max_bytes_per_s)
