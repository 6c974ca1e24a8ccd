"""The C copy loop (worker/_native.c) writes exactly what the Python loop writes, on real clusters."""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest
from confluent_kafka import Producer

from devtools.ports import free_port
from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from ureplicator.common import provenance

pytestmark = pytest.mark.integration

PARTITIONS = 3


def produce_mixed(bootstrap: str, topic: str, base_ts: int) -> None:
    """Records that take every branch of both loops, interleaved so the C loop hands over often.

    Per partition: plain records, tombstones, null keys, records with headers (repeated
    names, binary values), records stamped by a third cluster with a version 1 or a version 2
    header (kept, origin preserved) and records that came from the destination (skipped:
    loop prevention).
    """
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(3000):
        partition = i % PARTITIONS
        kind = (i // PARTITIONS) % 40
        key: bytes | None = f"key-{i}".encode()
        value: bytes | None = f"value-{i}-".encode() * (1 + i % 7)
        headers: list[tuple[str, bytes]] | None = None
        if kind == 5:
            value = None  # tombstone
        elif kind == 6:
            key = None
        elif 10 <= kind < 14:
            headers = [("trace", f"t{i}".encode()), ("kind", b"\x00\x01binary"), ("trace", b"again")]
        elif kind == 20:
            headers = [(provenance.HEADER, provenance.encode(i, partition, "third")), ("x", b"y")]
        elif kind == 25:
            headers = [("x", b"z"), (provenance.HEADER, provenance.encode(i, partition, "third", "mid"))]
        elif kind == 30:
            headers = [(provenance.HEADER, provenance.encode(i, partition, "dst"))]
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers, timestamp=base_ts + i)
        producer.poll(0)
    assert producer.flush(60) == 0


def mirror_with(pipeline, services, topic: str, worker_id: str, loop: str, **extra: object) -> tuple[str, dict]:
    """Mirror ``topic`` with one worker whose ``worker.native_loop`` is ``loop``; its log, and what it showed.

    Shown while it ran: its ``ureplicator_worker_native_loop`` series ({reason: value}) and its row
    and warnings in ``GET /status``.
    """
    port = free_port()
    worker = pipeline.start_worker(worker_id, worker={"native_loop": loop, "metrics_port": port}, **extra)
    status, body = pipeline.api("POST", "/topics", {"topic": topic})
    assert status == 201, body
    source_end = kafka_io.end_offsets(services["source"], topic, PARTITIONS)
    # Loop prevention skips the records that came from the destination: the commit still
    # reaches the source end, and the destination holds the rest.
    wait_for(lambda: kafka_io.committed(services["source"], pipeline.group, topic, PARTITIONS) == source_end, 90,
             f"{loop} loop commits the source end")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    gauge = {reason: float(value) for reason, value in
             re.findall(r'^ureplicator_worker_native_loop{reason="([^"]*)",route="default"} (\S+)$', text, re.M)}
    _, doc = pipeline.api("GET", "/status")
    shown = {"gauge": gauge, "row": next(w for w in doc["workers"] if w["worker"] == worker_id),
             "warnings": doc["warnings"]}
    assert worker.terminate(30) == 0, worker.tail()
    return worker.tail(400), shown


def loop_line(log: str) -> dict:
    lines = [json.loads(line) for line in log.splitlines() if '"mirror_loop"' in line]
    assert lines, log
    return lines[-1]


def test_native_loop_writes_exactly_what_the_python_loop_writes(pipeline, services):
    # Given two source topics with the same mixed records
    native_topic, python_topic = f"{pipeline.name}-native", f"{pipeline.name}-python"
    base_ts = int(time.time() * 1000) - 3_600_000  # recent: retention must not delete them mid-test
    for topic in (native_topic, python_topic):
        kafka_io.create_topic(services["source"], topic, PARTITIONS)
        produce_mixed(services["source"], topic, base_ts)
    pipeline.start_controller()

    # When one is mirrored by a worker on the C loop, with a destination queue so small that
    # produce fails with a full queue again and again (the C loop hands over mid-run), and the
    # other by a worker on the Python loop
    native_log, native_shown = mirror_with(pipeline, services, native_topic, "w-native", "on",
                                           destination={"properties": {"queue.buffering.max.messages": "200"}})
    python_log, python_shown = mirror_with(pipeline, services, python_topic, "w-python", "off")

    # Then each worker said which loop it ran: in its log, its gauge and the status document
    assert loop_line(native_log)["loop"] == "native"
    assert loop_line(python_log)["loop"] == "python"
    assert native_shown["gauge"] == {"": 1.0}
    assert (native_shown["row"]["loop"], native_shown["warnings"]) == ("native", [])
    assert python_shown["gauge"] == {"worker.native_loop is off": 0.0}
    assert python_shown["row"]["loop"] == "python"
    assert python_shown["warnings"] == ["worker w-python runs the Python copy loop, not the C loop: "
                                        "worker.native_loop is off"]
    # and both destinations hold the same records, byte for byte, headers and timestamps included
    total = skipped = 0
    for p in range(PARTITIONS):
        source = kafka_io.read_partition(services["source"], native_topic, p)
        native = kafka_io.read_partition(services["destination"], native_topic, p)
        python = kafka_io.read_partition(services["destination"], python_topic, p)
        assert native == python, f"partition {p}: the loops wrote different records"
        # and that is the source minus the records that came from the destination, in order,
        # each stamped (urep version 2) with its source offset, its first cluster and this hop's source
        kept = [r for r in source if (r.provenance() is None or r.provenance().origin != "dst")]
        skipped += len(source) - len(kept)
        assert [r.logical() for r in native] == [r.logical() for r in kept]
        assert [(o.source_partition, o.source_offset, o.origin, o.source)
                for o in (r.provenance() for r in native)] == [
            (p, r.offset, r.provenance().origin if r.provenance() else "src", "src") for r in kept
        ]
        total += len(native)
    assert skipped == 75 and total == 3000 - 75
