"""Measure: each partition's longest arrival gap through repeated ZooKeeper restarts (docs/operations.md's numbers).

Not a CI test (about 3 minutes): run it on demand, on a stack of its own (it restarts ZooKeeper)::

    UREPLICATOR_REPRODUCTIONS=1 .venv/bin/python -m pytest tests/reproductions/test_zookeeper_restart_gaps.py -s

Three workers and two controllers on the default 10 s session (a 9 s lease), 16 partitions
at 2,000 records/s, ZooKeeper stopped, left down for 3, 5 and 6.5 s in turn
(``UREPLICATOR_ZK_DOWN_S``, comma-separated) and started again, ``UREPLICATOR_ZK_RESTARTS``
times (10 by default). Each restart prints how long ZooKeeper was away, the longest destination
and source gaps and whether every worker kept its session. A restart shorter than the lease
(less the renewal cadence and the reconnection) must leave every gap under a second, and every
restart every session.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from devtools import stack
from tests.integration.test_worker_faults import ArrivalWatch, worker_sessions
from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.load import ContinuousProducer
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Paths
from ureplicator.worker.mirror import lease_s

pytestmark = [pytest.mark.integration, pytest.mark.disruptive]

PARTITIONS = 16
WORKERS = ("w1", "w2", "w3")
SESSION_S = 10.0


def test_zookeeper_restarts_shorter_than_the_lease_pause_nothing(pipeline, services):
    topic = f"{pipeline.name}-zkgaps"
    kafka_io.create_topic(services["source"], topic, PARTITIONS)
    settings = {"zookeeper": {"connect": services["zookeeper"], "session_timeout_s": SESSION_S},
                "worker": {"commit_interval_s": 5}}
    pipeline.start_controller("c1", **settings)
    pipeline.start_controller("c2", **settings)
    for worker in WORKERS:
        pipeline.start_worker(worker, **settings)
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    paths = Paths(config_module.from_dict(pipeline.config_doc(**settings)).root)
    results = []
    with ContinuousProducer(services["source"], topic, PARTITIONS, rate_per_s=2000):
        wait_for(lambda: all(kafka_io.end_offsets(services["destination"], topic, PARTITIONS).values()), 90,
                 "every partition mirrored")
        destination = ArrivalWatch(services["destination"], topic, PARTITIONS)
        source = ArrivalWatch(services["source"], topic, PARTITIONS)
        try:
            for watch, side in ((destination, "destination"), (source, "source")):  # past their backlog
                ends = kafka_io.end_offsets(services[side], topic, PARTITIONS)
                wait_for(lambda w=watch, e=ends: all(len(w.arrivals[p]) >= e[p] for p in range(PARTITIONS)), 60,
                         f"the {side} watch caught up")
            downs = [float(d) for d in os.environ.get("UREPLICATOR_ZK_DOWN_S", "3,5,6.5").split(",")]
            for i in range(int(os.environ.get("UREPLICATOR_ZK_RESTARTS", "10"))):
                sessions = worker_sessions(services["zookeeper"], paths, WORKERS)
                down_at = time.time()
                stack.stop_service(services["dir"], "zookeeper")
                time.sleep(downs[i % len(downs)])
                stack.start_service(services["dir"], "zookeeper", timeout_s=120)
                away = time.time() - down_at
                # Past the lease, and past the fence's rewind if there was one
                time.sleep(max(0.0, down_at + lease_s(SESSION_S) + 3 - time.time()))
                end = time.time()
                gaps = [destination.longest_gap(p, down_at - 0.5, end) for p in range(PARTITIONS)]
                source_gaps = [source.longest_gap(p, down_at - 0.5, end) for p in range(PARTITIONS)]
                kept = worker_sessions(services["zookeeper"], paths, WORKERS) == sessions
                results.append({"restart": i, "away_s": round(away, 2), "max_gap_s": round(max(gaps), 3),
                                "median_gap_s": round(sorted(gaps)[PARTITIONS // 2], 3),
                                "source_max_gap_s": round(max(source_gaps), 3), "sessions_kept": kept})
                print(json.dumps(results[-1]), flush=True)
                time.sleep(2)
        finally:
            destination.stop()
            source.stop()
    print("longest gap per restart:", [r["max_gap_s"] for r in results])
    lease = lease_s(SESSION_S)
    assert all(r["sessions_kept"] for r in results), results
    # Shorter than the lease: from the last renewal (at most 0.5 s before the stop) to the
    # reconnection (at most 0.35 s after ZooKeeper is back), with room to spare
    assert all(r["max_gap_s"] < 1.0 for r in results if r["away_s"] < lease - 1.0), results
