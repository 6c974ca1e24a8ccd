"""Connect to ZooKeeper and read or write the pipeline's documents (see common.zkschema).

Small and split by concept: connection, topics, workers/status, assignments.
Writes that touch several nodes go through ``transaction()`` and its result
list is checked, because kazoo's ``commit()`` returns exceptions instead of
raising them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import ACL, Permissions, make_acl, make_digest_acl

from ureplicator.common import logs, zkclient, zktls
from ureplicator.common.config import Config, parse_route, route_view
from ureplicator.common.errors import ClusterUnavailable, ConfigError, UReplicatorError
from ureplicator.common.zkschema import (
    Assignment,
    Paths,
    RouteRecord,
    SchemaError,
    TopicRecord,
    WorkerInfo,
    WorkerStatus,
)

log = logs.get(__name__)
T = TypeVar("T")


class TransactionFailed(UReplicatorError):
    """A multi-node write was refused: an ordinary race (a node appeared or vanished meanwhile)."""


class Fenced(TransactionFailed):
    """The write's fence ``check`` failed: the writer's election node is gone, it must step down."""


def connect(config: Config, timeout_s: float = 15.0, read_only: bool = False) -> KazooClient:
    """Start a session, or raise ClusterUnavailable naming the ensemble.

    The client reconnects quickly enough to keep its session through a short ZooKeeper restart
    (:mod:`common.zkclient`).

    ``read_only`` clients (the verifier) write nothing, not even the pipeline's parent nodes,
    so a mistyped pipeline name cannot create an empty pipeline.
    """
    auth = config.zookeeper.auth
    client = zkclient.Client(hosts=config.zookeeper.connect, timeout=config.zookeeper.session_timeout_s,
                              read_only=read_only, auth_data=[("digest", auth)] if auth else None,
                              default_acl=pipeline_acl(auth) if auth else None, **zktls.options(config))
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError:
        client.close()
        raise ClusterUnavailable(
            f"ZooKeeper at {config.zookeeper.connect} did not answer within {timeout_s:.0f}s"
        ) from None
    if not read_only:
        try:
            if auth:
                # Shared by every pipeline: others may add theirs next to ours, not remove ours.
                client.ensure_path(config.zookeeper.root, acl=_shared_root_acl(auth))
            _secure_pipeline(client, config)
            for parent in Paths(config.root).all_parents():
                client.ensure_path(parent)
        except BaseException:
            client.stop()
            client.close()
            raise
    return client


# --- authentication and ACLs ---------------------------------------------------------------


def pipeline_acl(auth: str) -> list[ACL]:
    """Only the holder of ``auth`` ("user:password") changes the pipeline's nodes; anyone may read them."""
    user, _, password = auth.partition(":")
    return [make_digest_acl(user, password, all=True), make_acl("world", "anyone", read=True)]


def _shared_root_acl(auth: str) -> list[ACL]:
    user, _, password = auth.partition(":")
    return [make_digest_acl(user, password, all=True), make_acl("world", "anyone", read=True, create=True)]


def _secure_pipeline(client: KazooClient, config: Config) -> None:
    """Make the pipeline's existing nodes match ``zookeeper.auth``, or refuse with what to do.

    Nodes created after auth is on get the digest ACL from ``default_acl``. Nodes from before
    (open to the world) are re-secured here once: every node, deepest first and the pipeline
    root last, so a start interrupted half-way does the walk again next time.
    """
    root = config.root
    try:
        current, _ = client.get_acls(root)
    except NoNodeError:
        return  # a new pipeline: created below with the right ACL
    auth = config.zookeeper.auth
    if auth is None:
        if not any(a.id.scheme == "world" and a.perms & Permissions.WRITE for a in current):
            raise ConfigError("zookeeper.auth", f"the pipeline's nodes under {root} are protected by ZooKeeper ACLs "
                              f"({_describe_acl(current)}): set zookeeper.auth (env UREPLICATOR_ZOOKEEPER_AUTH) to "
                              "the user:password they were secured with")
        return
    wanted = pipeline_acl(auth)
    if set(current) == set(wanted):
        return
    paths = _subtree(client, root)
    log.warning("zookeeper_acls_securing", root=root, nodes=len(paths), was=_describe_acl(current))
    try:
        for path in reversed(paths):
            try:
                client.set_acls(path, wanted)
            except NoNodeError:
                continue  # an ephemeral node that went away meanwhile
    except NoAuthError:
        raise ConfigError("zookeeper.auth", f"the pipeline's nodes under {root} are protected by another ZooKeeper "
                          f"credential ({_describe_acl(current)}): zookeeper.auth must be that user:password") from None


def _subtree(client: KazooClient, root: str) -> list[str]:
    """``root`` and every node below it, parents before children."""
    found, pending = [], [root]
    while pending:
        path = pending.pop()
        found.append(path)
        try:
            pending.extend(f"{path}/{child}" for child in client.get_children(path))
        except NoNodeError:
            continue
    return found


