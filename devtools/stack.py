"""Start and stop a local ZooKeeper plus two single-broker KRaft clusters (source, destination), or N.

With ``secure``, each broker also gets a SASL_SSL listener (SCRAM-SHA-512, a certificate from a
throwaway CA made by devtools.certs) next to its PLAINTEXT one, and one SCRAM user created when
its storage is formatted; ZooKeeper also opens a ``secureClientPort`` (TLS through Netty, the
same CA, a client certificate required). stack.json's ``secure`` block says how to connect
(docs/security.md).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devtools import jvm
from devtools.ports import NoFreePorts, free_ports

if TYPE_CHECKING:
    from devtools.certs import BrokerTls

SERVICES: tuple[str, ...] = ("zookeeper", "source", "destination")
BROKERS: tuple[str, ...] = ("source", "destination")
MAX_CLUSTERS = 9


def brokers(clusters: int = 2) -> tuple[str, ...]:
    """The broker services of a stack of ``clusters`` clusters: c1 and c2 keep the names source and
    destination (every single-pipeline test and tool knows them), the others are c3..cN."""
    if not 2 <= clusters <= MAX_CLUSTERS:
        raise StackError(f"--clusters must be between 2 and {MAX_CLUSTERS}, got {clusters}")
    return (*BROKERS, *(f"c{i}" for i in range(3, clusters + 1)))


def cluster_alias(broker: str) -> str:
    """The alias ``stack.json`` gives a broker service under ``clusters``: c1, c2, ..."""
    return {"source": "c1", "destination": "c2"}.get(broker, broker)


def _services(state: dict[str, Any] | None) -> tuple[str, ...]:
    """The services a stack was started with (its state file), or the default three."""
    recorded = tuple((state or {}).get("services", {}))
    return recorded or SERVICES

STACK_FILE = "stack.json"
STATE_FILE = "stack-state.json"
LOG_NAME = "service.log"
HOST = "127.0.0.1"

# Heaps sized for a 2-core test box running both brokers, ZooKeeper, workers and Spark;
# benchmarks can raise them without code changes.
KAFKA_HEAP = os.environ.get("UREPLICATOR_STACK_KAFKA_HEAP", "256m")
ZOOKEEPER_HEAP = os.environ.get("UREPLICATOR_STACK_ZOOKEEPER_HEAP", "128m")

_LOG_TAIL_LINES = 30

SECURE_USER = "ureplicator"
SECURE_MECHANISM = "SCRAM-SHA-512"


class StackError(Exception):
    """The local stack could not be started, stopped or inspected."""


def _say(message: str) -> None:
    print(f"stack: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- files


def _svc_dir(root: Path, name: str) -> Path:
    return root / name


def _log_path(root: Path, name: str) -> Path:
    return root / name / LOG_NAME


def _data_dir(root: Path, name: str) -> Path:
    return root / name / "data"


def _config_path(root: Path, name: str) -> Path:
    return root / name / ("zoo.cfg" if name == "zookeeper" else "server.properties")


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def _read_state(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((root / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StackError(f"unreadable stack state {root / STATE_FILE}: {exc}") from exc


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return ""


_ERROR_LINE = re.compile(r"\b(ERROR|FATAL)\b|^Exception in thread|^Error:")
_READ_CAP = 4 * 1024 * 1024


def _failure_report(log: Path, since: int = 0) -> str:
    """The first error of this start attempt (with its "Caused by" lines) and the log tail.

    A JVM that fails at startup usually logs pages of shutdown noise after the actual
    cause, so the tail alone often misses it.
    """
    try:
        with open(log, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(since, size - _READ_CAP))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    tail = lines[-_LOG_TAIL_LINES:]
    report = []
    first = next((i for i, line in enumerate(lines) if _ERROR_LINE.search(line)), None)
    if first is not None and first < len(lines) - len(tail):
        block = lines[first : first + 3]
        causes = [ln for ln in lines[first + 3 : first + 200] if ln.startswith("Caused by:")]
        report += [f"first error in {log}:", *block, *causes[:3], "..."]
    report += [f"last lines of {log}:", *tail]
    return "\n".join(report)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    # One operation per stack dir at a time (e.g. a fixture's down racing a CLI up).
    # Python opens the file non-inheritable, so the JVMs never hold this lock.
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- processes


def _is_zombie(pid: int) -> bool:
    """pid has exited and released everything (only its zombie entry is left).

    A multi-threaded process (a JVM) shows its leader as "Z" as soon as the leader thread
    exits, while other threads may still be tearing down and holding its sockets; it is
    gone only once no other thread is left.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # Field 3, after the parenthesised command name (which may contain spaces).
        if stat.rsplit(")", 1)[-1].split()[0] != "Z":
            return False
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return False


