"""Bench processes, load and measurement: pipelines, the load producer, the arrivals probe, exact log comparison.

Stack and child processes come from ``devtools.harness`` (shared with tests/support);
docs/benchmarks.md ("Methods") describes what each piece measures.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import struct
import sys
import threading
import time
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    Message,
    TopicPartition,
)

from bench.common import load_average
from devtools.harness import REPO, Offsets, Proc, Processes, end_offsets, say, wait_for
from devtools.harness import HarnessError as BenchError
from devtools.ports import free_port
from ureplicator.common import provenance
from ureplicator.common.errors import UReplicatorError
from ureplicator.controller.client import request

KEY = struct.Struct(">HQ")  # load records: run tag, sequence number within the flow
UREP = struct.Struct(">Bqi")  # provenance header: version, source offset, source partition
TAG_SHIFT = 40
TP = tuple[str, int]
LOAD_STALL_S = 45.0  # a load producer that reported nothing this long while holding records is replaced
READER_STALL_S = 10.0  # the destination reader fetched nothing this long: check it is not stuck (#5153)
# A measuring consumer: a fetch answered within 5 ms of a record, back soon after a broker restart.
MEASURING: dict[str, Any] = {"enable.auto.commit": False, "enable.partition.eof": False, "fetch.wait.max.ms": 5,
                             "fetch.min.bytes": 1, "fetch.error.backoff.ms": 50, "reconnect.backoff.max.ms": 500}


def install_signal_handlers() -> None:
    """SIGTERM behaves like Ctrl-C, so ``finally`` blocks stop every process we started."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def load_line() -> str:
    return " ".join(f"{v:.2f}" for v in load_average())


# ----------------------------------------------------------------------------- processes


