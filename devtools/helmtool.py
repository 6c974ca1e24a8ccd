"""Install and locate the pinned ``helm`` binary that the chart tests (and docs/deploy.md) use.

Development machines and CI reach the Go module proxy but no download sites, so helm is
built from source with ``go install`` into ``<cache>/bin/helm`` (``.cache`` or
``$UREPLICATOR_CACHE``, git-ignored). A second run finds the binary at the pinned version
and reuses it in well under a second::

    python -m devtools.helmtool install     # what `make install` runs
    python -m devtools.helmtool path        # prints the binary's path, fails if missing/stale
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from devtools.jvm import CACHE_DIR
from devtools.locking import file_lock

# The one place the helm version is pinned. v3.21.x needs Go >= 1.26.0 to build.
HELM_VERSION = "v3.21.4"
HELM_MODULE = "helm.sh/helm/v3"

_ERROR_TAIL_LINES = 30


class HelmToolError(Exception):
    """helm, or the Go toolchain that builds it, is missing or broken."""


def helm_path() -> Path:
    return CACHE_DIR / "bin" / "helm"


def installed_version(path: Path) -> str | None:
    """The version ``path`` reports, or None when it is missing or does not run.

    Our build stamps the full version in; a plain ``go install`` of helm would report
    only ``v3.21`` and so never passes for the pinned one.
    """
    if not (path.is_file() and os.access(path, os.X_OK)):
        return None
    try:
        done = subprocess.run(
            [str(path), "version", "--template", "{{.Version}}"],
            capture_output=True, text=True, timeout=30, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def kube_version(go_mod: str) -> tuple[str, str]:
    """(major, minor) of the Kubernetes release whose client-go helm's go.mod requires.

    helm's release Makefile stamps these in as the default ``Capabilities.KubeVersion``;
    without them ``helm template`` pretends to talk to Kubernetes 1.20.
    """
    match = re.search(r"^\s*k8s\.io/client-go v0\.(\d+)\.\d+", go_mod, re.MULTILINE)
    if not match:
        raise HelmToolError("cannot find the k8s.io/client-go requirement in helm's go.mod")
    return "1", match.group(1)


def ldflags(version: str, major: str, minor: str) -> str:
    """The linker flags helm's own Makefile uses for a release build (minus the git data)."""
    stamps = {
        "internal/version.version": version,
        "pkg/chartutil.k8sVersionMajor": major,
        "pkg/chartutil.k8sVersionMinor": minor,
        "pkg/lint/rules.k8sVersionMajor": major,
        "pkg/lint/rules.k8sVersionMinor": minor,
    }
    return " ".join(["-s", "-w", *(f"-X {HELM_MODULE}/{var}={value}" for var, value in stamps.items())])


def require() -> Path:
    """The pinned helm binary; raises with the command that installs it when missing or stale."""
    path = helm_path()
    found = installed_version(path)
    if found != HELM_VERSION:
        state = "missing" if found is None else f"at {found}"
        raise HelmToolError(
            f"helm {HELM_VERSION} is {state} at {_display(path)}; run `make install` "
            "(or `python -m devtools.helmtool install`) to build it with Go"
        )
    return path


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _log(message: str) -> None:
    print(f"helm: {message}", file=sys.stderr, flush=True)


def _go_executable() -> str:
    found = shutil.which("go")
    if not found:
        raise HelmToolError(
            f"Go not found: `go` is not on PATH. Install Go 1.26+; it builds helm {HELM_VERSION} "
            "from the Go module proxy"
        )
    return found


def _lock(folder: Path) -> contextlib.AbstractContextManager[None]:
    # Two runs at once (make install in one shell, a test fixture in another) must not
    # both swap the same files; serialise them.
    return file_lock(folder / ".helm.lock")


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run a go command, relaying its progress lines; returns stdout. Raises with the tail."""
    tail: deque[str] = deque(maxlen=_ERROR_TAIL_LINES)
    proc = subprocess.Popen(
        cmd, env=env, cwd=str(cwd), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        out = ""
        # go writes progress ("go: downloading m v") and errors to stderr; -json data to stdout.
        for line in proc.stderr:
            tail.append(line.rstrip("\n"))
            _log("  " + line.rstrip("\n"))
        out = proc.stdout.read()
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if rc != 0:
        raise HelmToolError(f"`{' '.join(cmd[:3])} ...` failed (exit {rc}):\n" + "\n".join(tail))
    return out


def install(force: bool = False) -> Path:
    """Make sure ``helm_path()`` is helm at ``HELM_VERSION``; builds it with Go when not."""
    path = helm_path()
    if not force and installed_version(path) == HELM_VERSION:
        _log(f"reused {_display(path)} ({HELM_VERSION})")
        return path
    go = _go_executable()
    with _lock(path.parent):
        if not force and installed_version(path) == HELM_VERSION:  # built while we waited
            _log(f"reused {_display(path)} ({HELM_VERSION})")
            return path
        started = time.monotonic()
        _log(f"building {HELM_MODULE}/cmd/helm@{HELM_VERSION} with {go} (first time: a few minutes)")
        # The build lands in a staging folder and replaces the binary only once it runs and
        # reports the pinned version: a failed build never leaves a broken helm behind.
        staging = path.parent / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        # Static binary like helm's releases; cwd outside any Go module so go.mod files of
        # the surrounding tree (none today) cannot change what is resolved.
        env = {**os.environ, "GOBIN": str(staging), "CGO_ENABLED": "0"}
        try:
            meta = json.loads(_run([go, "mod", "download", "-json", f"{HELM_MODULE}@{HELM_VERSION}"],
                                   env, staging))
            major, minor = kube_version(Path(meta["GoMod"]).read_text())
            _run([go, "install", "-trimpath", f"-ldflags={ldflags(HELM_VERSION, major, minor)}",
                  f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}"], env, staging)
            built = installed_version(staging / "helm")
            if built != HELM_VERSION:
                raise HelmToolError(f"the built helm reports {built!r}, expected {HELM_VERSION}")
            os.replace(staging / "helm", path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    _log(f"built {_display(path)} ({HELM_VERSION}, default Kubernetes {major}.{minor}) "
         f"in {time.monotonic() - started:.0f}s")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.helmtool", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser("install", help=f"build helm {HELM_VERSION} unless it is there")
    p_install.add_argument("--force", action="store_true", help="rebuild even if present")
    sub.add_parser("path", help="print the pinned helm's path (exit 1 when missing or stale)")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            install(force=args.force)
        else:
            print(require())
    except HelmToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
