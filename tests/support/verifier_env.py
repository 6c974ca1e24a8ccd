"""Helpers for verifier tests: build a destination partition by hand (to plant defects), commit, run, validate.

A destination written here looks exactly like the replicator's output (same
key, value, headers and timestamp, plus a ``urep`` header naming the source
offset and partition) unless a test changes it on purpose.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from kazoo.client import KazooClient

from tests.support.kafka_io import Record
from ureplicator.common import provenance
from ureplicator.common.zkschema import Paths, TopicRecord

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "reports" / "report.schema.json").read_text())


@dataclass(frozen=True)
class Copy:
    """A record to write to the destination."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int

    def with_value(self, value: bytes) -> Copy:
        return replace(self, value=value)

    def with_header(self, name: str, value: bytes) -> Copy:
        return replace(self, headers=tuple((k, value if k == name else v) for k, v in self.headers))


def mirrored(record: Record, partition: int, origin: str = "src") -> Copy:
    """What the replicator writes for ``record``: its content plus a urep header."""
    kept = tuple((k, v) for k, v in record.headers if k != provenance.HEADER)
    urep = (provenance.HEADER, provenance.encode(record.offset, partition, origin))
    return Copy(record.key, record.value, (*kept, urep), record.timestamp)


def write(bootstrap: str, topic: str, partition: int, copies: Iterable[Copy]) -> None:
    """Append ``copies`` to one destination partition, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for c in copies:
        producer.produce(
            topic, key=c.key, value=c.value, partition=partition, headers=list(c.headers), timestamp=c.timestamp
        )
        producer.poll(0)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, partition: int, timeout_s: float = 30) -> list[Record]:
    """Every committed record of a partition up to its end, also when the end is a transaction marker."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "verifier-test-reader", "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": "read_committed",
    })
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        records: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return records
                    raise AssertionError(msg.error())
                records.append(
                    Record(msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ()), msg.timestamp()[1])
                )
        raise AssertionError(f"{topic}:{partition}: no end of partition within {timeout_s}s")
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit offsets for ``group`` the way the replicator does (assign-style, explicit offsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        result = consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
        assert all(tp.error is None for tp in result), result
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The offsets ``group`` committed for ``topic``'s partitions (those it committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
        return {tp.partition: tp.offset for tp in found if tp.offset >= 0}
    finally:
        consumer.close()


def register(zookeeper: str, pipeline: str, topic: str, destination: str, partitions: int) -> None:
    """Record a mirrored topic in ZooKeeper as the controller's POST /topics does."""
    client = KazooClient(hosts=zookeeper)
    client.start(timeout=15)
    try:
        paths = Paths(f"/ureplicator/{pipeline}")
        client.ensure_path(paths.topics)
        client.create(paths.topic(topic), TopicRecord(topic, destination, partitions).encode())
    finally:
        client.stop()
        client.close()


def config_file(directory: Path, services: dict[str, Any], pipeline: str, **source_properties: str) -> Path:
    doc = {
        "pipeline": pipeline,
        "zookeeper": {"connect": services["zookeeper"]},
        "source": {"alias": "src", "bootstrap_servers": services["source"], "properties": source_properties},
        "destination": {"alias": "dst", "bootstrap_servers": services["destination"]},
    }
    path = directory / f"{pipeline}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class Outcome:
    status: int
    stdout: str
    stderr: str
    report: dict[str, Any] | None

    def partition(self, topic: str, partition: int) -> dict[str, Any]:
        assert self.report is not None, self.stderr
        for t in self.report["topics"]:
            if t["topic"] == topic:
                for p in t["partitions"]:
                    if p["partition"] == partition:
                        return p
        raise AssertionError(f"no partition {topic}:{partition} in the report")


def run_verifier(args: list[str], output: Path, route: str = "") -> Outcome:
    """Run ``python -m ureplicator.verifier`` in this process (sharing the session's SparkSession); validate the report
    (for ``route``, the one in its reports directory under ``output``)."""
    from ureplicator.verifier import cli

    out, err = io.StringIO(), io.StringIO()
    route_args = ["--route", route] if route else []
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main([*args, *route_args, "--output", str(output), "--conf", "spark.sql.shuffle.partitions=2"])
    latest = cli.route_output(output, route) / "latest.json"
    report = None
    if status != 2 or latest.exists():
        report = json.loads(latest.read_text())
        jsonschema.validate(report, SCHEMA)
    return Outcome(status, out.getvalue(), err.getvalue(), report)


def nonzero(partition: dict[str, Any]) -> dict[str, int]:
    """A partition's categories with a non-zero count."""
    return {c: n for c, n in partition["counts"].items() if n}


def ranges(partition: dict[str, Any], category: str) -> list[list[int]]:
    return partition["categories"][category]["ranges"]