class Pipeline:
    """Controllers and workers of one pipeline, as real ``ureplicator`` processes."""

    def __init__(self, services: dict[str, str], processes: Processes, name: str,
                 overrides: dict[str, dict[str, Any]] | None = None) -> None:
        self.services, self.processes, self.name = services, processes, name
        self.overrides = overrides or {}
        self.controllers: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}
        self.workers: dict[str, Proc] = {}

    def config_doc(self, rest_port: int, worker_id: str | None = None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "pipeline": self.name,
            "zookeeper": {"connect": self.services["zookeeper"]},
            "source": {"alias": "src", "bootstrap_servers": self.services["source"]},
            "destination": {"alias": "dst", "bootstrap_servers": self.services["destination"]},
            "controller": {"rest_host": "127.0.0.1", "rest_port": rest_port},
            "worker": {},
        }
        for section, values in self.overrides.items():
            doc.setdefault(section, {}).update(values)
        if worker_id is not None:
            doc["worker"]["id"] = worker_id
        return doc

    @property
    def config_path(self) -> Path:
        """The first controller's YAML (what the verifier is given)."""
        return self.processes.workdir / f"{next(iter(self.ports))}.yaml"

    def url(self, label: str) -> str:
        return f"http://127.0.0.1:{self.ports[label]}"

    def _start(self, role: str, label: str, port: int, ready: Callable[[], bool], timeout_s: float,
               worker_id: str | None = None) -> Proc:
        """Spawn ``ureplicator <role>`` with its generated YAML; wait until ``ready()`` (it must not exit first)."""
        config = self.processes.workdir / f"{label}.yaml"
        config.write_text(yaml.safe_dump(self.config_doc(port, worker_id), sort_keys=False))
        proc = self.processes.spawn(label, [sys.executable, "-m", "ureplicator", role, "--config", str(config)])
        (self.workers if worker_id else self.controllers)[label] = proc

        def check() -> bool:
            if not proc.alive():
                raise BenchError(f"{role} {label} exited:\n{proc.tail()}")
            return ready()

        wait_for(check, timeout_s, f"{role} {label} {'healthy' if role == 'controller' else 'registered'}", 0.3)
        return proc

    def _health(self, label: str) -> Any:
        """The body of the controller's ``/health`` when it answers 200, else None."""
        with contextlib.suppress(UReplicatorError, OSError):
            status, body = request(f"{self.url(label)}/health", timeout_s=2)
            return body if status == 200 else None
        return None

    def start_controller(self, label: str, timeout_s: float = 60) -> Proc:
        self.ports[label] = port = self.ports.get(label) or free_port()
        return self._start("controller", label, port, lambda: self._health(label) is not None, timeout_s)

    def start_worker(self, worker_id: str, timeout_s: float = 60) -> Proc:
        def registered() -> bool:
            status, body = self.api("GET", "/instances")
            rows = body.get("instances", []) if status == 200 and isinstance(body, dict) else []
            return any(r.get("worker") == worker_id and r.get("live") and r.get("generation") is not None
                       for r in rows)

        return self._start("worker", worker_id, next(iter(self.ports.values())), registered, timeout_s, worker_id)

    def api(self, method: str, path: str, body: Any = None, timeout_s: float = 10) -> tuple[int, Any]:
        """Ask the first live controller that answers; (0, reason) when none does."""
        last = "no controller running"
        for label, proc in self.controllers.items():
            if proc.alive():
                try:
                    return request(f"{self.url(label)}{path}", method, body, timeout_s=timeout_s)
                except (UReplicatorError, OSError) as exc:
                    last = str(exc)
        return 0, last

    def leader(self) -> str | None:
        """Label of the controller that says it leads."""
        for label, proc in self.controllers.items():
            if proc.alive() and isinstance(body := self._health(label), dict) and body.get("is_leader"):
                return label
        return None

    def add_topic(self, topic: str, partitions: int, destination: str | None = None) -> None:
        body = {"topic": topic, "numPartitions": partitions, **({"destination": destination} if destination else {})}
        status, body = self.api("POST", "/topics", body, timeout_s=60)
        if status != 201:
            raise BenchError(f"POST /topics {topic} answered {status}: {body}")

    def owners(self, topic: str) -> dict[int, str | None]:
        """Per partition the worker whose status says it mirrors it (``applied_by``)."""
        status, body = self.api("GET", f"/topics/{topic}")
        if status != 200 or not isinstance(body, dict):
            return {}
        return {row["partition"]: row["applied_by"] for row in body.get("assignment", [])}

    def settled(self, topics: dict[str, int]) -> bool:
        """Every partition applied by some worker, written == applied, nothing withheld."""
        status, body = self.api("GET", "/validation")
        if status != 200 or not body.get("ok") or body.get("withheld"):
            return False
        return all(len(owners := self.owners(topic)) == partitions and None not in owners.values()
                   for topic, partitions in topics.items())

    def stop_all(self) -> None:
        """Workers first (they commit), then controllers."""
        for proc in [*self.workers.values(), *self.controllers.values()]:
            if proc.alive():
                with contextlib.suppress(Exception):
                    proc.terminate(40)


class CheckoutProcesses(Processes):
    """Processes whose ``python -m ureplicator`` runs from another checkout (``code``), with ``python`` instead of
    this interpreter when given."""

    def __init__(self, workdir: Path, code: Path, python: str = sys.executable) -> None:
        super().__init__(workdir)
        self.code, self.python = code, python

    def spawn(self, name: str, cmd: list[str], cwd: Path = REPO) -> Proc:
        if cmd[0] == sys.executable:
            cmd = [self.python, *cmd[1:]]
        return super().spawn(name, cmd, self.code if cwd == REPO else cwd)


_Child = TypeVar("_Child", bound="Child")


