"""Issue 48 §7 on real Kafka: a source log start that moves past a lagging worker's position.

The fetching consumer never resets by itself (``auto.offset.reset=error``): records deleted
before they were mirrored are counted in ``ureplicator_worker_records_expired_total``, named in
the partition's status, and the partition continues from the log start, whatever
``worker.auto_offset_reset`` says (it decides only where a partition with no commit starts).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from devtools.ports import free_port
from tests.integration.test_worker_faults import scrape
from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from ureplicator.common import config as config_module
from ureplicator.common import zk
from ureplicator.common.zkschema import Paths

pytestmark = pytest.mark.integration

RECORDS = 3000
LOG_START = 2000  # where delete-records moves the log start
VALUE = b"x" * 4000  # large records and a small fetch queue: the consumer fetches little ahead of the loop


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer(kafka_io.client_config(bootstrap, **{"linger.ms": 5, "enable.idempotence": True}))
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, key=f"k{i}".encode(), value=VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_records_deleted_before_mirroring_are_counted_and_the_partition_continues(pipeline, services, reset):
    # Given a one-partition topic, registered while empty, and a worker limited to 200 records/s
    # whose consumer fetches at most ~64 KiB ahead of what it mirrored
    topic = f"{pipeline.name}-gap"
    kafka_io.create_topic(services["source"], topic, 1)
    port = free_port()
    pipeline.start_controller(worker={"auto_offset_reset": reset})
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    pipeline.start_worker("w1", worker={"metrics_port": port, "max_records_per_s": 200, "auto_offset_reset": reset},
                          source={"properties": {
                              "queued.max.messages.kbytes": 64, "max.partition.fetch.bytes": 65536,
                              "fetch.max.bytes": 1000000, "message.max.bytes": 1000000}})
    wait_for(lambda: scrape(port, "ureplicator_worker_partitions_owned") >= 1, 60, "w1 owns the partition")
    _produce(services["source"], topic)
    wait_for(lambda: scrape(port, "ureplicator_worker_records_mirrored_total") >= 100, 60, "w1 mirroring")

    # When delete-records moves the source's log start to 2000 while the worker stands far below it
    admin = AdminClient({"bootstrap.servers": services["source"]})
    for future in admin.delete_records([TopicPartition(topic, 0, LOG_START)]).values():
        assert future.result(timeout=30).low_watermark == LOG_START

    # Then every record the source still holds reaches the destination, exactly once
    def copied() -> list[int]:
        records = kafka_io.read_partition(services["destination"], topic, 0) if kafka_io.end_offsets(
            services["destination"], topic, 1)[0] else []
        return [r.provenance().source_offset for r in records]

    wait_for(lambda: set(range(LOG_START, RECORDS)) <= set(copied()), 90, "every record >= the log start mirrored")
    offsets = copied()
    kept = [o for o in offsets if o >= LOG_START]
    assert kept == list(range(LOG_START, RECORDS)), "a record of the new log skipped or mirrored twice"
    below = [o for o in offsets if o < LOG_START]
    assert below == list(range(len(below))), "the records mirrored before the deletion: a prefix, once each"
    assert len(below) < LOG_START - 500, "the worker was not behind the new log start: nothing tested"
    # and exactly the records deleted before they were mirrored are counted as expired
    lost = LOG_START - len(below)
    wait_for(lambda: scrape(port, "ureplicator_worker_records_expired_total") == lost, 30,
             f"records_expired_total = {lost}")
    # and the partition's status names the gap while it mirrors on
    cfg = config_module.from_dict(pipeline.config_doc())
    client = zk.connect(cfg)
    try:
        data, _ = client.get(Paths(cfg.root).worker_status("w1"))
    finally:
        client.stop()
        client.close()
    error = json.loads(data)["partitions"][topic]["0"]["error"]
    assert f"records [{len(below)}, {LOG_START}) were deleted from the source before they were mirrored" in error
    # and the log names the range
    lines = [json.loads(line) for line in (pipeline.workdir / f"{pipeline.name}-w1.log").read_text().splitlines()
             if line.startswith("{") and "records_expired_before_mirroring" in line]
    assert [(e["first_expired"], e["log_start"], e["records"]) for e in lines] == [(len(below), LOG_START, lost)]
