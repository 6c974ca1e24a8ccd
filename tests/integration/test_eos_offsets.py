"""Exactly-once positions on real clusters: whose position a transaction commits, and where a worker resumes.

Issue 44, section 4: the positions committed with a transaction are keyed by destination
topic and partition, so two source topics on one destination topic would overwrite each
other's (and a translation that matches copies by source partition alone mixes routes); a
record ``produce()`` refuses inside a run left the run's records in the transaction with the
partition's position in front of them; and a switch exactly-once -> at-least-once ->
exactly-once resumed from the stale destination position. Each test checks what a
``read_committed`` reader (or an operator) sees.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.test_exactly_once import EXACT, read_sources
from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from ureplicator.common import config as config_module
from ureplicator.common import provenance
from ureplicator.failover.groups import GroupOffsets

pytestmark = pytest.mark.integration


# --- 1. one source topic per destination topic -----------------------------------------------


def test_exactly_once_refuses_a_second_source_topic_onto_one_destination_topic(pipeline, services):
    # Given an exactly-once pipeline mirroring topic a onto destination topic x
    a, b, x = (f"{pipeline.name}-{s}" for s in ("a", "b", "x"))
    for topic in (a, b):
        kafka_io.create_topic(services["source"], topic, 1)
    pipeline.start_controller(worker=dict(EXACT))
    assert pipeline.api("POST", "/topics", {"topic": a, "destination": x})[0] == 201
    # When topic b is added onto the same destination topic
    status, body = pipeline.api("POST", "/topics", {"topic": b, "destination": x})
    # Then it is refused, naming both source topics and the destination topic
    assert status == 409, body
    message = str(body)
    assert a in message and b in message and x in message, message
    assert pipeline.api("GET", f"/topics/{b}")[0] == 404


def test_exactly_once_refuses_a_topic_mapping_that_gathers_topics(pipeline, services):
    # Given a topic mapping that sends two source topics onto one destination topic
    gathering = {"orders-eu": "orders", "orders-us": "orders"}
    mapping = {"controller": {"topic_naming": "mapping", "topic_mapping": gathering}}
    # When an exactly-once controller starts with it
    path = pipeline.write_config("controller", worker=dict(EXACT), **mapping)
    controller = pipeline._spawn("controller", ["controller", "--config", str(path)])
    # Then it exits with a config error naming the topics
    assert controller.popen.wait(60) != 0
    log = controller.log.read_text()
    assert "controller.topic_mapping" in log and "orders-eu" in log and "orders-us" in log, log[-2000:]
    # (at-least-once mode keeps allowing it: duplicates are allowed there, and each offset is the source's)
    config_module.from_dict(pipeline.config_doc(**mapping))


def test_exactly_once_worker_stops_topics_registered_onto_one_destination_before_the_switch(pipeline, services):
    # Given two source topics registered onto one destination topic while the pipeline ran at-least-once
    a, b, x = (f"{pipeline.name}-{s}" for s in ("a", "b", "x"))
    for topic in (a, b):
        kafka_io.create_topic(services["source"], topic, 1)
        kafka_io.produce(services["source"], topic, 10, 1)
    controller = pipeline.start_controller()
    assert pipeline.api("POST", "/topics", {"topic": a, "destination": x})[0] == 201
    assert pipeline.api("POST", "/topics", {"topic": b, "destination": x})[0] == 201
    assert controller.terminate(30) == 0
    # When the pipeline switches to exactly-once
    pipeline.start_controller("controller-eos", worker=dict(EXACT))
    worker = pipeline.start_worker("w1", worker=dict(EXACT))

    def errors() -> dict[str, str] | None:
        found = {}
        for topic in (a, b):
            status = pipeline.api("GET", f"/topics/{topic}")[1]["assignment"][0]["status"] or {}
            if status.get("error"):
                found[topic] = status["error"]
        return found if len(found) == 2 else None

    # Then the worker mirrors neither (their positions would overwrite each other's) and says why
    found = wait_for(errors, 60, "both partitions stopped")
    for error in found.values():
        assert a in error and b in error and x in error, error
    assert kafka_io.end_offsets(services["destination"], x, 1) == {0: 0}
    assert worker.alive(), worker.tail()


def test_translation_of_a_gathering_destination_reads_only_its_own_routes_copies(pipeline, services):
    # Given destination partition t:0 gathering copies of two routes (shared: true), each with its
    # own source offsets 0.. : route src's 0-49, the other route's 0-99, then route src's 50-99
    topic = f"{pipeline.name}-gather"
    kafka_io.create_topic(services["source"], topic, 1)
    kafka_io.produce(services["source"], topic, 100, 1)
    kafka_io.create_topic(services["destination"], topic, 1)
    producer = Producer({"bootstrap.servers": services["destination"], "enable.idempotence": True})
    copies = [("src", o) for o in range(50)] + [("other", o) for o in range(100)] + [("src", o) for o in range(50, 100)]
    for alias, offset in copies:
        producer.produce(topic, value=f"{alias}-{offset}".encode(), partition=0,
                         headers=[(provenance.HEADER, provenance.encode(offset, 0, alias, alias))])
    assert producer.flush(30) == 0
    # and a group that committed source offset 50 on route src's source cluster
    group = f"{pipeline.name}-readers"
    consumer = Consumer({"bootstrap.servers": services["source"], "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 50)], asynchronous=False)
    consumer.close()
    # When the group is translated for route src
    config = config_module.from_dict(pipeline.config_doc())
    offsets = GroupOffsets(config, lambda: {topic: topic})
    try:
        translation = offsets.translate(group)
    finally:
        offsets.close()
    # Then it resumes at route src's copy of offset 50 (destination offset 150), not after the
    # other route's copy of 49 (destination offset 100), which is no record this group read
    (row,) = translation.partitions
    assert row.destination_offset == 150, row


# --- 2. a record produce() refuses inside a run -----------------------------------------------


@pytest.mark.parametrize("loop", ["on", "off"], ids=["c_loop", "python_loop"])
def test_a_record_refused_inside_a_run_duplicates_nothing_after_a_restart(pipeline, services, loop):
    # Given a source partition of 20 small records, one above the worker producer's message.max.bytes
    # (offset 20), and 20 more, all fetched in one batch: one run until the refused record
    topic = f"{pipeline.name}-refused-{loop}"
    kafka_io.create_topic(services["source"], topic, 1)
    kafka_io.produce(services["source"], topic, 20, 1)
    big = Producer({"bootstrap.servers": services["source"]})
    big.produce(topic, key=b"big", value=b"x" * 30_000, partition=0)
    assert big.flush(30) == 0
    kafka_io.produce(services["source"], topic, 20, 1, start=20)
    refusing = {"properties": {"message.max.bytes": "20000"}}
    pipeline.start_controller(worker=dict(EXACT))
    worker = pipeline.start_worker("w1", worker={**EXACT, "native_loop": loop}, destination=refusing)
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    dst = services["destination"]

    def stopped(proc) -> bool:  # noqa: ANN001
        return '"event": "partition_stopped"' in proc.log.read_text()

    # When the worker stops the partition at the refused record, a transaction commits since,
    wait_for(lambda: stopped(worker), 60, "partition stopped")
    error = wait_for(lambda: (pipeline.api("GET", f"/topics/{topic}")[1]["assignment"][0]["status"] or {}).get("error"),
                     30, "the stop in the topic's status")
    assert error.startswith("offset 20:"), error
    time.sleep(2 * EXACT["transaction_interval_ms"] / 1000 + 1)
    # and the worker restarts
    assert worker.terminate(30) == 0
    restarted = pipeline.start_worker("w1", worker={**EXACT, "native_loop": loop}, destination=refusing)
    wait_for(lambda: stopped(restarted), 60, "partition stopped again after the restart")
    time.sleep(2 * EXACT["transaction_interval_ms"] / 1000 + 1)
    # Then a read_committed reader sees the 20 records in front of the refused one, each once
    committed = read_sources(dst, topic, 0, "read_committed")
    assert committed == list(range(20)), f"read committed: {committed}"
    # and the destination's group holds the position of the refused record
    assert kafka_io.committed(dst, pipeline.group, topic, 1) == {0: 20}
    # (the run's first copies went with an aborted transaction: still queued then, they never reached the broker)
    assert '"event": "produce_refused_in_run"' in worker.log.read_text()


# --- 3. exactly-once -> at-least-once -> exactly-once -----------------------------------------


def test_switching_back_to_exactly_once_resumes_after_the_at_least_once_period(pipeline, services):
    topic = f"{pipeline.name}-back"
    partitions = 2
    kafka_io.create_topic(services["source"], topic, partitions)
    dst = services["destination"]

    def copies() -> int:
        return sum(len(read_sources(dst, topic, p, "read_committed")) for p in range(partitions))

    # Given an exactly-once pipeline that mirrored 100 records
    kafka_io.produce(services["source"], topic, 100, partitions)
    controller = pipeline.start_controller(worker=dict(EXACT))
    worker = pipeline.start_worker("w1", worker=dict(EXACT))
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    wait_for(lambda: copies() >= 100, 60, "mirrored exactly once")
    assert worker.terminate(30) == 0 and controller.terminate(30) == 0
    # and then ran at-least-once for 100 more (committed to the source group only)
    controller = pipeline.start_controller("controller-alo")
    worker = pipeline.start_worker("w1-alo")
    kafka_io.produce(services["source"], topic, 100, partitions, start=100)
    wait_for(lambda: kafka_io.committed(services["source"], pipeline.group, topic, partitions) == {0: 100, 1: 100},
             60, "at-least-once period committed")
    assert worker.terminate(30) == 0 and controller.terminate(30) == 0
    # When it switches back to exactly-once and mirrors 100 more
    pipeline.start_controller("controller-eos-again", worker=dict(EXACT))
    again = pipeline.start_worker("w1-again", worker=dict(EXACT))
    kafka_io.produce(services["source"], topic, 100, partitions, start=200)
    wait_for(lambda: kafka_io.committed(dst, pipeline.group, topic, partitions) == {0: 150, 1: 150}, 60,
             "exactly-once positions at the end")
    # Then every record is on the destination once, in order: the at-least-once period is not sent again
    for p in range(partitions):
        committed = read_sources(dst, topic, p, "read_committed")
        assert committed == list(range(150)), f"{topic}:{p}: {len(committed)} copies of 150 records"
    assert "transactional_start_from_source_group" in again.log.read_text()
