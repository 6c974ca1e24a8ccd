"""Exactly-once mode on real clusters: a kill -9 mid-transaction, a restart that fences its predecessor.

A ``read_committed`` reader must see every source record exactly once; a
``read_uncommitted`` reader sees the aborted copies too, which proves an abort happened.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from prometheus_client.parser import text_string_to_metric_families

from devtools.harness import Offsets
from devtools.ports import free_port
from tests.support import kafka_io, verifier_env
from tests.support.kafka_io import wait_for
from tests.support.load import ContinuousProducer
from ureplicator.common import provenance

pytestmark = pytest.mark.integration

EXACT = {"exactly_once": True, "transaction_interval_ms": 2000}


def read_sources(bootstrap: str, topic: str, partition: int, isolation: str) -> list[int]:
    """The source offsets (from ``urep``) of one destination partition, read up to its end under ``isolation``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        offsets: list[int] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return offsets
                    continue
                value = dict(msg.headers() or ())[provenance.HEADER]
                offsets.append(provenance.decode(value).source_offset)
        raise AssertionError(f"{topic}:{partition}: no end after {len(offsets)} records")
    finally:
        consumer.close()


def committed_copies(bootstrap: str, topic: str, partitions: int) -> int:
    """How many records a ``read_committed`` reader sees on the destination topic."""
    return sum(len(read_sources(bootstrap, topic, p, "read_committed")) for p in range(partitions))


def assert_each_record_once_in_order(bootstrap: str, topic: str, partitions: int, sent: int,
                                     timeout_s: float = 90) -> None:
    """Every record the load sent (round robin) is there ``read_committed``, exactly once and in order."""
    wait_for(lambda: committed_copies(bootstrap, topic, partitions) >= sent, timeout_s, "everything mirrored")
    for p in range(partitions):
        committed = read_sources(bootstrap, topic, p, "read_committed")
        expected = len([i for i in range(sent) if i % partitions == p])
        assert committed == list(range(expected)), f"{topic}:{p}: lost, duplicated or reordered"


