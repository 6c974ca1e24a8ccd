"""Install and locate the pinned ``promtool`` that checks the chart's alerting rules and dashboard queries.

Built like helm (``devtools.gobuild``) from the Prometheus module on the Go module proxy into
``<cache>/bin/promtool``; reused when it reports the pinned version::

    python -m devtools.promtool install     # what `make promtool` (and so `make test`) runs
    python -m devtools.promtool path        # prints the binary's path, fails if missing/stale
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from devtools import gobuild

# The one place the Prometheus version is pinned: release 3.16.0 is module version v0.316.0.
PROMETHEUS_VERSION = "3.16.0"
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
MODULE_VERSION = "v0.316.0"

_log = gobuild.logger("promtool")


class PromtoolError(Exception):
    """promtool, or the Go toolchain that builds it, is missing or broken."""


def promtool_path() -> Path:
    return gobuild.bin_dir() / "promtool"


def installed_version(path: Path) -> str | None:
    """The version ``path`` reports (``promtool, version 3.16.0 ...``), or None."""
    try:
        done = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"promtool, version (\S+)", done.stdout + done.stderr)
    return match.group(1) if match else None


def install(force: bool = False) -> Path:
    """Make sure ``promtool_path()`` is promtool at ``PROMETHEUS_VERSION``; builds it with Go when not."""

    def build(go: str, env: dict[str, str], staging: Path) -> None:
        # Stamp the version in as Prometheus' release builds do; a plain go install reports none.
        stamp = f"-X github.com/prometheus/common/version.Version={PROMETHEUS_VERSION}"
        gobuild.run_go([go, "install", "-trimpath", f"-ldflags=-s -w {stamp}",
                        f"{PROMETHEUS_MODULE}/cmd/promtool@{MODULE_VERSION}"], env, staging, _log)

    try:
        return gobuild.install("promtool", PROMETHEUS_VERSION,
                               lambda p: installed_version(p) == PROMETHEUS_VERSION, build, _log, force=force)
    except gobuild.GoBuildError as exc:
        raise PromtoolError(str(exc)) from None


def require() -> Path:
    """The pinned promtool; raises with the command that installs it when missing or stale."""
    path = promtool_path()
    found = installed_version(path)
    if found != PROMETHEUS_VERSION:
        state = "missing" if found is None else f"at {found}"
        raise PromtoolError(f"promtool {PROMETHEUS_VERSION} is {state} at {gobuild.display(path)}; "
                            "run `make promtool` to build it with Go")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.promtool", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_install = sub.add_parser("install", help=f"build promtool {PROMETHEUS_VERSION} unless it is there")
    p_install.add_argument("--force", action="store_true", help="rebuild even if present")
    sub.add_parser("path", help="print the pinned promtool's path (exit 1 when missing or stale)")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            install(force=args.force)
        else:
            print(require())
    except PromtoolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
