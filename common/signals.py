"""First SIGTERM/SIGINT asks a process to stop gracefully; a second one ends it at once (dramatiq's rule)."""

from __future__ import annotations

import faulthandler
import os
import signal
from collections.abc import Callable
from typing import Any


def on_stop_signals(graceful: Callable[[], None], log: Any, event: str, exit_code: int = 130) -> None:
    """Call ``graceful`` on the first SIGTERM or SIGINT; exit immediately on the second.

    SIGUSR1 writes every thread's stack to stderr and the process goes on (``kill -USR1 PID``):
    what a stuck process is waiting for, without a debugger in the container.
    """
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    count = {"n": 0}

    def handler(signum: int, _frame: object) -> None:
        count["n"] += 1
        if count["n"] > 1:
            os._exit(exit_code)  # second signal: the operator wants out now
        log.info(event, signal=signal.Signals(signum).name)
        graceful()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
