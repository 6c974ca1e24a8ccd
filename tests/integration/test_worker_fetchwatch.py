"""A source consumer that silently stops fetching a partition is noticed and replaced (worker/fetchwatch.py)."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import TopicPartition
from structlog.testing import capture_logs

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.load import ContinuousProducer, compare, wait_mirrored
from ureplicator.common import config as config_module
from ureplicator.worker.mirror import MirrorWorker

pytestmark = pytest.mark.integration

STALL_S = 2.0


def stalls(worker: MirrorWorker, action: str) -> float:
    return worker.metrics.registry.get_sample_value(
        "ureplicator_worker_fetch_stalls_total", {"route": worker.metrics.route, "action": action}) or 0.0


def test_a_partition_the_consumer_stops_fetching_flows_again_with_nothing_lost(pipeline, services):
    # Given an in-process worker mirroring two partitions under load, its fetch watch set to 2 s
    topic = f"{pipeline.name}-fetchwatch"
    kafka_io.create_topic(services["source"], topic, 2)
    pipeline.start_controller()
    cfg = config_module.from_dict(pipeline.config_doc(worker={"id": "w1", "fetch_stall_s": STALL_S}))
    worker = MirrorWorker(cfg, "w1")
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    first = worker.consumer
    try:
        with capture_logs() as logs, ContinuousProducer(services["source"], topic, 2, rate_per_s=400) as load:
            wait_for(lambda: len(worker.owned) == 2 and worker.produced > 100, 60, "mirroring")
            # When partition 0 stops fetching behind the loop's back (librdkafka #5153's symptom:
            # no error, no record, while the source grows)
            worker.consumer.pause([TopicPartition(topic, 0)])
            stalled_at = time.monotonic()
            acks = worker.owned[(topic, 0)]
            before = acks.position
            # Then the watch replaces the source consumer, and the partition flows again
            wait_for(lambda: stalls(worker, "replace_consumer") >= 1, 3 * STALL_S + 5, "consumer replaced",
                     interval_s=0.1)
            replaced_after_s = time.monotonic() - stalled_at
            wait_for(lambda: worker.owned[(topic, 0)].position > before + 100, 20, "partition 0 flowing again")
        assert worker.consumer is not first and worker.handoff._consumer is worker.consumer
        assert worker.status._consumer is worker.consumer
        # never before one stall period (the wait above bounds it from above)
        assert replaced_after_s >= STALL_S, replaced_after_s
        events = [e for e in logs if e["event"] == "fetch_stalled"]
        assert [e["action"] for e in events] == ["replace_consumer"]
        assert all(e["topic"] == topic and e["partition"] == 0 and e["end_offset"] > e["position"] for e in events)
        # And nothing was lost, skipped or reordered
        wait_mirrored(services, topic, 2, timeout_s=60)
        result = compare(services, topic, 2)
        assert result["lost"] == 0 and result["reordered"] == 0 and result["records"] == load.sent
    finally:
        worker.stop()
        runner.join(30)
