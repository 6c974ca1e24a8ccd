"""The worker's HTTP face on ``worker.metrics_port``: ``/metrics``, ``/healthz`` (alive), ``/ready``.

A worker pinned to a route serves :func:`app`: ``/healthz`` follows its mirror loop,
``/ready`` its registration and fencing. A shared-pool worker serves :func:`pool_app` for
its whole life, bound or not (docs/routes.md, "Probes of a pool worker"): ``/healthz`` is
its ZooKeeper session plus, while it serves a route, that route's loop; ``/ready`` is its
membership of the pool plus, while it serves a route, that route's readiness.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, make_wsgi_app

from ureplicator.common.httpserve import WSGIApp


class Observed(Protocol):
    """What the probes read from a worker (plain attributes: no lock, no call into the loop)."""

    last_turn: float  # time.monotonic() of the loop's last turn

    @property
    def ready(self) -> bool: ...


class Pool(Protocol):
    """What the probes read from a shared-pool worker (plain attributes, as :class:`Observed`)."""

    @property
    def session(self) -> str: ...  # kazoo's state: CONNECTED, SUSPENDED or LOST

    @property
    def member(self) -> bool: ...  # our pool/workers/<id> node exists in the current session

    @property
    def serving(self) -> tuple[str, Observed] | None: ...  # the route being served and its mirror loop


def _respond(start_response: Callable[..., Any], ok: bool, body: dict[str, Any]) -> Iterable[bytes]:
    data = json.dumps(body).encode()
    start_response("200 OK" if ok else "503 Service Unavailable",
                   [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def _loop_health(worker: Observed, stall_s: float, clock: Callable[[], float]) -> tuple[bool, dict[str, Any]]:
    idle = clock() - worker.last_turn
    return idle <= stall_s, {"loop_idle_s": round(idle, 1), "stall_threshold_s": stall_s}


def _readiness(worker: Observed) -> tuple[bool, dict[str, Any]]:
    ready = worker.ready
    reason = getattr(worker, "not_ready_reason", None)  # e.g. a refused credential
    return ready, {"ready": ready, **({"reason": reason} if reason else {})}


def app(worker: Observed, registry: CollectorRegistry, stall_s: float,
        clock: Callable[[], float] = time.monotonic) -> WSGIApp:
    """``/healthz`` fails once the loop has not turned for ``stall_s``; ``/ready`` while unregistered or fenced."""
    metrics = make_wsgi_app(registry)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _respond(start_response, *_loop_health(worker, stall_s, clock))
        if path == "/ready":
            return _respond(start_response, *_readiness(worker))
        return metrics(environ, start_response)

    return application


def pool_app(pool: Pool, registry: CollectorRegistry, stall_s: float,
             clock: Callable[[], float] = time.monotonic) -> WSGIApp:
    """A pool worker's probes, bound or not.

    ``/healthz``: the process answers and its ZooKeeper session is not LOST (SUSPENDED is a
    connection blip the session outlives); while it serves a route, also that route's loop
    turned within ``stall_s``. ``/ready``: registered in the pool (``pool/workers/<id>`` in the
    current session), so an idle pool is ready and a RollingUpdate of it proceeds; while it
    serves a route, also that route's readiness (registered for the route, not fenced).
    """
    metrics = make_wsgi_app(registry)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        serving = pool.serving
        body: dict[str, Any] = {"route": serving[0] if serving else None}
        if path == "/healthz":
            session = pool.session
            ok = session != "LOST"
            body["zookeeper"] = session.lower()
            if serving is not None:
                alive, loop = _loop_health(serving[1], stall_s, clock)
                ok, body = ok and alive, {**body, **loop}
            return _respond(start_response, ok, body)
        if path == "/ready":
            ok = pool.member
            body["pool_member"] = ok
            if serving is not None:
                ready, detail = _readiness(serving[1])
                ok, body = ok and ready, {**body, **detail}
            elif not ok:
                body["reason"] = "not registered in the pool (starting, or the ZooKeeper session was lost)"
            return _respond(start_response, ok, {**body, "ready": ok})
        return metrics(environ, start_response)

    return application
