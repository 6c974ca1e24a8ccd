"""Serve a WSGI app (REST API, worker probes and metrics) with waitress, logging every request.

Waitress rather than gunicorn: the controller and the worker each hold state in
their own process (the leader's election and ZooKeeper session, the worker's
loop), so the HTTP server must run *inside* that process on a thread. Gunicorn
forks its own workers and owns the process; waitress is a pure-Python,
thread-pooled server embedded with one call, with connection and request
timeouts and bounded request sizes, and no dependency beyond itself.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from waitress.server import create_server

from ureplicator.common import logs

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


def serve(app: WSGIApp, host: str, port: int, name: str, tls: tuple[str, str] | None = None,
          **options: Any) -> Server | TlsServer:
    """Serve ``app`` on ``host:port``; with ``tls`` (certificate chain, key: PEM files) HTTPS only."""
    if tls is None:
        return Server(app, host, port, name, **options)
    peers: dict[int, tuple[str, int]] = {}
    backend = Server(_front_peer(app, peers), "127.0.0.1", 0, name, **options)
    try:
        return TlsServer(backend, host, port, tls[0], tls[1], name, timeout_s=options.get("timeout_s", 30),
                         peers=peers)
    except BaseException:
        backend.shutdown()
        raise


# --- TLS ----------------------------------------------------------------------------------------


def _front_peer(app: WSGIApp, peers: dict[int, tuple[str, int]]) -> WSGIApp:
    """The real client of a request relayed by our TLS front, instead of the front's 127.0.0.1.

    The front records, per loopback port it relays from, the peer it accepted (``peers``); a
    request arriving from one of those ports gets that peer as ``REMOTE_ADDR``/``REMOTE_PORT``.
    No header is read: X-Forwarded-For from outside is never trusted (waitress drops it), and a
    local process that connects to the backend directly keeps its own loopback address.
    """

    def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REMOTE_ADDR") == "127.0.0.1":
            try:
                peer = peers.get(int(environ.get("REMOTE_PORT") or -1))
            except ValueError:
                peer = None
            if peer is not None:
                environ = {**environ, "REMOTE_ADDR": peer[0], "REMOTE_PORT": str(peer[1])}
        return app(environ, start_response)

    return middleware


_TLS_HANDSHAKE = 0x16  # the first byte of every TLS ClientHello record


class TlsServer:
    """HTTPS in front of a loopback :class:`Server`: waitress speaks no TLS, so this terminates it.

    Each connection gets a thread that peeks at its first byte. A TLS handshake is unwrapped and
    relayed to waitress, one thread per connection, reads and writes on one thread so the SSL
    object is never used concurrently. Plain HTTP is answered with an error and closed, never
    relayed: with TLS configured, a bearer token that arrives in clear is refused, and the
    answer says it has crossed the network unencrypted.
    """

    def __init__(self, backend: Server, host: str, port: int, certfile: str, keyfile: str, name: str,
                 timeout_s: float = 30.0, peers: dict[int, tuple[str, int]] | None = None) -> None:
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._context.load_cert_chain(certfile, keyfile)
        self._backend = backend
        self._peers = peers if peers is not None else {}  # relay's loopback port -> the real client
        self._timeout_s = timeout_s
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=128)
        self.server_port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._log = logs.get("http", component=name)
        self._thread = threading.Thread(target=self._accept, name=f"{name}-tls", daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float = 5.0) -> None:
        self._closed.set()
        try:
            # close() alone does not wake a thread blocked in accept() on Linux: shutdown() does.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        finally:
            self._thread.join(timeout_s)
            self._backend.shutdown(timeout_s)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, peer = self._listener.accept()
            except OSError:
                return  # closed by shutdown()
            threading.Thread(target=self._connection, args=(conn, peer), daemon=True).start()

    def _connection(self, conn: socket.socket, peer: Any) -> None:
        try:
            conn.settimeout(self._timeout_s)
            first = conn.recv(1, socket.MSG_PEEK)
            if not first:
                return
            if first[0] != _TLS_HANDSHAKE:
                self._refuse_plain_http(conn, peer)
                return
            tls = self._context.wrap_socket(conn, server_side=True)
            with tls, socket.create_connection(("127.0.0.1", self._backend.server_port), timeout=5) as backend:
                relay_port = backend.getsockname()[1]
                self._peers[relay_port] = (str(peer[0]), int(peer[1]))
                try:
                    self._relay(tls, backend)
                finally:
                    self._peers.pop(relay_port, None)
        except (OSError, ssl.SSLError) as exc:
            self._log.debug("tls_connection_failed", client=str(peer[0]), error=logs.error_text(exc))
        finally:
            conn.close()

    def _relay(self, tls: ssl.SSLSocket, backend: socket.socket) -> None:
        idle_since = time.monotonic()
        while not self._closed.is_set() and time.monotonic() - idle_since < self._timeout_s:
            ready = [tls] if tls.pending() else select.select([tls, backend], [], [], 1.0)[0]
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                (backend if sock is tls else tls).sendall(data)
                idle_since = time.monotonic()

    def _refuse_plain_http(self, conn: socket.socket, peer: Any) -> None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
        with_token = any(line.lower().startswith(b"authorization:") for line in head.split(b"\r\n"))
        if with_token:
            status, message = "403 Forbidden", (
                "refused: this API serves HTTPS only, and this request carried a bearer token over plain HTTP. "
                "Consider the token exposed: rotate it, and call https:// (CLI: --url https://... --ca FILE)")
        else:
            status, message = "400 Bad Request", "this API serves HTTPS only: call https:// instead of http://"
        body = json.dumps({"error": {"code": int(status[:3]), "message": message}}).encode()
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + body)
        self._log.warning("plain_http_refused", client=str(peer[0]), carried_token=with_token)
