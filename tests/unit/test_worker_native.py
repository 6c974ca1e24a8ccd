"""Choosing the worker's copy loop: the C loop only where it is built and matches confluent-kafka."""

from __future__ import annotations

import confluent_kafka
import confluent_kafka.cimpl
import pytest
from confluent_kafka import Message, Producer
from structlog.testing import capture_logs

from tests.unit.fakes import FakeCommitClient, FakeConsumer, FakeProducer, FakeZooKeeper
from ureplicator.common import config as config_module
from ureplicator.common import provenance
from ureplicator.common.errors import ConfigError
from ureplicator.worker import mirror, native
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


def test_make_install_built_the_c_loop_and_it_matches_this_confluent_kafka():
    # `make install` compiles worker/_native.c; the layout check passes against the real Message
    module = native.load()
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "client.id": "ureplicator-unit-w1"})
    # and a producer is driven only when librdkafka names its handle after the worker's client id
    assert module.is_producer(producer, "ureplicator-unit-w1")
    assert not module.is_producer(producer, "ureplicator-unit-w2")
    assert not module.is_producer(producer, "ureplicator-unit-w")  # a prefix is not the name
    assert not module.is_producer(object(), "ureplicator-unit-w1")


def test_a_confluent_kafka_release_whose_layout_was_not_reviewed_falls_back_to_the_python_loop():
    with pytest.raises(native.Unavailable, match="confluent-kafka 3.0.0 is not a release whose layout"):
        native.load("3.0.0")
    assert native.installed_version() in native.REVIEWED_VERSIONS  # the one installed here was


def test_librdkafka_is_resolved_through_confluent_kafkas_own_extension_module():
    # the file dlopen'ed with RTLD_NOLOAD is confluent-kafka's cimpl, not a search of /proc/self/maps
    # (where librdkafka++ would match too)
    assert native.extension_path() == confluent_kafka.cimpl.__file__
    module = native.load()
    with pytest.raises(RuntimeError, match="extension is not loaded"):
        module.init("/nonexistent/cimpl.so", Message, Producer, Message(**native._LAYOUT_SAMPLE),
                    provenance.HEADER.encode())
    native.load()


def test_the_layout_check_refuses_a_message_that_does_not_read_back():
    module = native.load()
    # A Message whose fields differ from the agreed sample: what a changed struct layout would read
    wrong = Message(**{**native._LAYOUT_SAMPLE, "partition": 8})
    with pytest.raises(RuntimeError, match="not laid out"):
        module.init(native.extension_path(), Message, Producer, wrong, provenance.HEADER.encode())
    # and the module stays unusable until a check passes (no half-initialised C loop)
    with pytest.raises(RuntimeError, match="not initialised"):
        module.mirror(Producer({"bootstrap.servers": "127.0.0.1:1"}), [], 0, {}, b"src")
    native.load()  # a passing check makes it usable again


def test_auto_falls_back_to_the_python_loop_for_a_producer_the_c_loop_cannot_drive():
    with capture_logs() as logs:
        worker = worker_with("auto")
    assert worker.destination.native_target is None
    assert [e["loop"] for e in logs if e["event"] == "mirror_loop"] == ["python"]


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
