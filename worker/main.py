"""Run one worker process: mirror its assignment until SIGTERM (graceful) or a second signal (now)."""

from __future__ import annotations

import os
import signal

from common import logs
from common.config import Config, worker_id
from worker.mirror import MirrorWorker


def run(config: Config) -> int:
    wid = worker_id(config)
    log = logs.get("worker", pipeline=config.pipeline, worker=wid)
    log.info("worker_starting", config=config.redacted())
    worker = MirrorWorker(config, wid)
    signals = {"count": 0}

    def on_signal(signum: int, _frame: object) -> None:
        signals["count"] += 1
        if signals["count"] > 1:
            os._exit(130)  # second signal: the operator wants out now
        log.info("worker_signal", signal=signal.Signals(signum).name)
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.run()
    return 0
