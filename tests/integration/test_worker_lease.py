"""The lease follows ZooKeeper's answers, not the pace of the worker's loop (issue 44, section 4).

A loop that waits (a wait for a destination's metadata, a rewind's wait for reports, a slow
commit) longer than the lease, while ZooKeeper answers throughout, must not fence the worker:
its session lives, so nobody else can be given its partitions, and a fence would only purge,
replace the producer and send records again. The other half, a ZooKeeper that really stops
answering, fences the worker as before (tests/unit/test_worker_lease.py: freezing the shared
ZooKeeper is not allowed here).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.load import ContinuousProducer, compare, wait_mirrored
from ureplicator.common import config as config_module
from ureplicator.worker.mirror import MirrorWorker

pytestmark = pytest.mark.integration


def test_a_loop_blocked_past_the_lease_while_zookeeper_answers_does_not_fence_the_worker(pipeline, services):
    # Given an in-process worker mirroring two partitions under continuous produce (6 s session: a 5 s lease)
    topic = f"{pipeline.name}-lease"
    kafka_io.create_topic(services["source"], topic, 2)
    pipeline.start_controller()
    cfg = config_module.from_dict(pipeline.config_doc(worker={"id": "w1", "commit_interval_s": 1}))
    worker = MirrorWorker(cfg, "w1")
    block = threading.Event()
    blocked: list[float] = []
    mirror = worker.loop.mirror

    def mirror_then_wait(messages: Any) -> Any:
        # The loop thread stops right after handing records to the producer, as a long wait
        # inside a turn does; ZooKeeper is untouched and answers all along.
        result = mirror(messages)
        if block.is_set() and not blocked:
            blocked.append(worker.lease_window_s + 2.0)
            time.sleep(blocked[0])
        return result

    worker.loop.mirror = mirror_then_wait
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
        with ContinuousProducer(services["source"], topic, 2, rate_per_s=500) as load:
            wait_for(lambda: worker.produced > 300 and len(worker.owned) == 2, 60, "mirroring")
            # When the loop thread is blocked for longer than the lease
            block.set()
            wait_for(lambda: bool(blocked), 30, "the loop blocked")
            assert blocked[0] > worker.lease_window_s
            produced = worker.produced
            wait_for(lambda: worker.produced > produced + 300, 60, "mirroring after the block")
        # Then the worker did not fence itself: no purge, no new producer, no partition sent again
        assert worker.metrics.producer_replacements._value.get() == 0, "the worker purged and replaced its producer"
        assert worker.metrics.rewinds._value.get() == 0, "partitions were rewound"
        assert worker.ready
        wait_mirrored(services, topic, 2)
        result = compare(services, topic, 2)
        assert result["lost"] == 0 and result["duplicated"] == 0 and result["records"] == load.sent, result
    finally:
        worker.stop()
        runner.join(30)
    assert not runner.is_alive()
    # And the lease's timer thread stopped with the worker
    assert not [t for t in threading.enumerate() if t.name == "lease-w1"]
