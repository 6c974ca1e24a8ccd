"""The admin REST API's worker endpoints: live and blacklisted workers, rebalancing, validation (a Blueprint).

``/instances`` (list, rebalance now), ``/instances/<worker>`` (drain, whitelist)
and ``/validation``; served bare and under ``/routes/<id>/`` by
:func:`controller.api.create_app`.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, jsonify
from kazoo.exceptions import NodeExistsError, NoNodeError

from ureplicator.common import zk
from ureplicator.controller.api import ApiError, _put, _rt, _wake, _worker_name, requires_admin

# --- workers -------------------------------------------------------------------------------

blueprint = Blueprint("instances", __name__)


@blueprint.get("/instances")
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


@blueprint.post("/instances")
@requires_admin
def rebalance_now() -> Any:
    """Ask the leader to rebalance now (also when auto-balancing is off)."""
    ctl = _rt()
    _put(ctl, ctl.paths.rebalance_request, str(time.time()).encode())
    _wake()
    return jsonify({"rebalance": "requested"}), 202


@blueprint.post("/instances/<worker>")
@requires_admin
def whitelist_worker(worker: str) -> Any:
    ctl = _rt()
    try:
        ctl.zk.delete(ctl.paths.blacklisted_worker(_worker_name(worker)))
    except NoNodeError:
        raise ApiError(404, f"worker {worker!r} is not blacklisted") from None
    _wake()
    return jsonify({"worker": worker, "blacklisted": False})


@blueprint.delete("/instances/<worker>")
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


@blueprint.get("/validation")
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