def _reap(pid: int) -> None:
    # Reaps the process when it is our child (started by this Python process); anything
    # else is reaped by its own parent or init.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _alive(pid: int) -> bool:
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        pass
    # No procfs (macOS): ps gives the same information.
    result = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False)
    return result.stdout


def _owned(pid: int | None, marker: str) -> bool:
    """pid is alive and still runs our service (its command line names our config file),
    so a recycled pid is never signalled."""
    return bool(pid) and _alive(int(pid)) and marker in _cmdline(int(pid))


def _wait_gone(pids: list[int], deadline: float) -> list[int]:
    remaining = list(pids)
    while remaining and time.monotonic() < deadline:
        remaining = [p for p in remaining if _alive(p)]
        if remaining:
            time.sleep(0.1)
    return [p for p in remaining if _alive(p)]


def _terminate(pids: list[int], timeout_s: float) -> None:
    """SIGTERM, then SIGKILL whatever is still there after timeout_s."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    stubborn = _wait_gone(pids, time.monotonic() + timeout_s)
    for pid in stubborn:
        _say(f"pid {pid} did not stop within {timeout_s:.0f}s, killing it")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(stubborn, time.monotonic() + 10)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(pids, time.monotonic() + 10)


# ----------------------------------------------------------------------------- ports


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option the JVM sets on its server sockets: a port in TIME_WAIT from a
        # previous run is usable, a port someone listens on is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _port_holders(port: int) -> str:
    """Who holds a local TCP port, as `ss` reports it (best effort, for error messages)."""
    if shutil.which("ss") is None:
        return ""
    result = subprocess.run(["ss", "-Htanp", f"sport = :{port}"], capture_output=True, text=True, check=False)
    lines = [" ".join(line.split()) for line in result.stdout.splitlines() if line.strip()]
    return f" (ss: {'; '.join(lines[:5])})" if lines else ""


def _plan_ports(ports: dict[str, int] | None, services: tuple[str, ...] = SERVICES,
                broker_names: tuple[str, ...] = BROKERS) -> tuple[dict[str, int], dict[str, int]]:
    """(client port per service, controller port per broker)."""
    given = dict(ports or {})
    unknown = sorted(set(given) - set(services))
    if unknown:
        raise StackError(f"unknown service(s) in ports: {', '.join(unknown)}; known: {services}")
    seen: dict[int, str] = {}
    for name, port in given.items():
        if not isinstance(port, int) or not 0 < port < 65536:
            raise StackError(f"invalid port for {name}: {port!r}")
        if port in seen:
            raise StackError(f"{name} and {seen[port]} were both given port {port}")
        seen[port] = name
        if not _port_free(port):
            raise StackError(f"port {port} for {name} is already in use on {HOST}{_port_holders(port)}")
    missing = [s for s in services if s not in given]
    try:
        fresh = free_ports(len(missing) + len(broker_names), set(given.values()))
    except NoFreePorts as exc:
        raise StackError(str(exc)) from None
    client = {**given, **dict(zip(missing, fresh[: len(missing)], strict=True))}
    controller = dict(zip(broker_names, fresh[len(missing) :], strict=True))
    return {s: client[s] for s in services}, controller


# ----------------------------------------------------------------------------- configs


def _cluster_id() -> str:
    # Same format as Kafka's Uuid.randomUuid().toString(): url-safe base64, no padding,
    # never starting with "-" (Kafka regenerates those because they read as CLI flags).
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _props(values: dict[str, Any]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


def _kafka_properties(root: Path, name: str, port: int, controller_port: int, extra: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = {
        # Combined mode: one JVM is the whole cluster (broker + its KRaft controller).
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(_data_dir(root, name)),
        # A single node can replicate nothing: every default that expects 3 brokers.
        "num.partitions": 1,
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        # Internal topics with 50 partitions each take seconds to create on first use.
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        # Topics exist only when the replicator (or a test) creates them on purpose.
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "auto.leader.rebalance.enable": "false",
        # After a crash (kill_service) the restarted broker cannot register until the
        # controller expires its previous incarnation's session: 9 s by default.
        "broker.session.timeout.ms": 4000,
        "broker.heartbeat.interval.ms": 1000,
        # Few threads and a small cleaner buffer (on-heap, 128 MB by default) for a
        # 256 MB heap on 2 cores.
        "num.network.threads": 2,
        "num.io.threads": 4,
        "background.threads": 2,
        "num.recovery.threads.per.data.dir": 1,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 16 * 1024 * 1024,
        "log.cleaner.backoff.ms": 1000,
        # Deleted topics disappear promptly instead of after the default 60 s.
        "file.delete.delay.ms": 1000,
    }
    props.update(extra)
    return props


def _secure_listener(port: int, secure_port: int, controller_port: int, tls: BrokerTls) -> dict[str, Any]:
    """Broker settings for a SASL_SSL listener next to PLAINTEXT; brokers and their controller keep PLAINTEXT."""
    return {
        "listeners": f"PLAINTEXT://{HOST}:{port},SASL_SSL://{HOST}:{secure_port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port},SASL_SSL://{HOST}:{secure_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": SECURE_MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": str(tls.keystore),
    }


def secure_client_properties(secure: dict[str, Any]) -> dict[str, str]:
    """librdkafka properties (all but bootstrap.servers) for the SASL_SSL listeners in stack.json's ``secure``."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": secure["mechanism"],
        "sasl.username": secure["username"],
        "sasl.password": secure["password"],
        "ssl.ca.location": secure["ca"],
    }


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