class Child:
    """A spawned process (its own interpreter, GIL and librdkafka) running ``target(*args, counters, stop, out)``:
    it publishes ``counters``, the parent sets ``stop``, ``out`` carries what it hands back."""

    def __init__(self, target: Callable[..., None], name: str, args: tuple[Any, ...], counters: int) -> None:
        ctx = mp.get_context("spawn")
        self.counters = ctx.Array("q", counters, lock=False)
        self._stop, self._out = ctx.Event(), ctx.Queue()
        self._proc = ctx.Process(target=target, name=name, daemon=True,
                                 args=(*args, self.counters, self._stop, self._out))

    def start(self: _Child) -> _Child:
        self._proc.start()
        return self

    def alive(self) -> bool:
        return self._proc.is_alive()

    def receive(self, timeout_s: float, what: str) -> Any:
        """The next thing the child handed back; BenchError when nothing came within ``timeout_s``."""
        try:
            return self._out.get(timeout=timeout_s)
        except Exception as exc:  # queue.Empty, EOFError when the child died
            raise BenchError(f"{what} did not report within {timeout_s:.0f}s ({exc!r})") from None

    def kill(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)


# ----------------------------------------------------------------------------- load


@dataclass(frozen=True)
class Flow:
    """Records for one source topic: ``preload`` as fast as possible, then ``rate`` per second."""

    topic: str
    partitions: int
    rate: float
    preload: int = 0


@dataclass
class LoadResult:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    elapsed_s: float = 0.0
    first_error: str | None = None
    producer_replacements: int = 0  # the load's own producer went silent after a broker restart
    acked_keys: dict[TP, array] | None = None  # per (topic, partition), sequence numbers the source acked


def _load_main(bootstrap: str, flows: list[Flow], tag: int, duration_s: float | None, value_bytes: int,
               track_acked: bool, counters: Any, stop: Any, out: Any) -> None:
    """Child process body of :class:`Load`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    from confluent_kafka import Producer

    result = LoadResult(acked_keys={} if track_acked else None)
    acked_keys = result.acked_keys

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            result.failed += 1
            result.first_error = result.first_error or str(err)
        else:
            result.acked += 1
            if acked_keys is not None:
                acked_keys.setdefault((msg.topic(), msg.partition()), array("q")).append(KEY.unpack(msg.key())[1])

    config = {
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 2,
        "compression.type": "none", "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
        "message.timeout.ms": 600_000,  # ride out a restarting source broker
        "reconnect.backoff.max.ms": 500,  # back soon after a restart: measure the mirror, not our backoff
        "topic.metadata.refresh.interval.ms": 5000,  # not leaderless for minutes after a restart (common.kafka)
        "on_delivery": on_delivery,
    }
    producer = Producer(config)
    payloads = [os.urandom(value_bytes) for _ in range(64)]
    sent = [0] * len(flows)
    start = time.monotonic()
    last_publish = 0.0
    # librdkafka's idempotent producer can go silent after the source broker restarts (records queued, no
    # report, no error). A producer silent for LOAD_STALL_S while holding records is replaced: the purged
    # records fail (never acknowledged, so no check expects them).
    reports_seen, reports_moved_at = 0, start
    try:
        while not stop.is_set():
            now = time.monotonic()
            reports = result.acked + result.failed
            if reports != reports_seen or not len(producer):
                reports_seen, reports_moved_at = reports, now
            elif now - reports_moved_at >= LOAD_STALL_S:
                producer.purge(in_queue=True, in_flight=True, blocking=False)
                producer.poll(0)  # the purged records' reports: failed
                producer = Producer(config)
                result.producer_replacements += 1
                reports_seen, reports_moved_at = result.acked + result.failed, now
            elapsed = now - start if duration_s is None else min(now - start, duration_s)
            progressed = False
            for i, flow in enumerate(flows):
                # Bounded per turn, so one flow's preload does not starve the others' schedule.
                limit = min(flow.preload + int(elapsed * flow.rate), sent[i] + 5000)
                while sent[i] < limit:
                    seq = sent[i]
                    try:
                        producer.produce(flow.topic, key=KEY.pack(tag, seq), value=payloads[seq & 63],
                                         partition=seq % flow.partitions, timestamp=int(time.time() * 1000))
                    except BufferError:
                        producer.poll(0.01)
                        break
                    sent[i] += 1
                    progressed = True
            producer.poll(0)
            if now - last_publish >= 0.2:
                last_publish = now
                counters[0], counters[1], counters[2] = sum(sent), result.acked, result.failed
            if duration_s is not None and elapsed >= duration_s and all(
                    s >= f.preload + int(duration_s * f.rate) for s, f in zip(sent, flows, strict=True)):
                break
            if not progressed:
                time.sleep(0.0005)
        result.elapsed_s = time.monotonic() - start
        producer.flush(float(config["message.timeout.ms"]) / 1000 + 10)
    finally:
        result.sent = sum(sent)
        counters[0], counters[1], counters[2] = result.sent, result.acked, result.failed
        out.put(result)


class Load(Child):
    """A producer process writing ``flows`` at fixed rates until ``duration_s`` or :meth:`stop`."""

    def __init__(self, bootstrap: str, flows: list[Flow], tag: int = 1, duration_s: float | None = None,
                 value_bytes: int = 100, track_acked: bool = False) -> None:
        # counters: sent, acked, failed (published every 0.2 s)
        super().__init__(_load_main, "bench-load", (bootstrap, flows, tag, duration_s, value_bytes, track_acked), 3)
        self.result: LoadResult | None = None

    @property
    def sent(self) -> int:
        return int(self.counters[0])

    @property
    def acked(self) -> int:
        return int(self.counters[1])

    def wait(self, timeout_s: float) -> LoadResult:
        """Collect the result once the producer finished (its duration ran out or it was stopped)."""
        if self.result is None:
            try:
                self.result = self.receive(timeout_s, "the load producer")
            except BenchError:
                self.kill()
                raise
            self._proc.join(30)
        return self.result

    def stop(self, timeout_s: float = 660) -> LoadResult:
        self._stop.set()
        return self.wait(timeout_s)


# ----------------------------------------------------------------------------- arrivals


def _urep(msg: Message) -> tuple[int, int, int] | None:
    """The record's provenance header (version, source offset, source partition); None without one."""
    value = next((v for name, v in reversed(msg.headers() or ()) if name == provenance.HEADER), None)
    return None if value is None else UREP.unpack_from(value)


