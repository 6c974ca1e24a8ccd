"""The single-broker KRaft clusters of a local stack: properties, SASL_SSL, command lines, storage format, probe."""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devtools import jvm
from devtools.stack_common import (
    _COMMON_JVM_FLAGS,
    BROKERS,
    HOST,
    MAX_CLUSTERS,
    SECURE_MECHANISM,
    SECURE_USER,
    StackError,
    _config_path,
    _data_dir,
    _failure_report,
    _log_path,
    _props,
    _svc_dir,
    _tcp_open,
)

if TYPE_CHECKING:
    from devtools.certs import BrokerTls


def brokers(clusters: int = 2) -> tuple[str, ...]:
    """The broker services of a stack of ``clusters`` clusters: c1 and c2 keep the names source and
    destination (every single-pipeline test and tool knows them), the others are c3..cN."""
    if not 2 <= clusters <= MAX_CLUSTERS:
        raise StackError(f"--clusters must be between 2 and {MAX_CLUSTERS}, got {clusters}")
    return (*BROKERS, *(f"c{i}" for i in range(3, clusters + 1)))


def cluster_alias(broker: str) -> str:
    """The alias ``stack.json`` gives a broker service under ``clusters``: c1, c2, ..."""
    return {"source": "c1", "destination": "c2"}.get(broker, broker)


def _cluster_id() -> str:
    # Same format as Kafka's Uuid.randomUuid().toString(): url-safe base64, no padding,
    # never starting with "-" (Kafka regenerates those because they read as CLI flags).
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


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


def _kafka_command(java: str, root: Path, name: str, heap: str) -> list[str]:
    return [*_kafka_jvm(java, root, name, heap), "kafka.Kafka", str(_config_path(root, name))]


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