def loop_turns(metrics_port: int) -> int:
    """How many turns the worker serving ``metrics_port`` has made (``ureplicator_worker_loop_turns_total``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "ureplicator_worker_loop_turns":
            return sum(int(s.value) for s in family.samples if s.name.endswith("_total"))
    return 0


def start(pipeline, worker_id: str):  # noqa: ANN001, ANN201
    # The C loop, or a config error if it cannot run here: these tests prove exactly-once on it.
    return pipeline.start_worker(worker_id, worker={**EXACT, "native_loop": "on"})


def test_kill_9_mid_transaction_then_a_restart_fences_the_predecessor(pipeline, services):
    # Given an exactly-once pipeline mirroring under continuous produce (2 s transactions)
    topic = f"{pipeline.name}-eos"
    partitions = 2
    kafka_io.create_topic(services["source"], topic, partitions)
    pipeline.start_controller(worker=dict(EXACT))
    worker = start(pipeline, "w1")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]
    with ContinuousProducer(services["source"], topic, partitions, rate_per_s=1000) as load:
        wait_for(lambda: sum(kafka_io.end_offsets(dst, topic, partitions, settle_s=20).values()) > 3000, 90,
                 "several transactions committed")
        # When the worker is killed with kill -9 in the middle of a transaction
        time.sleep(1.0)
        os.kill(worker.popen.pid, signal.SIGKILL)
        worker.popen.wait(10)
        # and restarted with the same worker id (its init_transactions fences the predecessor)
        restarted = start(pipeline, "w1")
        time.sleep(3)
        load.stop()
        sent = load.sent
    # Then a read_committed reader sees every source record exactly once
    wait_for(lambda: sum(len(read_sources(dst, topic, p, "read_committed")) for p in range(partitions)) >= sent,
             120, "everything mirrored and committed")
    lost = duplicated = aborted = 0
    for p in range(partitions):
        source_count = kafka_io.end_offsets(services["source"], topic, partitions)[p]
        committed = read_sources(dst, topic, p, "read_committed")
        everything = read_sources(dst, topic, p, "read_uncommitted")
        lost += len(set(range(source_count)) - set(committed))
        duplicated += len(committed) - len(set(committed))
        aborted += len(everything) - len(committed)
        assert committed == sorted(committed), f"{topic}:{p} reordered"
    assert (lost, duplicated) == (0, 0), pipeline.logs()
    # and the killed worker's open transaction was aborted: its copies are visible read_uncommitted only
    assert aborted > 0, "no aborted copies: the kill did not land inside a transaction"
    assert restarted.alive(), restarted.tail()
    log = restarted.log.read_text()
    assert '"exactly_once": true' in log and "transactions_ready" in log
    # and the positions live in the destination's group, keyed by destination topic
    positions = kafka_io.committed(dst, pipeline.group, topic, partitions)
    assert all(offset > 0 for offset in positions.values()), positions


def test_a_restart_with_the_same_worker_id_fences_its_predecessor(pipeline, services):
    # Given a predecessor with worker w1's transactional id, in the middle of a transaction
    topic = f"{pipeline.name}-fence"
    kafka_io.create_topic(services["source"], topic, 1)
    kafka_io.produce(services["source"], topic, 100, 1)
    pipeline.start_controller(worker=dict(EXACT))
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    zombie = Producer({"bootstrap.servers": services["destination"], "transactional.id": f"{pipeline.group}.w1"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(10)
    # When a worker starts with that worker id
    start(pipeline, "w1")
    wait_for(lambda: len(read_sources_or_none(services["destination"], topic)) >= 100, 90, "mirrored")
    # Then the predecessor is fenced: its commit fails, and its record is never read committed
    with pytest.raises(KafkaException) as failed:
        zombie.commit_transaction(30)
    assert failed.value.args[0].fatal() or failed.value.args[0].code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    committed = read_sources_or_none(services["destination"], topic)
    assert sorted(committed) == list(range(100))


def read_sources_or_none(bootstrap: str, topic: str) -> list[int]:
    """Partition 0 read committed; records without ``urep`` (the zombie's) fail the test."""
    return read_sources(bootstrap, topic, 0, "read_committed")


def test_a_worker_whose_mode_differs_from_the_pipeline_refuses_to_start(pipeline):
    # Given an exactly-once pipeline (the controller recorded the mode)
    pipeline.start_controller(worker=dict(EXACT))
    # When an at-least-once worker starts
    worker = pipeline.start_worker("w-alo")
    # Then it exits with a config error naming the key
    worker.popen.wait(60)
    assert worker.popen.returncode != 0
    assert "worker.exactly_once" in worker.log.read_text()


def test_a_planned_hand_off_commits_the_transaction_before_the_release(pipeline, services):
    # Given an exactly-once pipeline with one worker, mirroring under continuous produce
    topic = f"{pipeline.name}-move"
    partitions = 4
    kafka_io.create_topic(services["source"], topic, partitions)
    pipeline.start_controller(worker=dict(EXACT))
    start(pipeline, "w1")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]
    with ContinuousProducer(services["source"], topic, partitions, rate_per_s=1000) as load:
        wait_for(lambda: sum(kafka_io.end_offsets(dst, topic, partitions, settle_s=20).values()) > 2000, 90,
                 "mirroring")
        # When a second worker joins and half the partitions move to it
        start(pipeline, "w2")
        wait_for(lambda: "partitions_released" in (pipeline.workdir / f"{pipeline.name}-w1.log").read_text(),
                 60, "w1 released partitions")
        time.sleep(3)
        load.stop()
        sent = load.sent
    # Then a read_committed reader sees every source record exactly once, and nothing was aborted
    wait_for(lambda: sum(len(read_sources(dst, topic, p, "read_committed")) for p in range(partitions)) >= sent,
             120, "everything mirrored and committed")
    for p in range(partitions):
        source_count = kafka_io.end_offsets(services["source"], topic, partitions)[p]
        committed = read_sources(dst, topic, p, "read_committed")
        assert sorted(committed) == list(range(source_count)), f"{topic}:{p}: lost or duplicated"
        assert len(read_sources(dst, topic, p, "read_uncommitted")) == len(committed), f"{topic}:{p}: aborted copies"


