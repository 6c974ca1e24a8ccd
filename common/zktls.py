"""The KazooClient keyword arguments for TLS to ZooKeeper (``zookeeper.tls*``), in one place.

ZooKeeper serves TLS on its ``secureClientPort`` (Netty); kazoo speaks it with ``use_ssl``.
Every ZooKeeper client of the project (controller, worker, verifier, ``ureplicator check``)
passes ``**options(config)`` so none of them can forget it.
"""

from __future__ import annotations

from typing import Any

from common.config import Config


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
