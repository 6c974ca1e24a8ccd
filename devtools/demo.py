"""The end-to-end demo behind ``make demo``: stack, controller, two workers, 100k records, a table.

Everything it starts it stops again, on success, failure or Ctrl-C. Exit
status 0 only when every source record arrived in the destination and the
verifier found them all. ``launch`` and ``verify`` say how the processes run:
local Python processes here, containers in ``devtools.images`` (``make image-test``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from devtools import jvm, stack
from devtools.jvm import CACHE_DIR
from devtools.ports import free_port
from ureplicator.controller.client import request
from ureplicator.verifier import connector

TOPIC = "demo.orders"

# launch(role, name, config file, log file) -> the running controller or worker
Launch = Callable[[str, str, Path, IO[bytes]], "subprocess.Popen[bytes]"]
# verify(config file, reports folder) -> the finished `ureplicator verify` (verdict on stdout)
Verify = Callable[[Path, Path], "subprocess.CompletedProcess[str]"]


def _say(text: str) -> None:
    print(text, flush=True)


def run(records: int = 100_000, partitions: int = 8, timeout_s: float = 300.0, directory: Path | None = None,
        workers: int = 2, launch: Launch | None = None, verify: Verify | None = None) -> int:
    directory = directory or CACHE_DIR / "demo"
    processes: list[subprocess.Popen] = []
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        stack.down(directory)  # a demo interrupted the hard way may have left one behind
        _say("demo: starting ZooKeeper and the source and destination Kafka clusters")
        services = stack.up(directory)
        return _run(services, directory, processes, records, partitions, timeout_s, workers,
                    launch or _local_process, verify or _local_verify)
    except KeyboardInterrupt:
        _say("\ndemo: interrupted; stopping everything it started")
        return 130
    except stack.StackError as exc:
        _say(f"demo: the local stack did not start: {exc}")
        return 1
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in processes:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        stack.down(directory)
        signal.signal(signal.SIGTERM, previous)
        _say("demo: stopped the stack and every process it started")


def _local_process(role: str, name: str, config: Path, log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ureplicator", role, "--config", str(config)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, "UREPLICATOR_LOG_LEVEL": "info"},
    )


def _local_verify(config: Path, output: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ureplicator", "--log-level", "warning", "verify", "--config", str(config),
         "--output", str(output), "--master", "local[2]"],
        stdout=subprocess.PIPE, stderr=None, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, connector.JARS_ENV: str(jvm.jvm_dir() / "spark-kafka")},
    )


def _run(services: dict[str, str], directory: Path, processes: list[subprocess.Popen], records: int,
         partitions: int, timeout_s: float, workers: int, launch: Launch, verify: Verify) -> int:
    rest_port = free_port()
    config = {
        "pipeline": "demo",
        "zookeeper": {"connect": services["zookeeper"]},
        "source": {"alias": "source", "bootstrap_servers": services["source"]},
        "destination": {"alias": "destination", "bootstrap_servers": services["destination"]},
        "controller": {"rest_host": "127.0.0.1", "rest_port": rest_port, "reconcile_interval_s": 1},
        "worker": {"commit_interval_s": 1},
    }
    logs_dir = directory / "logs"
    logs_dir.mkdir(parents=True, exist_ok=True)

    def spawn(role: str, name: str, extra: dict[str, Any]) -> None:
        doc = {**config, role: {**config.get(role, {}), **extra}} if extra else config
        path = directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        with (logs_dir / f"{name}.log").open("ab") as log:
            processes.append(launch(role, name, path, log))

    _say(f"demo: source {services['source']}, destination {services['destination']}, "
         f"ZooKeeper {services['zookeeper']}; process logs in {logs_dir}")
    spawn("controller", "controller", {})
    for n in range(1, workers + 1):
        spawn("worker", f"worker-{n}", {"id": f"worker-{n}"})

    admin = AdminClient({"bootstrap.servers": services["source"]})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    _produce(services["source"], records, partitions)

    url = f"http://127.0.0.1:{rest_port}"
    _wait_healthy(url, processes)
    status, body = request(f"{url}/topics", "POST", {"topic": TOPIC, "numPartitions": partitions})
    if status != 201:
        _say(f"demo: adding the topic failed: {status} {body}")
        return 1
    _say(f"demo: POST /topics {{\"topic\": \"{TOPIC}\", \"numPartitions\": {partitions}}} -> {status}")

    source = _end_offsets(services["source"], partitions)
    total = sum(source.values())
    deadline = time.monotonic() + timeout_s
    destination: dict[int, int] = {}
    started = time.monotonic()
    while time.monotonic() < deadline:
        destination = _end_offsets(services["destination"], partitions)
        done = sum(destination.values())
        elapsed = time.monotonic() - started
        rate = done / elapsed if elapsed > 0 else 0.0
        print(f"\rdemo: mirrored {done:>7}/{total} records ({100 * done / total:5.1f}%, {rate:,.0f}/s)",
              end="", flush=True)
        if destination == source:
            break
        for proc in processes:
            if proc.poll() is not None:
                _say(f"\ndemo: a process exited early (status {proc.returncode}); see {logs_dir}")
                return 1
        time.sleep(0.5)
    print()
    ok = _table(source, destination)
    if not ok:
        _say(f"demo: FAILED — not every record arrived within {timeout_s:.0f}s; see {logs_dir}")
        return 1
    _say(f"demo: all {total} records arrived in {time.monotonic() - started:.1f}s")
    return _verify(directory / "controller.yaml", directory / "verification", verify)


def _verify(config_path: Path, output: Path, verify: Verify) -> int:
    """Prove it: the PySpark verifier compares every record (content, order, exactly once)."""
    _say("demo: running the verifier (PySpark) over source and destination")
    started = time.monotonic()
    proc = verify(config_path, output)
    verdict = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "no verdict"
    _say(f"demo: verifier: {verdict}")
    _say(f"demo: start to verdict {time.monotonic() - started:.1f}s (a new process: JVM and Spark start-up included)")
    _say(f"demo: HTML and JSON reports in {output}")
    if proc.returncode == 0:
        return 0
    _say(f"demo: FAILED — the verifier exited with status {proc.returncode}")
    return 1


def _produce(bootstrap: str, records: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    step = max(records // 20, 1)
    for i in range(records):
        while True:
            try:
                producer.produce(
                    TOPIC, key=f"customer-{i % 977}".encode(), value=f'{{"order": {i}, "amount": {i % 100}}}'.encode(),
                    partition=i % partitions, headers=[("source-app", b"demo"), ("seq", str(i).encode())],
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if (i + 1) % step == 0 or i + 1 == records:
            print(f"\rdemo: produced {i + 1:>7}/{records} keyed records with headers", end="", flush=True)
    producer.flush(60)
    print()


def _wait_healthy(url: str, processes: list[subprocess.Popen], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if request(f"{url}/health", timeout_s=2)[0] == 200:
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if any(p.poll() is not None for p in processes):
            break
        time.sleep(0.3)
    raise stack.StackError(f"the controller did not become healthy at {url}")


def _end_offsets(bootstrap: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-reader"})
    try:
        return {
            p: max(0, consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1])
            for p in range(partitions)
        }
    except Exception:  # noqa: BLE001 - the destination topic may not exist yet
        return {}
    finally:
        consumer.close()


def _table(source: dict[int, int], destination: dict[int, int]) -> bool:
    _say(f"{'PARTITION':>9}  {'SOURCE':>8}  {'DESTINATION':>11}  MATCH")
    ok = True
    for p in sorted(source):
        match = source[p] == destination.get(p)
        ok &= match
        _say(f"{p:>9}  {source[p]:>8}  {destination.get(p, 0):>11}  {'yes' if match else 'NO'}")
    _say(f"{'total':>9}  {sum(source.values()):>8}  {sum(destination.values()):>11}  {'yes' if ok else 'NO'}")
    return ok
