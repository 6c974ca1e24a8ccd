"""Worker ids (issue 48 §4): how long another session may hold our id before we refuse, and the pool's join."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import NodeExistsError, NoNodeError

from ureplicator.common.zkschema import Paths, WorkerInfo
from ureplicator.worker.main import _join_pool, _leave_pool
from ureplicator.worker.mirror import IdHolderWatch, WorkerIdInUse, describe_holder

INFO = WorkerInfo(host="pod-a", pid=7, version="0.1.0", started_at="2026-12-06T10:00:00+00:00").encode()


def test_the_wait_runs_per_owning_session_and_a_new_owner_starts_it_again():
    now = [0.0]
    holder = IdHolderWatch(11.0, clock=lambda: now[0])
    assert not holder.expired(0xA)
    now[0] = 10.0
    assert not holder.expired(0xA)
    now[0] = 10.5  # the old session expired and another registered: its own full wait
    assert not holder.expired(0xB)
    now[0] = 21.0
    assert not holder.expired(0xB)
    now[0] = 21.6
    assert holder.expired(0xB)


def test_the_holder_is_named_by_host_pid_and_start():
    assert describe_holder(INFO, 0x1F) == "host pod-a, pid 7, started_at 2026-12-06T10:00:00+00:00, session 0x1f"
    assert describe_holder(b"{", 0x1F) == "registration unreadable, session 0x1f"


class FakeClient:
    """The few kazoo calls the pool's join makes; nodes carry their owning session."""

    def __init__(self, session: int) -> None:
        self.client_id = (session, b"")
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.deleted: list[str] = []

    def ensure_path(self, path: str) -> None:
        pass

    def create(self, path: str, value: bytes, ephemeral: bool = False) -> None:
        if path in self.nodes:
            raise NodeExistsError()
        self.nodes[path] = (value, self.client_id[0])

    def get(self, path: str) -> tuple[bytes, Any]:
        if path not in self.nodes:
            raise NoNodeError()
        data, owner = self.nodes[path]
        return data, SimpleNamespace(ephemeralOwner=owner, version=0)

    def delete(self, path: str, version: int = -1) -> None:
        del self.nodes[path]
        self.deleted.append(path)


def test_a_pool_worker_refuses_an_id_another_live_session_holds_and_leaves_its_node_alone():
    paths = Paths("/p")
    client = FakeClient(session=2)
    client.nodes[paths.pool_worker("w1")] = (INFO, 1)
    with pytest.raises(WorkerIdInUse, match=r"'w1' is in use by a live worker \(host pod-a, pid 7"):
        _join_pool(client, paths, "w1", b"{}", threading.Event(), wait_s=0.6)
    _leave_pool(client, paths.pool_worker("w1"))
    assert client.nodes[paths.pool_worker("w1")] == (INFO, 1) and not client.deleted


def test_a_pool_worker_takes_its_id_once_the_previous_node_is_gone_and_deletes_only_its_own():
    paths = Paths("/p")
    client = FakeClient(session=2)
    assert _join_pool(client, paths, "w1", b"{}", threading.Event(), wait_s=5.0)
    _leave_pool(client, paths.pool_worker("w1"))
    assert client.deleted == [paths.pool_worker("w1")]
