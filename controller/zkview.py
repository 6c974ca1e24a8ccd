"""The leader's view of one route's ZooKeeper state, kept current by watches instead of re-read every round.

Before, every round listed and read every topic, status and assignment node, and every
worker's status refresh (one per worker every few seconds) started a round: the leader's
cost grew with workers x rounds. Here kazoo's ``TreeCache`` follows the route's nodes (a
change costs one read of that node) and a round reads nothing unless a worker registered
anew. Events only signal (``wake``); the reconcile loop reads this view.

- **Followed**: ``topics/``, ``workers/``, ``status/``, ``blacklist/``, ``admin/``: one cache on
  the route's own root, or, for the route whose state is the pipeline root (which also holds
  the election and the other routes), one cache per subtree.
- **Woken for**: any change but a status refresh that keeps the worker's generation and owned
  partitions (only rates and lag moved): the hand-off gate depends on those two alone, and
  rates and lag are sampled by the next periodic round.
- **Written assignments** are not followed: the leader is their only writer, so it keeps
  what it wrote (:meth:`note_written`). A worker deletes its own node before it registers,
  so a worker whose registration is new has its node read again (one read). All of them are
  read again at the start, after a refused write and after a reconnect.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.cache import TreeCache, TreeEvent

from ureplicator.common import logs, zk
from ureplicator.common.zkschema import Assignment, Paths, SchemaError, TopicPartition, TopicRecord, WorkerStatus

T = TypeVar("T")
log = logs.get(__name__)


class RouteView:
    """The nodes of one route the leader plans from; start it, wait for :attr:`ready`, close it at term end."""

    def __init__(self, client: KazooClient, paths: Paths, wake: Callable[[], None], own_root: bool) -> None:
        self._client = client
        self._paths = paths
        self._wake = wake
        roots = [paths.root] if own_root else [paths.topics, paths.workers, paths.status,
                                                f"{paths.root}/blacklist", paths.admin]
        self._caches = [TreeCache(client, root) for root in roots]
        self._pending = len(self._caches)  # caches not initialized yet
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[bytes, Any]] = {}  # path -> (data, stat) of followed nodes
        self._children: dict[str, set[str]] = {}
        self._decoded: dict[str, tuple[int, Any]] = {}  # path -> (mzxid, document)
        self._gate_keys: dict[str, tuple[int, frozenset[TopicPartition]] | None] = {}
        self._written: dict[str, Assignment] | None = None  # None: read them all next time
        self._epoch = 0  # bumped when the written assignments must be read again
        self._registrations: dict[str, int] = {}  # worker -> czxid of the registration its node was read for

    @property
    def ready(self) -> bool:
        return self._pending == 0

    def start(self) -> None:
        for cache in self._caches:
            cache.listen(self._on_event)
            cache.listen_fault(lambda exc: log.warning("route_view_fault", error=repr(exc)))
            cache.start()

    def close(self) -> None:
        for cache in self._caches:
            cache.close()

    # --- events (cache threads: record and signal, never block) -------------------------------

    def _on_event(self, event: TreeEvent) -> None:
        kind = event.event_type
        if kind == TreeEvent.INITIALIZED:
            with self._lock:
                self._pending -= 1
            self._wake()
            return
        if kind == TreeEvent.CONNECTION_RECONNECTED:
            self.forget_written()  # writes may have been refused or raced while disconnected
            self._wake()
            return
        if kind not in (TreeEvent.NODE_ADDED, TreeEvent.NODE_UPDATED, TreeEvent.NODE_REMOVED):
            return
        node = event.event_data
        if node is None:
            return
        path = node.path
        parent, _, name = path.rpartition("/")
        if parent == self._paths.assignments or path == self._paths.assignments:
            return  # our own writes: kept in memory
        with self._lock:
            if kind == TreeEvent.NODE_REMOVED:
                self._nodes.pop(path, None)
                self._children.get(parent, set()).discard(name)
                self._decoded.pop(path, None)
            else:
                self._nodes[path] = (node.data, node.stat)
                self._children.setdefault(parent, set()).add(name)
        if parent == self._paths.status:
            key = None
            if kind != TreeEvent.NODE_REMOVED:
                try:
                    status = WorkerStatus.decode(node.data or b"")
                    key = (status.generation, status.owned)
                    self._decoded[path] = (node.stat.mzxid, status)  # decoded once, here
                except SchemaError:
                    pass
            with self._lock:
                changed = path not in self._gate_keys or self._gate_keys[path] != key
                self._gate_keys[path] = key
                if kind == TreeEvent.NODE_REMOVED:
                    del self._gate_keys[path]
            if not changed:
                return  # a refresh of rates and lag: the next periodic round samples it
        self._wake()

    # --- reads (the reconcile loop) -------------------------------------------------------------

    def children(self, parent: str) -> list[str]:
        with self._lock:
            return sorted(self._children.get(parent, ()))

    def data(self, path: str) -> bytes | None:
        with self._lock:
            entry = self._nodes.get(path)
        return entry[0] if entry is not None else None

    def topics(self) -> dict[str, TopicRecord]:
        return self._documents(self._paths.topics, TopicRecord.decode, "topic_record_unreadable")

    def statuses(self) -> dict[str, WorkerStatus]:
        return self._documents(self._paths.status, WorkerStatus.decode, "worker_status_unreadable")

    def written(self, registered: list[str]) -> dict[str, Assignment]:
        """The assignments as last written: from memory, re-read for workers that registered anew."""
        with self._lock:
            current, epoch = self._written, self._epoch
            registrations = {w: self._nodes[self._paths.worker(w)][1].czxid
                             for w in registered if self._paths.worker(w) in self._nodes}
        if current is None:
            current = zk.read_assignments(self._client, self._paths)
            self._registrations = dict(registrations)
        else:
            current = dict(current)
            for worker, czxid in registrations.items():
                if self._registrations.get(worker) == czxid:
                    continue
                try:
                    current[worker] = Assignment.decode(self._client.get(self._paths.assignment(worker))[0])
                except NoNodeError:
                    current.pop(worker, None)
                except SchemaError as exc:
                    log.warning("assignment_unreadable", worker=worker, error=logs.error_text(exc))
                    current.pop(worker, None)
                self._registrations[worker] = czxid
        with self._lock:
            if self._epoch == epoch:  # not invalidated meanwhile
                self._written = current
        return dict(current)

    def note_written(self, changed: dict[str, Assignment], removed: list[str]) -> None:
        """What the leader's write just made true (a refused write calls :meth:`forget_written`)."""
        with self._lock:
            if self._written is None:
                return
            self._written.update(changed)
            for worker in removed:
                self._written.pop(worker, None)

    def forget_written(self) -> None:
        with self._lock:
            self._written = None
            self._epoch += 1

    def _documents(self, parent: str, decode: Callable[[bytes], T], event: str) -> dict[str, T]:
        """Decoded children of ``parent``, each decoded once per version."""
        with self._lock:
            entries = {name: self._nodes.get(f"{parent}/{name}") for name in self._children.get(parent, ())}
        documents: dict[str, T] = {}
        for name, entry in entries.items():
            if entry is None:
                continue
            data, stat = entry
            path = f"{parent}/{name}"
            cached = self._decoded.get(path)
            if cached is not None and cached[0] == stat.mzxid:
                documents[name] = cached[1]
                continue
            try:
                document = decode(data)
            except SchemaError as exc:
                log.warning(event, node=name, error=logs.error_text(exc))
                continue
            self._decoded[path] = (stat.mzxid, document)
            documents[name] = document
        return documents