class PartitionLog:
    """What the destination consumer saw on one partition, in arrival order."""

    __slots__ = ("idents", "arrivals", "latency_ms")

    def __init__(self) -> None:
        self.idents = array("q")  # source offset (urep) or tag<<40|sequence (key)
        self.arrivals = array("d")  # epoch seconds when consume() returned the record
        self.latency_ms = array("d")  # arrival - CreateTime


class Arrivals:
    """Destination consumer recording per partition each record's identity, arrival time and latency;
    ``ident="urep"``: the source offset in its provenance header, ``"key"``: the load key (MirrorMaker 2)."""

    def __init__(self, bootstrap: str, ident: str = "urep", isolation: str = "read_uncommitted") -> None:
        if ident not in ("urep", "key"):
            raise ValueError(ident)
        self.ident = ident
        self._config = {
            **MEASURING, "bootstrap.servers": bootstrap, "group.id": f"bench-arrivals-{os.getpid()}-{time.time_ns()}",
            "isolation.level": isolation,  # read_committed: aborted copies don't count
            # Not left leaderless for minutes after a destination restart.
            "topic.metadata.refresh.interval.ms": 5000,
        }
        self._bootstrap = bootstrap
        self._isolation = (IsolationLevel.READ_COMMITTED if isolation == "read_committed"
                           else IsolationLevel.READ_UNCOMMITTED)
        self._offsets: Offsets | None = None  # the stall check's own client (_ends)
        self.consumer = Consumer(self._config)
        self.logs: dict[TP, PartitionLog] = {}
        self.replacements = 0  # the reader's own consumer replaced after it stopped fetching (_watch)
        self.bad_headers = 0  # urep missing, unreadable, or naming another partition
        self._next: dict[TP, int] = {}  # per partition, the offset after the last record read
        self._read_at: dict[TP, float] = {}  # per partition, when (monotonic) it was last read or checked
        self._pending: list[TopicPartition] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arrivals", daemon=True)

    def add(self, topic: str, partitions: int) -> None:
        """Record ``topic`` from its first record on (safe to call while running)."""
        with self._lock:
            for p in range(partitions):
                self.logs.setdefault((topic, p), PartitionLog())
            self._pending.extend(TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions))

    def start(self) -> Arrivals:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop recording (idempotent; safe when never started)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(30)
        with contextlib.suppress(Exception):
            self.consumer.close()

    def last_arrival(self, tp: TP) -> float:
        log = self.logs.get(tp)
        return log.arrivals[-1] if log is not None and log.arrivals else 0.0

    def _run(self) -> None:
        checked = time.monotonic()
        while not self._stop.is_set():
            if self._pending:
                with self._lock:
                    pending, self._pending = self._pending, []
                self.consumer.incremental_assign(pending)
            messages = self.consumer.consume(2000, 0.05)
            mono = time.monotonic()
            now = time.time()
            for msg in messages:
                if msg.error() is not None:
                    continue
                partition = msg.partition()
                tp = (msg.topic(), partition)
                self._next[tp], self._read_at[tp] = msg.offset() + 1, mono
                if self.ident == "key":
                    tag, seq = KEY.unpack(msg.key())
                    ident = (tag << TAG_SHIFT) | seq
                elif (urep := _urep(msg)) and urep[0] == provenance.VERSION and urep[2] == partition:
                    ident = urep[1]
                else:
                    ident = -1
                    self.bad_headers += 1
                log = self.logs[tp]
                log.idents.append(ident)
                log.arrivals.append(now)
                log.latency_ms.append(now * 1000.0 - msg.timestamp()[1])
            # After the batch is recorded: a replacement consumer starts after its last records. Checked
            # before, it started in front of them and read them again, counted as duplicates (up to a
            # whole batch: 2,000 in one exactly-once soak step, 0 in the destination's log).
            if mono - checked >= READER_STALL_S:
                checked = mono
                self._watch(mono)

    def _watch(self, now: float) -> None:
        """A new consumer, at the offsets after the last records read, when a partition's end is past what was
        read (beyond a trailing transaction marker) and nothing came for :data:`READER_STALL_S`: librdkafka's
        ``assign()`` consumer can stop fetching after its broker restarts (#5153). Its gaps include the stall."""
        with self._lock:
            assigned = list(self.logs)
        quiet = [tp for tp in assigned if now - self._read_at.setdefault(tp, now) >= READER_STALL_S]
        ends = self._ends(quiet) if quiet else {}
        if ends is None:
            return  # the destination does not answer: nothing to decide yet
        behind = []
        for tp in quiet:
            if ends.get(tp, -1) > self._next.get(tp, 0) + 1:
                behind.append(tp)
            else:
                self._read_at[tp] = now  # idle, not stuck: check it again a stall period from now
        if not behind:
            return
        old, self.consumer = self.consumer, Consumer(self._config)
        self.replacements += 1
        threading.Thread(target=old.close, name="arrivals-close", daemon=True).start()
        self.consumer.assign([TopicPartition(t, p, self._next.get((t, p), OFFSET_BEGINNING)) for t, p in assigned])
        say(f"the destination reader fetched nothing for {READER_STALL_S:.0f} s with {len(behind)} "
            f"partition(s) behind their end; replaced its consumer ({self.replacements} so far)")


    def next_offset(self, tp: TP) -> int:
        """The offset after the last record read from ``tp`` (0: none yet)."""
        return self._next.get(tp, 0)

    def readable_ends(self, tps: list[TP]) -> dict[TP, int]:
        """:meth:`_ends`, for a diagnosis: empty when the destination did not answer."""
        return self._ends(tps) or {}

    def _ends(self, tps: list[TP]) -> dict[TP, int] | None:
        """The end of each partition as this reader can read it (read_committed: the last stable offset, so an
        open transaction is not taken for a stall), asked through a client of its own; None when not answered.

        Not through the reader's consumer: the stuck one's own questions failed with it, so the check
        returned before deciding, every time (an exactly-once soak step waited its 180 s on a reader that
        had stopped after a destination restart while the workers copied on).
        """
        if self._offsets is None:
            self._offsets = Offsets(self._bootstrap)
        return self._offsets.ends(tps, self._isolation, timeout_s=5)


