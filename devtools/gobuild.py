"""Build a pinned Go command from the Go module proxy into ``<cache>/bin`` (helm, promtool).

Development machines and CI reach the Go module proxy but no download sites, so the tools
the chart tests need are built from source with ``go install``. The binary lands in a
staging folder and replaces the installed one only once it runs and reports the pinned
version: a failed build never leaves a broken tool behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from devtools.jvm import CACHE_DIR
from devtools.locking import file_lock

_ERROR_TAIL_LINES = 30


class GoBuildError(Exception):
    """Go is missing, or building or checking a tool failed."""


def bin_dir() -> Path:
    return CACHE_DIR / "bin"


def display(path: Path) -> str:
    """Short form for messages: relative when under the working directory."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def go_executable(tool: str) -> str:
    found = shutil.which("go")
    if not found:
        raise GoBuildError(f"Go not found: `go` is not on PATH. Install Go 1.26+; it builds {tool} "
                           "from the Go module proxy")
    return found


def run_go(cmd: list[str], env: dict[str, str], cwd: Path, log: Callable[[str], None]) -> str:
    """Run a go command, relaying its progress lines; returns stdout. Raises with the tail."""
    tail: deque[str] = deque(maxlen=_ERROR_TAIL_LINES)
    proc = subprocess.Popen(
        cmd, env=env, cwd=str(cwd), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        # go writes progress ("go: downloading m v") and errors to stderr; -json data to stdout.
        for line in proc.stderr:
            tail.append(line.rstrip("\n"))
            log("  " + line.rstrip("\n"))
        out = proc.stdout.read()
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if rc != 0:
        raise GoBuildError(f"`{' '.join(cmd[:3])} ...` failed (exit {rc}):\n" + "\n".join(tail))
    return out


def install(name: str, version: str, is_current: Callable[[Path], bool],
            build: Callable[[str, dict[str, str], Path], None], log: Callable[[str], None],
            force: bool = False) -> Path:
    """Make sure ``<bin>/<name>`` passes ``is_current``; else ``build(go, env, staging)`` it.

    ``build`` runs ``go install`` with ``env`` (GOBIN = the staging folder, static binary)
    in the staging folder, outside any Go module so no go.mod around can change what is resolved.
    """
    path = bin_dir() / name
    if not force and is_current(path):
        log(f"reused {display(path)} ({version})")
        return path
    go = go_executable(name)
    with file_lock(path.parent / f".{name}.lock"):
        if not force and is_current(path):  # built while we waited
            log(f"reused {display(path)} ({version})")
            return path
        started = time.monotonic()
        log(f"building {name} {version} with {go} (first time: a few minutes)")
        staging = path.parent / f".staging-{name}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        env = {**os.environ, "GOBIN": str(staging), "CGO_ENABLED": "0"}
        try:
            build(go, env, staging)
            if not is_current(staging / name):
                raise GoBuildError(f"the built {name} does not report version {version}")
            os.replace(staging / name, path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log(f"built {display(path)} ({version}) in {time.monotonic() - started:.0f}s")
    return path


def logger(tool: str) -> Callable[[str], None]:
    def log(message: str) -> None:
        print(f"{tool}: {message}", file=sys.stderr, flush=True)

    return log