def _log4j_properties(name: str) -> str:
    # Console only: stdout is the service log, so there is a single writer to the file.
    return _props(
        {
            "log4j.rootLogger": "INFO, stdout",
            "log4j.appender.stdout": "org.apache.log4j.ConsoleAppender",
            "log4j.appender.stdout.layout": "org.apache.log4j.PatternLayout",
            "log4j.appender.stdout.layout.ConversionPattern": f"[%d] %p [{name}] %m (%c)%n",
            "log4j.logger.kafka.request.logger": "WARN",
            "log4j.logger.state.change.logger": "WARN",
            "log4j.logger.kafka.authorizer.logger": "WARN",
        }
    )


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

_COMMON_JVM_FLAGS = [
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]


def _zookeeper_command(java: str, root: Path) -> list[str]:
    svc = _svc_dir(root, "zookeeper")
    return [
        java,
        # C1 only: a (re)start is mostly class loading and warm-up, and the Netty factory the TLS port
        # needs made it about 2 s slower on a loaded 2-core box (3.2 s -> 5.9 s, 7 restarts each); a
        # test ZooKeeper's load never needs C2. Fault tests restart it and expect a short outage.
        "-XX:TieredStopAtLevel=1",
        "-Xms32m",
        f"-Xmx{ZOOKEEPER_HEAP}",
        *_COMMON_JVM_FLAGS,
        f"-Dlogback.configurationFile={svc / 'logback.xml'}",
        "-Dzookeeper.admin.enableServer=false",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp",
        jvm.classpath("zookeeper"),
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(_config_path(root, "zookeeper")),
    ]


def _kafka_jvm(java: str, root: Path, name: str, heap: str) -> list[str]:
    svc = _svc_dir(root, name)
    return [
        java,
        "-Xms64m",
        f"-Xmx{heap}",
        *_COMMON_JVM_FLAGS,
        f"-Dlog4j.configuration=file:{svc / 'log4j.properties'}",
        f"-Dkafka.logs.dir={svc}",
        "-cp",
        jvm.classpath("kafka"),
    ]


def _kafka_command(java: str, root: Path, name: str) -> list[str]:
    return [*_kafka_jvm(java, root, name, KAFKA_HEAP), "kafka.Kafka", str(_config_path(root, name))]


