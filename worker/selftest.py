"""Prove the C loop against the installed confluent-kafka at start: every field worker/_native.c reads, on real records.

worker/_native.c reads confluent-kafka's ``Message`` and ``Handle`` structs and hands its
delivery report a state laid out like its private ``Producer_msgstate``. Instead of a list of
releases whose layouts someone reviewed, every worker proves them for the binding it has, before
it copies a record with the C loop (:func:`worker.native.load`):

1. ``init()``: the ``Message`` layout against a ``Message`` built from Python (topic, key, value,
   partition, offset, timestamp and its type), and librdkafka's functions resolved through
   confluent-kafka's own extension module.
2. ``probe()`` on a record consumed with a key, a value, a header and a CreateTime timestamp:
   every pointer field is the very object the ``Message``'s accessor returns, ``c_headers`` holds
   the header (read back through librdkafka), and once ``headers()`` converted them, the
   ``headers`` field is that list and ``c_headers`` is cleared.
3. ``probe()`` on a consumed error event (partition EOF): the ``error`` field is ``error()``'s object,
   and ``mirror()`` leaves such an event to Python.
4. ``is_producer()``: the ``Handle``'s ``rk`` is a producer whose opaque is the ``Handle`` and
   whose name is the client id; another id is refused.
5. ``mirror()``: the record copied by the C loop to a second topic; confluent-kafka's delivery
   report calls the run's callback exactly once, without an error (the ``Producer_msgstate``
   layout); the copy, consumed back, has the key, value, timestamp, the header, and a provenance
   stamp that decodes to the source offset and partition.

It runs on librdkafka's in-process mock cluster (``rd_kafka_mock_*``, part of the librdkafka
confluent-kafka bundles: loopback sockets inside the process, no broker needed), in a child
process (:func:`run`): a layout that changed makes C code read the wrong memory, which may
crash; the child's crash is a refusal naming its signal, never the worker's death.
``python -m ureplicator.worker.selftest`` runs the checks and prints one JSON line.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

SOURCE = "selftest.source"
COPY = "selftest.copy"
HEADER = "h"
HEADER_VALUE = b"header-value"
KEY = b"key"
VALUE = b"value"
TIMESTAMP_MS = 1_700_000_000_123
CLIENT_ID = "ureplicator-selftest"
ALIAS = b"selftest"
TIMEOUT_S = 60.0  # the child's budget: well under a second on an idle machine, far more on a loaded one
MODULE_ENV = "UREPLICATOR_NATIVE_MODULE"  # worker.native's: the build the child must prove


class Refused(Exception):
    """A check failed: ``field`` names what the C code would read wrong."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass
class Outcome:
    """What the child said: passed, or the field that failed and why."""

    ok: bool
    reason: str = ""
    field: str = ""
    checks: list[str] = dataclasses.field(default_factory=list)
    elapsed_s: float = 0.0


# --- pure comparisons (unit-tested with wrong observations) ---------------------------------------

PROBE_FIELDS = ("topic", "value", "key", "headers", "has_c_headers", "c_header", "error", "partition", "offset",
                "timestamp", "tstype")


def compare(what: str, observed: tuple[Any, ...], expected: dict[str, Any], same: frozenset[str]) -> None:
    """Raise :class:`Refused` naming the first field of ``observed`` (a ``probe()`` tuple) that differs.

    Fields in ``same`` must be the identical object (the C code reads the pointer the accessor
    returns); the others must be equal.
    """
    if len(observed) != len(PROBE_FIELDS):
        raise Refused(f"{what}.probe", f"returned {len(observed)} fields, expected {len(PROBE_FIELDS)}")
    got = dict(zip(PROBE_FIELDS, observed, strict=True))
    for name, want in expected.items():
        value = got[name]
        if name in same:
            if value is not want:
                raise Refused(f"{what}.{name}", f"the C loop reads {_show(value)}, the Message holds {_show(want)}")
        elif value != want:
            raise Refused(f"{what}.{name}", f"the C loop reads {_show(value)}, expected {_show(want)}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def outcome_of(returncode: int, stdout: str, stderr: str) -> Outcome:
    """The child's verdict from its exit and its last JSON line; a crash is a refusal naming the signal."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return Outcome(False, f"the C loop's self-test crashed ({name}): confluent-kafka's structs are not laid out "
                              "as worker/_native.c reads them", field="crash")
    for line in reversed(stdout.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "ok" in doc:
            return Outcome(bool(doc["ok"]), str(doc.get("reason", "")), str(doc.get("field", "")),
                           list(doc.get("checks", [])), float(doc.get("elapsed_s", 0.0)))
    tail = (stderr.strip().splitlines() or ["no output"])[-1]
    return Outcome(False, f"the C loop's self-test exited {returncode} without a verdict: {tail}", field="exit")


# --- the child ------------------------------------------------------------------------------------


class _MockCluster:
    """librdkafka's mock cluster with one broker, driven through the librdkafka confluent-kafka loaded."""

    def __init__(self, extension: str, topics: tuple[str, ...]) -> None:
        lib = self._lib = ctypes.CDLL(extension)  # dlsym through cimpl searches the librdkafka it links
        lib.rd_kafka_conf_new.restype = ctypes.c_void_p
        lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_size_t]
        lib.rd_kafka_new.restype = ctypes.c_void_p
        lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
        lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(conf, b"log_level", b"0", errstr, len(errstr))  # it never connects: no warning
        self._host = lib.rd_kafka_new(0, conf, errstr, len(errstr))
        if not self._host:
            raise Refused("mock_cluster", errstr.value.decode(errors="replace"))
        self._cluster = lib.rd_kafka_mock_cluster_new(self._host, 1)
        if not self._cluster:
            raise Refused("mock_cluster", "librdkafka could not start its mock cluster")
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()
        for topic in topics:
            lib.rd_kafka_mock_topic_create(self._cluster, topic.encode(), 1, 1)


