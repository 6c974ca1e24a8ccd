"""Write MirrorMaker 2's dedicated-mode config for one benchmark run and build its java command line.

One flow, identity naming, the worker's producer settings, only the data path on (no heartbeats, checkpoints,
offset-syncs or config/ACL/group sync), internal topics at replication factor 1, a fresh source alias per run;
the JVM gets ``connect-mirror-maker.sh``'s heap and ``kafka-run-class.sh``'s G1 flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import PRODUCER_SETTINGS
from devtools import jvm

MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
HEAP = ["-Xms256M", "-Xmx2G"]
# KAFKA_JVM_PERFORMANCE_OPTS of kafka-run-class.sh (what connect-mirror-maker.sh runs with).
JVM_FLAGS = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
             "-XX:+ExplicitGCInvokesConcurrent", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"]
DESTINATION = "destination"
# Everything but the data path off. (No offset-syncs.* keys at all: with emit.offset-syncs.enabled=false the
# connector refuses any of them.)
DISABLED = ("emit.heartbeats", "emit.checkpoints", "emit.offset-syncs", "sync.topic.configs", "sync.topic.acls",
            "sync.group.offsets", "refresh.groups")


def producer_overrides() -> dict[str, str]:
    """The worker's librdkafka producer settings in Java client terms."""
    same = {k: str(PRODUCER_SETTINGS[k]) for k in ("linger.ms", "batch.size", "compression.type", "acks")}
    # Connect defaults its source-task producers to 1 request in flight; librdkafka's
    # idempotent producer keeps up to 5, so MM2 gets the same 5.
    return {**same, "enable.idempotence": str(PRODUCER_SETTINGS["enable.idempotence"]).lower(),
            "max.in.flight.requests.per.connection": "5"}


def properties(alias: str, source: str, destination: str, topic: str, tasks_max: int = 1,
               exactly_once: bool = False) -> dict[str, Any]:
    """``exactly_once``: KIP-618's exactly-once source support (Kafka 3.5+ in dedicated mode): each
    task's records and source offsets commit in one transaction, one per poll (Connect's default
    ``transaction.boundary``)."""
    flow = f"{alias}->{DESTINATION}"
    props: dict[str, Any] = {
        "clusters": f"{alias}, {DESTINATION}",
        f"{alias}.bootstrap.servers": source,
        f"{DESTINATION}.bootstrap.servers": destination,
        f"{flow}.enabled": "true",
        f"{DESTINATION}->{alias}.enabled": "false",
        f"{flow}.topics": topic,
        "tasks.max": tasks_max,
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        **{f"{name}.enabled": "false" for name in DISABLED},
        # Internal topics on single-broker clusters.
        **{f"{name}replication.factor": 1 for name in ("", "offset.storage.", "status.storage.", "config.storage.")},
        **{f"{DESTINATION}.producer.{key}": value for key, value in producer_overrides().items()},
    }
    if exactly_once:
        # Per target cluster in dedicated mode (the Kafka docs' geo-replication section, "Exactly once").
        props[f"{DESTINATION}.exactly.once.source.support"] = "enabled"
    return props


def launch(workdir: Path, props: dict[str, Any]) -> list[str]:
    """Write ``props`` as ``mm2.properties`` and a ``log4j.properties`` into ``workdir``; return the java command."""
    workdir.mkdir(parents=True, exist_ok=True)
    log4j = {
        "log4j.rootLogger": "INFO, file",
        "log4j.appender.file": "org.apache.log4j.FileAppender",
        "log4j.appender.file.File": str(workdir / "mm2.log"),
        "log4j.appender.file.layout": "org.apache.log4j.PatternLayout",
        "log4j.appender.file.layout.ConversionPattern": "[%d] %p %m (%c)%n",
        "log4j.logger.org.reflections": "ERROR",
    }
    for name, values in (("mm2.properties", props), ("log4j.properties", log4j)):
        (workdir / name).write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return [jvm.java_executable(), *HEAP, *JVM_FLAGS, f"-Dlog4j.configuration=file:{workdir / 'log4j.properties'}",
            "-cp", jvm.classpath("mirrormaker"), MAIN_CLASS, str(workdir / "mm2.properties")]
