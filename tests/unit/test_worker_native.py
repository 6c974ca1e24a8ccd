"""Choosing the worker's copy loop: the C loop only where it is built and its self-test passes here."""

from __future__ import annotations

import re
import sys

import confluent_kafka
import confluent_kafka.cimpl
import pytest
from confluent_kafka import Message, Producer
from structlog.testing import capture_logs

from tests.unit.fakes import FakeCommitClient, FakeConsumer, FakeProducer, FakeZooKeeper
from ureplicator.common import config as config_module
from ureplicator.common import provenance
from ureplicator.common.errors import ConfigError
from ureplicator.worker import mirror, native, selftest
from ureplicator.worker.clients import WorkerClients
from ureplicator.worker.mirror import MirrorWorker


def worker_with(loop: str) -> MirrorWorker:
    cfg = config_module.from_dict({
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
        "worker": {"id": "w1", "native_loop": loop},
    })
    consumer = FakeConsumer({})
    clients = WorkerClients(consumer=consumer, producer=FakeProducer(), zk=FakeZooKeeper(),
                            make_producer=FakeProducer, make_commit_client=lambda: FakeCommitClient(consumer),
                            commit_thread=False, handoff_thread=False)
    return MirrorWorker(cfg, "w1", clients=clients)


def test_make_install_built_the_c_loop_and_it_proves_itself_on_this_confluent_kafka():
    # `make install` compiles worker/_native.c; the self-test passes on the installed binding
    module = native.load()
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "client.id": "ureplicator-unit-w1"})
    # and a producer is driven only when librdkafka names its handle after the worker's client id
    assert module.is_producer(producer, "ureplicator-unit-w1")
    assert not module.is_producer(producer, "ureplicator-unit-w2")
    assert not module.is_producer(producer, "ureplicator-unit-w")  # a prefix is not the name
    assert not module.is_producer(object(), "ureplicator-unit-w1")


def test_the_self_test_runs_every_check_in_a_child_process_and_passes_here():
    verdict = selftest.run(str(native.initialised().__file__))
    assert verdict.ok, verdict.reason
    fields = [check.split(":")[0] for check in verdict.checks]
    assert fields == ["init", "Handle.rk", "Message", "Message.error", "Producer_msgstate", "mirror",
                      "Message.headers"]


def test_a_binding_whose_layout_differs_is_refused_with_the_field_named(monkeypatch):
    # What a changed struct layout reads: the C code's value field holding the key. The child is given
    # a probe() that answers so; the verdict names the field, and load() refuses with it.
    shifted = ("import sys; from ureplicator.worker import native, selftest; m = native.initialised(); "
               "probe = m.probe; m.probe = lambda msg, h: (lambda t: (t[0], t[2], t[2]) + t[3:])(probe(msg, h)); "
               "sys.exit(selftest.main())")
    verdict = selftest.run(str(native.initialised().__file__), command=[sys.executable, "-c", shifted])
    assert not verdict.ok
    assert verdict.field == "Message.value"
    assert "the C loop reads b'key'" in verdict.reason

    monkeypatch.setattr(native, "_verdicts", {})
    monkeypatch.setattr(selftest, "run", lambda module_file: verdict)
    with pytest.raises(native.Unavailable, match=r"self-test failed on Message.value \(confluent-kafka "):
        native.load()


