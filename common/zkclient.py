"""The kazoo client every process uses: its reconnection tuned so a ZooKeeper restart shorter than the session keeps it.

kazoo's defaults lose time in two places after a ZooKeeper restart, both measured on a
worker (docs/operations.md, "ZooKeeper restart"):

* **Backoff.** Reconnection attempts back off 0.1, 0.2, 0.4, ... s (±40 %) without a useful
  cap, so a server that is back 4.5 s after it went away is tried again only 5-7 s after: past
  a 10 s session's lease (then 6.7 s), and the worker stops copying until it reconnects. Here the
  delay stops growing at :data:`RECONNECT_MAX_DELAY_S`; a refused connection costs nothing.
* **Handshake.** kazoo waits ``session timeout / number of hosts`` for the answer to its
  connect request: 10 s for one server. ZooKeeper 3.8 opens its client port before it has
  loaded its database; a connection that arrives in that window is refused a session, and the
  close then fails on a NullPointerException (ZOOKEEPER-5051), leaving the socket open and
  silent. Waiting 10 s on it outlives the session (the server restarts the session clocks when
  it has loaded, so 10 s later it expires them). Here the first handshake waits
  :data:`HANDSHAKE_FIRST_S` and each one after a time-out twice as long, up to kazoo's own
  bound, so a silent socket costs a second and a slow server still gets its full time.

It also keeps the session timeout the server *granted* (:attr:`Client.granted_session_s`): a
server clamps the asked one into its ``minSessionTimeout``..``maxSessionTimeout`` (by default 2
and 20 ticks), kazoo keeps only the asked one, and a worker's lease must be shorter than the
session the server actually expires it by.

All three rely on kazoo internals (``ConnectionHandler._invoke``, ``KazooClient._connection``) that
``tests/unit/test_zkclient.py`` checks against the installed kazoo.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Connect
from kazoo.retry import KazooRetry

RECONNECT_FIRST_DELAY_S = 0.1
RECONNECT_MAX_DELAY_S = 0.25  # with kazoo's ±40 % jitter: a restarted server is tried within 0.35 s
HANDSHAKE_FIRST_S = 1.0
REPEAT_LOG_S = 10.0  # one of each identical reconnection warning per this long: 4 attempts a second add up


def handshake_waits(bound_s: float, first_s: float = HANDSHAKE_FIRST_S) -> list[float]:
    """The successive handshake waits after consecutive time-outs: ``first_s`` doubling, up to ``bound_s``.

    ``bound_s`` is kazoo's own wait (the session timeout divided by the number of servers).
    """
    waits = [min(first_s, bound_s)]
    while waits[-1] < bound_s:
        waits.append(min(waits[-1] * 2, bound_s))
    return waits


class _Connection(ConnectionHandler):
    """kazoo's connection loop with a handshake that gives up on a silent server early (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handshake_timeouts = 0  # consecutive ones: the next wait is longer

    def _invoke(self, timeout: float, request: Any, xid: int | None = None) -> Any:
        if not isinstance(request, Connect):
            return super()._invoke(timeout, request, xid)
        waits = handshake_waits(timeout, HANDSHAKE_FIRST_S)
        wait = waits[min(self.handshake_timeouts, len(waits) - 1)]
        try:
            result = super()._invoke(wait, request, xid)
        except self.handler.timeout_exception:
            self.handshake_timeouts += 1
            self.logger.warning("ZooKeeper handshake unanswered after %.1fs; reconnecting", wait)
            raise
        self.handshake_timeouts = 0
        granted_ms = getattr(result[0], "time_out", 0) if isinstance(result, tuple) and result else 0
        if granted_ms > 0:  # 0 or less: the session expired (kazoo raises on it next)
            self.client.granted(granted_ms / 1000.0)
        return result


class _Repeats(logging.Filter):
    """Let each distinct kazoo warning through once per :data:`REPEAT_LOG_S` (quick retries repeat them)."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(message, -REPEAT_LOG_S) < REPEAT_LOG_S:
                return False
            if len(self._last) > 100:
                self._last.clear()
            self._last[message] = now
        return True


def _connection_log() -> logging.Logger:
    """The connection loop's logger: under kazoo's own (same level and handlers), its repeats held back."""
    log = logging.getLogger("kazoo.client.connection")
    if not any(isinstance(f, _Repeats) for f in log.filters):
        log.addFilter(_Repeats())
    return log


class Client(KazooClient):
    """A KazooClient whose reconnection keeps a session through a short ZooKeeper restart (see the module)."""

    granted_session_s: float | None = None  # what the server granted at the last handshake; None before one

    def granted(self, session_s: float) -> None:
        """Keep the session timeout the server granted; a clamped one is logged (once per value)."""
        if session_s != self.granted_session_s and abs(session_s - self._session_timeout / 1000.0) > 1e-3:
            _connection_log().warning("ZooKeeper granted a %.1fs session where %.1fs was asked (the server's "
                                      "minSessionTimeout/maxSessionTimeout); a worker's lease follows the "
                                      "granted one", session_s, self._session_timeout / 1000.0)
        self.granted_session_s = session_s

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("connection_retry", KazooRetry(max_tries=-1, delay=RECONNECT_FIRST_DELAY_S, backoff=2,
                                                         max_delay=RECONNECT_MAX_DELAY_S))
        super().__init__(**kwargs)
        old = self._connection
        self._connection = _Connection(self, self._conn_retry.copy(), logger=_connection_log(),
                                       sasl_options=old.sasl_options)