def _poll(consumer: Any, topic: str, want_eof: bool, deadline: float) -> tuple[Any, Any]:
    """The first record of ``topic`` and, when ``want_eof``, the partition-EOF event after it."""
    record = eof = None
    while time.monotonic() < deadline and (record is None or (want_eof and eof is None)):
        msg = consumer.poll(0.2)
        if msg is None or msg.topic() != topic:
            continue
        if msg.error() is None:
            record = record or msg
        elif record is not None:
            eof = msg  # the end of the partition, read after the record
    if record is None:
        raise Refused("mock_cluster", f"no record read back from {topic} in time")
    if want_eof and eof is None:
        raise Refused("mock_cluster", f"no partition-EOF event from {topic} in time")
    return record, eof


class _Acks:
    """Stands in for worker.acks.PartitionAcks: records the runs the C loop books and reports."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, int]] = []
        self.reports: list[tuple[int, int, int, int, Any, Any]] = []

    def sent_run(self, through: int, count: int, nbytes: int) -> None:
        self.sent.append((through, count, nbytes))

    def report_run(self, first: int, through: int, count: int, nbytes: int, err: Any, msg: Any) -> None:
        self.reports.append((first, through, count, nbytes, err, msg))


def prove() -> list[str]:
    """Run every check in this process; the names of the checks passed, or :class:`Refused`."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from ureplicator.common import provenance
    from ureplicator.worker import native

    passed: list[str] = []
    try:
        module = native.initialised()
    except native.Unavailable as exc:
        raise Refused("init", str(exc)) from None
    passed.append("init: Message layout from a Message built in Python; librdkafka resolved")
    deadline = time.monotonic() + TIMEOUT_S / 2
    cluster = _MockCluster(native.extension_path(), (SOURCE, COPY))
    common = {"bootstrap.servers": cluster.bootstrap, "log_level": 0}
    producer = Producer({**common, "client.id": CLIENT_ID, "linger.ms": 0})
    if not module.is_producer(producer, CLIENT_ID):
        raise Refused("Handle.rk", "is_producer() does not find the producer named after its client id")
    if module.is_producer(producer, CLIENT_ID[:-1]) or module.is_producer(object(), CLIENT_ID):
        raise Refused("Handle.rk", "is_producer() accepts a name or an object it must refuse")
    passed.append("Handle.rk: a producer whose opaque is its Handle, named after the client id")

    producer.produce(SOURCE, key=KEY, value=VALUE, partition=0, timestamp=TIMESTAMP_MS,
                     headers=[(HEADER, HEADER_VALUE)])
    if producer.flush(TIMEOUT_S / 4):
        raise Refused("mock_cluster", "the source record was not acknowledged in time")
    consumer = Consumer({**common, "group.id": CLIENT_ID, "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.wait.max.ms": 10})
    try:
        consumer.assign([TopicPartition(SOURCE, 0, 0), TopicPartition(COPY, 0, 0)])
        record, eof = _poll(consumer, SOURCE, True, deadline)
        tstype, ts = record.timestamp()
        # Before anything calls headers(): the consumed headers are still librdkafka's.
        compare("Message", module.probe(record, HEADER),
                {"topic": record.topic(), "value": record.value(), "key": record.key(), "headers": None,
                 "has_c_headers": 1, "c_header": HEADER_VALUE, "error": None, "partition": record.partition(),
                 "offset": record.offset(), "timestamp": ts, "tstype": tstype},
                frozenset({"topic", "value", "key", "error"}))
        if (record.key(), record.value(), ts, tstype) != (KEY, VALUE, TIMESTAMP_MS, 1):
            raise Refused("mock_cluster", "the source record did not read back as produced")
        passed.append("Message: topic, value, key, c_headers, error, partition, offset, timestamp, tstype")
        compare("Message(error)", module.probe(eof, HEADER), {"error": eof.error()}, frozenset({"error"}))
        if module.mirror(producer, [eof], 0, {(SOURCE, 0): (COPY, None, SOURCE, 0)}, ALIAS)[0] != 0:
            raise Refused("Message.error", "mirror() copied an error event instead of leaving it to Python")
        passed.append("Message.error: the error object; mirror() leaves error events to Python")

        acks = _Acks()
        result = module.mirror(producer, [record], 0, {(SOURCE, 0): (COPY, acks, SOURCE, 0)}, ALIAS)
        size = len(KEY) + len(VALUE)
        if tuple(result) != (1, 0, 1, size, record.offset(), 0, 0) or acks.sent != [(record.offset(), 1, size)]:
            raise Refused("mirror", f"mirror() returned {result} and booked {acks.sent}")
        if producer.flush(TIMEOUT_S / 4):
            raise Refused("Producer_msgstate", "the copy was not acknowledged in time")
        if len(acks.reports) != 1:
            raise Refused("Producer_msgstate", f"the run's delivery callback ran {len(acks.reports)} times, not once")
        first, through, count, nbytes, err, delivered = acks.reports[0]
        if (first, through, count, nbytes) != (record.offset(), record.offset(), 1, size) or err is not None:
            raise Refused("Producer_msgstate", f"the run's callback got {acks.reports[0][:5]}")
        if (delivered.topic(), delivered.partition()) != (COPY, 0):
            raise Refused("Producer_msgstate", f"the report is for {delivered.topic()}[{delivered.partition()}]")
        passed.append("Producer_msgstate: confluent-kafka's delivery report calls the run's callback once")

        copy, _ = _poll(consumer, COPY, False, deadline)
        headers = dict(copy.headers() or [])
        stamp = provenance.decode(headers.get(provenance.HEADER))
        if (copy.key(), copy.value(), copy.timestamp()) != (KEY, VALUE, (1, TIMESTAMP_MS)):
            raise Refused("mirror", f"the copy reads back as {copy.key()!r}, {copy.value()!r}, {copy.timestamp()}")
        if headers.get(HEADER) != HEADER_VALUE or (stamp.source_offset, stamp.source_partition) != (
                record.offset(), 0) or stamp.origin != ALIAS.decode():
            raise Refused("mirror", f"the copy's headers are {headers}")
        passed.append("mirror: key, value, timestamp, headers and provenance stamp of the copy")

        converted = record.headers()
        compare("Message(headers)", module.probe(record, HEADER),
                {"headers": converted, "has_c_headers": 0, "c_header": None}, frozenset({"headers"}))
        passed.append("Message.headers: the list headers() made, c_headers cleared")
    finally:
        consumer.close()
    return passed


def main() -> int:
    started = time.monotonic()
    try:
        checks = prove()
    except Refused as exc:
        print(json.dumps({"ok": False, "field": exc.field, "reason": str(exc)}))
        return 1
    print(json.dumps({"ok": True, "checks": checks, "elapsed_s": round(time.monotonic() - started, 3)}))
    return 0


# --- the parent -----------------------------------------------------------------------------------


def run(module_file: str, command: list[str] | None = None, timeout_s: float = TIMEOUT_S) -> Outcome:
    """The checks in a child process proving ``module_file`` (a build of worker/_native.c); never raises."""
    argv = command or [sys.executable, "-m", "ureplicator.worker.selftest"]
    env = {**os.environ, MODULE_ENV: module_file}
    started = time.monotonic()
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(False, f"the C loop's self-test did not finish in {timeout_s:.0f} s", field="timeout")
    except OSError as exc:
        return Outcome(False, f"the C loop's self-test could not start: {exc}", field="exit")
    outcome = outcome_of(done.returncode, done.stdout, done.stderr)
    outcome.elapsed_s = round(time.monotonic() - started, 3)
    return outcome


if __name__ == "__main__":
    sys.exit(main())
