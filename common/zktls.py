"""The KazooClient keyword arguments for TLS to ZooKeeper (``zookeeper.tls*``), in one place.

ZooKeeper serves TLS on its ``secureClientPort`` (Netty); kazoo speaks it with ``use_ssl``.
Every ZooKeeper client of the project (controller, worker, verifier, ``ureplicator check``)
passes ``**options(config)`` so none of them can forget it.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

from ureplicator.common.config import Config


def options(config: Config) -> dict[str, Any]:
    zkc = config.zookeeper
    if not zkc.tls:
        return {}
    return {
        "use_ssl": True,
        "verify_certs": True,
        "ca": zkc.tls_ca,
        "certfile": zkc.tls_certfile,
        "keyfile": zkc.tls_keyfile,
    }


def handshake_error(config: Config, timeout_s: float = 3.0) -> str | None:
    """Why a TLS handshake with the first reachable ZooKeeper server fails, or None when one succeeds.

    kazoo only logs a refused handshake and keeps retrying until its start times out, so a caller
    that timed out asks this for the reason (a CA that does not sign the server's certificate, a
    client certificate the server refuses) instead of saying "did not answer".
    """
    zkc = config.zookeeper
    if not zkc.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=zkc.tls_ca)
        # kazoo does not check the host name either: the CA is the trust anchor.
        context.check_hostname = False
        if zkc.tls_certfile and zkc.tls_keyfile:
            context.load_cert_chain(zkc.tls_certfile, zkc.tls_keyfile)
    except (OSError, ssl.SSLError) as exc:
        return f"cannot load the TLS files (zookeeper.tls_ca/tls_certfile/tls_keyfile): {exc}"
    reason = None
    for host in zkc.connect.split("/", 1)[0].split(","):
        name, _, port = host.strip().rpartition(":")
        try:
            with socket.create_connection((name, int(port)), timeout=timeout_s) as raw, \
                    context.wrap_socket(raw) as sock:
                sock.settimeout(timeout_s)
                # Under TLS 1.3 the server refuses a client certificate after the handshake:
                # the alert arrives at the first read.
                sock.sendall(b"srvr")
                sock.recv(1)
                return None
        except ssl.SSLError as exc:
            detail = getattr(exc, "verify_message", None)  # what was wrong with the server's certificate
            reason = f"TLS handshake with {host.strip()} failed: {exc.reason or exc}{f' ({detail})' if detail else ''}"
        except (OSError, ValueError):
            continue  # unreachable: the caller's own message covers it
    return reason
