"""Install and locate the pinned ``helm`` binary that the chart tests (and docs/deploy.md) use.

Development machines and CI reach the Go module proxy but no download sites, so helm is
built from source with ``go install`` into ``<cache>/bin/helm`` (``.cache`` or
``$UREPLICATOR_CACHE``, git-ignored). A second run finds the binary at the pinned version
and reuses it in well under a second::

    python -m devtools.helmtool install     # what `make helm` (and so `make test`) runs
    python -m devtools.helmtool path        # prints the binary's path, fails if missing/stale
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from devtools import gobuild

# The one place the helm version is pinned. v3.21.x needs Go >= 1.26.0 to build.
HELM_VERSION = "v3.21.4"
HELM_MODULE = "helm.sh/helm/v3"


class HelmToolError(Exception):
    """helm, or the Go toolchain that builds it, is missing or broken."""


def helm_path() -> Path:
    return gobuild.bin_dir() / "helm"


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
            f"helm {HELM_VERSION} is {state} at {gobuild.display(path)}; run `make helm` "
            "(or `python -m devtools.helmtool install`) to build it with Go"
        )
    return path


_log = gobuild.logger("helm")


def install(force: bool = False) -> Path:
    """Make sure ``helm_path()`` is helm at ``HELM_VERSION``; builds it with Go when not."""

    def build(go: str, env: dict[str, str], staging: Path) -> None:
        meta = json.loads(gobuild.run_go([go, "mod", "download", "-json", f"{HELM_MODULE}@{HELM_VERSION}"],
                                         env, staging, _log))
        major, minor = kube_version(Path(meta["GoMod"]).read_text())
        _log(f"default Kubernetes version {major}.{minor}")
        gobuild.run_go([go, "install", "-trimpath", f"-ldflags={ldflags(HELM_VERSION, major, minor)}",
                        f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}"], env, staging, _log)

    try:
        return gobuild.install("helm", HELM_VERSION, lambda p: installed_version(p) == HELM_VERSION, build, _log,
                               force=force)
    except gobuild.GoBuildError as exc:
        raise HelmToolError(str(exc)) from None


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
