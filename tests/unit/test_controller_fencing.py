"""Exactly-once mode: a departed worker's partitions wait in the gate until its transactional id is fenced."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.unit.test_leader import ALL, FakeKazoo, snapshot
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Assignment
from ureplicator.controller import fencing
from ureplicator.controller.leader import Leadership

EXACT = config_module.from_dict({
    "pipeline": "unit",
    "zookeeper": {"connect": "127.0.0.1:1"},
    "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
    "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
    "controller": {"reconcile_interval_s": 0.05},
    "worker": {"exactly_once": True},
})


class Recorder(FakeKazoo):
    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, bytes] = {}

    def create(self, path: str, value: bytes = b"", makepath: bool = False) -> str:
        self.nodes[path] = value
        return path


def exact_leader(init: Any) -> tuple[Leadership, Recorder]:
    client = Recorder()
    leader = Leadership(EXACT, client, "c1", cache=False)  # type: ignore[arg-type]
    assert leader._fencer is not None
    leader._fencer._init = init
    return leader, client


def test_a_departed_workers_partitions_wait_for_its_fence_then_move():
    # Given w1 owned everything and departed (its node is gone), w2 is live; the fence is slow
    release = threading.Event()
    fenced: list[str] = []

    def init(txn_id: str) -> None:
        release.wait(5)
        fenced.append(txn_id)

    leader, client = exact_leader(init)
    written = {"w1": Assignment(1, ALL)}
    # When the leader plans before the fence is done
    first = leader._plan(snapshot(["w2"], written), now=1000.0)
    # Then nothing of w1's goes to w2, and w1's assignment node is kept (a new leader fences again)
    assert first.changed.get("w2", Assignment(2)).partitions == frozenset()
    assert first.withheld == ALL and "w1" not in first.departed
    # When the fence is done
    release.set()
    deadline = time.monotonic() + 5
    while not fenced and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    second = leader._plan(snapshot(["w2"], written), now=1001.0)
    # Then w2 gets them, w1's node goes, and the fence is recorded in ZooKeeper
    assert fenced == ["ureplicator.unit.w1"]
    assert second.changed["w2"].partitions == ALL and second.departed == ["w1"]
    assert b'"state": "fenced"' in client.nodes["/ureplicator/unit/fences/w1"]


def test_at_least_once_pipelines_fence_nothing():
    from tests.unit.test_leader import leadership
    leader = leadership()
    assert leader._fencer is None
    plan = leader._plan(snapshot(["w2"], {"w1": Assignment(1, ALL)}), now=1000.0)
    assert plan.changed["w2"].partitions == ALL


def test_the_mode_is_recorded_once_and_rewritten_when_it_changes():
    class Log:
        def warning(self, event: str, **kw: Any) -> None:
            pass

    client = Recorder()
    fencing.record_mode(client, "/r", True, Log())
    assert client.nodes["/r/mode"] == b'{"exactly_once": true}'
