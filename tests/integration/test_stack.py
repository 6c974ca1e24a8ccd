"""Integration tests for common/stack.py: real ZooKeeper and KRaft brokers started in tmp dirs."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from devtools import stack

pytestmark = pytest.mark.integration


def _java_pids(marker: Path) -> list[int]:
    """Live (non-zombie) java processes whose command line mentions marker."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and "java" in cmdline and str(marker) in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def stack_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "stack"
    yield directory
    # Whatever the test did, no JVM may outlive it; a leftover one also fails the test.
    try:
        stack.down(directory, timeout_s=15)
    finally:
        leftovers = _java_pids(directory)
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        assert not leftovers, f"java processes left running: {leftovers}"


def _nothing_started(directory: Path) -> None:
    assert _java_pids(directory) == []
    assert not (directory / stack.STATE_FILE).exists()
    assert not (directory / stack.STACK_FILE).exists()


def test_port_taken_is_reported_before_anything_starts(stack_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(stack.StackError) as info:
            stack.up(stack_dir, ports={"destination": port}, timeout_s=30)
    message = str(info.value)
    assert "destination" in message and str(port) in message
    _nothing_started(stack_dir)
    assert not (stack_dir / "zookeeper" / stack.LOG_NAME).exists(), "nothing may have started"


def test_java_missing_is_a_clear_error(stack_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk-here"))
    with pytest.raises(stack.StackError, match=r"JAVA_HOME=.*no executable bin/java"):
        stack.up(stack_dir)
    _nothing_started(stack_dir)

    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(stack.StackError, match="Java not found.*install"):
        stack.up(stack_dir)
    _nothing_started(stack_dir)


def test_broker_that_dies_at_startup_stops_the_whole_stack(stack_dir: Path) -> None:
    # The storage format accepts this config; the broker itself fails when it loads the
    # metric reporter, after ZooKeeper and the source broker were started.
    broken = {"destination": {"metric.reporters": "org.example.NoSuchReporter"}}
    with pytest.raises(stack.StackError) as info:
        stack.up(stack_dir, timeout_s=60, extra_config=broken)
    message = str(info.value)
    assert message.startswith("destination exited during startup")
    assert "org.example.NoSuchReporter" in message, "the log tail explains the failure"
    assert len(message.splitlines()) > 5
    _nothing_started(stack_dir)
    assert stack.status(stack_dir) == {}


def test_startup_timeout_stops_the_whole_stack(stack_dir: Path) -> None:
    with pytest.raises(stack.StackError, match="in time"):
        stack.up(stack_dir, timeout_s=0.5)
    _nothing_started(stack_dir)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors: list[str] = []

    def report(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value, on_delivery=report)
    assert producer.flush(30) == 0
    assert errors == []


def _consume(bootstrap: str, topic: str, count: int, timeout_s: float = 30) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-stack-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)


def test_up_status_restart_down_round_trip(stack_dir: Path) -> None:
    addresses = stack.up(stack_dir)
    clusters = addresses.pop("clusters")

    assert list(addresses) == list(stack.SERVICES)
    assert clusters == {"c1": addresses["source"], "c2": addresses["destination"]}
    assert all(a.startswith("127.0.0.1:") for a in addresses.values())
    assert len(set(addresses.values())) == 3
    assert json.loads((stack_dir / stack.STACK_FILE).read_text()) == {**addresses, "clusters": clusters}
    assert (stack_dir / stack.STATE_FILE).exists()
    status = stack.status(stack_dir)
    assert {n: (s["address"], s["running"]) for n, s in status.items()} == {n: (a, True) for n, a in addresses.items()}
    with pytest.raises(stack.StackError, match="already running"):
        stack.up(stack_dir)

    zk = KazooClient(hosts=addresses["zookeeper"])
    zk.start(timeout=15)
    try:
        zk.create("/stack-test", b"hello")
        assert zk.get("/stack-test")[0] == b"hello"
    finally:
        zk.stop()
        zk.close()

    # Both clusters take writes and serve reads, and they are distinct clusters.
    for name in stack.BROKERS:
        _create_topic(addresses[name], f"{name}-only")
    _produce(addresses["source"], "source-only", [b"s0", b"s1", b"s2"])
    assert _consume(addresses["source"], "source-only", 3) == [b"s0", b"s1", b"s2"]
    kept = [f"kept-{i}".encode() for i in range(50)]
    _produce(addresses["destination"], "destination-only", kept)
    topics = AdminClient({"bootstrap.servers": addresses["source"]}).list_topics(timeout=10)
    assert "destination-only" not in topics.topics

    # A destination outage: clean stop, then the same port and the same data.
    stack.stop_service(stack_dir, "destination")
    status = stack.status(stack_dir)
    assert status["destination"]["running"] is False
    assert status["source"]["running"] and status["zookeeper"]["running"]
    assert stack.start_service(stack_dir, "destination") == addresses["destination"]
    assert stack.status(stack_dir)["destination"]["running"] is True
    assert _consume(addresses["destination"], "destination-only", len(kept)) == kept

    # A crash (SIGKILL) keeps acknowledged data too.
    stack.kill_service(stack_dir, "source")
    assert stack.status(stack_dir)["source"]["running"] is False
    assert stack.start_service(stack_dir, "source") == addresses["source"]
    assert _consume(addresses["source"], "source-only", 3) == [b"s0", b"s1", b"s2"]

    logs = stack.service_logs(stack_dir, lines=20)
    assert set(logs) == set(stack.SERVICES)
    assert "restarting destination" in stack.service_logs(stack_dir, lines=10_000)["destination"]

    stopped = stack.down(stack_dir)
    assert sorted(stopped) == sorted(stack.SERVICES)
    assert _java_pids(stack_dir) == []
    for name in stack.SERVICES:
        assert not (stack_dir / name / "data").exists()
        assert (stack_dir / name / stack.LOG_NAME).exists(), "logs stay for post-mortems"
    assert not (stack_dir / stack.STACK_FILE).exists()
    assert not (stack_dir / stack.STATE_FILE).exists()
    assert stack.down(stack_dir) == []
    assert stack.status(stack_dir) == {}


def test_stack_up_with_three_clusters_names_them_c1_to_c3(stack_dir: Path) -> None:
    # Given `ureplicator stack up --clusters 3`
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "ureplicator", "stack", "up", "--clusters", "3",
                             "--dir", str(stack_dir)],
                            capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    # Then stack.json names three distinct clusters and keeps source and destination for c1 and c2
    addresses = json.loads((stack_dir / stack.STACK_FILE).read_text())
    assert json.loads(result.stdout) == addresses
    clusters = addresses["clusters"]
    assert list(clusters) == ["c1", "c2", "c3"]
    assert (clusters["c1"], clusters["c2"]) == (addresses["source"], addresses["destination"])
    assert len(set(clusters.values())) == 3
    # and the third cluster takes writes of its own
    _create_topic(clusters["c3"], "c3-only")
    _produce(clusters["c3"], "c3-only", [b"x", b"y"])
    assert _consume(clusters["c3"], "c3-only", 2) == [b"x", b"y"]
    assert "c3-only" not in AdminClient({"bootstrap.servers": clusters["c1"]}).list_topics(timeout=10).topics
    assert stack.status(stack_dir)["c3"]["running"] is True
    assert set(stack.service_logs(stack_dir, lines=5)) == {"zookeeper", "source", "destination", "c3"}
    # When it goes down, all four services stop
    assert sorted(stack.down(stack_dir)) == ["c3", "destination", "source", "zookeeper"]
    assert _java_pids(stack_dir) == []
