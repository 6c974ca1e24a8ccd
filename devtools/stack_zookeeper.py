"""The ZooKeeper of a local stack: zoo.cfg, its TLS port, its command line and its readiness probe."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devtools import jvm
from devtools.stack_common import _COMMON_JVM_FLAGS, HOST, _config_path, _data_dir, _svc_dir

if TYPE_CHECKING:
    from devtools.certs import BrokerTls


def secure_zookeeper(secure: dict[str, Any]) -> dict[str, Any]:
    """The ``zookeeper`` config section (all but timeouts and auth) for the TLS port in stack.json's ``secure``."""
    return {"connect": secure["zookeeper"], "tls": True, "tls_ca": secure["ca"],
            "tls_certfile": secure["client_certfile"], "tls_keyfile": secure["client_keyfile"]}


def _zookeeper_tls(secure_port: int, tls: BrokerTls) -> dict[str, Any]:
    """zoo.cfg entries for a TLS client port next to the plain one.

    Only the Netty connection factory speaks TLS (it then serves the plain port as well). Keys that
    zoo.cfg does not know become ``zookeeper.*`` system properties, which is where ZooKeeper's X509
    settings are read from. The keystore is the brokers' PEM file; clients must present a
    certificate from the same CA (``ssl.clientAuth`` defaults to need).
    """
    return {
        "secureClientPort": secure_port,
        "secureClientPortAddress": HOST,
        "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
        "ssl.keyStore.location": str(tls.keystore),
        "ssl.keyStore.type": "PEM",
        "ssl.trustStore.location": str(tls.ca),
        "ssl.trustStore.type": "PEM",
    }


def _zoo_cfg(root: Path, port: int, extra: dict[str, Any]) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        # A short tick keeps session expiry (worker crash detection) quick in tests;
        # clients may still ask for up to a minute.
        "tickTime": 500,
        "minSessionTimeout": 1000,
        "maxSessionTimeout": 60000,
        "dataDir": str(_data_dir(root, "zookeeper")),
        "clientPort": port,
        "clientPortAddress": HOST,
        # Every worker, controller and test connects from 127.0.0.1: no per-IP cap.
        "maxClientCnxns": 0,
        "admin.enableServer": "false",
        "4lw.commands.whitelist": "ruok,srvr",
        # Throwaway data: skip fsync and the 64 MB transaction-log preallocation.
        "forceSync": "no",
        "preAllocSize": 4096,
    }
    cfg.update(extra)
    return cfg


_LOGBACK_XML = """<configuration>
  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
    <encoder>
      <pattern>%d{ISO8601} %-5level [zookeeper] [%thread] %logger{36} - %msg%n</pattern>
    </encoder>
  </appender>
  <root level="INFO">
    <appender-ref ref="CONSOLE"/>
  </root>
</configuration>
"""

def _zookeeper_command(java: str, root: Path, heap: str) -> list[str]:
    svc = _svc_dir(root, "zookeeper")
    return [
        java,
        # C1 only: a (re)start is mostly class loading and warm-up, and the Netty factory the TLS port
        # needs made it about 2 s slower on a loaded 2-core box (3.2 s -> 5.9 s, 7 restarts each); a
        # test ZooKeeper's load never needs C2. Fault tests restart it and expect a short outage.
        "-XX:TieredStopAtLevel=1",
        "-Xms32m",
        f"-Xmx{heap}",
        *_COMMON_JVM_FLAGS,
        f"-Dlogback.configurationFile={svc / 'logback.xml'}",
        "-Dzookeeper.admin.enableServer=false",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp",
        jvm.classpath("zookeeper"),
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(_config_path(root, "zookeeper")),
    ]


def _zookeeper_ok(port: int) -> bool:
    # `srvr`, not `ruok`: ruok answers imok even when the server thread died and no
    # request is served; srvr reports the mode only when the server really serves.
    try:
        with socket.create_connection((HOST, port), timeout=1) as sock:
            sock.sendall(b"srvr")
            sock.settimeout(1)
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
            return b"Mode:" in reply
    except OSError:
        return False


def _zookeeper_tls_ok(port: int, secure: dict[str, Any]) -> bool:
    """A TLS handshake with a client certificate succeeds on ZooKeeper's secure port."""
    import ssl

    context = ssl.create_default_context(cafile=secure["ca"])
    context.load_cert_chain(secure["client_certfile"], secure["client_keyfile"])
    try:
        with socket.create_connection((HOST, port), timeout=1) as raw, \
                context.wrap_socket(raw, server_hostname=HOST) as sock:
            sock.settimeout(1)
            # Under TLS 1.3 a refused client certificate shows only at the first read, so
            # this sends a 4-letter word; the server may answer or just close: both mean served.
            sock.sendall(b"srvr")
            sock.recv(1)
            return True
    except (OSError, ssl.SSLError):
        return False
