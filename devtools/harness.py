"""The stack, process and Kafka plumbing that bench/ and tests/support share: child processes, waits, topics, offsets.

* :class:`Proc` is one child process we started (terminate = SIGTERM, then SIGKILL
  after a timeout; ``tail`` of its log); :class:`Processes` ends all of a run's.
* :func:`wait_for` polls until a check holds and raises ``error`` (``HarnessError``
  unless the caller names another, tests name ``AssertionError``) naming what it waited for.
* :func:`own_stack` starts a local stack in ``.cache/bench-<name>/stack`` and always stops it.
* :class:`Offsets` / :func:`end_offsets` are the one way to read end offsets: a failed
  question returns None and replaces the client (librdkafka remembers a topic asked
  about before it existed as unknown).
* :func:`librdkafka_path` names the librdkafka confluent-kafka runs with, for code that loads it itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from devtools import jvm, stack

REPO: Path = Path(__file__).resolve().parent.parent

# Where a helper connects: a bootstrap address, or a whole librdkafka client config (TLS, SASL).
Cluster = str | Mapping[str, Any]


class HarnessError(Exception):
    """A wait timed out or a child process did not do what it had to (bench/ calls it BenchError)."""


def say(message: str) -> None:
    """One progress line for the person waiting (stderr, flushed at once)."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.25,
             error: type[Exception] = HarnessError) -> Any:
    """Poll ``check`` until it returns something truthy (returned); ``error`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout_s:g}s waiting for {what} (last: {value!r})")
        time.sleep(interval_s)


# ----------------------------------------------------------------------------- processes


@dataclass
class Proc:
    """One child process we started (a controller, worker, MirrorMaker 2 node or tool)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def terminate(self, timeout_s: float = 30) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                return self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                say(f"{self.name} (pid {self.pid}) did not stop within {timeout_s:.0f}s; killing it")
                self.popen.kill()
        return self.popen.wait(10)

    def kill(self) -> None:
        """SIGKILL (a crash)."""
        if self.alive():
            self.popen.kill()
        self.popen.wait(10)

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def spawn(name: str, cmd: list[str], log: Path, cwd: Path = REPO, env: Mapping[str, str] | None = None) -> Proc:
    """Start ``cmd`` with its output appended to ``log`` (stdin closed; ``env`` added to ours)."""
    with open(log, "ab") as out:
        popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(cwd),
                                 env=None if env is None else {**os.environ, **env})
    return Proc(name, popen, log)


class Processes:
    """Every child process of one benchmark run; ``stop_all`` ends whatever is still running."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[Proc] = []

    def spawn(self, name: str, cmd: list[str], cwd: Path = REPO) -> Proc:
        proc = spawn(name, cmd, self.workdir / f"{name}.log", cwd)
        self.procs.append(proc)
        return proc

    def stop_all(self, timeout_s: float = 30) -> None:
        for proc in reversed(self.procs):
            if proc.alive():
                with contextlib.suppress(Exception):
                    proc.terminate(timeout_s)



# ----------------------------------------------------------------------------- stack


def bench_dir(name: str) -> Path:
    """``.cache/bench-<name>``: this benchmark's stack, logs and configs.

    ``UREPLICATOR_BENCH_DIR`` moves them elsewhere: ``.cache`` may be shared by several
    checkouts, and two runs of one benchmark in one folder would stop each other's stack.
    """
    path = Path(os.environ.get("UREPLICATOR_BENCH_DIR") or jvm.CACHE_DIR) / f"bench-{name}"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def own_stack(name: str, heap: str = "512m", timeout_s: float = 180,
              running: Path | None = None) -> Iterator[tuple[dict[str, str], Path]]:
    """ZooKeeper + source + destination in ``.cache/bench-<name>/stack``, stopped on the way out;
    or the stack already ``running`` in that folder (``--stack DIR``), left as it is."""
    if running is not None:
        say(f"using the running stack in {running}")
        yield json.loads((running / stack.STACK_FILE).read_text()), running
        return
    root = bench_dir(name) / "stack"
    with contextlib.suppress(stack.StackError):
        if stack.down(root):  # leftovers of an earlier run that was killed -9
            say(f"stopped a stack left over in {root}")
    stack.KAFKA_HEAP = heap
    say(f"starting a local stack in {root} (broker heap {heap})")
    services = stack.up(root, timeout_s=timeout_s)
    try:
        yield services, root
    finally:
        say("stopping the local stack")
        stack.down(root)


# ----------------------------------------------------------------------------- topics and offsets


def client_config(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    base = {"bootstrap.servers": cluster} if isinstance(cluster, str) else dict(cluster)
    return {**base, **extra}


def admin_client(bootstrap: Cluster) -> AdminClient:
    """An admin client for the benchmark's own bookkeeping: its failures surface as exceptions,
    so librdkafka's own log lines (connection refused while the stack stops, purged events of
    dropped clients) stay quiet."""
    return AdminClient(client_config(bootstrap, log_level=2))


def create_topic(bootstrap: Cluster, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = admin_client(bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(60)
    wait_for(lambda: end_offsets(bootstrap, topic, partitions) is not None, 30, f"topic {topic} visible", 0.2)


def list_topics(bootstrap: Cluster) -> list[str]:
    admin = admin_client(bootstrap)
    return sorted(t for t in admin.list_topics(timeout=30).topics if not t.startswith("__"))


def delete_topics(bootstrap: Cluster, topics: list[str], timeout_s: float = 60) -> None:
    """Delete ``topics`` and wait until the cluster no longer lists them."""
    if not topics:
        return
    admin = admin_client(bootstrap)
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        try:
            future.result(60)
        except KafkaException as exc:
            if exc.args[0].name() != "UNKNOWN_TOPIC_OR_PART":
                raise
    wanted = set(topics)
    wait_for(lambda: not wanted & set(admin.list_topics(timeout=30).topics), timeout_s, "topics deleted", 0.2)


class Offsets:
    """End offsets of one cluster's partitions (``AdminClient.list_offsets``).

    librdkafka clients remember a topic they were asked about before it existed as
    unknown and may keep failing after it was created (seen with both a consumer's
    ``get_watermark_offsets`` and ``list_offsets``), so a failed question replaces
    the client: the next one starts with fresh metadata.
    """

    def __init__(self, bootstrap: Cluster) -> None:
        self.bootstrap = bootstrap
        self.admin = admin_client(bootstrap)

    def end(self, topic: str, partitions: int) -> list[int] | None:
        """Per partition high watermark, or None while the topic does not exist (yet)."""
        found = self.ends([(topic, p) for p in range(partitions)])
        return None if found is None else [max(found[(topic, p)], 0) for p in range(partitions)]

    def ends(self, tps: list[tuple[str, int]], isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
             timeout_s: float = 10) -> dict[tuple[str, int], int] | None:
        """Each partition's end at ``isolation`` (read_committed: the last stable offset); None when not answered."""
        wanted = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
        try:
            futures = self.admin.list_offsets(wanted, isolation_level=isolation, request_timeout=timeout_s)
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
        except KafkaException:
            self.admin = admin_client(self.bootstrap)
            return None