def _format_command(java: str, root: Path, name: str, cluster_id: str, scram_password: str | None) -> list[str]:
    # A short-lived tool: C1 only starts faster and it needs little heap.
    jvm_part = _kafka_jvm(java, root, name, "128m")
    return [
        *jvm_part[:1],
        "-XX:TieredStopAtLevel=1",
        *jvm_part[1:],
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id,
        "-c",
        str(_config_path(root, name)),
        # KRaft stores SCRAM credentials in its metadata log: the user exists before the first client.
        *(["--add-scram", f"{SECURE_MECHANISM}=[name={SECURE_USER},password={scram_password}]"]
          if scram_password else []),
    ]


def _write_configs(
    root: Path,
    ports: dict[str, int],
    controller_ports: dict[str, int],
    extra: dict[str, dict[str, Any]],
) -> None:
    for name in ports:
        svc = _svc_dir(root, name)
        shutil.rmtree(_data_dir(root, name), ignore_errors=True)
        _data_dir(root, name).mkdir(parents=True)
        _log_path(root, name).write_text("")
        if name == "zookeeper":
            (svc / "logback.xml").write_text(_LOGBACK_XML)
            cfg = _zoo_cfg(root, ports[name], extra.get(name, {}))
        else:
            (svc / "log4j.properties").write_text(_log4j_properties(name))
            cfg = _kafka_properties(root, name, ports[name], controller_ports[name], extra.get(name, {}))
        _config_path(root, name).write_text(_props(cfg))


# ----------------------------------------------------------------------------- readiness


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


def _tcp_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


class _KafkaProbe:
    """Asks a broker for metadata; created lazily once the port accepts connections so
    librdkafka does not log 'connection refused' while the JVM is still booting."""

    def __init__(self, port: int, client: dict[str, str] | None = None) -> None:
        self.port = port
        self.client = dict(client or {})  # security settings, for the SASL_SSL listener
        self.admin: Any = None

    def ready(self, budget_s: float) -> bool:
        if self.admin is None:
            if not _tcp_open(self.port):
                return False
            from confluent_kafka.admin import AdminClient

            self.admin = AdminClient({"bootstrap.servers": f"{HOST}:{self.port}", **self.client})
        try:
            metadata = self.admin.list_topics(timeout=max(0.5, min(2.0, budget_s)))
        except Exception:  # KafkaException while the broker is not serving yet
            return False
        return bool(metadata.brokers)


def _wait_ready(root: Path, name: str, pid: int, port: int, deadline: float, log_offset: int = 0,
                client: dict[str, str] | None = None, zookeeper_tls: dict[str, Any] | None = None) -> None:
    probe = _KafkaProbe(port, client) if name != "zookeeper" else None
    while True:
        if not _alive(pid):
            raise StackError(f"{name} exited during startup; " + _failure_report(_log_path(root, name), log_offset))
        remaining = deadline - time.monotonic()
        if probe is not None:
            ok = probe.ready(remaining)
        else:
            ok = _zookeeper_tls_ok(port, zookeeper_tls) if zookeeper_tls else _zookeeper_ok(port)
        if ok:
            return
        if time.monotonic() >= deadline:
            raise StackError(
                f"{name} on {HOST}:{port} was not ready in time; " + _failure_report(_log_path(root, name), log_offset)
            )
        time.sleep(0.2)


# ----------------------------------------------------------------------------- launch


def _launch(root: Path, name: str, cmd: list[str]) -> int:
    with open(_log_path(root, name), "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(_svc_dir(root, name)),
            # Own session: survives the `stack up` command and its terminal's Ctrl-C.
            start_new_session=True,
        )
    return proc.pid


def _format_brokers(root: Path, java: str, cluster_ids: dict[str, str], deadline: float,
                    scram_password: str | None = None) -> None:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in cluster_ids:
            with open(_log_path(root, name), "ab") as log:
                procs[name] = subprocess.Popen(
                    _format_command(java, root, name, cluster_ids[name], scram_password),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=str(_svc_dir(root, name)),
                )
        for name, proc in procs.items():
            try:
                rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise StackError(
                    f"{name}: formatting its storage did not finish in time; " + _failure_report(_log_path(root, name))
                ) from None
            if rc != 0:
                raise StackError(
                    f"{name}: formatting its storage failed (exit {rc}); " + _failure_report(_log_path(root, name))
                )
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _address(port: int) -> str:
    return f"{HOST}:{port}"


