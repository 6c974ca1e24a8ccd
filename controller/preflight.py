"""The preflight check behind ``ureplicator check``: can this config run, with these credentials?

It validates nothing twice: the config was loaded (and validated) by the caller. It then
connects to ZooKeeper and to both Kafka clusters with the configured credentials and asks
each broker which operations it grants (``include_authorized_operations``), for the cluster,
the mirrored topics and the offsets group. Each check yields one :class:`Finding`; a person
reads them top to bottom, a script reads ``--json``. Nothing is written but one ephemeral
ZooKeeper node, created and deleted to prove the credential may write the pipeline's nodes.

The operations each role needs are in :data:`REQUIRED` (docs/security.md lists them too, and a
test keeps the two in step).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, KazooException, NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ureplicator.common import autherrors, kafka, zk, zktls
from ureplicator.common.config import ClusterConfig, Config, route_view
from ureplicator.common.errors import ClusterUnavailable
from ureplicator.common.zkschema import Paths

# What the replicator does on each cluster, as Kafka ACL operations (resource -> operations).
REQUIRED: dict[str, dict[str, tuple[str, ...]]] = {
    "source": {
        "topic": ("DESCRIBE", "READ", "DESCRIBE_CONFIGS"),
        "group": ("DESCRIBE", "READ"),  # ureplicator.<pipeline>: offsets are committed there
    },
    "destination": {
        "cluster": ("IDEMPOTENT_WRITE", "CREATE"),  # CREATE: or a topic-level CREATE per mirrored topic
        "topic": ("DESCRIBE", "WRITE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
    },
}


@dataclass(frozen=True)
class Finding:
    """One checked thing: ``level`` is ok, warn (works, but look) or fail (will not work)."""

    target: str
    level: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run(config: Config, timeout_s: float = 15.0) -> list[Finding]:
    """Every finding for ``config``: ZooKeeper first (it names the topics), then every cluster of every route.

    Each cluster is checked once per role it plays (a cluster that is the source of two routes is
    connected to once, with both routes' topics and offsets groups); a loaded config is the view
    of its first route, so checking only ``config.source`` and ``config.destination`` left the
    other routes' clusters and credentials unchecked.
    """
    views = [route_view(config, route=route) for route in config.routes] or [config]
    findings, topics = _check_zookeeper(config, views, timeout_s)
    sources: dict[str, tuple[ClusterConfig, dict[str, str], list[str]]] = {}
    destinations: dict[str, tuple[ClusterConfig, dict[str, str]]] = {}
    for view in views:
        routed = topics.get(view.route_id, {})
        _, mirrored, groups = sources.setdefault(view.source.alias, (view.source, {}, []))
        mirrored.update(routed)
        if view.consumer_group not in groups:
            groups.append(view.consumer_group)
        # The destination role reads only the destination names (the map's values).
        destinations.setdefault(view.destination.alias, (view.destination, {}))[1].update(
            {name: name for name in routed.values()})
    for cluster, mirrored, groups in sources.values():
        findings += check_cluster("source", cluster, config, mirrored, timeout_s, groups=groups)
    for cluster, mirrored in destinations.values():
        findings += check_cluster("destination", cluster, config, mirrored, timeout_s)
    return findings


def failed(findings: Iterable[Finding]) -> bool:
    return any(f.level == "fail" for f in findings)


# --- ZooKeeper ---------------------------------------------------------------------------------


def check_zookeeper(config: Config, timeout_s: float) -> tuple[list[Finding], dict[str, str]]:
    """Connect, find the pipeline, prove the credential may write; returns findings and {topic: destination}."""
    findings, topics = _check_zookeeper(config, [config], timeout_s)
    return findings, topics.get(config.route_id, {})


def _check_zookeeper(config: Config, views: list[Config],
                     timeout_s: float) -> tuple[list[Finding], dict[str, dict[str, str]]]:
    """One connection for every route in ``views``: findings and {route id: {topic: destination}}."""
    zkc = config.zookeeper
    target = "zookeeper"
    auth = zkc.auth
    client = KazooClient(hosts=zkc.connect, timeout=zkc.session_timeout_s,
                         auth_data=[("digest", auth)] if auth else None, **zktls.options(config))
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError:
        client.close()
        tls_error = zktls.handshake_error(config)
        if tls_error:
            return [Finding(target, "fail", f"ZooKeeper TLS to {zkc.connect} refused: {tls_error} "
                            "(check zookeeper.tls_ca, zookeeper.tls_certfile and zookeeper.tls_keyfile)")], {}
        return [Finding(target, "fail", f"ZooKeeper at {zkc.connect} did not answer within {timeout_s:.0f}s"
                        f"{' (zookeeper.tls is on: is the port a TLS port?)' if zktls.options(config) else ''}")], {}
    except AuthFailedError as exc:
        client.close()
        return [Finding(target, "fail", f"ZooKeeper at {zkc.connect} refused authentication: {exc}")], {}
    findings: list[Finding] = []
    topics: dict[str, dict[str, str]] = {}
    several = len(views) > 1
    if several:
        findings.append(Finding(target, "ok", f"connected to {zkc.connect}; pipeline {config.pipeline}, "
                                f"{len(views)} routes"))
    root = views[0].root
    probe_parent: str | None = None
    try:
        for view in views:
            root = view.root
            # one route: the pipeline's own line, as before; several: one line per route
            what = f"route {view.route_id}" if several else f"connected to {zkc.connect}; pipeline {config.pipeline}"
            if client.exists(root):
                routed = {name: r.destination for name, r in zk.read_topics(client, Paths(root)).items()}
                topics[view.route_id] = routed
                findings.append(Finding(target, "ok", f"{what} exists at {root} with {len(routed)} mirrored topic(s)"))
                probe_parent = probe_parent or root
            else:
                findings.append(Finding(target, "ok", f"{what} is new ({root} is created at the first start)"))
        if probe_parent is None:
            probe_parent = zkc.root if client.exists(zkc.root) else None
        if probe_parent is not None:
            findings.append(_write_probe(client, probe_parent, bool(auth)))
    except NoAuthError:
        findings.append(Finding(target, "fail", f"ZooKeeper refused to read {root}: not authorized "
                                "(check zookeeper.auth)"))
    except KazooException as exc:
        findings.append(Finding(target, "fail", f"ZooKeeper at {zkc.connect} failed: {type(exc).__name__} {exc}"))
    finally:
        client.stop()
        client.close()
    return findings, topics


def _write_probe(client: KazooClient, parent: str, has_auth: bool) -> Finding:
    node = f"{parent}/preflight-{socket.gethostname()}-{os.getpid()}-"
    try:
        created = client.create(node, b"ureplicator check", ephemeral=True, sequence=True)
        client.delete(created)
    except NoAuthError:
        hint = ("zookeeper.auth is not the credential that secured it" if has_auth
                else "it is secured with a digest credential: set zookeeper.auth")
        return Finding("zookeeper", "fail", f"ZooKeeper refused a write under {parent}: not authorized ({hint})")
    except NoNodeError:
        return Finding("zookeeper", "warn", f"{parent} vanished while checking; run the check again")
    return Finding("zookeeper", "ok", f"this credential may write under {parent}")


# --- Kafka -------------------------------------------------------------------------------------


def check_cluster(role: str, cluster: ClusterConfig, config: Config, topics: dict[str, str],
                  timeout_s: float, groups: Iterable[str] | None = None) -> list[Finding]:
    """Connect to one cluster with its properties and check the operations ``role`` needs.

    ``groups``: the offsets groups a source cluster holds (one per route reading it); default the config's.
    """
    target = f"{role} {cluster.alias}"
    admin = kafka.admin(cluster)
    try:  # a refused login fails at once rather than after timeout_s: it is not transient
        metadata = kafka.read_metadata(admin, cluster, timeout_s)
    except ClusterUnavailable as error:
        return [Finding(target, "fail", str(error))]
    findings = [Finding(target, "ok", f"connected to {cluster.bootstrap_servers} "
                                      f"({len(metadata.brokers)} broker(s), authenticated)")]
    findings += _cluster_operations(role, target, admin, timeout_s)
    names = sorted(topics) if role == "source" else sorted(set(topics.values()))
    present = [n for n in names if n in metadata.topics and metadata.topics[n].error is None]
    missing = [n for n in names if n not in present]
    if missing and role == "source":
        findings.append(Finding(target, "fail", f"mirrored topic(s) missing or not visible on the source: "
                                f"{', '.join(missing)} (DESCRIBE on the topic is needed to see it)"))
    elif missing:
        findings.append(Finding(target, "ok", f"{len(missing)} destination topic(s) not created yet "
                                f"(the controller creates them): {', '.join(missing[:5])}"))
    if present:
        findings += _topic_operations(role, target, admin, present, timeout_s)
    if role == "source":
        for group in groups if groups is not None else [config.consumer_group]:
            findings.append(_group_operations(target, admin, group, timeout_s))
    return findings


def _names(operations: Any) -> set[str] | None:
    return None if operations is None else {op.name for op in operations}


def _cluster_operations(role: str, target: str, admin: Any, timeout_s: float) -> list[Finding]:
    wanted = REQUIRED[role].get("cluster")
    if not wanted:
        return []
    try:
        granted = _names(admin.describe_cluster(include_authorized_operations=True).result(timeout_s)
                         .authorized_operations)
    except KafkaException as exc:
        return [Finding(target, "fail", _refused("describe the cluster", exc))]
    if granted is None:
        return [Finding(target, "warn", "the broker does not report authorized operations; cluster ACLs not checked")]
    lacking = [op for op in wanted if op not in granted and "ALL" not in granted]
    if not lacking:
        return [Finding(target, "ok", f"cluster grants {', '.join(wanted)}")]
    out = []
    if "IDEMPOTENT_WRITE" in lacking:
        # A warning, not a failure: from Kafka 3.0 on, WRITE on the topics (checked per topic) implies it.
        out.append(Finding(target, "warn", "cluster does not grant IDEMPOTENT_WRITE: brokers before Kafka 3.0 "
                           "refuse the idempotent producer (no duplicates on retry) without it; from 3.0 on, WRITE "
                           "on the destination topics is enough"))
    if "CREATE" in lacking:
        out.append(Finding(target, "warn", "cluster does not grant CREATE: destination topics must exist "
                           "beforehand, or a topic-level CREATE ACL must cover them"))
    return out


def _topic_operations(role: str, target: str, admin: Any, names: list[str], timeout_s: float) -> list[Finding]:
    wanted = REQUIRED[role]["topic"]
    findings = []
    futures = admin.describe_topics(TopicCollection(names), include_authorized_operations=True)
    lacking: dict[str, list[str]] = {}
    for name, future in futures.items():
        try:
            granted = _names(future.result(timeout_s).authorized_operations)
        except KafkaException as exc:
            findings.append(Finding(target, "fail", f"topic {name}: {_refused('describe it', exc)}"))
            continue
        if granted is None:
            findings.append(Finding(target, "warn", f"topic {name}: authorized operations not reported"))
            continue
        missing = [op for op in wanted if op not in granted and "ALL" not in granted]
        if missing:
            lacking[name] = missing
    for name, missing in sorted(lacking.items()):
        findings.append(Finding(target, "fail", f"topic {name}: not authorized for {', '.join(missing)}"))
    if not lacking and not findings:
        findings.append(Finding(target, "ok", f"{len(names)} topic(s) grant {', '.join(wanted)}"))
    return findings


def _group_operations(target: str, admin: Any, group: str, timeout_s: float) -> Finding:
    wanted = REQUIRED["source"]["group"]
    try:
        description = admin.describe_consumer_groups([group], include_authorized_operations=True)[group]
        granted = _names(description.result(timeout_s).authorized_operations)
    except KafkaException as exc:
        return Finding(target, "fail", f"group {group}: {_refused('describe it', exc)}")
    if granted is None:
        return Finding(target, "warn", f"group {group}: authorized operations not reported")
    missing = [op for op in wanted if op not in granted and "ALL" not in granted]
    if missing:
        return Finding(target, "fail", f"group {group}: not authorized for {', '.join(missing)} "
                                       "(offsets are committed in this group)")
    return Finding(target, "ok", f"group {group} grants {', '.join(wanted)}")


def _refused(what: str, exc: KafkaException) -> str:
    error = exc.args[0]
    cause = autherrors.kind(error) if hasattr(error, "name") else None
    if cause:
        return f"{cause} failed: cannot {what}: {error.str()}"
    return f"cannot {what}: {error.str() if hasattr(error, 'str') else error}"
