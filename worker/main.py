"""Run one worker process: mirror its route until SIGTERM (graceful) or a second signal (now).

A worker serves one route at a time. Pinned (``worker.route``, or the deployment's only
route) it resolves that route once and mirrors it. In the shared pool (``worker.pool: true``)
it registers ``pool/workers/<id>`` and follows ``pool/bindings/<id>``, which the leader
rewrites only after the old route's hand-off gate drained it: on a new binding it stops its
:class:`MirrorWorker` gracefully and starts one for the new route, in the same process.
A pool worker serves its probes and metrics itself, bound or not (:func:`worker.probes.pool_app`);
the route's MirrorWorker then opens no port of its own and labels its metrics with the route.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import replace
from datetime import datetime, timezone

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from prometheus_client import CollectorRegistry

from ureplicator.common import httpserve, logs, signals, zk
from ureplicator.common.config import IMPLICIT_ROUTE, Config, worker_id
from ureplicator.common.errors import UReplicatorError
from ureplicator.common.zkschema import Paths, PoolBinding, SchemaError, WorkerInfo
from ureplicator.worker import probes
from ureplicator.worker.metrics import WorkerMetrics, per_route
from ureplicator.worker.mirror import (
    ID_WAIT_MARGIN_S,
    VERSION,
    IdHolderWatch,
    MirrorWorker,
    WorkerIdInUse,
    describe_holder,
)


def run(config: Config) -> int:
    if config.worker.pool:
        return run_pooled(config)
    # The route this worker serves: declared in the file, or added through the API (read from
    # ZooKeeper's route registry); its clusters, forwarding, paths and offsets group.
    config = zk.route_config(config, config.worker.route)
    wid = worker_id(config)
    log = logs.get("worker", pipeline=config.pipeline, worker=wid)
    log.info("worker_starting", config=config.redacted())
    worker = MirrorWorker(config, wid, metrics=WorkerMetrics(config.route_id or IMPLICIT_ROUTE))
    signals.on_stop_signals(worker.stop, log, "worker_signal")
    worker.run()
    return 0


class _Serving:
    """One route's MirrorWorker on a thread, and how its run ended."""

    def __init__(self, config: Config, wid: str, route: str, metrics: WorkerMetrics) -> None:
        self.route = route
        view = zk.route_config(config, route)
        # The pool's server answers on worker.metrics_port for the whole process: no second one.
        view = replace(view, worker=replace(view.worker, metrics_port=0))
        self.metrics = metrics
        self.worker = MirrorWorker(view, wid, metrics=metrics)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"mirror-{route}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the pool loop, which ends the process
            self.error = exc

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join()
        self.metrics.forget()  # the route's gauges go with it; its counters stay


class _PoolFace:
    """What the pool worker's probes read (:class:`worker.probes.Pool`): plain attributes of the pool loop."""

    def __init__(self, client) -> None:  # noqa: ANN001 - a KazooClient
        self._client = client
        self.joined = threading.Event()  # pool/workers/<id> created in the current session
        self.current: _Serving | None = None

    @property
    def session(self) -> str:
        return str(self._client.state)

    @property
    def member(self) -> bool:
        return self.joined.is_set() and self._client.state != KazooState.LOST

    @property
    def serving(self) -> tuple[str, probes.Observed] | None:
        current = self.current
        return (current.route, current.worker) if current is not None else None