def test_a_departed_workers_transactional_id_is_fenced_before_its_partitions_move(pipeline, services):
    # Given an exactly-once pipeline with two workers, mirroring under continuous produce
    topic = f"{pipeline.name}-depart"
    partitions = 4
    kafka_io.create_topic(services["source"], topic, partitions)
    controller = pipeline.start_controller(worker=dict(EXACT))
    doomed = start(pipeline, "w1")
    start(pipeline, "w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]
    with ContinuousProducer(services["source"], topic, partitions, rate_per_s=1000) as load:
        wait_for(lambda: sum(kafka_io.end_offsets(dst, topic, partitions, settle_s=20).values()) > 3000, 90,
                 "both workers mirroring")
        # When w1 is killed with kill -9 in the middle of a transaction, and not restarted: right
        # after one of its partitions showed an open transaction with records written (its end
        # past its last stable offset). A kill at a fixed time can land in a commit on a loaded
        # machine (seen once in a parallel run: no aborted copies).
        offsets = Offsets(dst)
        tps = [(topic, p) for p in range(partitions)]

        def open_on_w1() -> bool:
            body = pipeline.api("GET", f"/topics/{topic}")[1]
            applied = {p["partition"]: p["applied_by"] for p in body["assignment"]}
            ends, stable = offsets.ends(tps), offsets.ends(tps, IsolationLevel.READ_COMMITTED)
            return ends is not None and stable is not None and any(
                applied.get(p) == "w1" and ends[(topic, p)] > stable[(topic, p)] for p in range(partitions))

        wait_for(open_on_w1, 30, "an open transaction of w1 with records written", interval_s=0.05)
        os.kill(doomed.popen.pid, signal.SIGKILL)
        doomed.popen.wait(10)
        # Then the leader fences w1's transactional id before w2 gets its partitions
        wait_for(lambda: "transactional_id_fenced" in controller.log.read_text(), 60, "w1 fenced")
        time.sleep(3)
        load.stop()
        sent = load.sent
    # and, well before the transaction timeout (60 s) could have aborted w1's transaction,
    # a read_committed reader sees every source record exactly once
    wait_for(lambda: sum(len(read_sources(dst, topic, p, "read_committed")) for p in range(partitions)) >= sent,
             30, "everything mirrored and committed")
    aborted = 0
    for p in range(partitions):
        source_count = kafka_io.end_offsets(services["source"], topic, partitions)[p]
        committed = read_sources(dst, topic, p, "read_committed")
        assert sorted(committed) == list(range(source_count)), f"{topic}:{p}: lost or duplicated"
        aborted += len(read_sources(dst, topic, p, "read_uncommitted")) - len(committed)
    assert aborted > 0, "no aborted copies: the kill did not land inside a transaction"
    assert '"transactional_id": "' + pipeline.group + '.w1"' in controller.log.read_text()


def test_switching_modes_both_ways_under_load_loses_and_duplicates_nothing(pipeline, services):
    # Given an at-least-once pipeline mirroring under continuous load
    topic = f"{pipeline.name}-switch"
    partitions = 2
    kafka_io.create_topic(services["source"], topic, partitions)
    dst = services["destination"]

    def mirrored() -> int:
        return sum(kafka_io.end_offsets(dst, topic, partitions, settle_s=20).values())

    with ContinuousProducer(services["source"], topic, partitions, rate_per_s=500) as load:
        controller = pipeline.start_controller()
        worker = pipeline.start_worker("w1")
        assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
        wait_for(lambda: mirrored() >= 1500, 60, "mirrored at least once")
        # When the deployment is switched to exactly-once while records keep arriving (a graceful
        # stop of the worker and the controller, then both start in the new mode)
        assert worker.terminate(30) == 0 and controller.terminate(30) == 0
        controller = pipeline.start_controller("controller-eos", worker=dict(EXACT))
        worker = start(pipeline, "w1")
        before = mirrored()
        wait_for(lambda: mirrored() >= before + 1500, 90, "mirrored exactly once")
        # and switched back to at-least-once, still under load
        assert worker.terminate(30) == 0 and controller.terminate(30) == 0
        pipeline.start_controller("controller-alo")
        back = pipeline.start_worker("w1-again")
        before = mirrored()
        wait_for(lambda: mirrored() >= before + 1500, 60, "mirrored at least once again")
        load.stop()
        sent = load.sent
    # Then every source record is on the destination exactly once, in order, read_committed
    assert_each_record_once_in_order(dst, topic, partitions, sent)
    assert "transactional_start_from_source_group" in worker.log.read_text()
    assert back.alive(), back.tail()


# Freezes the session's destination broker for a while (as tests/integration/test_faults.py does).
@pytest.mark.disruptive  # freezes the destination broker
def test_zombie_frozen_with_its_destination_then_two_kill_9s_loses_and_duplicates_nothing(pipeline, services, tmp_path):
    from tests.integration.test_faults import frozen, owners, service_pid

    # Given two exactly-once workers mirroring under continuous load
    topic = f"{pipeline.name}-zombie"
    partitions = 4
    kafka_io.create_topic(services["source"], topic, partitions)
    controller = pipeline.start_controller(worker=dict(EXACT))
    zombie = start(pipeline, "w1")
    other = start(pipeline, "w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]
    with ContinuousProducer(services["source"], topic, partitions, rate_per_s=1000) as load:
        wait_for(lambda: owners(pipeline, topic) == {"w1", "w2"}, 60, "both workers mirror")
        wait_for(lambda: sum(kafka_io.end_offsets(dst, topic, partitions, settle_s=20).values()) > 2000, 60,
                 "mirroring")
        # When the destination broker and then w1 are frozen past w1's session timeout
        with frozen(service_pid(services, "destination")):
            with frozen(zombie.popen.pid):
                wait_for(lambda: "w1" not in owners(pipeline, topic), 60, "w1's session expired")
            # and w1 wakes while its destination is still frozen
            time.sleep(5)
        # Then, once the destination is back, the leader fences w1's transactional id before w2 takes over
        wait_for(lambda: "transactional_id_fenced" in controller.log.read_text(), 90, "w1 fenced")
        time.sleep(5)
        # When both workers are killed with kill -9, then restarted
        for proc in (zombie, other):
            os.kill(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(10)
        start(pipeline, "w1")
        start(pipeline, "w2")
        time.sleep(5)
        load.stop()
        sent = load.sent
    # Then a read_committed reader sees every source record exactly once
    wait_for(lambda: sum(len(read_sources(dst, topic, p, "read_committed")) for p in range(partitions)) >= sent,
             180, "everything mirrored and committed")
    lost = duplicated = 0
    for p in range(partitions):
        source_count = kafka_io.end_offsets(services["source"], topic, partitions)[p]
        committed = read_sources(dst, topic, p, "read_committed")
        lost += len(set(range(source_count)) - set(committed))
        duplicated += len(committed) - len(set(committed))
    print(f"zombie, exactly-once: sent {sent}, lost {lost}, duplicated {duplicated}")
    assert (lost, duplicated) == (0, 0), pipeline.logs()
    # And the verifier (read_committed in an exactly-once pipeline, where a duplicate is a FAIL) says OK
    # once the positions copied to the source group reach the end of every partition
    ends = kafka_io.end_offsets(services["source"], topic, partitions)
    wait_for(lambda: kafka_io.committed(services["source"], pipeline.group, topic, partitions) == ends, 60,
             "positions copied to the source group")
    config = pipeline.write_config("verify", worker=dict(EXACT))
    outcome = verifier_env.run_verifier(["--config", str(config), "--topic", topic], tmp_path / "reports")
    assert outcome.status == 0, outcome.stdout + outcome.stderr
    assert outcome.report["status"] == "OK", outcome.report["totals"]
    assert outcome.report["totals"]["verified_records"] == sum(ends.values())


def test_a_record_the_destination_refuses_stops_only_its_partition_after_a_few_aborts(pipeline, services):
    from confluent_kafka.admin import AdminClient, NewTopic

    # Given a destination topic with a smaller record limit and a source record above it (partition 1, offset 50)
    topic = f"{pipeline.name}-poison"
    kafka_io.create_topic(services["source"], topic, 2)
    admin = AdminClient({"bootstrap.servers": services["destination"]})
    admin.create_topics([NewTopic(topic, 2, 1, config={"max.message.bytes": "200000"})])[topic].result(30)
    kafka_io.produce(services["source"], topic, 100, 2)
    producer = Producer({"bootstrap.servers": services["source"]})
    producer.produce(topic, key=b"big", value=os.urandom(500_000), partition=1)
    producer.flush(30)
    kafka_io.produce(services["source"], topic, 100, 2, start=100)
    # When an exactly-once worker mirrors it
    pipeline.start_controller(worker=dict(EXACT))
    port = free_port()
    worker = pipeline.start_worker("w1", worker={**EXACT, "metrics_port": port, "metrics_host": "127.0.0.1"},
                                   destination={"properties": {"batch.size": "100000"}})
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201

    def stopped() -> dict | None:
        body = pipeline.api("GET", f"/topics/{topic}")[1]
        status = body["assignment"][1]["status"] or {}
        return body if status.get("error") else None

    # Then partition 1 stops, naming the refused record, and partition 0 goes on to its end
    body = wait_for(stopped, 60, "partition 1 stopped")
    assert body["assignment"][1]["status"]["error"].startswith("offset 50:")
    wait_for(lambda: len(read_sources(services["destination"], topic, 0, "read_committed")) == 100, 60,
             "partition 0 committed")
    # Every turn of the worker's loop is a chance to rewind, resend or abort: 60 more of them (about 3 s
    # of idle turns, each waiting worker.fetch_wait_ms for a record) and partition 1 still stands.
    turns = loop_turns(port)
    wait_for(lambda: loop_turns(port) >= turns + 60, 60, "60 more turns of the worker's loop")
    # and a read_committed reader sees no duplicate and no gap in either partition
    for p in range(2):
        committed = read_sources(services["destination"], topic, p, "read_committed")
        assert committed == list(range(len(committed))), f"{topic}:{p}"
    positions = kafka_io.committed(services["destination"], pipeline.group, topic, 2)
    assert positions[0] == 100 and positions[1] <= 50, positions
    log = worker.log.read_text()
    aborts = log.count('"event": "transaction_aborted"')
    assert 1 <= aborts <= 5, f"{aborts} aborts: the refused record must not abort transactions forever"
    # and partition 0's records were freed by aborting the refused transaction, not by the stall watch
    assert '"event": "producer_stalled"' not in log


def test_sigterm_under_load_commits_the_transaction_and_hands_off_exactly_once(pipeline, services):
    # Given two exactly-once workers mirroring under continuous produce
    topic = f"{pipeline.name}-term"
    partitions = 4
    kafka_io.create_topic(services["source"], topic, partitions)
    pipeline.start_controller(worker=dict(EXACT))
    leaving = start(pipeline, "w1")
    start(pipeline, "w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]
    with ContinuousProducer(services["source"], topic, partitions, rate_per_s=1000) as load:
        wait_for(lambda: sum(kafka_io.end_offsets(dst, topic, partitions, settle_s=20).values()) > 2000, 90,
                 "mirroring")
        # When w1 gets SIGTERM in the middle of a transaction
        time.sleep(1.0)
        assert leaving.terminate(60) == 0, leaving.tail()
        time.sleep(5)
        load.stop()
        sent = load.sent
    # Then its last transaction committed (nothing aborted) and w2 went on from there: exactly once
    wait_for(lambda: sum(len(read_sources(dst, topic, p, "read_committed")) for p in range(partitions)) >= sent,
             120, "everything mirrored and committed")
    for p in range(partitions):
        source_count = kafka_io.end_offsets(services["source"], topic, partitions)[p]
        committed = read_sources(dst, topic, p, "read_committed")
        assert sorted(committed) == list(range(source_count)), f"{topic}:{p}: lost or duplicated"
        assert len(read_sources(dst, topic, p, "read_uncommitted")) == len(committed), f"{topic}:{p}: aborted copies"


def test_a_lost_session_ends_the_open_transaction_uncommitted(pipeline, services):
    import threading

    from tests.integration.test_worker_fencing import expire_session
    from ureplicator.common import config as config_module
    from ureplicator.worker.mirror import MirrorWorker

    # Given an in-process exactly-once worker mirroring under continuous produce
    topic = f"{pipeline.name}-lost"
    partitions = 2
    kafka_io.create_topic(services["source"], topic, partitions)
    pipeline.start_controller(worker=dict(EXACT))
    cfg = config_module.from_dict(pipeline.config_doc(worker={"id": "w1", **EXACT}))
    worker = MirrorWorker(cfg, "w1")
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]
    try:
        with ContinuousProducer(services["source"], topic, partitions, rate_per_s=1000) as load:
            wait_for(lambda: worker.produced > 1500, 60, "mirroring")
            def uncommitted() -> float:
                # An abort or a fatal commit, or a producer replaced because it was fenced mid-produce:
                # each ends the open transaction uncommitted.
                return (sum(worker.metrics.transactions.labels(o)._value.get() for o in ("aborted", "fatal"))
                        + worker.metrics.producer_replacements._value.get())

            ended_before = uncommitted()
            # When its ZooKeeper session expires in the middle of a transaction
            expire_session(worker.zk, services["zookeeper"])
            # Then its open transaction ends uncommitted: aborted by the worker, or fenced by the
            # leader (the worker departed, so its transactional id is fenced before its partitions
            # move; the worker then needs a new producer), and it re-registers and mirrors again
            wait_for(lambda: uncommitted() > ended_before, 20, "transaction aborted or fenced")
            wait_for(lambda: len(worker.owned) == partitions and not worker.session_lost, 30, "re-registered")
            produced = worker.produced
            wait_for(lambda: worker.produced > produced + 500, 30, "mirroring again")
            load.stop()
            sent = load.sent
        wait_for(lambda: sum(len(read_sources(dst, topic, p, "read_committed")) for p in range(partitions)) >= sent,
                 120, "everything mirrored and committed")
        for p in range(partitions):
            source_count = kafka_io.end_offsets(services["source"], topic, partitions)[p]
            committed = read_sources(dst, topic, p, "read_committed")
            assert sorted(committed) == list(range(source_count)), f"{topic}:{p}: lost or duplicated"
    finally:
        worker.stop()
        runner.join(30)


@pytest.mark.disruptive  # stops ZooKeeper
def test_zookeeper_away_past_the_lease_aborts_then_resumes_exactly_once(pipeline, services):
    # Not on a shared stack: it restarts ZooKeeper.
    from devtools import stack

    # Given an exactly-once worker under load, with a 15 s session (a lease of 13.5 s)
    topic = f"{pipeline.name}-zkaway"
    partitions = 2
    kafka_io.create_topic(services["source"], topic, partitions)
    session = {"zookeeper": {"connect": services["zookeeper"], "session_timeout_s": 15}}
    pipeline.start_controller(worker=dict(EXACT), **session)
    # The Python loop here, so that exactly-once mode is proved on both loops.
    worker = pipeline.start_worker("w1", worker={**EXACT, "native_loop": "off"}, **session)
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]
    with ContinuousProducer(services["source"], topic, partitions, rate_per_s=500) as load:
        wait_for(lambda: sum(kafka_io.end_offsets(dst, topic, partitions, settle_s=20).values()) > 1000, 60,
                 "mirroring")
        # When ZooKeeper is away longer than the lease but shorter than the session
        stack.stop_service(services["dir"], "zookeeper")
        wait_for(lambda: "transaction_aborted" in worker.log.read_text(), 30, "the stale lease's abort")
        stack.start_service(services["dir"], "zookeeper")
        # Then the worker resumes: new transactions commit after the abort
        aborted_at = committed_copies(dst, topic, partitions)
        wait_for(lambda: committed_copies(dst, topic, partitions) > aborted_at + 1000, 60,
                 "committed again after the abort")
        load.stop()
        sent = load.sent
    # And every record is there exactly once, in order
    assert_each_record_once_in_order(dst, topic, partitions, sent)


@pytest.mark.disruptive  # restarts the source broker
def test_a_source_broker_restart_under_load_resumes_exactly_once(pipeline, services):
    # Not on a shared stack: it restarts the source broker.
    from devtools import stack

    # Given an exactly-once worker mirroring under continuous load
    topic = f"{pipeline.name}-eossrc"
    partitions = 2
    kafka_io.create_topic(services["source"], topic, partitions)
    pipeline.start_controller(worker=dict(EXACT))
    start(pipeline, "w1")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]

    with ContinuousProducer(services["source"], topic, partitions, rate_per_s=500) as load:
        wait_for(lambda: committed_copies(dst, topic, partitions) > 1000, 60, "mirroring")
        # When the source broker restarts (the load producer retries meanwhile)
        stack.stop_service(services["dir"], "source")
        try:
            time.sleep(2)
        finally:
            stack.start_service(services["dir"], "source")
        before = committed_copies(dst, topic, partitions)
        # Then transactions commit again
        wait_for(lambda: committed_copies(dst, topic, partitions) > before + 1000, 90,
                 "committed again after the restart")
        load.stop()
        sent = load.sent
    # And every record is there exactly once, in order
    assert_each_record_once_in_order(dst, topic, partitions, sent)



@pytest.mark.disruptive  # restarts the destination broker
def test_two_destination_restarts_under_load_lose_and_duplicate_nothing(pipeline, services):
    # Not on a shared stack: it restarts the destination broker. After such restarts librdkafka's
    # send_offsets_to_transaction can wait for ever (librdkafka #5456/#5511); before the worker gave
    # such a producer up after its timeout (worker/transactions.py), this stalled for good.
    from devtools import stack

    # Given two exactly-once workers mirroring under continuous load
    topic = f"{pipeline.name}-eosdst"
    partitions = 4
    kafka_io.create_topic(services["source"], topic, partitions)
    pipeline.start_controller(worker=dict(EXACT))
    start(pipeline, "w1")
    start(pipeline, "w2")
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]
    with ContinuousProducer(services["source"], topic, partitions, rate_per_s=500) as load:
        wait_for(lambda: committed_copies(dst, topic, partitions) > 500, 60, "mirroring")
        # When the destination broker restarts twice, the second time soon after the first
        for pause in (3, 1):
            stack.stop_service(services["dir"], "destination")
            try:
                time.sleep(pause)  # the outage
            finally:
                stack.start_service(services["dir"], "destination")
            time.sleep(5)  # load on the restarted broker before the next fault
        load.stop()
        sent = load.sent
    # Then transactions commit again, and every record is there exactly once, in order
    assert_each_record_once_in_order(dst, topic, partitions, sent, timeout_s=120)
