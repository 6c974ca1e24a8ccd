"""Behind the REST API's TLS front, the app and its access log see the real client, never a forwarded header."""

from __future__ import annotations

import http.client
import json
import ssl
from pathlib import Path

from structlog.testing import capture_logs

from devtools import certs
from ureplicator.common import httpserve


def _echo(environ, start_response):  # noqa: ANN001, ANN202 - a WSGI app
    body = json.dumps({"remote_addr": environ.get("REMOTE_ADDR")}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def test_the_logged_client_is_the_tls_peer_and_x_forwarded_for_is_ignored(tmp_path: Path):
    # Given the TLS front on 127.0.0.1 and a client connecting from another loopback address
    tls = certs.write(tmp_path / "tls")
    server = httpserve.serve(httpserve.logged(_echo, "controller"), "127.0.0.1", 0, "rest-test",
                             tls=(str(tls.keystore), str(tls.keystore)), timeout_s=10)
    context = ssl.create_default_context(cafile=str(tls.ca))
    with capture_logs() as logs:
        try:
            # When it calls over HTTPS, claiming another address in X-Forwarded-For
            conn = http.client.HTTPSConnection("127.0.0.1", server.server_port, context=context, timeout=10,
                                               source_address=("127.0.0.2", 0))
            conn.request("GET", "/status", headers={"X-Forwarded-For": "203.0.113.9"})
            seen = json.loads(conn.getresponse().read())
            conn.close()
            # And a local process calls the loopback backend directly (no front in between)
            direct = http.client.HTTPConnection("127.0.0.1", server._backend.server_port, timeout=10)
            direct.request("GET", "/direct")
            direct_seen = json.loads(direct.getresponse().read())
            direct.close()
        finally:
            server.shutdown()

    # Then the app and the access log name the TLS peer, not the front and not the header's claim
    assert seen == {"remote_addr": "127.0.0.2"}
    clients = {e["path"]: e["client"] for e in logs if e["event"] == "http_request"}
    assert clients["/status"] == "127.0.0.2"
    # And the direct caller keeps its own address
    assert direct_seen == {"remote_addr": "127.0.0.1"} and clients["/direct"] == "127.0.0.1"