def _live_services(state: dict[str, Any]) -> dict[str, int]:
    live = {}
    for name, svc in state.get("services", {}).items():
        if _owned(svc.get("pid"), svc["config"]):
            live[name] = int(svc["pid"])
    return live


def up(
    dir: Path,
    ports: dict[str, int] | None = None,
    timeout_s: float = 90,
    extra_config: dict[str, dict[str, Any]] | None = None,
    secure: bool = False,
    clusters: int = 2,
) -> dict[str, Any]:
    """Start ZooKeeper and the source and destination brokers in dir; returns (and writes
    to dir/stack.json) {"zookeeper": "127.0.0.1:p", "source": ..., "destination": ...,
    "clusters": {"c1": <source>, "c2": <destination>, ...}}.

    clusters > 2 starts that many single-broker clusters: c1 and c2 are source and
    destination, c3..cN are services of those names.

    extra_config adds/overrides zoo.cfg or server.properties entries per service.
    secure adds a SASL_SSL listener per broker, a TLS port to ZooKeeper, and a "secure" block:
    {"source": address, "destination": address, "c3"...: address, "zookeeper": TLS address,
    "ca": PEM path, "client_certfile", "client_keyfile" (ZooKeeper's client certificate),
    "mechanism", "username", "password"}.
    Raises StackError, after stopping whatever it started, when anything fails; also
    when a stack is already running in dir.
    """
    root = Path(dir).resolve()
    extra = dict(extra_config or {})
    broker_names = brokers(clusters)
    services = ("zookeeper", *broker_names)
    unknown = sorted(set(extra) - set(services))
    if unknown:
        raise StackError(f"unknown service(s) in extra_config: {', '.join(unknown)}")
    with _locked(root):
        state = _read_state(root)
        if state is not None:
            live = _live_services(state)
            if live:
                pids = ", ".join(f"{n} pid {p}" for n, p in live.items())
                raise StackError(f"a stack is already running in {root} ({pids}); run `ureplicator stack down` first")
            (root / STATE_FILE).unlink(missing_ok=True)  # leftovers of a dead stack
        (root / STACK_FILE).unlink(missing_ok=True)

        # Everything that can fail without side effects is checked before any JVM starts.
        try:
            java = jvm.java_executable()
            jvm.classpath("zookeeper")
            jvm.classpath("kafka")
        except jvm.JvmError as exc:
            raise StackError(str(exc)) from exc
        client_ports, controller_ports = _plan_ports(ports, services, broker_names)
        secure_ports: dict[str, int] = {}
        if secure:
            try:
                taken = {*client_ports.values(), *controller_ports.values()}
                secure_ports = dict(zip(services, free_ports(len(services), taken), strict=True))
            except NoFreePorts as exc:
                raise StackError(str(exc)) from None

        started = time.monotonic()
        deadline = started + timeout_s
        for name in services:
            _svc_dir(root, name).mkdir(parents=True, exist_ok=True)
        secure_block: dict[str, Any] | None = None
        if secure:
            from devtools import certs  # cryptography (the dev extra) is needed only here

            tls = certs.write(root / "tls")
            secure_block = {
                **{name: _address(secure_ports[name]) for name in services},
                "ca": str(tls.ca), "client_certfile": str(tls.client_cert), "client_keyfile": str(tls.client_key),
                "mechanism": SECURE_MECHANISM, "username": SECURE_USER,
                "password": secrets.token_urlsafe(18),
            }
            extra["zookeeper"] = {**_zookeeper_tls(secure_ports["zookeeper"], tls), **extra.get("zookeeper", {})}
            for name in broker_names:
                listener = _secure_listener(client_ports[name], secure_ports[name], controller_ports[name], tls)
                extra[name] = {**listener, **extra.get(name, {})}
        _write_configs(root, client_ports, controller_ports, extra)
        cluster_ids = {name: _cluster_id() for name in broker_names}
        state = {"dir": str(root), "created_at": time.time(), "services": {}}
        launched: list[int] = []
        try:
            # ZooKeeper boots while the brokers' storage is formatted: JVM start-up
            # dominates, so overlapping them roughly halves the wall time.
            commands = {"zookeeper": _zookeeper_command(java, root)}
            commands.update({n: _kafka_command(java, root, n) for n in broker_names})
            launch_times: dict[str, float] = {}

            def start(name: str) -> None:
                _say(f"starting {name} on {_address(client_ports[name])}")
                pid = _launch(root, name, commands[name])
                launched.append(pid)
                launch_times[name] = time.monotonic()
                state["services"][name] = {
                    "address": _address(client_ports[name]),
                    "port": client_ports[name],
                    "controller_port": controller_ports.get(name),
                    "secure_port": secure_ports.get(name),
                    "cluster_id": cluster_ids.get(name),
                    "pid": pid,
                    "config": str(_config_path(root, name)),
                    "log": str(_log_path(root, name)),
                    "command": commands[name],
                    "started_at": time.time(),
                }
                # Recorded at once, so `stack down` finds it even if this process dies.
                _write_json(root / STATE_FILE, state)

            start("zookeeper")
            _say(f"formatting the storage of {', '.join(broker_names)}")
            _format_brokers(root, java, cluster_ids, deadline, secure_block["password"] if secure_block else None)
            for name in broker_names:
                start(name)
            for name in services:
                svc = state["services"][name]
                _wait_ready(root, name, svc["pid"], svc["port"], deadline)
                _say(f"{name} ready in {time.monotonic() - launch_times[name]:.1f}s")
            if secure_block is not None:
                _wait_ready(root, "zookeeper", state["services"]["zookeeper"]["pid"], secure_ports["zookeeper"],
                            deadline, zookeeper_tls=secure_block)
                for name in broker_names:  # a SCRAM login over TLS, as every secure client will do it
                    svc = state["services"][name]
                    _wait_ready(root, name, svc["pid"], secure_ports[name], deadline,
                                client=secure_client_properties(secure_block))
                _say(f"SASL_SSL listeners and ZooKeeper TLS on {secure_block['zookeeper']} ready "
                     f"({SECURE_MECHANISM}, user {SECURE_USER}, CA {secure_block['ca']})")
        except BaseException:
            # No orphan JVM: whatever this call started goes, the logs stay.
            _kill([p for p in launched if _alive(p)])
            (root / STATE_FILE).unlink(missing_ok=True)
            raise
        addresses: dict[str, Any] = {name: _address(client_ports[name]) for name in SERVICES}
        addresses["clusters"] = {cluster_alias(name): _address(client_ports[name]) for name in broker_names}
        if secure_block is not None:
            addresses["secure"] = secure_block
        _write_json(root / STACK_FILE, addresses)
        _say(f"up in {time.monotonic() - started:.1f}s: {root / STACK_FILE}")
        return addresses


