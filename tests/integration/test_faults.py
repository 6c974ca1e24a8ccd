"""Faults on the real services (Jepsen-style pauses and restarts), each ending with an exact comparison.

Every scenario mirrors under continuous load and ends with the per-partition
comparison of source and destination: nothing lost, order kept, duplicates
counted (and printed). Services a test stops or freezes are running and
resumed again when it ends, for the tests that follow.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import pytest
from confluent_kafka import KafkaException

from devtools import stack
from devtools.ports import free_port
from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.load import ContinuousProducer, compare, wait_mirrored
from tests.support.pipeline import Pipeline, Process
from tests.support.rounds import wait_rounds

# Every test here stops, restarts or freezes a service of the session stack.
pytestmark = [pytest.mark.integration, pytest.mark.disruptive]


def owners(pipeline: Pipeline, topic: str) -> set[str | None]:
    """Workers whose status says they mirror a partition of ``topic`` (None: a partition nobody applied)."""
    code, body = pipeline.api("GET", f"/topics/{topic}")
    return {p["applied_by"] for p in body["assignment"]} if code == 200 else {None}


def mirrored(services: dict, topic: str, partitions: int = 4) -> int:
    """Records on the destination topic; 0 while its metadata is still propagating after creation."""
    try:
        return sum(kafka_io.end_offsets(services["destination"], topic, partitions).values())
    except KafkaException:
        return 0


def service_pid(services: dict, name: str) -> int:
    pid = stack.status(services["dir"])[name]["pid"]
    assert pid, f"{name} is not running"
    return int(pid)


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    """SIGSTOP a process; SIGCONT it however the block ends."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def events(proc: Process, since: float = 0.0) -> list[dict]:
    """The process's structured log events (JSON lines) logged at or after epoch ``since``."""
    found = []
    for line in proc.log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        stamp = event.get("timestamp")
        if stamp and datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() >= since:
            found.append(event)
    return found


def exact(services: dict, topic: str, partitions: int, sent: int, label: str) -> dict[str, int]:
    wait_mirrored(services, topic, partitions, timeout_s=180)
    result = compare(services, topic, partitions)
    print(f"{label}: {result}")  # duplicates are allowed (at-least-once) but counted
    assert result["lost"] == 0 and result["reordered"] == 0 and result["records"] == sent, result
    return result


