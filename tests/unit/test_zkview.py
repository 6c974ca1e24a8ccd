"""The leader's route view: what wakes a round, and when written assignments are read again."""

from __future__ import annotations

import queue
from types import SimpleNamespace
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.recipe.cache import NodeData, TreeEvent

from ureplicator.common.zkschema import Assignment, PartitionStatus, Paths, WorkerStatus
from ureplicator.controller.zkview import RouteView

PATHS = Paths("/u/p/routes/r")


class Client:
    """What RouteView asks of kazoo outside its caches: one node read, counted."""

    handler = SimpleNamespace(queue_impl=queue.Queue)

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.reads: list[str] = []

    def get(self, path: str) -> tuple[bytes, Any]:
        self.reads.append(path)
        if path not in self.nodes:
            raise NoNodeError()
        return self.nodes[path], None

    def get_children(self, path: str) -> list[str]:
        self.reads.append(path)
        prefix = path + "/"
        return [p[len(prefix):] for p in self.nodes if p.startswith(prefix)]


def stat(zxid: int, czxid: int | None = None) -> Any:
    return SimpleNamespace(mzxid=zxid, czxid=czxid if czxid is not None else zxid)


def event(kind: int, path: str, data: bytes, zxid: int, czxid: int | None = None) -> TreeEvent:
    return TreeEvent.make(kind, NodeData.make(path, data, stat(zxid, czxid)))


def status(generation: int, partitions: list[int], rate: float = 1.0) -> bytes:
    return WorkerStatus(generation, {("t", p): PartitionStatus(records_per_s=rate) for p in partitions}).encode()


def view() -> tuple[RouteView, Client, list[int]]:
    woken: list[int] = []
    client = Client()
    route_view = RouteView(client, PATHS, lambda: woken.append(1), own_root=True)  # type: ignore[arg-type]
    route_view._on_event(TreeEvent.make(TreeEvent.INITIALIZED, None))
    woken.clear()
    return route_view, client, woken


def test_a_status_refresh_that_only_moves_rates_wakes_nothing():
    route_view, _, woken = view()
    path = PATHS.worker_status("w1")
    route_view._on_event(event(TreeEvent.NODE_ADDED, path, status(1, [0, 1]), 10))
    assert len(woken) == 1
    # Rates and lag move: the gate reads nothing new, no round
    route_view._on_event(event(TreeEvent.NODE_UPDATED, path, status(1, [0, 1], rate=9.0), 11))
    assert len(woken) == 1
    assert route_view.statuses()["w1"].partitions[("t", 0)].records_per_s == 9.0  # still the newest document
    # A release (partitions change) or a new generation wakes the leader
    route_view._on_event(event(TreeEvent.NODE_UPDATED, path, status(1, [0]), 12))
    route_view._on_event(event(TreeEvent.NODE_UPDATED, path, status(2, [0]), 13))
    route_view._on_event(event(TreeEvent.NODE_REMOVED, path, b"", 14))
    assert len(woken) == 4 and route_view.statuses() == {}


def test_the_leaders_own_assignment_writes_wake_nothing_and_are_kept_in_memory():
    route_view, client, woken = view()
    route_view._on_event(event(TreeEvent.NODE_ADDED, PATHS.worker("w1"), b"{}", 5))
    client.nodes[PATHS.assignment("w1")] = Assignment(1, frozenset({("t", 0)})).encode()
    assert route_view.written(["w1"]) == {"w1": Assignment(1, frozenset({("t", 0)}))}
    reads = len(client.reads)
    route_view.note_written({"w1": Assignment(2, frozenset({("t", 1)}))}, [])
    route_view._on_event(event(TreeEvent.NODE_UPDATED, PATHS.assignment("w1"), b"ignored", 20))
    assert len(woken) == 1  # the registration only
    # No read for the next rounds: the leader knows what it wrote
    assert route_view.written(["w1"]) == {"w1": Assignment(2, frozenset({("t", 1)}))}
    assert route_view.written(["w1"])["w1"].generation == 2 and len(client.reads) == reads


def test_a_worker_that_registered_anew_has_its_node_read_again():
    route_view, client, _ = view()
    route_view._on_event(event(TreeEvent.NODE_ADDED, PATHS.worker("w1"), b"{}", 5))
    route_view.written(["w1"])  # the first full read: none written
    route_view.note_written({"w1": Assignment(3, frozenset({("t", 0)}))}, [])
    # w1 restarts: it deleted its own assignment node, then registered again (a new czxid)
    route_view._on_event(event(TreeEvent.NODE_REMOVED, PATHS.worker("w1"), b"", 6))
    route_view._on_event(event(TreeEvent.NODE_ADDED, PATHS.worker("w1"), b"{}", 30))
    reads = len(client.reads)
    assert route_view.written(["w1"]) == {}
    assert client.reads[reads:] == [PATHS.assignment("w1")]  # one read, of that node


def test_a_refused_write_or_a_reconnect_reads_every_assignment_again():
    route_view, client, _ = view()
    route_view._on_event(event(TreeEvent.NODE_ADDED, PATHS.worker("w1"), b"{}", 5))
    route_view.written(["w1"])
    route_view.note_written({"w1": Assignment(4, frozenset({("t", 0)}))}, [])
    client.nodes[PATHS.assignment("w1")] = Assignment(3, frozenset()).encode()
    route_view.forget_written()
    assert route_view.written(["w1"]) == {"w1": Assignment(3, frozenset())}
    route_view.note_written({"w1": Assignment(5, frozenset())}, [])
    route_view._on_event(TreeEvent.make(TreeEvent.CONNECTION_RECONNECTED, None))
    assert route_view.written(["w1"])["w1"].generation == 3


def test_no_round_is_planned_before_every_cache_loaded():
    client = Client()
    route_view = RouteView(client, Paths("/u/p"), lambda: None, own_root=False)  # type: ignore[arg-type]
    for _ in range(4):
        route_view._on_event(TreeEvent.make(TreeEvent.INITIALIZED, None))
    assert not route_view.ready
    route_view._on_event(TreeEvent.make(TreeEvent.INITIALIZED, None))
    assert route_view.ready
