"""A worker whose ZooKeeper session expires stops writing until it has re-registered."""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.client import KazooClient

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.load import ContinuousProducer, compare, wait_mirrored
from ureplicator.common import config as config_module
from ureplicator.common import zk
from ureplicator.worker.mirror import MirrorWorker, lease_s

pytestmark = pytest.mark.integration


def expire_session(client: KazooClient, hosts: str) -> None:
    """Kazoo's own trick (kazoo.testing.harness): close a second client sharing the session."""
    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_expired_session_stops_writing_until_reregistered(pipeline, services):
    # Given an in-process worker mirroring under continuous produce
    topic = f"{pipeline.name}-fenced"
    kafka_io.create_topic(services["source"], topic, 2)
    pipeline.start_controller()
    cfg = config_module.from_dict(pipeline.config_doc(worker={"id": "w1", "commit_interval_s": 1}))
    worker = MirrorWorker(cfg, "w1")
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    samples: list[tuple[float, int, int, bool]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            samples.append((time.monotonic(), worker.produced, len(worker.owned), worker.session_lost))
            time.sleep(0.005)

    try:
        with ContinuousProducer(services["source"], topic, 2, rate_per_s=1000) as load:
            wait_for(lambda: worker.produced > 500, 60, "mirroring")
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            # When its session expires
            expire_session(worker.zk, services["zookeeper"])
            # Then it drops its partitions, re-registers and mirrors again
            wait_for(lambda: any(s[3] for s in samples), 20, "session loss noticed", interval_s=0.05)
            wait_for(lambda: samples and samples[-1][2] == 2 and not samples[-1][3], 30, "re-registered")
            produced_before = worker.produced
            wait_for(lambda: worker.produced > produced_before + 200, 30, "mirroring again")
            sampling.set()
            sampler.join(5)
        # and between noticing the loss and getting partitions back it wrote nothing
        lost = next(i for i, s in enumerate(samples) if s[3])
        back = next(i for i in range(lost, len(samples)) if samples[i][2] > 0 and not samples[i][3])
        fenced_window = samples[lost:back]
        assert fenced_window, "no sample inside the fenced window"
        assert len({s[1] for s in fenced_window}) == 1, "records were produced while fenced"
        assert any(s[2] == 0 for s in fenced_window), "partitions were not dropped"
        wait_mirrored(services, topic, 2)
        result = compare(services, topic, 2)
        assert result["lost"] == 0 and result["reordered"] == 0 and result["records"] == load.sent
    finally:
        worker.stop()
        runner.join(30)


def test_a_status_node_our_new_session_created_early_does_not_block_the_registration(pipeline, services):
    # Given a worker whose new session already holds its status node: a status write sent
    # before the old session expired was answered NoNode afterwards, and the publisher
    # created the node in the new session (seen in the exactly-once soak)
    pipeline.start_controller()
    cfg = config_module.from_dict(pipeline.config_doc(worker={"id": "w-early", "commit_interval_s": 1}))
    worker = MirrorWorker(cfg, "w-early")
    try:
        status_path = worker.paths.worker_status("w-early")
        worker.zk.create(status_path, b"{}", ephemeral=True, makepath=True)
        # When it registers (with a short wait for another session's nodes)
        worker.register(wait_s=3)
        # Then the registration and a fresh status are there, both of this session
        session = worker.zk.client_id[0]
        for path in (worker.paths.worker("w-early"), status_path):
            data, stat = worker.zk.get(path)
            assert stat.ephemeralOwner == session and data != b"{}", path
    finally:
        worker.stop()
        worker.zk.stop()


def test_the_lease_follows_the_session_zookeeper_granted_not_the_one_asked(pipeline, services):
    # Given a worker that asks for a 120 s session from a ZooKeeper whose maxSessionTimeout is 60 s
    cfg = config_module.from_dict(pipeline.config_doc(worker={"id": "w1"},
                                                      zookeeper={"connect": services["zookeeper"],
                                                                 "session_timeout_s": 120}))
    client = zk.connect(cfg)
    try:
        # Then the client keeps what the server granted
        assert client.granted_session_s == 60.0
    finally:
        client.stop()
        client.close()
    # And the worker's lease ends before the granted session can expire, not the asked one
    worker = MirrorWorker(cfg, "w1")
    try:
        worker.register()
        assert worker.lease_window_s == lease_s(60.0) == 54.0
    finally:
        worker.stop()
        worker._shutdown()
