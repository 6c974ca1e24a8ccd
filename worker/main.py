"""Run one worker process: mirror its route until SIGTERM (graceful) or a second signal (now).

A worker serves one route at a time. Pinned (``worker.route``, or the deployment's only
route) it resolves that route once and mirrors it. In the shared pool (``worker.pool: true``)
it registers ``pool/workers/<id>`` and follows ``pool/bindings/<id>``, which the leader
rewrites only after the old route's hand-off gate drained it: on a new binding it stops its
:class:`MirrorWorker` gracefully and starts one for the new route, in the same process.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import datetime, timezone

from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from ureplicator.common import logs, signals, zk
from ureplicator.common.config import Config, worker_id
from ureplicator.common.errors import UReplicatorError
from ureplicator.common.zkschema import Paths, PoolBinding, SchemaError, WorkerInfo
from ureplicator.worker.mirror import VERSION, MirrorWorker


def run(config: Config) -> int:
    if config.worker.pool:
        return run_pooled(config)
    # The route this worker serves: declared in the file, or added through the API (read from
    # ZooKeeper's route registry); its clusters, forwarding, paths and offsets group.
    config = zk.route_config(config, config.worker.route)
    wid = worker_id(config)
    log = logs.get("worker", pipeline=config.pipeline, worker=wid)
    log.info("worker_starting", config=config.redacted())
    worker = MirrorWorker(config, wid)
    signals.on_stop_signals(worker.stop, log, "worker_signal")
    worker.run()
    return 0


class _Serving:
    """One route's MirrorWorker on a thread, and how its run ended."""

    def __init__(self, config: Config, wid: str, route: str) -> None:
        self.route = route
        self.worker = MirrorWorker(zk.route_config(config, route), wid)
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
            log.error("pool_binding_unreadable", error=str(exc))
            binding["route"] = None
        changed.set()
        return not stop.is_set()

    def on_connection(state: str) -> None:
        if state == KazooState.LOST:
            lost.set()  # our pool registration went with the session: register again
        changed.set()

    def graceful() -> None:
        stop.set()
        changed.set()

    client = zk.connect(config)
    client.add_listener(on_connection)
    info = WorkerInfo(host=socket.gethostname(), pid=os.getpid(), version=VERSION,
                      started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      metrics_port=config.worker.metrics_port)
    signals.on_stop_signals(graceful, log, "worker_signal")
    serving: _Serving | None = None
    failed: tuple[str | None, float] = (None, 0.0)  # a route that could not be served, and when to try again
    code = 0
    try:
        _join_pool(client, paths, wid, info.encode(), stop)
        client.DataWatch(paths.pool_binding(wid), on_binding)
        log.info("pool_joined")
        while not stop.is_set():
            if lost.is_set() and client.connected:
                lost.clear()
                _join_pool(client, paths, wid, info.encode(), stop)
            wanted = binding["route"]
            if serving is not None and serving.error is not None:
                log.error("mirror_loop_failed", route=serving.route, error=repr(serving.error))
                code = 1
                break
            if serving is not None and serving.route != wanted:
                log.info("pool_leaving_route", route=serving.route, next=wanted)
                serving.stop()
                serving = None
            if serving is None and wanted is not None and (wanted != failed[0] or time.monotonic() >= failed[1]):
                log.info("pool_serving_route", route=wanted)
                try:
                    serving = _Serving(config, wid, wanted)
                except UReplicatorError as exc:  # the route cannot be served from this file: say so, wait
                    log.error("pool_route_not_served", route=wanted, error=str(exc))
                    failed = (wanted, time.monotonic() + 10.0)
            changed.wait(1.0)
            changed.clear()
    finally:
        if serving is not None:
            serving.stop()
        try:
            client.delete(paths.pool_worker(wid))
        except NoNodeError:
            pass
        finally:
            client.stop()
            client.close()
        log.info("pool_left")
    return code


def _join_pool(client, paths: Paths, wid: str, info: bytes, stop: threading.Event) -> None:  # noqa: ANN001
    """Register in the pool; a previous session's node with our id is waited out."""
    client.ensure_path(paths.pool_workers)
    while True:
        try:
            client.create(paths.pool_worker(wid), info, ephemeral=True)
            return
        except NodeExistsError:
            if stop.wait(0.5):
                return
