"""The admin REST API's topic endpoints: mirrored topics, their committed offsets and progress (Blueprints).

``/topics`` (list, add, expand), ``/topics/<topic>`` (show, add, remove),
``/topics/<topic>/<action>`` (pause, resume), ``/offset`` and ``/noprogress``;
served bare and under ``/routes/<id>/`` by :func:`controller.api.create_app`.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from flask import Blueprint, jsonify

from ureplicator.common import autherrors, logs, zk
from ureplicator.controller import topics
from ureplicator.controller.api import ApiError, _record, _rt, _topic_name, _wake, body_as, requires_admin
from ureplicator.controller.schemas import TopicExpand, TopicOptions, TopicRequest

log = logs.get(__name__)

# --- topics --------------------------------------------------------------------------------

blueprint = Blueprint("topics", __name__)


@blueprint.get("/topics")
def list_topics() -> Any:
    ctl = _rt()
    records = zk.read_topics(ctl.zk, ctl.paths)
    return jsonify({"topics": [asdict(r) for _, r in sorted(records.items())]})


def _add(topic: str, body: TopicOptions | TopicRequest) -> Any:
    ctl = _rt()
    record, outcome = topics.register(
        ctl.config, ctl.zk, ctl.source_admin, ctl.destination_admin, topic, body.numPartitions, body.destination,
    )
    _wake()
    return jsonify({**asdict(record), "destination_topic": outcome}), 201


@blueprint.post("/topics")
@requires_admin
def add_topic() -> Any:
    """Start mirroring a source topic: ``{"topic": "t", "numPartitions": 8}``."""
    body = body_as(TopicRequest)
    return _add(body.topic, body)


@blueprint.post("/topics/<topic>")
@requires_admin
def add_named_topic(topic: str) -> Any:
    return _add(_topic_name(topic), body_as(TopicOptions, optional=True))


@blueprint.put("/topics")
@requires_admin
def expand_topic() -> Any:
    """Grow a mirrored topic after its source grew: ``{"topic": "t", "numPartitions": 16}``."""
    ctl = _rt()
    body = body_as(TopicExpand)
    record = topics.expand(ctl.config, ctl.zk, ctl.source_admin, ctl.destination_admin, body.topic,
                           body.numPartitions)
    _wake()
    return jsonify(asdict(record))


@blueprint.get("/topics/<topic>")
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


@blueprint.delete("/topics/<topic>")
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


@blueprint.post("/topics/<topic>/<action>")
@requires_admin
def pause_or_resume(topic: str, action: str) -> Any:
    if action not in ("pause", "resume"):
        raise ApiError(404, f"unknown topic action {action!r} (use pause or resume)")
    _record(topic)
    record = topics.set_state(_rt().config, _rt().zk, topic, "paused" if action == "pause" else "active")
    _wake()
    return jsonify(asdict(record))


# --- offsets -------------------------------------------------------------------------------

offsets = Blueprint("offsets", __name__)


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


@offsets.get("/offset")
def all_offsets() -> Any:
    ctl = _rt()
    pairs = [(name, p) for name, r in sorted(zk.read_topics(ctl.zk, ctl.paths).items()) for p in range(r.partitions)]
    rows = _offset_rows(pairs) if pairs else []
    return jsonify({"group": ctl.config.consumer_group, "offsets": rows, "total_lag": sum(r["lag"] for r in rows)})


@offsets.get("/offset/<topic>/<partition>")
def one_offset(topic: str, partition: str) -> Any:
    record = _record(topic)
    if not partition.isdigit() or int(partition) >= record.partitions:
        raise ApiError(404, f"topic {topic!r} has no partition {partition!r}")
    return jsonify({"group": _rt().config.consumer_group, **_offset_rows([(topic, int(partition))])[0]})


@offsets.get("/noprogress")
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
