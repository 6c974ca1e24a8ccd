"""The REST API over TLS: HTTPS with the configured certificate, and a token sent over plain HTTP is refused."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from devtools import certs
from ureplicator.controller.client import request

pytestmark = pytest.mark.integration

TOKEN = "tls-admin-Token-4711"


def _plain_http(port: int, head: str) -> tuple[int, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    status_line, _, rest = answer.decode().partition("\r\n")
    return int(status_line.split()[1]), rest.partition("\r\n\r\n")[2]


def test_rest_api_answers_over_tls_and_refuses_the_token_over_plain_http(pipeline, services, tmp_path):
    # Given a controller whose REST API has a certificate (signed by a CA of the test's own) and a token
    tls = certs.write(tmp_path / "rest", hosts=("127.0.0.1", "localhost"))
    config = pipeline.write_config("controller", controller={
        "admin_token": TOKEN, "rest_tls_certfile": str(tls.keystore), "rest_tls_keyfile": str(tls.keystore)})
    proc = pipeline._spawn("controller", ["controller", "--config", str(config)])
    url = f"https://127.0.0.1:{pipeline.rest_port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.alive(), proc.tail()
        try:
            if request(f"{url}/health", ca=str(tls.ca), timeout_s=3)[0] == 200:
                break
        except Exception:  # noqa: BLE001 - not listening yet
            assert time.monotonic() < deadline, proc.tail()
            time.sleep(0.3)

    # When a client that trusts the CA calls it over HTTPS, reads and token-guarded writes work as ever
    assert request(f"{url}/status", ca=str(tls.ca))[0] == 200
    assert request(f"{url}/topics", "POST", {"topic": "absent-topic"}, ca=str(tls.ca))[0] == 401
    status, body = request(f"{url}/topics", "POST", {"topic": f"{pipeline.name}-absent"}, TOKEN, ca=str(tls.ca))
    assert status == 404, body  # past the token check: the topic does not exist on the source

    # And the CLI speaks HTTPS with --ca, and refuses a server it cannot verify
    ok = subprocess.run([sys.executable, "-m", "ureplicator", "health", "--url", url, "--ca", str(tls.ca)],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    unverified = subprocess.run([sys.executable, "-m", "ureplicator", "health", "--url", url],
                                capture_output=True, text=True, timeout=60)
    assert unverified.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in unverified.stderr

    # Then plain HTTP on the same port is refused: with the token it says so and tells to rotate it
    code, text = _plain_http(pipeline.rest_port, "POST /topics HTTP/1.1\r\nHost: x\r\n"
                             f"Authorization: Bearer {TOKEN}\r\nContent-Length: 2\r\n\r\n{{}}")
    assert code == 403 and "bearer token over plain HTTP" in text and "rotate it" in text
    code, text = _plain_http(pipeline.rest_port, "GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
    assert code == 400 and "HTTPS only" in text
    # And the token is never echoed in the controller's log
    assert TOKEN not in proc.tail(200)