def longest_gap(arrivals: array, t0: float, t1: float, before_s: float = 1.0) -> tuple[float, float]:
    """Longest time without an arrival in ``[t0 - before_s, t1]`` and when that gap ended; the last arrival
    before the window opens the first gap, ``t1`` closes the last one."""
    lo, hi = bisect_left(arrivals, t0 - before_s), bisect_right(arrivals, t1)
    points = list(arrivals[max(0, lo - 1):hi])
    if not points or points[0] > t0 - before_s:
        points.insert(0, t0 - before_s)
    points.append(t1)
    best, end = 0.0, t0
    for a, b in zip(points, points[1:], strict=False):
        if b - a > best:
            best, end = b - a, b
    return best, end


# ----------------------------------------------------------------------------- logs and comparison


@dataclass
class LogRead:
    """One partition of a topic read from its start to the end offset seen when reading began."""

    offsets: array = field(default_factory=lambda: array("q"))
    keys: array = field(default_factory=lambda: array("q"))  # tag<<40 | sequence
    urep: array = field(default_factory=lambda: array("q"))  # source offset from the header, -1 without


def read_log(bootstrap: str, topic: str, partitions: int, timeout_s: float = 300,
             isolation: str = "read_uncommitted") -> dict[int, LogRead]:
    """Every record of every partition (offsets, key identities, provenance offsets); ``read_committed`` skips
    aborted copies, and a partition ending in transaction markers ends when the position passes its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-reader-{time.time_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation, "fetch.max.bytes": 64 * 1024 * 1024})
    result = {p: LogRead() for p in range(partitions)}
    try:
        ends = {p: n for p, n in wait_for(lambda: end_offsets(bootstrap, topic, partitions), 30,
                                          f"end offsets of {topic}").items() if n > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        remaining = set(ends)
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise BenchError(f"reading {topic} timed out; partitions {sorted(remaining)} unfinished")
            for msg in consumer.consume(5000, 0.5):
                p, offset = msg.partition(), msg.offset()
                if msg.error() is not None:
                    # At the end (markers after the last record included): the partition is read.
                    if msg.error().code() == KafkaError._PARTITION_EOF and offset >= ends[p]:
                        remaining.discard(p)
                    continue
                if offset >= ends[p]:
                    continue
                log = result[p]
                log.offsets.append(offset)
                tag, seq = KEY.unpack(msg.key())
                log.keys.append((tag << TAG_SHIFT) | seq)
                log.urep.append(urep[1] if (urep := _urep(msg)) else -1)
                if offset >= ends[p] - 1:
                    remaining.discard(p)
        return result
    finally:
        consumer.close()


@dataclass
class Comparison:
    records: int = 0  # in the source log
    mirrored: int = 0  # distinct source records found on the destination
    destination_records: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    per_partition: dict[int, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "per_partition"} | {
            "per_partition": {str(p): v for p, v in self.per_partition.items()}}


def compare(source: dict[int, LogRead], destination: dict[int, LogRead], by: str = "urep") -> Comparison:
    """Source log vs destination per partition: by source offset (``urep``) or by load key (``key``)."""
    total = Comparison()
    for p, src in source.items():
        dst = destination.get(p, LogRead())
        want, seen = (src.offsets, dst.urep) if by == "urep" else (src.keys, dst.keys)
        want_set, seen_set = set(want), set(seen)
        first = list(dict.fromkeys(seen))
        row = {"records": len(want), "mirrored": len(want_set & seen_set), "lost": len(want_set - seen_set),
               "duplicated": len(seen) - len(seen_set),
               "reordered": sum(1 for a, b in zip(first, first[1:], strict=False) if b < a) if by == "urep" else 0}
        total.per_partition[p] = row
        total.destination_records += len(seen)
        for key, value in row.items():
            setattr(total, key, getattr(total, key) + value)
    return total
