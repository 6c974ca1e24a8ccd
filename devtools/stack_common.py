"""The files, processes and ports of one local stack folder (shared by its ZooKeeper and Kafka parts)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from devtools.ports import NoFreePorts, free_ports

SERVICES: tuple[str, ...] = ("zookeeper", "source", "destination")
BROKERS: tuple[str, ...] = ("source", "destination")
MAX_CLUSTERS = 9


STACK_FILE = "stack.json"
STATE_FILE = "stack-state.json"
LOG_NAME = "service.log"
HOST = "127.0.0.1"

_LOG_TAIL_LINES = 30

SECURE_USER = "ureplicator"
SECURE_MECHANISM = "SCRAM-SHA-512"


class StackError(Exception):
    """The local stack could not be started, stopped or inspected."""


def _say(message: str) -> None:
    print(f"stack: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- files


def _svc_dir(root: Path, name: str) -> Path:
    return root / name


def _log_path(root: Path, name: str) -> Path:
    return root / name / LOG_NAME


def _data_dir(root: Path, name: str) -> Path:
    return root / name / "data"


def _config_path(root: Path, name: str) -> Path:
    return root / name / ("zoo.cfg" if name == "zookeeper" else "server.properties")


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def _read_state(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((root / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StackError(f"unreadable stack state {root / STATE_FILE}: {exc}") from exc


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return ""


_ERROR_LINE = re.compile(r"\b(ERROR|FATAL)\b|^Exception in thread|^Error:")
_READ_CAP = 4 * 1024 * 1024


def _failure_report(log: Path, since: int = 0) -> str:
    """The first error of this start attempt (with its "Caused by" lines) and the log tail.

    A JVM that fails at startup usually logs pages of shutdown noise after the actual
    cause, so the tail alone often misses it.
    """
    try:
        with open(log, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(since, size - _READ_CAP))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    tail = lines[-_LOG_TAIL_LINES:]
    report = []
    first = next((i for i, line in enumerate(lines) if _ERROR_LINE.search(line)), None)
    if first is not None and first < len(lines) - len(tail):
        block = lines[first : first + 3]
        causes = [ln for ln in lines[first + 3 : first + 200] if ln.startswith("Caused by:")]
        report += [f"first error in {log}:", *block, *causes[:3], "..."]
    report += [f"last lines of {log}:", *tail]
    return "\n".join(report)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    # One operation per stack dir at a time (e.g. a fixture's down racing a CLI up).
    # Python opens the file non-inheritable, so the JVMs never hold this lock.
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- processes


def _is_zombie(pid: int) -> bool:
    """pid has exited and released everything (only its zombie entry is left).

    A multi-threaded process (a JVM) shows its leader as "Z" as soon as the leader thread
    exits, while other threads may still be tearing down and holding its sockets; it is
    gone only once no other thread is left.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # Field 3, after the parenthesised command name (which may contain spaces).
        if stat.rsplit(")", 1)[-1].split()[0] != "Z":
            return False
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return False


def _reap(pid: int) -> None:
    # Reaps the process when it is our child (started by this Python process); anything
    # else is reaped by its own parent or init.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _alive(pid: int) -> bool:
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        pass
    # No procfs (macOS): ps gives the same information.
    result = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False)
    return result.stdout


def _owned(pid: int | None, marker: str) -> bool:
    """pid is alive and still runs our service (its command line names our config file),
    so a recycled pid is never signalled."""
    return bool(pid) and _alive(int(pid)) and marker in _cmdline(int(pid))


def _wait_gone(pids: list[int], deadline: float) -> list[int]:
    remaining = list(pids)
    while remaining and time.monotonic() < deadline:
        remaining = [p for p in remaining if _alive(p)]
        if remaining:
            time.sleep(0.1)
    return [p for p in remaining if _alive(p)]


def _terminate(pids: list[int], timeout_s: float) -> None:
    """SIGTERM, then SIGKILL whatever is still there after timeout_s."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    stubborn = _wait_gone(pids, time.monotonic() + timeout_s)
    for pid in stubborn:
        _say(f"pid {pid} did not stop within {timeout_s:.0f}s, killing it")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(stubborn, time.monotonic() + 10)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(pids, time.monotonic() + 10)


# ----------------------------------------------------------------------------- ports


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Same option the JVM sets on its server sockets: a port in TIME_WAIT from a
        # previous run is usable, a port someone listens on is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _port_holders(port: int) -> str:
    """Who holds a local TCP port, as `ss` reports it (best effort, for error messages)."""
    if shutil.which("ss") is None:
        return ""
    result = subprocess.run(["ss", "-Htanp", f"sport = :{port}"], capture_output=True, text=True, check=False)
    lines = [" ".join(line.split()) for line in result.stdout.splitlines() if line.strip()]
    return f" (ss: {'; '.join(lines[:5])})" if lines else ""


def _plan_ports(ports: dict[str, int] | None, services: tuple[str, ...] = SERVICES,
                broker_names: tuple[str, ...] = BROKERS) -> tuple[dict[str, int], dict[str, int]]:
    """(client port per service, controller port per broker)."""
    given = dict(ports or {})
    unknown = sorted(set(given) - set(services))
    if unknown:
        raise StackError(f"unknown service(s) in ports: {', '.join(unknown)}; known: {services}")
    seen: dict[int, str] = {}
    for name, port in given.items():
        if not isinstance(port, int) or not 0 < port < 65536:
            raise StackError(f"invalid port for {name}: {port!r}")
        if port in seen:
            raise StackError(f"{name} and {seen[port]} were both given port {port}")
        seen[port] = name
        if not _port_free(port):
            raise StackError(f"port {port} for {name} is already in use on {HOST}{_port_holders(port)}")
    missing = [s for s in services if s not in given]
    try:
        fresh = free_ports(len(missing) + len(broker_names), set(given.values()))
    except NoFreePorts as exc:
        raise StackError(str(exc)) from None
    client = {**given, **dict(zip(missing, fresh[: len(missing)], strict=True))}
    controller = dict(zip(broker_names, fresh[len(missing) :], strict=True))
    return {s: client[s] for s in services}, controller


def _props(values: dict[str, Any]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


_COMMON_JVM_FLAGS = [
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]


def _tcp_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


# ----------------------------------------------------------------------------- launch


def _launch(root: Path, name: str, cmd: list[str]) -> int:
    with open(_log_path(root, name), "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(_svc_dir(root, name)),
            # Own session: survives the `stack up` command and its terminal's Ctrl-C.
            start_new_session=True,
        )
    return proc.pid


def _address(port: int) -> str:
    return f"{HOST}:{port}"
