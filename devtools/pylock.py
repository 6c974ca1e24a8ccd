"""The Python lock file: every transitive dependency pinned with hashes, for every supported Python, made by uv.

``make install`` (and so ``make demo`` and ``make test``, CI and the images) installs from the
lock only, so a fresh clone runs exactly the set that was tested; ``setup.cfg`` keeps the
compatible ranges for people who embed the package. The files:

* ``requirements.lock`` (the repository's root): the package with its ``dev`` and ``verifier``
  extras plus the build tools (``lock/build.in``: pip, setuptools, wheel), resolved once for
  Python 3.10, 3.11 and 3.12 together (``uv pip compile --universal``): where a package needs
  another release on one of them, the file holds both, each behind its ``python_full_version``
  marker, and pip installs the one whose marker holds;
* ``lock/image-runtime.txt`` and ``lock/image-verifier.txt``: the subsets the two images install
  (Python 3.11, the images' interpreter), resolved with ``requirements.lock`` as constraints, so
  they pin the same versions;
* ``lock/uv.txt``: the uv that makes them, itself pinned with hashes.

Commands (``python -m devtools.pylock ...``)::

    path                 the lock file, when this interpreter is one it was resolved for
    compile              re-resolve, keeping every pin that still fits (after a change to setup.cfg)
    compile --upgrade    every pin to the newest release setup.cfg allows (`make lock-upgrade`)
    check                the files agree with setup.cfg and with each other
"""

from __future__ import annotations

import argparse
import configparser
import re
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
LOCK_DIR = ROOT / "lock"
PYTHONS = ("3.10", "3.11", "3.12")
IMAGE_PYTHON = "3.11"  # python:3.11-slim-bookworm, or Debian bookworm's python3 (devtools/images.py)
EXTRAS = ("dev", "verifier")
IMAGES = {"image-runtime.txt": (), "image-verifier.txt": ("verifier",)}
UV_DIR = ROOT / ".cache" / "uv"
# name==version, and the environment marker after " ; " when the pin holds on some Pythons only
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)(?: ; ([^\\\n]+?))?\s*\\?$", re.MULTILINE)


class LockError(Exception):
    """A lock file is missing, stale or inconsistent; the message says which and what to run."""


def _say(message: str) -> None:
    print(f"lock: {message}", flush=True)


def lock_for(version: tuple[int, int] | None = None) -> Path:
    """The lock file, when Python ``(major, minor)`` (this interpreter by default) is one it was resolved for."""
    major, minor = version or sys.version_info[:2]
    name = f"{major}.{minor}"
    if name not in PYTHONS:
        raise LockError(f"no tested set for Python {name}: requirements.lock is resolved for {', '.join(PYTHONS)}; "
                        f"use one of those, or add {name} to devtools/pylock.py PYTHONS and run `make lock`")
    return LOCK


def pins(path: Path, python: str | None = None) -> dict[str, str]:
    """``{normalised name: version}`` of a lock file; with ``python`` ("3.11"), the pins whose marker holds there."""
    if not path.is_file():
        raise LockError(f"{path.relative_to(ROOT)} is missing: run `make lock`")
    found: dict[str, str] = {}
    for name, version, marker in _PIN.findall(path.read_text()):
        if python is not None and marker and not _holds(marker, python):
            continue
        found[_normal(name)] = version
    return found


def _holds(marker: str, python: str) -> bool:
    """Whether ``marker`` holds on CPython ``python`` on Linux (where every install here runs)."""
    from packaging.markers import Marker  # in the venv (the lock); `path` runs before it exists

    return Marker(marker).evaluate({"python_version": python, "python_full_version": f"{python}.0",
                                    "sys_platform": "linux", "os_name": "posix",
                                    "platform_python_implementation": "CPython", "implementation_name": "cpython"})


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, list[Any]]:
    """setup.cfg's requirements: ``install_requires`` and each extra, as packaging ``Requirement`` objects."""
    from packaging.requirements import Requirement

    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")

    def parse(text: str) -> list[Requirement]:
        return [Requirement(line.strip()) for line in text.splitlines()
                if line.strip() and not line.strip().startswith("#")]

    found = {"install_requires": parse(parser.get("options", "install_requires"))}
    for extra in EXTRAS:
        found[extra] = parse(parser.get("options.extras_require", extra))
    return found


