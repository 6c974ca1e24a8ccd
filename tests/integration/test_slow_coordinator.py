"""A source group coordinator that hangs during an acquisition stops only the partitions being acquired.

The source's clients go through devtools.kproxy, which withholds every group-coordinator
request while it "hangs" and lets fetches and produces through: on this one-broker
cluster that is what a hung coordinator broker of a real cluster looks like.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left, bisect_right

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from structlog.testing import capture_logs

from devtools.kproxy import KafkaProxy
from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.load import ContinuousProducer, compare, wait_mirrored
from ureplicator.common import config as config_module
from ureplicator.worker.mirror import MirrorWorker

pytestmark = pytest.mark.integration

HOLD_S = 4.0  # how long the coordinator keeps hanging once the acquisition waits on it
# The target is 0.5 s, measured by bench/stalls on a quiet machine. This test runs on a
# 2-core machine shared with other suites and a soak, where the arrival consumer itself can be
# descheduled for a second; 2 s still fails if the acquisition blocks the loop (it would stall
# the unmoved partitions for the whole hang, HOLD_S and more).
UNMOVED_GAP_BOUND_S = 2.0


class ArrivalTimes:
    """Destination consumer noting when each partition's records arrive (the observable a user has)."""

    def __init__(self, bootstrap: str, partitions: list[tuple[str, int]]) -> None:
        self.times: dict[tuple[str, int], list[float]] = {tp: [] for tp in partitions}
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"arrivals-{time.time_ns()}",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        self.consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in partitions])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self.consumer.consume(500, 0.05):
                if msg.error() is None:
                    self.times[(msg.topic(), msg.partition())].append(time.time())

    def first_after(self, tp: tuple[str, int], t: float) -> float | None:
        later = self.times[tp][bisect_right(self.times[tp], t):]
        return later[0] if later else None

    def longest_gap(self, tp: tuple[str, int], t0: float, t1: float) -> float:
        times = self.times[tp]
        points = [t0, *times[bisect_left(times, t0):bisect_right(times, t1)], t1]
        return max(b - a for a, b in zip(points, points[1:], strict=False))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def acquiring(pipeline, worker: str) -> bool:
    """The leader wrote ``worker`` a generation it has not applied yet (``GET /validation``)."""
    status, body = pipeline.api("GET", "/validation")
    rows = [r for r in body.get("workers", []) if r.get("worker") == worker] if status == 200 else []
    return bool(rows) and (rows[0]["desired_generation"] or 0) > (rows[0]["applied_generation"] or 0)


def test_a_hung_source_coordinator_holds_the_acquired_partitions_only(pipeline, services):
    # Given a worker whose source clients all go through the proxy, mirroring topic A under load
    flowing, acquired = f"{pipeline.name}-coord-a", f"{pipeline.name}-coord-b"
    for topic in (flowing, acquired):
        kafka_io.create_topic(services["source"], topic, 2)
    with KafkaProxy(services["source"]) as proxy:
        pipeline.services = {**pipeline.services, "source": proxy.address}
        pipeline.start_controller()
        worker = MirrorWorker(config_module.from_dict(pipeline.config_doc(worker={"id": "w1"})), "w1")
        runner = threading.Thread(target=worker.run, daemon=True)
        runner.start()
        arrivals = ArrivalTimes(services["destination"], [(t, p) for t in (flowing, acquired) for p in range(2)])
        try:
            with capture_logs() as logs, \
                    ContinuousProducer(services["source"], flowing, 2, rate_per_s=400) as load_a, \
                    ContinuousProducer(services["source"], acquired, 2, rate_per_s=200) as load_b:
                assert pipeline.api("POST", "/topics", {"topic": flowing})[0] == 201
                wait_for(lambda: all(arrivals.first_after((flowing, p), time.time() - 0.5) for p in range(2)),
                         60, "topic A flowing")
                # When the source's group coordinator hangs and topic B is handed to the worker
                proxy.hang()
                hung_at = time.time()
                assert pipeline.api("POST", "/topics", {"topic": acquired})[0] == 201
                # (the acquisition waits: its committed-offsets read queues behind a commit the coordinator
                # does not answer, or is itself not answered)
                wait_for(lambda: acquiring(pipeline, "w1"), 30, "w1 acquiring topic B", interval_s=0.1)
                waiting_at = time.time()
                time.sleep(HOLD_S)  # the hang goes on; what flowed meanwhile is asserted below
                proxy.release()
                released_at = time.time()
                # Then B flows once the coordinator answers, A never stopped, and nothing is lost
                wait_for(lambda: all(arrivals.first_after((acquired, p), 0) for p in range(2)), 60, "topic B flowing")
                # A keeps flowing until well after the release, so its window closes with arrivals
                wait_for(lambda: all(arrivals.first_after((flowing, p), released_at + 1) for p in range(2)), 30,
                         "topic A flowing after the release")
            stats = proxy.stats()
            wait_mirrored(services, flowing, 2, timeout_s=60)
            wait_mirrored(services, acquired, 2, timeout_s=60)
        finally:
            proxy.release()
            arrivals.close()
            worker.stop()
            runner.join(30)
    gaps = {p: arrivals.longest_gap((flowing, p), hung_at, released_at + 1) for p in range(2)}
    assert max(gaps.values()) < UNMOVED_GAP_BOUND_S, (gaps, stats)
    # The hang really held the acquisition: B's first record arrived only after the release.
    first_b = min(arrivals.first_after((acquired, p), 0) or 0.0 for p in range(2))
    assert first_b > released_at, (first_b - released_at, stats)
    # ... and it held group-coordinator traffic only (no fetch or produce queued behind a group request).
    assert stats["held_data_requests"] == 0 and stats["mixed_connections"] == 0, stats
    assert not stats["errors"], stats
    for topic, load in ((flowing, load_a), (acquired, load_b)):
        result = compare(services, topic, 2)
        assert result["lost"] == 0 and result["reordered"] == 0 and result["records"] == load.sent, (topic, result)
    waited = [e for e in logs if e["event"] == "committed_offsets_retry"]
    print(f"waiting on the coordinator after {waiting_at - hung_at:.2f}s; A's longest gaps {gaps}; "
          f"B first record {first_b - released_at:.2f}s after the release; committed retries {len(waited)}; "
          f"held {stats['held']}")
