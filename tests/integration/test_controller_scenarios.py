"""Controller scenarios under continuous produce, each ending with an exact per-partition comparison."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.load import ContinuousProducer, compare, wait_mirrored
from ureplicator.common.errors import UReplicatorError

pytestmark = pytest.mark.integration


def owners(pipeline, topic: str) -> dict[int, str | None]:
    status, body = pipeline.api("GET", f"/topics/{topic}")
    assert status == 200, body
    return {p["partition"]: p["applied_by"] for p in body["assignment"]}


def settled(pipeline) -> bool:
    status, body = pipeline.api("GET", "/validation")
    return status == 200 and body["ok"] and not body["withheld"]


def setup_topic(pipeline, services, partitions: int, name: str = "t") -> str:
    topic = f"{pipeline.name}-{name}"
    kafka_io.create_topic(services["source"], topic, partitions)
    return topic


class CommitWatcher:
    """Samples each partition's committed offset (from worker status) to find pauses."""

    def __init__(self, pipeline, topic: str) -> None:
        self.pipeline, self.topic = pipeline, topic
        self.samples: dict[int, list[tuple[float, int, str | None]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CommitWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            status, body = self.pipeline.api("GET", f"/topics/{self.topic}")
            if status == 200:
                now = time.monotonic()
                for p in body["assignment"]:
                    committed = (p["status"] or {}).get("committed", -1)
                    self.samples.setdefault(p["partition"], []).append((now, committed, p["applied_by"]))
            time.sleep(0.25)

    def owners(self, partition: int) -> set[str]:
        """Every worker seen applying ``partition`` while watching."""
        return {owner for _, _, owner in self.samples[partition] if owner is not None}

    def commits(self, partition: int) -> list[int]:
        """The distinct committed offsets of ``partition``, in the order they were seen."""
        seen: list[int] = []
        for _, committed, _ in self.samples[partition]:
            if not seen or committed != seen[-1]:
                seen.append(committed)
        return seen


def _released(pipeline, worker: str, topic: str) -> set[int]:
    """Partitions of ``topic`` that ``worker`` logged as released (its partitions_released events)."""
    (proc,) = [p for p in pipeline.processes if p.name == worker]
    released: set[int] = set()
    for line in proc.tail(100_000).splitlines():
        if '"partitions_released"' in line:
            released |= {int(tp.rsplit(":", 1)[1]) for tp in json.loads(line)["partitions"]
                         if tp.rsplit(":", 1)[0] == topic}
    return released


def test_adding_and_blacklisting_workers_loses_and_duplicates_nothing(pipeline, services):
    # Given two workers mirroring 8 partitions under continuous produce
    topic = setup_topic(pipeline, services, 8)
    pipeline.start_controller()
    pipeline.start_worker("w1")
    pipeline.start_worker("w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    with ContinuousProducer(services["source"], topic, 8, rate_per_s=1500) as load:
        wait_for(lambda: settled(pipeline) and set(owners(pipeline, topic).values()) == {"w1", "w2"}, 60,
                 "initial assignment")
        before = owners(pipeline, topic)
        with CommitWatcher(pipeline, topic) as watcher:
            # When a third worker joins
            pipeline.start_worker("w3")
            wait_for(lambda: "w3" in owners(pipeline, topic).values() and settled(pipeline), 60, "w3 assigned")
            after_join = owners(pipeline, topic)
            # Then only about P/W partitions moved, all to the newcomer
            moved = [p for p in before if before[p] != after_join[p]]
            assert 2 <= len(moved) <= 3 and all(after_join[p] == "w3" for p in moved)
            stayed = [p for p in before if before[p] == after_join[p]]
            # (commits of the stayed partitions move on after the hand-off: several new offsets each)
            start = {p: watcher.commits(p)[-1] for p in stayed}
            wait_for(lambda: all(len([c for c in watcher.commits(p) if c > start[p]]) >= 3 for p in stayed), 60,
                     "commits of the partitions that stayed to keep moving")
        # and partitions that stayed were never handed off or paused: one owner throughout, never released
        # by it — not even during the initial settle, where a worker granted partitions while another was
        # still acquiring them used to hand them back — and their commits kept moving through the join
        # (the stall time itself is measured by bench/stalls.py, not asserted here)
        for p in stayed:
            assert watcher.owners(p) == {before[p]}, (p, watcher.samples[p][-10:])
            assert p not in _released(pipeline, before[p], topic)
        # (while each moved one was released by its old owner: the log check sees hand-offs)
        assert all(p in _released(pipeline, before[p], topic) for p in moved)

        # When w1 is blacklisted, its partitions are handed off and it keeps none
        assert pipeline.api("DELETE", "/instances/w1")[0] == 200
        wait_for(lambda: "w1" not in owners(pipeline, topic).values() and settled(pipeline), 60, "w1 drained")
        time.sleep(2)
    # Then, once the mirror caught up: nothing lost, nothing duplicated, order kept
    wait_mirrored(services, topic, 8)
    result = compare(services, topic, 8)
    assert result == {"records": load.sent, "lost": 0, "duplicated": 0, "reordered": 0}
    # And whitelisting w1 again makes it eligible
    assert pipeline.api("POST", "/instances/w1")[0] == 200
    status, body = pipeline.api("GET", "/blacklist")
    assert body["workers"] == []


def test_killing_the_leader_controller_hands_leadership_to_a_standby(pipeline, services):
    topic = setup_topic(pipeline, services, 4)
    first = pipeline.start_controller("c1")
    second = pipeline.start_controller("c2", controller={"rest_port": pipeline.rest_port + 1})
    pipeline.start_worker("w1")
    pipeline.start_worker("w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    with ContinuousProducer(services["source"], topic, 4, rate_per_s=1000) as load:
        wait_for(lambda: settled(pipeline) and set(owners(pipeline, topic).values()) == {"w1", "w2"}, 60,
                 "assignment")
        status, health = pipeline.api("GET", "/health")
        leader = first if health["is_leader"] else second
        standby_port = pipeline.rest_port + 1 if leader is first else pipeline.rest_port
        # When the leader is killed -9
        leader.kill()
        from ureplicator.controller.client import request

        def standby_leads() -> bool:
            try:
                status, body = request(f"http://127.0.0.1:{standby_port}/health")
            except UReplicatorError:
                return False  # its REST server is busy or restarting: ask again
            return status == 200 and body["is_leader"]

        # Then the standby takes the lead once the killed leader's session expires (how fast
        # belongs to bench/stalls.py, not to a test on a shared machine)
        wait_for(standby_leads, 60, "standby to lead", interval_s=0.2)
        # and it assigns new work: a second topic added through it gets mirrored
        topic2 = setup_topic(pipeline, services, 2, "after")
        kafka_io.produce(services["source"], topic2, 100, 2)
        assert request(f"http://127.0.0.1:{standby_port}/topics", "POST", {"topic": topic2})[0] == 201
        wait_mirrored(services, topic2, 2, timeout_s=60)
    wait_mirrored(services, topic, 4)
    assert compare(services, topic, 4) == {"records": load.sent, "lost": 0, "duplicated": 0, "reordered": 0}


def test_a_killed_worker_s_partitions_move_to_the_live_worker_and_lose_nothing(pipeline, services):
    topic = setup_topic(pipeline, services, 6)
    pipeline.start_controller()
    victim = pipeline.start_worker("w1")
    pipeline.start_worker("w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    with ContinuousProducer(services["source"], topic, 6, rate_per_s=1500) as load:
        wait_for(lambda: settled(pipeline) and set(owners(pipeline, topic).values()) == {"w1", "w2"}, 60, "both own")
        # When w1 is killed -9
        os.kill(victim.popen.pid, signal.SIGKILL)
        # Then w2 owns its partitions once w1's session expired (how fast is a benchmark's question, not
        # this test's: bench.stalls, "kill -9 worker"; a bound here failed under load)
        wait_for(lambda: set(owners(pipeline, topic).values()) == {"w2"}, 30, "w2 owns all", interval_s=0.2)
        time.sleep(2)
    wait_mirrored(services, topic, 6)
    result = compare(services, topic, 6)
    # At-least-once after a crash: nothing lost, order kept; duplicates bounded by the commit interval.
    assert result["lost"] == 0 and result["reordered"] == 0 and result["records"] == load.sent
    assert result["duplicated"] <= 1500 * 2, result


def test_grown_source_partitions_are_mirrored_from_their_first_record(pipeline, services):
    topic = setup_topic(pipeline, services, 2)
    pipeline.start_controller(controller={"topic_sync_interval_s": 1})
    pipeline.start_worker("w1", worker={"auto_offset_reset": "latest"})
    kafka_io.produce(services["source"], topic, 200, 2)
    assert pipeline.api("POST", "/topics", {"topic": topic, "numPartitions": 2})[0] == 201
    # When the source topic grows to 4 partitions and records land in the new ones at once
    kafka_io.grow_topic(services["source"], topic, 4)
    kafka_io.produce(services["source"], topic, 400, 4, start=200)
    # Then the controller grows the destination and the new partitions are mirrored from offset 0
    wait_for(lambda: pipeline.api("GET", f"/topics/{topic}")[1]["partitions"] == 4, 30, "growth detected")
    for p in (2, 3):
        source_count = kafka_io.end_offsets(services["source"], topic, 4)[p]
        wait_for(lambda p=p, n=source_count: kafka_io.end_offsets(services["destination"], topic, 4)[p] == n,
                 60, f"partition {p}")
        src = kafka_io.read_partition(services["source"], topic, p)
        dst = kafka_io.read_partition(services["destination"], topic, p)
        assert [r.logical() for r in dst] == [r.logical() for r in src]