def run_pooled(config: Config) -> int:
    """Serve the route the leader binds this worker to, until a stop signal; 1 when a mirror loop failed."""
    wid = worker_id(config)
    paths = Paths(config.pipeline_root)
    log = logs.get("worker", pipeline=config.pipeline, worker=wid, pool=True)
    log.info("worker_starting", config=config.redacted())
    stop, changed, lost = threading.Event(), threading.Event(), threading.Event()
    binding: dict[str, str | None] = {"route": None}

    def on_binding(data: bytes | None, stat: object) -> bool:
        try:
            binding["route"] = PoolBinding.decode(data).route if data else None
        except SchemaError as exc:
            log.error("pool_binding_unreadable", error=logs.error_text(exc))
            binding["route"] = None
        changed.set()
        return not stop.is_set()

    def on_connection(state: str) -> None:
        if state == KazooState.LOST:
            face.joined.clear()
            lost.set()  # our pool registration went with the session: register again
        changed.set()

    def graceful() -> None:
        stop.set()
        changed.set()

    client = zk.connect(config)
    face = _PoolFace(client)
    client.add_listener(on_connection)
    registry = CollectorRegistry()
    metrics_for = per_route(registry)
    server = None
    if config.worker.metrics_port:
        server = httpserve.serve(
            httpserve.logged(probes.pool_app(face, registry, config.worker.health_stall_s), "worker",
                             quiet_paths=frozenset({"/metrics", "/healthz", "/ready"})),
            config.worker.metrics_host, config.worker.metrics_port, "worker-probes",
        )
    info = WorkerInfo(host=socket.gethostname(), pid=os.getpid(), version=VERSION,
                      started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      metrics_port=config.worker.metrics_port)
    signals.on_stop_signals(graceful, log, "worker_signal")
    id_wait_s = max(config.zookeeper.session_timeout_s,
                    getattr(client, "granted_session_s", None) or 0.0) + ID_WAIT_MARGIN_S
    serving: _Serving | None = None
    failed: tuple[str | None, float] = (None, 0.0)  # a route that could not be served, and when to try again
    code = 0
    try:
        if _join_pool(client, paths, wid, info.encode(), stop, id_wait_s):
            face.joined.set()
        client.DataWatch(paths.pool_binding(wid), on_binding)
        log.info("pool_joined")
        while not stop.is_set():
            if lost.is_set() and client.connected:
                lost.clear()
                if _join_pool(client, paths, wid, info.encode(), stop, id_wait_s):
                    face.joined.set()
            wanted = binding["route"]
            if serving is not None and serving.error is not None:
                log.error("mirror_loop_failed", route=serving.route, error=repr(serving.error))
                code = 1
                break
            if serving is not None and serving.route != wanted:
                log.info("pool_leaving_route", route=serving.route, next=wanted)
                face.current = None
                serving.stop()
                serving = None
            if serving is None and wanted is not None and (wanted != failed[0] or time.monotonic() >= failed[1]):
                log.info("pool_serving_route", route=wanted)
                try:
                    serving = _Serving(config, wid, wanted, metrics_for(wanted))
                    face.current = serving
                except UReplicatorError as exc:  # the route cannot be served from this file: say so, wait
                    log.error("pool_route_not_served", route=wanted, error=logs.error_text(exc))
                    failed = (wanted, time.monotonic() + 10.0)
            changed.wait(1.0)
            changed.clear()
    finally:
        face.current = None
        if serving is not None:
            serving.stop()
        face.joined.clear()
        try:
            _leave_pool(client, paths.pool_worker(wid))
        finally:
            client.stop()
            client.close()
            if server is not None:
                server.shutdown()
        log.info("pool_left")
    return code


def _join_pool(client, paths: Paths, wid: str, info: bytes, stop: threading.Event,  # noqa: ANN001
               wait_s: float) -> bool:
    """Register in the pool (True); a previous session's node with our id is waited out (False: stopped first).

    The same rule as :meth:`MirrorWorker.register`: a node another session still holds after
    ``wait_s`` (session timeout and margin) belongs to a live process, and we refuse with
    :class:`WorkerIdInUse` rather than wait for ever; its node is never touched.
    """
    client.ensure_path(paths.pool_workers)
    path = paths.pool_worker(wid)
    holder = IdHolderWatch(wait_s)
    while True:
        try:
            client.create(path, info, ephemeral=True)
            return True
        except NodeExistsError:
            try:
                data, stat = client.get(path)
            except NoNodeError:
                continue  # its session expired meanwhile: take the id
            owner = getattr(stat, "ephemeralOwner", None)
            if owner is not None and client.client_id and owner == client.client_id[0]:
                return True  # ours: a create of this session answered after a reconnect
            if holder.expired(owner):
                raise WorkerIdInUse(wid, path, describe_holder(data, owner), wait_s) from None
            if stop.wait(0.5):
                return False


def _leave_pool(client, path: str) -> None:  # noqa: ANN001
    """Delete our pool node, and only ours: a refused or stopped join leaves another holder's node alone."""
    try:
        _, stat = client.get(path)
        if client.client_id and getattr(stat, "ephemeralOwner", None) == client.client_id[0]:
            client.delete(path, version=stat.version)
    except (NoNodeError, BadVersionError):
        pass
