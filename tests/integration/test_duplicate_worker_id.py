"""Worker ids (issue 48 §4): a second live process with a worker's id is refused; a restart is not."""

from __future__ import annotations

import socket
import time

import pytest
from kazoo.client import KazooClient

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.load import wait_mirrored
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Paths, WorkerInfo

pytestmark = pytest.mark.integration

SESSION_S = 6


def _nodes(client: KazooClient, paths: Paths, wid: str) -> dict[str, tuple[int, int, int]]:
    """(ephemeralOwner, czxid, mzxid-or-version) of a worker's registration, status and assignment."""
    out = {}
    for name, path in (("worker", paths.worker(wid)), ("status", paths.worker_status(wid)),
                       ("assignment", paths.assignment(wid))):
        _, stat = client.get(path)
        # the status is rewritten periodically: its owner and creation are what must not change
        out[name] = (stat.ephemeralOwner, stat.czxid, stat.mzxid if name != "status" else 0)
    return out


@pytest.fixture
def zk_client(services):
    client = KazooClient(hosts=services["zookeeper"])
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def _mirroring_w1(pipeline, services, suffix: str):  # noqa: ANN202
    topic = f"{pipeline.name}-{suffix}"
    kafka_io.create_topic(services["source"], topic, 2)
    kafka_io.produce(services["source"], topic, 200, 2)
    pipeline.start_controller()
    w1 = pipeline.start_worker("w1", zookeeper={"session_timeout_s": SESSION_S})
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    wait_mirrored(services, topic, 2)
    paths = Paths(config_module.from_dict(pipeline.config_doc()).root)
    return topic, w1, paths


def test_a_second_live_process_with_the_same_id_is_refused_and_leaves_the_live_worker_alone(
        pipeline, services, zk_client):
    # Given worker w1 mirroring a topic, its partitions assigned
    topic, w1, paths = _mirroring_w1(pipeline, services, "dup")
    wait_for(lambda: zk_client.exists(paths.assignment("w1")) is not None, 30, "w1's assignment")
    before = _nodes(zk_client, paths, "w1")
    live = WorkerInfo.decode(zk_client.get(paths.worker("w1"))[0])
    assert live.pid == w1.pid
    # When a second process starts with the same id (a copy-pasted config)
    config = pipeline.write_config("w1-dup", worker={"id": "w1"}, zookeeper={"session_timeout_s": SESSION_S})
    started = time.monotonic()
    dup = pipeline._spawn("w1-dup", ["worker", "--config", str(config)])
    # Then it exits non-zero within the session timeout and a margin, naming the id and the live worker
    wait_for(lambda: not dup.alive(), SESSION_S + 15 + 10, "the duplicate's refusal")  # + 10: its start-up
    took = time.monotonic() - started
    code = dup.popen.returncode
    text = dup.tail(80)
    assert code == 2, f"exit {code}:\n{text}"
    assert "'w1' is in use by a live worker" in text, text
    assert f"host {socket.gethostname()}" in text and f"pid {w1.pid}" in text, text
    assert f"started_at {live.started_at}" in text, text
    # And the live worker was left alone: alive, same nodes of the same session, its assignment untouched
    assert w1.alive(), pipeline.logs()
    assert _nodes(zk_client, paths, "w1") == before
    # And it keeps mirroring
    kafka_io.produce(services["source"], topic, 200, 2, start=200, tag="after")
    wait_mirrored(services, topic, 2, timeout_s=60)
    assert _nodes(zk_client, paths, "w1") == before
    print(f"refused after {took:.1f} s (session {SESSION_S} s)")


def test_a_restarted_worker_with_the_same_id_waits_out_its_killed_predecessor_and_registers(
        pipeline, services, zk_client):
    # Given worker w1 mirroring, then killed (SIGKILL: its nodes stay until its session expires)
    topic, w1, paths = _mirroring_w1(pipeline, services, "restart")
    old_owner = zk_client.get(paths.worker("w1"))[1].ephemeralOwner
    w1.kill()
    assert zk_client.exists(paths.worker("w1")) is not None
    # When it is started again at once with the same id (a pod restarted within the session timeout)
    config = pipeline.write_config("w1-again", worker={"id": "w1"}, zookeeper={"session_timeout_s": SESSION_S})
    again = pipeline._spawn("w1-again", ["worker", "--config", str(config)])

    def registered_anew() -> bool:
        stat = zk_client.exists(paths.worker("w1"))
        return stat is not None and stat.ephemeralOwner != old_owner

    # Then it waits the old session out and registers, and mirrors what arrives
    wait_for(registered_anew, SESSION_S + 30, "re-registration after the old session expired")
    assert again.alive(), again.tail()
    assert WorkerInfo.decode(zk_client.get(paths.worker("w1"))[0]).pid == again.pid
    kafka_io.produce(services["source"], topic, 200, 2, start=200, tag="after")
    wait_mirrored(services, topic, 2, timeout_s=90)
    assert again.alive() and "worker_id_in_use" not in again.tail(400)
