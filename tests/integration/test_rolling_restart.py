"""A StatefulSet-style rolling restart on the local stack: same worker ids, one at a time, no partition moves."""

from __future__ import annotations

import threading
import time

import pytest

from tests.support import kafka_io
from tests.support.kafka_io import wait_for

pytestmark = pytest.mark.integration

WORKERS = ("mirror-worker-0", "mirror-worker-1")  # the pod names a StatefulSet gives, kept across restarts


def _owners(pipeline, topic: str) -> dict[int, str | None]:
    code, body = pipeline.api("GET", "/status")
    assert code == 200, body
    return {p["partition"]: p["owner"] for p in body["partitions"] if p["topic"] == topic}


def _healthy(pipeline, topic: str) -> bool:
    code, body = pipeline.api("GET", "/status")
    rows = [p for p in body["partitions"] if p["topic"] == topic]
    return code == 200 and body["healthy"] and rows and all(p["health"] == "ok" for p in rows)


def test_rolling_restart_with_stable_ids_moves_no_partition(pipeline, services):
    # Given two workers with StatefulSet names mirroring 6 partitions, and the chart's restart grace
    topic = f"{pipeline.name}-rolling"
    kafka_io.create_topic(services["source"], topic, 6)
    kafka_io.produce(services["source"], topic, 3000, 6)
    pipeline.start_controller(controller={"worker_restart_grace_s": 60})
    processes = {w: pipeline.start_worker(w) for w in WORKERS}
    code, body = pipeline.api("POST", "/topics", {"topic": topic})
    assert code == 201, body
    wait_for(lambda: _healthy(pipeline, topic) and set(_owners(pipeline, topic).values()) == set(WORKERS), 120,
             "both workers mirror their share")
    before = _owners(pipeline, topic)

    # When each worker is stopped and started again under the same id, one after the other, while
    # records keep arriving
    samples: list[tuple[str | None, dict[int, str | None]]] = []  # (the worker down at that moment, owners)
    down: list[str | None] = [None]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            stopped = down[0]
            samples.append((stopped, _owners(pipeline, topic)))
            time.sleep(0.3)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        for i, worker in enumerate(WORKERS):
            down[0] = worker
            assert processes[worker].terminate(60) == 0
            kafka_io.produce(services["source"], topic, 600, 6, start=3000 + 600 * i)
            time.sleep(2)  # a pod restart takes a while: the partitions wait for it meanwhile
            processes[worker] = pipeline.start_worker(worker)
            wait_for(lambda: _healthy(pipeline, topic), 90, f"{worker} back with its partitions")
            down[0] = None
    finally:
        done.set()
        watcher.join(10)

    # Then no partition was ever given to another worker, and each came back to its own owner
    assert {stopped for stopped, _ in samples} >= set(WORKERS), "no sample while a worker was down"
    moved = [(stopped, p, owner) for stopped, s in samples for p, owner in s.items() if owner != before[p]]
    assert moved == [], moved[:3]
    assert _owners(pipeline, topic) == before
    # And every record arrived
    source_end = kafka_io.end_offsets(services["source"], topic, 6)
    assert sum(source_end.values()) == 4200
    wait_for(lambda: kafka_io.end_offsets(services["destination"], topic, 6) == source_end, 90, "all mirrored")