# A group coordinator that is moving or still loading its offsets (a broker just started): ask again.
_COORDINATOR_BUSY = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                               KafkaError.COORDINATOR_NOT_AVAILABLE})


def committed(bootstrap: Cluster, group: str, topic: str, partitions: int,
              settle_s: float = 30.0) -> dict[int, int]:
    """The offsets ``group`` committed per partition (negative: none); a busy coordinator is asked again."""
    deadline = time.monotonic() + settle_s
    consumer = Consumer(client_config(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        while True:
            try:
                tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
                return {tp.partition: tp.offset for tp in tps}
            except KafkaException as exc:
                if exc.args[0].code() not in _COORDINATOR_BUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def librdkafka_path() -> str:
    """The librdkafka confluent-kafka runs with: the copy its wheel bundles, else the system's."""
    bundled = sorted((Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs")
                     .glob("librdkafka*.so*"))
    return str(bundled[0]) if bundled else "librdkafka.so.1"


def end_offsets(bootstrap: Cluster, topic: str, partitions: int) -> dict[int, int] | None:
    """High watermark per partition; None while the topic is not (yet) there or the cluster is away."""
    ends = Offsets(bootstrap).end(topic, partitions)
    return None if ends is None else dict(enumerate(ends))


def caught_up(services: Mapping[str, Cluster], topic: str, partitions: int, mirror: str | None = None,
              source_ends: Mapping[int, int] | None = None, exact: bool = False) -> bool:
    """The destination's end offsets of ``mirror`` (default ``topic``) at (``exact``: equal to) or past the
    source's on every partition (``source_ends``: the source's, read earlier); False while a side cannot say."""
    source = source_ends if source_ends is not None else end_offsets(services["source"], topic, partitions)
    destination = end_offsets(services["destination"], mirror or topic, partitions)
    if source is None or destination is None:
        return False
    return all((destination[p] == n) if exact else (destination[p] >= n) for p, n in source.items())


def stalled_ends(services: Mapping[str, Cluster], topic: str, stalled: list[int]) -> str:
    """Both sides' end offsets of the partitions a run found stalled, for its diagnosis.

    The source's end tells a replicator that stopped fetching (the source grew, the
    destination did not) from a load producer that stopped producing (neither grew).
    """
    if not stalled:
        return "no partition stalled"
    count = max(stalled) + 1
    ends = {side: end_offsets(services[side], topic, count) for side in ("source", "destination")}
    parts = []
    for p in stalled:
        source, destination = ((ends[side] or {}).get(p, "unknown") for side in ("source", "destination"))
        parts.append(f"{p}: source end {source}, destination end {destination}")
    return "end offsets " + "; ".join(parts)
