"""Serve a WSGI app (REST API, worker probes and metrics) with waitress, logging every request.

Waitress rather than gunicorn: the controller and the worker each hold state in
their own process (the leader's election and ZooKeeper session, the worker's
loop), so the HTTP server must run *inside* that process on a thread. Gunicorn
forks its own workers and owns the process; waitress is a pure-Python,
thread-pooled server embedded with one call, with connection and request
timeouts and bounded request sizes, and no dependency beyond itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from waitress.server import create_server

from common import logs

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def logged(app: WSGIApp, component: str, quiet_paths: frozenset[str] = frozenset()) -> WSGIApp:
    """One structured log event per request: method, path, status, duration, client."""
    log = logs.get("http", component=component)

    def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()
        seen: dict[str, str] = {}

        def recording_start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            seen["status"] = status
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        try:
            return app(environ, recording_start)
        finally:
            path = environ.get("PATH_INFO", "")
            code = int(seen.get("status", "500").split(" ", 1)[0])
            # Probes and scrapes arrive every few seconds: log them only when they fail.
            if path not in quiet_paths or code >= 400:
                log.info("http_request", method=environ.get("REQUEST_METHOD"), path=path, status=code,
                         duration_ms=round((time.perf_counter() - started) * 1000, 1),
                         client=environ.get("REMOTE_ADDR"))

    return middleware


class Server:
    """A waitress server on a background thread; :meth:`shutdown` stops it."""

    def __init__(self, app: WSGIApp, host: str, port: int, name: str, threads: int = 8,
                 timeout_s: int = 30) -> None:
        # channel_timeout closes idle or stalled connections; the size limits bound memory
        # a client can make us hold.
        self._server = create_server(
            app, host=host, port=port, threads=threads, channel_timeout=timeout_s,
            cleanup_interval=max(1, timeout_s // 2), max_request_body_size=16 * 1024 * 1024,
            max_request_header_size=64 * 1024, ident="ureplicator", clear_untrusted_proxy_headers=True,
        )
        self.server_port: int = self._server.effective_port  # type: ignore[union-attr]
        self._thread = threading.Thread(target=self._server.run, name=name, daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float = 5.0) -> None:
        self._server.close()
        self._thread.join(timeout_s)


def serve(app: WSGIApp, host: str, port: int, name: str, **options: Any) -> Server:
    return Server(app, host, port, name, **options)