def _describe_acl(acl: Iterable[ACL]) -> str:
    """Who may do what, without the digest's password hash."""
    entries = []
    for entry in acl:
        who = entry.id.id.partition(":")[0] if entry.id.scheme == "digest" else entry.id.id
        entries.append(f"{entry.id.scheme}:{who} {','.join(entry.acl_list).lower()}")
    return "; ".join(entries)


def commit(transaction: object, what: str, fenced: bool = False) -> None:
    """Commit a kazoo transaction and raise if any operation failed.

    With ``fenced``, the first operation is the writer's fence ``check``: when *it* is the
    one that failed (kazoo marks the others ``RolledBackError``) raise :class:`Fenced`,
    otherwise :class:`TransactionFailed` (a race worth retrying, not a reason to step down).
    """
    results = transaction.commit()  # type: ignore[attr-defined]
    failures = [r for r in results if isinstance(r, Exception)]
    if not failures:
        return
    names = ", ".join(type(f).__name__ for f in failures)
    if fenced and results and isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
        raise Fenced(f"{what}: fence check failed ({type(results[0]).__name__})")
    raise TransactionFailed(f"{what}: {names}")


# --- topics --------------------------------------------------------------------------------


def read_topics(client: KazooClient, paths: Paths) -> dict[str, TopicRecord]:
    topics: dict[str, TopicRecord] = {}
    for name in client.get_children(paths.topics):
        record = read_topic(client, paths, name)
        if record is not None:
            topics[name] = record
    return topics


def read_topic(client: KazooClient, paths: Paths, name: str) -> TopicRecord | None:
    try:
        data, _ = client.get(paths.topic(name))
    except NoNodeError:
        return None
    try:
        return TopicRecord.decode(data)
    except SchemaError as exc:
        log.warning("topic_record_unreadable", topic=name, error=logs.error_text(exc))
        return None


class TopicBlacklisted(UReplicatorError):
    """Auto-whitelisting met a topic an operator removed (it is blacklisted): it is not registered."""


def create_topic(client: KazooClient, paths: Paths, record: TopicRecord, lift_blacklist: bool = True,
                 attempts: int = 3) -> bool:
    """Register a topic; False when it is already registered.

    An explicit add (``lift_blacklist``) deletes an earlier removal's blacklist entry in the same
    write. Auto-whitelisting passes ``lift_blacklist=False``: its write creates and deletes the
    blacklist entry around the registration, so the whole write is refused when the entry exists
    (ZooKeeper has no "check absent"), and :class:`TopicBlacklisted` is raised. Together with
    :func:`remove_topic` this keeps a removed topic from coming back under any interleaving.
    """
    entry = paths.blacklisted_topic(record.topic)
    for _ in range(attempts):
        tx = client.transaction()
        tx.create(paths.topic(record.topic), record.encode())
        if not lift_blacklist:
            tx.create(entry)
            tx.delete(entry)
        elif client.exists(entry):
            tx.delete(entry)
        results = tx.commit()
        if not any(isinstance(r, Exception) for r in results):
            return True
        if isinstance(results[0], NodeExistsError):
            return False
        if not lift_blacklist and isinstance(results[1], NodeExistsError):
            raise TopicBlacklisted(f"topic {record.topic!r} was removed through the API (it is blacklisted)")
        # The blacklist entry vanished between exists() and commit(): decide again.
    raise TransactionFailed(f"registering topic {record.topic!r}: its blacklist entry kept changing; try again")


def update_topic(client: KazooClient, paths: Paths, record: TopicRecord) -> None:
    client.set(paths.topic(record.topic), record.encode())


def remove_topic(client: KazooClient, paths: Paths, name: str, attempts: int = 3) -> bool:
    """Unregister a topic and blacklist it in one transaction; False when it is not registered.

    One write, not two: the leader's auto-whitelist pass reads the registered topics and then
    the blacklist, and between two separate writes it could find the topic in neither and
    register again what an operator had just removed.
    """
    for _ in range(attempts):
        tx = client.transaction()
        tx.delete(paths.topic(name))
        if not client.exists(paths.blacklisted_topic(name)):
            tx.create(paths.blacklisted_topic(name))
        results = tx.commit()
        if not any(isinstance(r, Exception) for r in results):
            return True
        if isinstance(results[0], NoNodeError):
            return False
        # The blacklist entry appeared or vanished between exists() and commit(): decide again.
    raise TransactionFailed(f"removing topic {name!r}: its blacklist entry kept changing; try again")


# --- workers and their status ------------------------------------------------------------------


def live_workers(client: KazooClient, paths: Paths) -> list[str]:
    return sorted(client.get_children(paths.workers))


def read_worker_infos(client: KazooClient, paths: Paths) -> dict[str, WorkerInfo]:
    """Every live worker's registration (host, version, the copy loop it runs)."""
    return _read_children(client, paths.workers, WorkerInfo.decode, "worker_registration_unreadable")


def read_statuses(client: KazooClient, paths: Paths) -> dict[str, WorkerStatus]:
    return _read_children(client, paths.status, WorkerStatus.decode, "worker_status_unreadable")


