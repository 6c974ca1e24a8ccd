"""The worker's HTTP face on ``worker.metrics_port``: ``/metrics``, ``/healthz`` (loop alive), ``/ready``."""

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


def app(worker: Observed, registry: CollectorRegistry, stall_s: float,
        clock: Callable[[], float] = time.monotonic) -> WSGIApp:
    """``/healthz`` fails once the loop has not turned for ``stall_s``; ``/ready`` while unregistered or fenced."""
    metrics = make_wsgi_app(registry)

    def respond(start_response: Callable[..., Any], ok: bool, body: dict[str, Any]) -> Iterable[bytes]:
        data = json.dumps(body).encode()
        start_response("200 OK" if ok else "503 Service Unavailable",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            idle = clock() - worker.last_turn
            return respond(start_response, idle <= stall_s,
                           {"loop_idle_s": round(idle, 1), "stall_threshold_s": stall_s})
        if path == "/ready":
            ready = worker.ready
            reason = getattr(worker, "not_ready_reason", None)  # e.g. a refused credential
            return respond(start_response, ready, {"ready": ready, **({"reason": reason} if reason else {})})
        return metrics(environ, start_response)

    return application