def check() -> list[str]:
    """Every inconsistency between setup.cfg and the lock files (empty: they agree)."""
    from packaging.version import Version

    name = LOCK.name
    if not LOCK.is_file():
        return [f"{name} is missing: run `make lock`"]
    problems: list[str] = []
    if "--hash=sha256:" not in LOCK.read_text() or re.search(r"^\S+==[^\\\n]*$", LOCK.read_text(), re.MULTILINE):
        problems.append(f"{name}: every pin must carry its hashes (uv pip compile --generate-hashes)")
    required = [r for group in declared().values() for r in group]
    for python in PYTHONS:
        pinned = pins(LOCK, python)
        for tool in ("pip", "setuptools", "wheel"):
            if tool not in pinned:
                problems.append(f"{name} (Python {python}): the build tool {tool} is not pinned (lock/build.in)")
        for req in required:
            if req.marker is not None and not req.marker.evaluate({"python_version": python}):
                continue
            version = pinned.get(_normal(req.name))
            if version is None:
                problems.append(f"{name} (Python {python}): {req.name} (setup.cfg) is not pinned")
            elif not req.specifier.contains(Version(version), prereleases=True):
                problems.append(f"{name} (Python {python}): {req.name}=={version} is outside setup.cfg's "
                                f"{req.specifier}")
    reference = pins(LOCK, IMAGE_PYTHON)
    for image in IMAGES:
        try:
            subset = pins(LOCK_DIR / image)
        except LockError as exc:
            problems.append(str(exc))
            continue
        for package, version in sorted(subset.items()):
            if reference.get(package) != version:
                problems.append(f"{image}: {package}=={version}, but {name} pins "
                                f"{reference.get(package, 'nothing')} for Python {IMAGE_PYTHON}")
    return problems


def _uv() -> Path:
    """The pinned uv (lock/uv.txt, hashes checked) in .cache/uv; installed on first use."""
    binary = UV_DIR / "bin" / "uv"
    stamp = UV_DIR / ".installed"
    wanted = (LOCK_DIR / "uv.txt").read_text()
    if binary.exists() and stamp.is_file() and stamp.read_text() == wanted:
        return binary
    _say("installing the pinned uv into .cache/uv (lock/uv.txt)")
    venv.create(UV_DIR, with_pip=True, clear=True)
    subprocess.run([str(UV_DIR / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--require-hashes", "--no-deps", "-r", str(LOCK_DIR / "uv.txt")], check=True)
    stamp.write_text(wanted)
    return binary


def compile_all(upgrade: bool = False) -> None:
    """Write every lock file with uv; ``upgrade`` moves every pin to the newest release allowed."""
    uv = _uv()
    command = "make lock-upgrade" if upgrade else "make lock"
    base = [str(uv), "pip", "compile", "--quiet", "--generate-hashes", "--custom-compile-command", command]
    _say(f"resolving {LOCK.name} (Python {', '.join(PYTHONS)} in one file; extras {', '.join(EXTRAS)})")
    extras = [arg for extra in EXTRAS for arg in ("--extra", extra)]
    _run([*base, *(["--upgrade"] if upgrade else []), "--universal", "--python-version", PYTHONS[0], "setup.cfg",
          "lock/build.in", *extras, "-o", str(LOCK)])
    for name, image_extras in IMAGES.items():
        target = LOCK_DIR / name
        _say(f"resolving {target.relative_to(ROOT)} (the image's Python {IMAGE_PYTHON}, as {LOCK.name})")
        extra_args = [arg for extra in image_extras for arg in ("--extra", extra)]
        # The image's subset never upgrades on its own: requirements.lock's pins are its constraints.
        _run([*base, "setup.cfg", "lock/build.in", *extra_args, "--python-version", IMAGE_PYTHON,
              "-c", LOCK.name, "-o", str(target)])
    problems = check()
    if problems:
        raise LockError("the new lock files disagree:\n  " + "\n  ".join(problems))


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise LockError(f"{' '.join(argv[:3])} failed:\n{done.stderr.strip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.pylock", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("path", help="the lock file, when this interpreter is one it was resolved for")
    comp = sub.add_parser("compile", help="write the lock files with the pinned uv")
    comp.add_argument("--upgrade", action="store_true", help="every pin to the newest release setup.cfg allows")
    sub.add_parser("check", help="the lock files agree with setup.cfg and each other")
    args = parser.parse_args(argv)
    try:
        if args.command == "path":
            print(lock_for().relative_to(ROOT))
        elif args.command == "compile":
            compile_all(upgrade=args.upgrade)
            _say("done; review `git diff requirements.lock lock/` before committing")
        else:
            problems = check()
            for problem in problems:
                print(f"lock: {problem}", file=sys.stderr)
            if problems:
                return 1
            _say(f"{LOCK.name} and lock/ agree with setup.cfg ({', '.join(PYTHONS)}, both images)")
    except LockError as exc:
        print(f"lock: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
