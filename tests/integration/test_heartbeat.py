"""Freshness: the heartbeat's age on the destination grows while the only worker is stopped, and recovers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support import kafka_io
from tests.support.kafka_io import wait_for

pytestmark = pytest.mark.integration


def _freshness(pipeline) -> dict:
    code, body = pipeline.api("GET", "/status")
    assert code == 200, body
    return body


def _age_metric(pipeline, route: str = "default") -> float | None:
    with urllib.request.urlopen(f"{pipeline.url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    labels = f'pipeline="{re.escape(pipeline.name)}",route="{route}"'
    match = re.search(rf"^ureplicator_heartbeat_age_seconds{{{labels}}} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match and match.group(1) != "NaN" else None


def test_heartbeat_age_reflects_a_stopped_worker_and_recovers(pipeline, services):
    # Given a pipeline with a heartbeat every second, an RPO of 10 s and one worker
    # (an RPO of seconds, not minutes: the age grows one second per second whatever the RPO, so 20 s
    # of stop prove what 60 s would, and the suite waits 40 s less)
    pipeline.start_controller(controller={"heartbeat_interval_s": 1, "rpo_s": 10})
    worker = pipeline.start_worker("w1")

    # When the leader's heartbeats flow through the pipeline, the freshness is a few seconds
    def fresh():
        doc = _freshness(pipeline)
        age = (doc.get("freshness") or {}).get("age_s")
        return doc if age is not None and age < 5 else None

    doc = wait_for(fresh, 90, "heartbeats reach the destination")
    heartbeat_topic = f"ureplicator-heartbeats-{pipeline.name}"
    assert any(p["topic"] == heartbeat_topic for p in doc["partitions"])  # registered like any topic
    assert doc["freshness"]["rpo_s"] == 10 and doc["freshness"]["late"] is False
    assert _age_metric(pipeline) < 5

    # When the only worker is stopped, until the age reads 20 s (twice the RPO)
    worker.terminate()
    stopped = time.monotonic()

    def aged():
        doc = _freshness(pipeline)
        age = (doc.get("freshness") or {}).get("age_s")
        return doc if age is not None and age >= 20 else None

    wait_for(aged, 60, "the heartbeat age passes 20 s")

    # Then the age is the time since the stop (no older than the stop, at most the last heartbeat's lag
    # more), above the RPO, and `ureplicator status` exits 1 naming freshness
    before = time.monotonic() - stopped
    doc = _freshness(pipeline)
    metric = _age_metric(pipeline)
    after = time.monotonic() - stopped
    age = doc["freshness"]["age_s"]
    assert before - 5 <= age <= after + 15, (before, age, after)
    assert before - 5 <= metric <= after + 15, (before, metric, after)
    assert doc["freshness"]["late"] is True
    assert any(p.startswith("freshness: the newest heartbeat on the destination is") for p in doc["problems"])
    result = subprocess.run([sys.executable, "-m", "ureplicator", "status", "--url", pipeline.url, "--json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and json.loads(result.stdout)["freshness"]["late"] is True

    # When the worker comes back, the freshness recovers to seconds
    pipeline.start_worker("w1")
    recovered = wait_for(fresh, 90, "freshness recovers after the restart")
    assert recovered["freshness"]["late"] is False
    assert time.monotonic() - stopped < 200


def test_the_verifier_proves_the_heartbeat_topic_like_any_other(spark, pipeline, services, tmp_path):
    from tests.support import verifier_env

    # Given a pipeline whose leader keeps writing heartbeats, mirrored by one worker
    pipeline.start_controller(controller={"heartbeat_interval_s": 1})
    pipeline.start_worker("w1")
    wait_for(lambda: ((_freshness(pipeline).get("freshness") or {}).get("age_s") or 99) < 5, 90, "heartbeats flow")
    # and the worker has committed a position (the verifier proves what is committed, no more)
    heartbeats = f"ureplicator-heartbeats-{pipeline.name}"
    wait_for(lambda: max(kafka_io.committed(services["source"], pipeline.group, heartbeats, 1).values()) > 0, 60,
             "a heartbeat position committed")

    # When the verifier runs while heartbeats are still being written
    config = pipeline.write_config("verify", controller={"heartbeat_interval_s": 1})
    outcome = verifier_env.run_verifier(["--config", str(config)], tmp_path / "reports")

    # Then the heartbeat topic verifies like any topic: records in flight are pending, none missing
    assert outcome.status == 0, outcome.stderr
    assert outcome.report["status"] == "OK"
    (topic,) = [t for t in outcome.report["topics"] if t["topic"] == heartbeats]
    assert topic["status"] == "OK"
    assert outcome.report["totals"]["verified_records"] > 0


def test_each_route_has_its_own_heartbeat_age_and_a_stopped_routes_grows_alone(pipeline, services):
    # Given one deployment with a route each way between two clusters, a heartbeat every second,
    # and a worker pinned to each route
    pipeline.declare_routes({"src": services["source"], "dst": services["destination"]}, [
        {"id": "default", "source": "src", "destination": "dst"},
        {"id": "back", "source": "dst", "destination": "src"}])
    pipeline.start_controller(controller={"heartbeat_interval_s": 1, "rpo_s": 6})
    pipeline.start_worker("w-default", worker={"route": "default"})
    back = pipeline.start_worker("w-back", worker={"route": "back"})

    # When heartbeats flow on both routes, each has its own gauge, a few seconds old
    def both_fresh() -> bool:
        ages = [_age_metric(pipeline, route) for route in ("default", "back")]
        return all(age is not None and age < 4 for age in ages)

    wait_for(both_fresh, 90, "heartbeats reach both routes' destinations")
    # each route's topic is its own: the back route's heartbeats are written on dst, the default's mirrored there
    assert kafka_io.end_offsets(services["destination"], f"ureplicator-heartbeats-{pipeline.name}.back", 1)[0] > 0

    # When the back route's only worker stops
    back.terminate()

    # Then its age grows past the RPO and the status names it, while the default route stays fresh
    doc = wait_for(lambda: (d := _freshness(pipeline))["freshness"]["late"] and d, 60, "the back route is late")
    assert (_age_metric(pipeline, "back") or 0) > 6
    assert _age_metric(pipeline, "default") < 4
    assert doc["freshness"]["routes"]["default"] < 4
    assert any(p.startswith("freshness:") and p.endswith("(route back)") for p in doc["problems"]), doc["problems"]