def down(dir: Path, timeout_s: float = 30) -> list[str]:
    """Stop the processes recorded in dir's state file and remove their data and the
    state files (logs and configs stay). Returns the services that were running."""
    root = Path(dir).resolve()
    if not root.is_dir():
        return []
    with _locked(root):
        state = _read_state(root) or {}
        live = _live_services(state)
        if live:
            _say(f"stopping {', '.join(live)}")
            _terminate(list(live.values()), timeout_s)
        leftover = [n for n, p in live.items() if _alive(p)]
        if leftover:
            raise StackError(f"could not stop {', '.join(leftover)} in {root}")
        for name in _services(state):
            shutil.rmtree(_data_dir(root, name), ignore_errors=True)
        (root / STATE_FILE).unlink(missing_ok=True)
        (root / STACK_FILE).unlink(missing_ok=True)
        return list(live)


def status(dir: Path) -> dict[str, dict[str, Any]]:
    """Per service {"address", "pid", "running"}; empty when no stack was started in dir."""
    state = _read_state(Path(dir).resolve()) or {}
    result: dict[str, dict[str, Any]] = {}
    for name in _services(state):
        svc = state.get("services", {}).get(name)
        if svc is None:
            continue
        result[name] = {
            "address": svc["address"],
            "pid": svc.get("pid"),
            "running": _owned(svc.get("pid"), svc["config"]),
        }
    return result