def test_a_self_test_that_crashes_is_a_refusal_naming_the_signal_not_the_workers_death():
    crash = "import ctypes; ctypes.string_at(0)"  # what reading a moved pointer field does
    verdict = selftest.run("unused.so", command=[sys.executable, "-c", crash])
    assert (verdict.ok, verdict.field) == (False, "crash")
    # SIGSEGV; SIGABRT under `make sanitize`, whose AddressSanitizer aborts on the bad read
    assert re.search(r"self-test crashed \(SIG(SEGV|ABRT)\)", verdict.reason), verdict.reason
    silent = selftest.run("unused.so", command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    assert (silent.ok, silent.field) == (False, "exit")
    slow = selftest.run("unused.so", command=[sys.executable, "-c", "import time; time.sleep(5)"], timeout_s=0.5)
    assert (slow.ok, slow.field) == (False, "timeout")


def test_compare_names_the_first_field_the_c_code_reads_wrong():
    key, value = b"key", b"a value"
    good = ("t", value, key, None, 1, b"h", None, 0, 5, 10, 1)
    expected = {"topic": "t", "value": value, "key": key, "partition": 0, "offset": 5}
    selftest.compare("Message", good, expected, frozenset({"value", "key"}))
    with pytest.raises(selftest.Refused) as refused:
        selftest.compare("Message", good[:7] + (0, 6) + good[9:], expected, frozenset())
    assert refused.value.field == "Message.offset"
    # an equal but different object is not the field the accessor returns
    with pytest.raises(selftest.Refused, match="Message.value"):
        selftest.compare("Message", ("t", bytes(bytearray(value)), key) + good[3:], expected, frozenset({"value"}))
    with pytest.raises(selftest.Refused, match="returned 3 fields"):
        selftest.compare("Message", good[:3], expected, frozenset())


def test_librdkafka_is_resolved_through_confluent_kafkas_own_extension_module():
    # the file dlopen'ed with RTLD_NOLOAD is confluent-kafka's cimpl, not a search of /proc/self/maps
    # (where librdkafka++ would match too)
    assert native.extension_path() == confluent_kafka.cimpl.__file__
    module = native.load()
    with pytest.raises(RuntimeError, match="extension is not loaded"):
        module.init("/nonexistent/cimpl.so", Message, Producer, Message(**native._LAYOUT_SAMPLE),
                    provenance.HEADER.encode())
    native.initialised()


def test_the_layout_check_refuses_a_message_that_does_not_read_back():
    module = native.load()
    # A Message whose fields differ from the agreed sample: what a changed struct layout would read
    wrong = Message(**{**native._LAYOUT_SAMPLE, "partition": 8})
    with pytest.raises(RuntimeError, match="not laid out"):
        module.init(native.extension_path(), Message, Producer, wrong, provenance.HEADER.encode())
    # and the module stays unusable until a check passes (no half-initialised C loop)
    with pytest.raises(RuntimeError, match="not initialised"):
        module.mirror(Producer({"bootstrap.servers": "127.0.0.1:1"}), [], 0, {}, b"src")
    native.initialised()  # a passing check makes it usable again


def test_auto_falls_back_to_the_python_loop_for_a_producer_the_c_loop_cannot_drive():
    with capture_logs() as logs:
        worker = worker_with("auto")
    assert worker.destination.native_target is None
    assert [(e["loop"], e["log_level"]) for e in logs if e["event"] == "mirror_loop"] == [("python", "warning")]
    # and says so where an operator looks: the gauge, with the reason, and the registration `status` reads
    reason = "the destination producer is not one the C loop can drive (is_producer refused it)"
    assert worker.metrics.registry.get_sample_value(
        "ureplicator_worker_native_loop", {"route": "default", "reason": reason}) == 0.0
    assert worker.destination.loop_reason == reason


def test_on_refuses_to_start_without_a_c_loop(monkeypatch):
    # A producer the C loop cannot drive
    with pytest.raises(ConfigError, match="worker.native_loop"):
        worker_with("on")

    # and no C loop at all (not built here): the reason is in the message
    def unavailable() -> None:
        raise native.Unavailable("worker._native is not built")

    monkeypatch.setattr(native, "load", unavailable)
    with pytest.raises(ConfigError, match="not built"):
        mirror._load_native("on")
    assert mirror._load_native("auto") == (None, "worker._native is not built")
    assert mirror._load_native("off") == (None, "worker.native_loop is off")
    with capture_logs():
        off = worker_with("off")
    assert off.metrics.registry.get_sample_value(
        "ureplicator_worker_native_loop", {"route": "default", "reason": "worker.native_loop is off"}) == 0.0
