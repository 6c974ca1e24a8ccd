"""SIGUSR1 writes every thread's stack to stderr and the process goes on."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import os, signal, threading, time
from ureplicator.common import signals
signals.on_stop_signals(lambda: None, None, "stop")
threading.Thread(target=lambda: time.sleep(5), name="sleeper", daemon=True).start()
os.kill(os.getpid(), signal.SIGUSR1)
time.sleep(0.2)
print("still running")
"""


def test_sigusr1_dumps_every_threads_stack_and_the_process_goes_on() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert "still running" in done.stdout
    assert "Current thread 0x" in done.stderr and "line 5 in <lambda>" in done.stderr  # main and sleeper
