"""The ZooKeeper client's reconnection (common.zkclient): quick retries, and a silent handshake given up early.

The servers here are plain sockets on loopback, each one a ZooKeeper misbehaviour seen in a
restart: one that accepts and never answers (a connection in the startup window of
ZOOKEEPER-5051), one that accepts and closes at once (a server not running yet). The real
restart, with the session kept, is tests/integration/test_worker_faults.py.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter

import pytest
from kazoo.client import KazooClient

from ureplicator.common import zkclient


class Listener:
    """A loopback server that records when each connection arrived and keeps it open or closes it."""

    def __init__(self, close: bool) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.port = self._server.getsockname()[1]
        self.accepted: list[float] = []
        self._held: list[socket.socket] = []
        self._close = close
        self._stop = threading.Event()
        self._enough = threading.Event()
        self.wanted = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            self.accepted.append(time.monotonic())
            if self._close:
                conn.close()
            else:
                self._held.append(conn)  # open and silent
            if len(self.accepted) >= self.wanted:
                self._enough.set()

    def wait_for(self, count: int, timeout_s: float) -> bool:
        self.wanted = count
        self._enough.clear()
        if len(self.accepted) >= count:
            return True
        return self._enough.wait(timeout_s)

    def close(self) -> None:
        """Stop accepting and close what is held (a client in a handshake wait then stops at once)."""
        self._stop.set()
        self._thread.join(2)
        for conn in self._held:
            conn.close()
        self._server.close()


@pytest.fixture
def listener(request):
    server = Listener(close=request.param)
    yield server
    server.close()


def started(client: KazooClient) -> KazooClient:
    client.start_async()
    return client


def test_handshake_waits_start_short_and_double_up_to_kazoos_bound():
    assert zkclient.handshake_waits(10.0) == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert zkclient.handshake_waits(0.6) == [0.6]  # never longer than kazoo's own
    assert zkclient.handshake_waits(3.0, first_s=0.5) == [0.5, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("listener", [False], indirect=True)
def test_a_silent_server_is_left_after_the_first_handshake_wait_not_the_whole_session(listener, monkeypatch):
    # Given a server that takes the connection and never answers the handshake, a 10 s session,
    # and a first handshake wait of 0.3 s (1 s in production: test_handshake_waits_...)
    monkeypatch.setattr(zkclient, "HANDSHAKE_FIRST_S", 0.3)
    client = started(zkclient.Client(hosts=f"127.0.0.1:{listener.port}", timeout=10.0))
    try:
        # Then the client tries again after that wait (kazoo alone waits the 10 s)
        assert listener.wait_for(2, 5.0), listener.accepted
        assert listener.accepted[1] - listener.accepted[0] < 0.3 + zkclient.RECONNECT_MAX_DELAY_S * 1.4 + 0.5
        # And the wait after that doubles: a slow server still gets its time
        assert listener.wait_for(3, 5.0), listener.accepted
        assert listener.accepted[2] - listener.accepted[1] > 0.58
    finally:
        listener.close()
        client.stop()
        client.close()


@pytest.mark.parametrize("listener", [True], indirect=True)
def test_reconnection_attempts_stay_a_quarter_second_apart(listener):
    # Given a server that closes every connection at once (kazoo backs off 0.1, 0.2, 0.4 ... 3.2 s)
    client = started(zkclient.Client(hosts=f"127.0.0.1:{listener.port}", timeout=10.0))
    try:
        # Then eight attempts take under 3 s (kazoo's own backoff needs about 12 s)
        assert listener.wait_for(8, 6.0), listener.accepted
        assert listener.accepted[7] - listener.accepted[0] < 3.0, listener.accepted
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("listener", [True], indirect=True)
def test_the_retries_repeat_a_warning_once_per_ten_seconds(listener, caplog):
    # Given a client retrying against a server that closes every connection
    client = started(zkclient.Client(hosts=f"127.0.0.1:{listener.port}", timeout=10.0))
    try:
        # When it has tried several times
        assert listener.wait_for(5, 6.0), listener.accepted
    finally:
        client.stop()
        client.close()
    # Then each distinct "connection dropped" warning was logged at most once, not once per attempt
    # (an earlier test's within the last 10 s may already have been the once)
    dropped = Counter(r.getMessage() for r in caplog.records
                      if r.name.startswith("kazoo.client") and "Connection dropped" in r.getMessage())
    assert all(n == 1 for n in dropped.values()), dropped