def _read_children(client: KazooClient, parent: str, decode: Callable[[bytes], T], event: str) -> dict[str, T]:
    """Decode every child of ``parent``; children that vanish meanwhile or do not decode are skipped."""
    documents: dict[str, T] = {}
    for worker in client.get_children(parent):
        try:
            data, _ = client.get(f"{parent}/{worker}")
            documents[worker] = decode(data)
        except NoNodeError:
            continue  # the worker went away between the listing and the read
        except SchemaError as exc:
            log.warning(event, worker=worker, error=logs.error_text(exc))
    return documents


# --- assignments ---------------------------------------------------------------------------


def read_assignments(client: KazooClient, paths: Paths) -> dict[str, Assignment]:
    return _read_children(client, paths.assignments, Assignment.decode, "assignment_unreadable")


def write_assignments(
    client: KazooClient,
    paths: Paths,
    changed: dict[str, Assignment],
    existing: Iterable[str],
    removed: Iterable[str],
    fence: str | None,
) -> None:
    """Write the changed assignments and drop those of departed workers, atomically.

    ``fence`` is the leader's election node: if it is gone (session lost and a
    new leader may act) the whole write is refused.
    """
    existing = set(existing)
    tx = client.transaction()
    if fence is not None:
        tx.check(fence, -1)
    for worker, assignment in sorted(changed.items()):
        if worker in existing:
            tx.set_data(paths.assignment(worker), assignment.encode())
        else:
            tx.create(paths.assignment(worker), assignment.encode())
    for worker in sorted(removed):
        tx.delete(paths.assignment(worker))
    commit(tx, "writing assignments", fenced=fence is not None)


# --- routes --------------------------------------------------------------------------------


def read_routes(client: KazooClient, paths: Paths) -> dict[str, RouteRecord]:
    """The route registry under the pipeline root ``paths``; records that do not decode are skipped."""
    try:
        return _read_children(client, paths.routes, RouteRecord.decode, "route_record_unreadable")
    except NoNodeError:
        return {}


def route_state(data: bytes | None) -> str:
    """``active`` or ``paused`` from a registry node's data (unreadable: active, the safe default)."""
    try:
        return RouteRecord.decode(data or b"").state
    except SchemaError:
        return "active"


def create_route(client: KazooClient, paths: Paths, record: RouteRecord, state_root: str) -> bool:
    """Register a route and create its state's parent nodes in one write; False when the id is taken.

    ``state_root`` is where the route keeps its state: its registry node, or the pipeline root
    for the route that keeps the pipeline's own state (its parents exist already).
    """
    client.ensure_path(paths.routes)
    node = paths.route(record.id)
    tx = client.transaction()
    tx.create(node, record.encode())
    if state_root == node:
        created = {node}
        for parent in Paths(state_root).all_parents():
            for step in _steps(node, parent):
                if step not in created:
                    created.add(step)
                    tx.create(step)
    results = tx.commit()
    if not any(isinstance(r, Exception) for r in results):
        return True
    if isinstance(results[0], NodeExistsError):
        return False
    raise TransactionFailed(f"registering route {record.id!r}: {', '.join(type(r).__name__ for r in results)}")


def _steps(base: str, path: str) -> list[str]:
    """The nodes from below ``base`` down to ``path``, parents first."""
    parts = path[len(base):].strip("/").split("/")
    return [f"{base}/{'/'.join(parts[: i + 1])}" for i in range(len(parts))]


def update_route(client: KazooClient, paths: Paths, record: RouteRecord) -> None:
    client.set(paths.route(record.id), record.encode())


def delete_route(client: KazooClient, paths: Paths, route_id: str) -> None:
    """Drop a route from the registry together with the state under its node (topics, assignments...)."""
    client.delete(paths.route(route_id), recursive=True)


def route_config(config: Config, route_id: str = "", timeout_s: float = 15.0) -> Config:
    """The single-route config a worker serves: :func:`common.config.route_view` of ``route_id``.

    A route the file does not declare (added through ``POST /routes``) is read from the
    route registry in ZooKeeper, over a short read-only session; its clusters must be
    declared in the file (secrets never go to ZooKeeper). Anything missing is a ConfigError.
    """
    if not route_id or any(r.id == route_id for r in config.routes):
        return route_view(config, route_id)
    client = connect(config, timeout_s=timeout_s, read_only=True)
    try:
        data, _ = client.get(Paths(config.pipeline_root).route(route_id))
    except NoNodeError:
        raise ConfigError("worker.route", f"unknown route {route_id!r}: not in the config file, and "
                                          f"{Paths(config.pipeline_root).route(route_id)} does not exist") from None
    finally:
        client.stop()
        client.close()
    try:
        definition = RouteRecord.decode(data).definition
    except SchemaError as exc:
        raise ConfigError("worker.route", f"route {route_id!r} in ZooKeeper is unreadable: {exc}") from None
    return route_view(config, route=parse_route(definition, f"routes/{route_id}"))
