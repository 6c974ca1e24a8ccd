"""Tell an authentication or authorization failure apart from a cluster that did not answer.

librdkafka reports a wrong SASL password or a refused TLS handshake only through its error
callback; the call that failed (``list_topics``, a fetch) sees a generic "Broker transport
failure". :class:`ErrorWatch` is that callback: it remembers the last authentication-class
error, so the message that reaches a person can say *why*::

    watch = ErrorWatch()
    client = AdminClient({..., "error_cb": watch})
    try:
        client.list_topics(timeout=10)
    except KafkaException as exc:
        client.poll(0)  # serves the pending error callbacks
        raise unavailable("dst", "127.0.0.1:9093", exc.args[0], watch) from None

Used by the controller (REST 503s, ``/status``, the preflight check); the worker's readiness
can use the same watch (not wired yet: worker/ is another piece of work).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ureplicator.common.errors import ClusterUnavailable

# librdkafka's local codes for a failed SASL exchange or TLS handshake, and the broker's codes
# for a refused credential or a missing ACL.
AUTHENTICATION = frozenset({"_AUTHENTICATION", "_SSL", "SASL_AUTHENTICATION_FAILED", "ILLEGAL_SASL_STATE",
                            "UNSUPPORTED_SASL_MECHANISM"})
AUTHORIZATION = frozenset({"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                           "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                           "DELEGATION_TOKEN_AUTHORIZATION_FAILED"})


class AuthenticationFailed(ClusterUnavailable):
    """A cluster refused the configured credentials (or the TLS handshake), or an ACL is missing.

    A subclass of ClusterUnavailable so existing handlers still answer 503, with a message
    that names the real cause.
    """


def kind(error: Any) -> str | None:
    """``"authentication"``, ``"authorization"`` or None for a ``KafkaError`` (or its name)."""
    name = error if isinstance(error, str) else error.name()
    if name in AUTHENTICATION:
        return "authentication"
    if name in AUTHORIZATION:
        return "authorization"
    return None


class ErrorWatch:
    """A librdkafka ``error_cb`` that keeps the newest authentication/authorization error.

    An error older than ``max_age_s`` is forgotten: a credential fixed by a rotation must
    stop being blamed.
    """

    def __init__(self, max_age_s: float = 120.0) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, str, str] | None = None
        self._max_age_s = max_age_s

    def __call__(self, error: Any) -> None:
        what = kind(error)
        if what is None:
            return
        with self._lock:
            self._last = (time.monotonic(), what, error.str())

    def failure(self, within_s: float | None = None) -> tuple[str, str] | None:
        """(kind, librdkafka's message) of the newest failure in the last ``within_s`` (default
        ``max_age_s``) seconds, or None. librdkafka retries a refused login every second or so,
        so a lasting failure stays recent while a one-off TLS blip soon stops counting."""
        window = self._max_age_s if within_s is None else within_s
        with self._lock:
            if self._last is None or time.monotonic() - self._last[0] > window:
                return None
            return self._last[1], self._last[2]


def describe(alias: str, servers: str, error: Any, watch: ErrorWatch | None = None) -> str:
    """One sentence for a failed call to cluster ``alias``: the auth failure when there was one."""
    text = error.str() if hasattr(error, "str") else str(error)
    direct = kind(error) if hasattr(error, "name") else None
    if direct is not None:
        return f"cluster {alias} ({servers}) refused the request: {direct} failed: {text}"
    seen = watch.failure() if watch is not None else None
    if seen is not None:
        return (f"cluster {alias} ({servers}) refused our credentials: {seen[0]} failed: {seen[1]} "
                f"(check {alias}'s sasl.* / ssl.* properties)")
    return f"cluster {alias} ({servers}) did not answer: {text}"


def unavailable(alias: str, servers: str, error: Any, watch: ErrorWatch | None = None) -> ClusterUnavailable:
    """The exception to raise for ``error``: AuthenticationFailed when credentials or ACLs are the cause."""
    message = describe(alias, servers, error, watch)
    auth = (hasattr(error, "name") and kind(error) is not None) or (watch is not None and watch.failure())
    return AuthenticationFailed(message) if auth else ClusterUnavailable(message)


def watch_of(client: Any) -> ErrorWatch | None:
    """The ErrorWatch attached to a client by :func:`attach`, after serving its pending callbacks."""
    watch = getattr(client, "_ureplicator_errors", None)
    if watch is not None and hasattr(client, "poll"):
        try:
            client.poll(0)
        except Exception:  # noqa: BLE001 - a closed client: the watch still holds what it saw
            pass
    return watch


def attach(config: dict[str, Any], client_factory: Any) -> Any:
    """Build a client with an ErrorWatch as its ``error_cb`` (unless the caller set one)."""
    watch = ErrorWatch()
    if "error_cb" not in config:
        config = {**config, "error_cb": watch}
    client = client_factory(config)
    try:
        client._ureplicator_errors = watch
    except AttributeError:  # a C type without a __dict__: the message stays generic
        pass
    return client
