"""Exactly-once mode: a departed worker's partitions wait in the gate until its transactional id is fenced."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException

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


def exact_leader(init: Any) -> tuple[Leadership, Recorder, list[Any]]:
    """An exactly-once leader whose fences wait in the returned list until the test runs them."""
    client = Recorder()
    leader = Leadership(EXACT, client, "c1", cache=False)  # type: ignore[arg-type]
    assert leader._fencer is not None
    pending: list[Any] = []
    leader._fencer._init = init
    leader._fencer._spawn = lambda run, name: pending.append(run)
    return leader, client, pending


def test_a_departed_workers_partitions_wait_for_its_fence_then_move():
    # Given w1 owned everything and departed (its node is gone), w2 is live
    fenced: list[str] = []
    leader, client, pending = exact_leader(fenced.append)
    written = {"w1": Assignment(1, ALL)}
    # When the leader plans before the fence is done
    first = leader._plan(snapshot(["w2"], written), now=1000.0)
    # Then nothing of w1's goes to w2, and w1's assignment node is kept (a new leader fences again)
    assert first.changed.get("w2", Assignment(2)).partitions == frozenset()
    assert first.withheld == ALL and "w1" not in first.departed
    assert len(pending) == 1 and not fenced
    # When the fence is done
    pending.pop()()
    second = leader._plan(snapshot(["w2"], written), now=1001.0)
    # Then w2 gets them, w1's node goes, and the fence is recorded in ZooKeeper
    assert fenced == ["ureplicator.unit.w1"]
    assert second.changed["w2"].partitions == ALL and second.departed == ["w1"]
    assert b'"state": "fenced"' in client.nodes["/ureplicator/unit/fences/w1"]


def test_a_fence_that_fails_keeps_the_partitions_withheld_and_is_started_again_after_a_pause():
    # Given w1 departed and a destination that refuses the fence
    def refuse(txn_id: str) -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    leader, client, pending = exact_leader(refuse)
    paused: list[float] = []
    leader._fencer._sleep = paused.append
    written = {"w1": Assignment(1, ALL)}
    leader._plan(snapshot(["w2"], written), now=1000.0)
    # When the fence runs and fails
    pending.pop()()
    # Then it pauses before the next round asks again, and w1's partitions stay withheld
    assert paused == [1.0]
    again = leader._plan(snapshot(["w2"], written), now=1001.0)
    assert again.withheld == ALL and "w1" not in again.departed
    # And that round started the fence again
    assert len(pending) == 1


def test_a_worker_back_while_its_fence_still_runs_gets_nothing_until_the_fence_ends():
    # Given w1 departed and its fence started (the destination was frozen: the fence waits on it)
    fenced: list[str] = []
    leader, client, pending = exact_leader(fenced.append)
    leader._plan(snapshot(["w2"], {"w1": Assignment(1, ALL)}), now=1000.0)
    assert len(pending) == 1
    # When w1 registers again (its session expired; it deleted its own assignment node) before the fence ends
    back = leader._plan(snapshot(["w1", "w2"], {}), now=1001.0)
    # Then w1 gets nothing and its share waits: the fence's retries would fence every producer w1
    # opened a transaction with (the soak's cascade of producer replacements)
    assert back.changed.get("w1", Assignment(0)).partitions == frozenset()
    share = back.withheld
    assert share and not share & back.changed.get("w2", Assignment(0)).partitions
    assert len(pending) == 1  # no second fence: the one running is waited for
    # When the fence ends
    pending.pop()()
    after = leader._plan(snapshot(["w1", "w2"], {}), now=1002.0)
    # Then w1 gets its share
    assert after.changed["w1"].partitions == share
    assert not after.withheld


def test_a_fence_that_fails_while_its_worker_is_back_lifts_the_hold_without_fencing_again():
    def refuse(txn_id: str) -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    leader, client, pending = exact_leader(refuse)
    leader._fencer._sleep = lambda s: None
    leader._plan(snapshot(["w2"], {"w1": Assignment(1, ALL)}), now=1000.0)
    share = leader._plan(snapshot(["w1", "w2"], {}), now=1001.0).withheld
    assert share
    pending.pop()()  # the fence fails; w1 registered again meanwhile, so it fenced its predecessor itself
    after = leader._plan(snapshot(["w1", "w2"], {}), now=1002.0)
    assert after.changed["w1"].partitions == share
    assert not after.withheld and not pending


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