def _service_state(root: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    state = _read_state(root)
    if name not in _services(state):
        raise StackError(f"unknown service {name!r}; expected one of {_services(state)}")
    if state is None or name not in state.get("services", {}):
        raise StackError(f"no stack in {root}; run `ureplicator stack up` first")
    return state, state["services"][name]


def stop_service(dir: Path, name: str, timeout_s: float = 30) -> None:
    """Stop one service cleanly (SIGTERM; SIGKILL after timeout_s), keeping its data."""
    root = Path(dir).resolve()
    with _locked(root):
        state, svc = _service_state(root, name)
        if _owned(svc.get("pid"), svc["config"]):
            _say(f"stopping {name} (pid {svc['pid']})")
            _terminate([int(svc["pid"])], timeout_s)
        svc["pid"] = None
        _write_json(root / STATE_FILE, state)


def kill_service(dir: Path, name: str) -> None:
    """SIGKILL one service (a crash), keeping its data."""
    root = Path(dir).resolve()
    with _locked(root):
        state, svc = _service_state(root, name)
        if _owned(svc.get("pid"), svc["config"]):
            _say(f"killing {name} (pid {svc['pid']})")
            _kill([int(svc["pid"])])
        svc["pid"] = None
        _write_json(root / STATE_FILE, state)


def start_service(dir: Path, name: str, timeout_s: float = 60) -> str:
    """Start a stopped service again on the same port with the same data; returns its
    address. A no-op when it is already running."""
    root = Path(dir).resolve()
    with _locked(root):
        state, svc = _service_state(root, name)
        if _owned(svc.get("pid"), svc["config"]):
            return str(svc["address"])
        ports = [p for p in (svc["port"], svc.get("controller_port"), svc.get("secure_port")) if p]
        # Sockets of the previous process can linger for a moment after it is gone.
        grace = time.monotonic() + min(5.0, timeout_s / 2)
        busy = [p for p in ports if not _port_free(p)]
        while busy and time.monotonic() < grace:
            time.sleep(0.2)
            busy = [p for p in ports if not _port_free(p)]
        if busy:
            raise StackError(
                f"cannot restart {name}: port {busy[0]} is already in use on {HOST}" + _port_holders(busy[0])
            )
        with open(_log_path(root, name), "a") as log:
            log.write(f"\n===== ureplicator stack: restarting {name} at {time.ctime()} =====\n")
            log_offset = log.tell()
        _say(f"starting {name} on {svc['address']}")
        started = time.monotonic()
        pid = _launch(root, name, svc["command"])
        svc["pid"] = pid
        svc["started_at"] = time.time()
        _write_json(root / STATE_FILE, state)
        try:
            _wait_ready(root, name, pid, svc["port"], started + timeout_s, log_offset)
        except BaseException:
            _kill([pid] if _alive(pid) else [])
            svc["pid"] = None
            _write_json(root / STATE_FILE, state)
            raise
        _say(f"{name} ready in {time.monotonic() - started:.1f}s")
        return str(svc["address"])


def service_logs(dir: Path, lines: int = 50) -> dict[str, str]:
    """The last lines of each service's log (for test failure reports)."""
    root = Path(dir).resolve()
    names = _services(_read_state(root))
    return {name: _tail(_log_path(root, name), lines) for name in names if _log_path(root, name).exists()}


def default_dir() -> Path:
    return jvm.CACHE_DIR / "stack"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.stack", description=__doc__)
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="stack folder (default: $UREPLICATOR_CACHE/stack, else .cache/stack)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds to wait")
    parser.add_argument("--secure", action="store_true", help="add SASL_SSL (SCRAM-SHA-512) listeners")
    parser.add_argument("--clusters", type=int, default=2, help="single-broker clusters c1..cN (default 2)")
    args = parser.parse_args(argv)
    root = args.dir if args.dir is not None else default_dir()
    try:
        if args.command == "up":
            addresses = up(root, timeout_s=args.timeout or 90, secure=args.secure, clusters=args.clusters)
            print(json.dumps(addresses, indent=2))
        elif args.command == "down":
            stopped = down(root, timeout_s=args.timeout or 30)
            _say(f"stopped {', '.join(stopped)}" if stopped else f"nothing running in {root}")
        else:
            print(json.dumps(status(root), indent=2))
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
