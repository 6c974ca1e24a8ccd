"""SIGUSR1 writes every thread's stack to stderr and the process goes on."""

from __future__ import annotations

import subprocess
import sys

# The waiter thread is in its lambda before the signal, and raise_signal returns only after the
# handler ran (faulthandler writes the dump from the C handler): no sleep on either side.
SCRIPT = """
import signal, threading
from ureplicator.common import signals
signals.on_stop_signals(lambda: None, None, "stop")
waiting = threading.Event()
threading.Thread(target=lambda: (waiting.set(), threading.Event().wait()), name="waiter", daemon=True).start()
waiting.wait()
signal.raise_signal(signal.SIGUSR1)
print("still running")
"""
WAITER_LINE = next(n for n, line in enumerate(SCRIPT.splitlines(), 1) if "threading.Thread(" in line)


def test_sigusr1_dumps_every_threads_stack_and_the_process_goes_on() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert "still running" in done.stdout
    assert "Current thread 0x" in done.stderr  # the main thread
    assert f"line {WAITER_LINE} in <lambda>" in done.stderr  # and the waiter
