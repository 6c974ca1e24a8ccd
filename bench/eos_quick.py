"""Exactly-once against at-least-once, one worker, one backlog: a quick comparison, not the issue's benchmark.

    UREPLICATOR_TEST_STACK=/work/stack .venv/bin/python -m bench.eos_quick --records 300000 --size 100

For each mode (at-least-once on the Python loop, at-least-once on the loop ``auto``
picks, exactly-once) it fills a fresh 4-partition topic with ``--records`` records of
``--size`` bytes, starts a controller and one worker, and times from the worker's first
acquisition to the moment the destination group (exactly-once) or the source group
(at-least-once) has committed the whole backlog. It prints one line per mode; it writes
nothing. Issue 26's benchmark (against MirrorMaker 2 in exactly-once mode, in
``bench/throughput.py``) is still to do.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import kafka_io
from tests.support.pipeline import Pipeline

MODES = {
    "at-least-once, python loop": {"native_loop": "off"},
    "at-least-once, native auto": {"native_loop": "auto"},
    "exactly-once (python loop)": {"exactly_once": True, "transaction_interval_ms": 1000},
}


def fill(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4"})
    value = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(0, tp.offset) for tp in tps)
    finally:
        consumer.close()


def run(services: dict[str, str], label: str, worker: dict, records: int, size: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        pipeline = Pipeline(services=services, workdir=Path(tmp))
        topic = f"{pipeline.name}-bench"
        partitions = 4
        kafka_io.create_topic(services["source"], topic, partitions)
        fill(services["source"], topic, records, size, partitions)
        try:
            pipeline.start_controller(worker=dict(worker))
            pipeline.start_worker("w1", worker=dict(worker))
            assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
            exactly_once = bool(worker.get("exactly_once"))
            side = services["destination"] if exactly_once else services["source"]
            start = time.monotonic()
            while committed_total(side, pipeline.group, topic, partitions) < records:
                time.sleep(0.2)
                if time.monotonic() - start > 600:
                    raise TimeoutError(label)
            return time.monotonic() - start
        finally:
            pipeline.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.eos_quick", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--stack", type=Path, default=None, help="a running `ureplicator stack up --dir D`")
    args = parser.parse_args()
    import os
    stack_dir = args.stack or Path(os.environ["UREPLICATOR_TEST_STACK"])
    services = {k: v for k, v in json.loads((stack_dir / "stack.json").read_text()).items() if k != "secure"}
    for label, worker in MODES.items():
        seconds = run(services, label, worker, args.records, args.size)
        print(f"{label:30s} {args.records} x {args.size} B: {seconds:6.1f} s, {args.records / seconds:9.0f} records/s")


if __name__ == "__main__":
    main()
