"""Worker probes: /healthz follows the loop, /ready follows registration and fencing; served by waitress."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter
from structlog.testing import capture_logs

from ureplicator.common import httpserve
from ureplicator.worker import probes


@dataclass
class Loop:
    last_turn: float = 100.0
    ready: bool = True


def call(app: httpserve.WSGIApp, path: str) -> tuple[int, bytes]:
    seen: dict[str, str] = {}
    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET"},
                        lambda status, headers: seen.update(status=status)))
    return int(seen["status"].split()[0]), body


def test_healthz_fails_once_the_loop_stops_turning():
    # Given a loop that last turned at t=100 and a 30 s stall threshold
    now = {"t": 110.0}
    loop = Loop()
    app = probes.app(loop, CollectorRegistry(), stall_s=30, clock=lambda: now["t"])
    # Then it is healthy 10 s later ...
    assert call(app, "/healthz")[0] == 200
    # ... and unhealthy once 31 s have passed without a turn
    now["t"] = 131.0
    status, body = call(app, "/healthz")
    assert status == 503 and json.loads(body)["loop_idle_s"] == 31.0


def test_ready_follows_registration_and_fencing():
    loop = Loop(ready=False)
    app = probes.app(loop, CollectorRegistry(), stall_s=30)
    assert call(app, "/ready")[0] == 503
    loop.ready = True
    assert call(app, "/ready")[0] == 200


def test_metrics_are_served_next_to_the_probes():
    registry = CollectorRegistry()
    Counter("ureplicator_worker_demo", "demo", registry=registry).inc()
    status, body = call(probes.app(Loop(), registry, stall_s=30), "/metrics")
    assert status == 200 and b"ureplicator_worker_demo_total 1.0" in body


def test_the_server_logs_each_request_and_stops_cleanly():
    # Given the probes served by waitress on a free loopback port
    loop = Loop(ready=False)
    server = httpserve.serve(httpserve.logged(probes.app(loop, CollectorRegistry(), stall_s=1e9), "worker"),
                             "127.0.0.1", 0, "probes-test")
    with capture_logs() as logs:
        try:
            # When a client asks whether the worker is ready
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/ready", timeout=10)
                raise AssertionError("not ready must be a 503")
            except urllib.error.HTTPError as exc:
                assert exc.code == 503
        finally:
            server.shutdown()
    # Then the request was logged with its outcome
    requests = [e for e in logs if e["event"] == "http_request"]
    assert requests and requests[0]["path"] == "/ready" and requests[0]["status"] == 503


@dataclass
class PoolState:
    session: str = "CONNECTED"
    member: bool = True
    serving: tuple[str, Loop] | None = None


def test_an_unbound_pool_worker_is_alive_with_its_session_and_ready_once_in_the_pool():
    pool = PoolState(member=False)
    app = probes.pool_app(pool, CollectorRegistry(), stall_s=30, clock=lambda: 110.0)
    # Not yet registered in the pool: alive, not ready
    assert call(app, "/healthz")[0] == 200
    status, body = call(app, "/ready")
    assert status == 503 and json.loads(body)["pool_member"] is False
    # Registered, unbound: ready (an idle pool's RollingUpdate proceeds)
    pool.member = True
    assert call(app, "/ready") == (200, b'{"route": null, "pool_member": true, "ready": true}')
    # A connection blip (SUSPENDED) is no reason to restart; a lost session is
    pool.session = "SUSPENDED"
    assert call(app, "/healthz")[0] == 200
    pool.session = "LOST"
    status, body = call(app, "/healthz")
    assert status == 503 and json.loads(body)["zookeeper"] == "lost"


def test_a_bound_pool_worker_adds_its_routes_loop_and_readiness():
    # Given a pool worker serving route a, whose loop last turned at t=100
    now = {"t": 110.0}
    loop = Loop(ready=False)
    pool = PoolState(serving=("a", loop))
    app = probes.pool_app(pool, CollectorRegistry(), stall_s=30, clock=lambda: now["t"])
    # Then it is ready only once the route's loop is (registered for the route, not fenced)
    status, body = call(app, "/ready")
    assert status == 503 and json.loads(body)["route"] == "a"
    loop.ready = True
    assert call(app, "/ready")[0] == 200
    # And it is dead once the route's loop stalls, though its session is up
    assert call(app, "/healthz")[0] == 200
    now["t"] = 131.0
    status, body = call(app, "/healthz")
    assert status == 503 and json.loads(body)["loop_idle_s"] == 31.0
