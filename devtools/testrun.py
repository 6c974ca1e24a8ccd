"""`make test-parallel`: the whole suite on one stack of its own, in two phases, the stack always stopped after.

Most integration tests wait on I/O (a reconcile interval, a session timeout, a JVM starting), so
two pytest-xdist workers share a 2-core machine well. They share one stack (ZooKeeper, clusters
c1..c3, SASL_SSL listeners; started here and handed to pytest as ``UREPLICATOR_TEST_STACK``), so
a test that stops, restarts or freezes one of its services would break the tests running beside
it: those are marked ``disruptive`` and run in a second phase, one at a time, on the same stack
(they start every service they stopped again). The tests that use Spark run on one xdist worker
(``xdist_group("spark")``, tests/conftest.py), so two Spark drivers never starve each other.

    python -m devtools.testrun [--workers N] [PYTEST ARGS...]

``--workers 0`` runs the first phase without xdist. PYTEST ARGS that name files or folders
replace ``tests`` (``make test-parallel PYTEST_ARGS=tests/integration/test_faults.py``). The exit
status is pytest's: 0 when both phases passed, 5 when neither collected a test, else the first
failing phase's status.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from devtools import stack

NO_TESTS = 5  # pytest's exit status when it collected nothing


class Terminated(KeyboardInterrupt):
    """SIGTERM (CI cancelling the job): unwinds like Ctrl-C, so the stack is stopped on the way out."""


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"signal {signum}")


def _pytest(command: list[str], env: dict[str, str]) -> int:
    """Run one phase. Interrupted, it gets one SIGINT (Ctrl-C in a terminal sent it one already), so its
    fixtures stop the processes they started, before the stack goes."""
    child = subprocess.Popen([sys.executable, "-m", "pytest", *command], env=env)
    try:
        return child.wait()
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated):
            child.send_signal(signal.SIGINT)
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise


def _names_paths(extra: list[str]) -> bool:
    """Whether the extra pytest arguments name test files or folders (then they replace ``tests``)."""
    return any(not a.startswith("-") and Path(a.split("::")[0]).exists() for a in extra)


def phases(workers: int, extra: list[str]) -> list[tuple[str, list[str]]]:
    """The two pytest command lines (after ``python -m pytest``), each with its name."""
    common = [*([] if _names_paths(extra) else ["tests"]), "-q", "-ra", "--durations=30", "-p", "no:cacheprovider"]
    parallel = ["-n", str(workers), "--dist", "loadgroup"] if workers > 0 else []
    return [("parallel" if workers > 0 else "shared", [*common, *parallel, "-m", "not disruptive", *extra]),
            ("disruptive, one at a time", [*common, "-m", "disruptive", *extra])]


def combined(statuses: list[int]) -> int:
    """0 when every phase passed; NO_TESTS only when no phase collected a test; else the first failure."""
    ran = [s for s in statuses if s != NO_TESTS]
    if not ran:
        return NO_TESTS
    return next((s for s in ran if s != 0), 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.testrun", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers of the first phase (0: none)")
    args, extra = parser.parse_known_args(argv)
    if args.workers < 0:
        parser.error(f"--workers must be 0 or more, got {args.workers}")
    signal.signal(signal.SIGTERM, _interrupted)
    directory = Path(tempfile.mkdtemp(prefix="ureplicator-test-stack-"))
    statuses: list[int] = []
    try:
        started = time.monotonic()
        # 4 minutes, not the CLI's 90 s: the machine that runs the suite is often shared.
        stack.up(directory, secure=True, clusters=3, timeout_s=240)
        print(f"testrun: stack in {directory} up in {time.monotonic() - started:.0f} s", flush=True)
        env = {**os.environ, "UREPLICATOR_TEST_STACK": str(directory)}
        for name, command in phases(args.workers, extra):
            started = time.monotonic()
            print(f"testrun: phase {len(statuses) + 1}, {name}: pytest {' '.join(command)}", flush=True)
            statuses.append(_pytest(command, env))
            print(f"testrun: phase {len(statuses)} exited {statuses[-1]} after {time.monotonic() - started:.0f} s",
                  flush=True)
    except stack.StackError as exc:
        print(f"testrun: the test stack did not start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("testrun: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM must not skip the stop
        stack.down(directory)
    status = combined(statuses)
    if status == 0:
        shutil.rmtree(directory, ignore_errors=True)
    else:  # the services' logs, for whoever reads the failure
        print(f"testrun: the stack's logs stay in {directory}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