def test_worker_and_destination_frozen_past_the_session_then_resumed(pipeline, services):
    # Given two workers mirroring a topic under continuous load
    topic = f"{pipeline.name}-freeze"
    kafka_io.create_topic(services["source"], topic, 4)
    pipeline.start_controller()
    zombie = pipeline.start_worker("w1")
    pipeline.start_worker("w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    with ContinuousProducer(services["source"], topic, 4, rate_per_s=1000) as load:
        wait_for(lambda: owners(pipeline, topic) == {"w1", "w2"}, 60, "both workers mirror")
        wait_for(lambda: mirrored(services, topic) > 500, 60,
                 "mirroring")
        destination = service_pid(services, "destination")
        # When the destination broker and then w1 are frozen past w1's session timeout
        with frozen(destination):
            with frozen(zombie.popen.pid):
                # Then the leader gives w1's partitions to w2 (it cannot write them yet)
                wait_for(lambda: owners(pipeline, topic) == {"w2"}, 90, "w2 owns every partition")
            # And w1, woken while its destination is still frozen, fences itself and drops
            # what its producer still held before it could send it
            wait_for(lambda: any(e["event"] == "session_lost_partitions_dropped" for e in events(zombie)), 60,
                     "w1 dropped its partitions")
        # When the destination is back, w1 re-registers and gets partitions again
        wait_for(lambda: owners(pipeline, topic) == {"w1", "w2"}, 120, "w1 mirrors again")
        time.sleep(1)
    # Then nothing is lost or reordered
    exact(services, topic, 4, load.sent, "worker+destination frozen")
    assert any(e["event"] == "producer_purged" for e in events(zombie))


def test_source_broker_restart_under_load(pipeline, services):
    # Given a worker mirroring under continuous load
    topic = f"{pipeline.name}-srcrestart"
    kafka_io.create_topic(services["source"], topic, 4)
    pipeline.start_controller()
    pipeline.start_worker("w1")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    load = ContinuousProducer(services["source"], topic, 4, rate_per_s=1000)
    with load:
        wait_for(lambda: mirrored(services, topic) > 500, 60,
                 "mirroring")
        # When the source broker restarts (the load producer retries meanwhile)
        stack.stop_service(services["dir"], "source")
        try:
            time.sleep(2)
        finally:
            stack.start_service(services["dir"], "source")
        before = mirrored(services, topic)
        # Then mirroring resumes
        wait_for(lambda: mirrored(services, topic) > before + 500,
                 120, "mirroring after the restart")
    exact(services, topic, 4, load.sent, "source broker restart")
    # And the group's commits caught up with the coordinator back: the worker commits its
    # acknowledged end, so a hand-off now would repeat nothing
    source_end = kafka_io.end_offsets(services["source"], topic, 4)
    wait_for(lambda: kafka_io.committed(services["source"], pipeline.group, topic, 4) == source_end, 60,
             "commits after the restart")


def test_zookeeper_restart_under_load(pipeline, services):
    # Given two workers and a controller mirroring under continuous load
    topic = f"{pipeline.name}-zkrestart"
    kafka_io.create_topic(services["source"], topic, 4)
    pipeline.start_controller()
    pipeline.start_worker("w1")
    pipeline.start_worker("w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    with ContinuousProducer(services["source"], topic, 4, rate_per_s=1000) as load:
        wait_for(lambda: owners(pipeline, topic) == {"w1", "w2"}, 60, "both workers mirror")
        # When ZooKeeper restarts
        stack.stop_service(services["dir"], "zookeeper")
        try:
            time.sleep(2)
        finally:
            stack.start_service(services["dir"], "zookeeper")
        # Then the pipeline comes back: a leader, every partition applied, mirroring going on
        wait_for(lambda: pipeline.api("GET", "/health")[0] == 200, 90, "a leader again")
        wait_for(lambda: owners(pipeline, topic) <= {"w1", "w2"} and None not in owners(pipeline, topic), 90,
                 "every partition owned")
        before = mirrored(services, topic)
        wait_for(lambda: mirrored(services, topic) > before + 500,
                 120, "mirroring after the restart")
    exact(services, topic, 4, load.sent, "zookeeper restart")


def test_leader_frozen_past_its_session_writes_nothing_after_waking(pipeline, services):
    # Given two controllers (the first leads) and a worker mirroring under load
    topic = f"{pipeline.name}-leaderfreeze"
    kafka_io.create_topic(services["source"], topic, 4)
    old_leader = pipeline.start_controller("c1")
    standby_port = free_port()
    pipeline.start_controller("c2", controller={"rest_port": standby_port})
    pipeline.start_worker("w1")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    wait_for(lambda: owners(pipeline, topic) == {"w1"}, 60, "w1 mirrors")
    standby = Pipeline(services=pipeline.services, workdir=pipeline.workdir, name=pipeline.name,
                       rest_port=standby_port)
    with ContinuousProducer(services["source"], topic, 4, rate_per_s=1000) as load:
        # When the leader is frozen past its session and the standby takes over and moves work
        with frozen(old_leader.popen.pid):
            wait_for(lambda: any(e["event"] == "leadership_acquired" for e in events(pipeline.processes[1])), 60,
                     "c2 leads")
            pipeline.start_worker("w2")
            wait_for(lambda: owners(standby, topic) == {"w1", "w2"}, 90, "c2 handed partitions to w2")
            woke_at = time.time()
        # Then the old leader, awake again, steps down and writes nothing
        wait_for(lambda: any(e["event"] in ("leadership_released", "leadership_fenced")
                             for e in events(old_leader, woke_at)), 60, "c1 stepped down")
        # Two of the new leader's reconcile rounds later (same interval as the old one's): a stale
        # reconcile by the old leader would have shown by now
        wait_rounds(standby.url, 2)
        writes = [e for e in events(old_leader, woke_at) if e["event"] in ("assignment_written", "topics_synced")]
        assert writes == [], writes
        assert owners(standby, topic) == {"w1", "w2"}
    exact(services, topic, 4, load.sent, "leader frozen")


def test_destination_restart_after_a_worker_and_destination_freeze_keeps_mirroring(pipeline, services):
    # Given two workers mirroring under continuous load, one of which (w1) was frozen past its
    # session together with the destination broker: woken first, it purged its producer
    # (queued and in-flight records) and re-registered; then the destination woke too
    topic = f"{pipeline.name}-purgerestart"
    kafka_io.create_topic(services["source"], topic, 4)
    pipeline.start_controller()
    debug = os.environ.get("UREP_TEST_PRODUCER_DEBUG")  # e.g. eos,msg,protocol when diagnosing
    extra = {"destination": {"properties": {"debug": debug}}} if debug else {}
    zombie = pipeline.start_worker("w1", **extra)
    pipeline.start_worker("w2", **extra)
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    with ContinuousProducer(services["source"], topic, 4, rate_per_s=1000) as load:
        wait_for(lambda: owners(pipeline, topic) == {"w1", "w2"}, 60, "both workers mirror")
        wait_for(lambda: mirrored(services, topic) > 500, 60, "mirroring")
        destination = service_pid(services, "destination")
        with frozen(destination):
            with frozen(zombie.popen.pid):
                wait_for(lambda: owners(pipeline, topic) == {"w2"}, 90, "w2 owns every partition")
            wait_for(lambda: any(e["event"] == "producer_purged" for e in events(zombie)), 60, "w1 purged")
            time.sleep(3)
        wait_for(lambda: owners(pipeline, topic) == {"w1", "w2"}, 120, "w1 mirrors again")
        # When the destination broker restarts under load
        stack.stop_service(services["dir"], "destination")
        try:
            time.sleep(3)
        finally:
            stack.start_service(services["dir"], "destination", timeout_s=180)  # log recovery is slow under load
        # Then every partition, the ones w1 mirrors included, keeps arriving at the destination
        before = kafka_io.end_offsets(services["destination"], topic, 4)
        wait_for(lambda: all(n > before[p] + 100 for p, n in kafka_io.end_offsets(
            services["destination"], topic, 4).items()), 120, "every partition flowing after the restart")
        assert owners(pipeline, topic) == {"w1", "w2"}
    # And nothing is lost or reordered
    exact(services, topic, 4, load.sent, "destination restart after a purge")
