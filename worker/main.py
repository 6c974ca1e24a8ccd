"""Run one worker process: mirror its assignment until SIGTERM (graceful) or a second signal (now)."""

from __future__ import annotations

from common import logs, signals, zk
from common.config import Config, worker_id
from worker.mirror import MirrorWorker


def run(config: Config) -> int:
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
