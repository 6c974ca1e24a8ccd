"""The Python lock files: every transitive dependency pinned with hashes, per supported Python, made by uv.

``make install`` (and so ``make demo`` and ``make test``, CI and the images) installs from these
files only, so a fresh clone runs exactly the set that was tested; ``setup.cfg`` keeps the
compatible ranges for people who embed the package. The files, in ``lock/``:

* ``py3.10.txt``, ``py3.11.txt``, ``py3.12.txt``: the package with its ``dev`` and ``verifier``
  extras plus the build tools (``lock/build.in``: pip, setuptools, wheel), for that Python;
* ``image-runtime.txt`` and ``image-verifier.txt``: the subsets the two images install (Python
  3.11, the images' interpreter), resolved with ``py3.11.txt`` as constraints, so they pin the
  same versions;
* ``uv.txt``: the uv that makes them, itself pinned with hashes.

Commands (``python -m devtools.pylock ...``)::

    path                 the lock file for this interpreter (fails for an unsupported Python)
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
LOCK_DIR = ROOT / "lock"
PYTHONS = ("3.10", "3.11", "3.12")
IMAGE_PYTHON = "3.11"  # python:3.11-slim-bookworm, or Debian bookworm's python3 (devtools/images.py)
EXTRAS = ("dev", "verifier")
IMAGES = {"image-runtime.txt": (), "image-verifier.txt": ("verifier",)}
UV_DIR = ROOT / ".cache" / "uv"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


class LockError(Exception):
    """A lock file is missing, stale or inconsistent; the message says which and what to run."""


def _say(message: str) -> None:
    print(f"lock: {message}", flush=True)


def lock_for(version: tuple[int, int] | None = None) -> Path:
    """The lock file of a Python ``(major, minor)`` (this interpreter's by default)."""
    major, minor = version or sys.version_info[:2]
    name = f"{major}.{minor}"
    if name not in PYTHONS:
        raise LockError(f"no lock file for Python {name}: the tested set exists for {', '.join(PYTHONS)} "
                        f"(lock/py<version>.txt); use one of those, or add {name} to devtools/pylock.py "
                        "PYTHONS and run `make lock`")
    return LOCK_DIR / f"py{name}.txt"


def pins(path: Path) -> dict[str, str]:
    """``{normalised name: version}`` of a lock file."""
    if not path.is_file():
        raise LockError(f"{path.relative_to(ROOT)} is missing: run `make lock`")
    return {_normal(name): version for name, version in _PIN.findall(path.read_text())}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, list[Any]]:
    """setup.cfg's requirements: ``install_requires`` and each extra, as :class:`Requirement`."""
    from packaging.requirements import Requirement  # in the venv (lock files); `path` runs before it exists

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

    problems: list[str] = []
    requirements = declared()
    full = [r for group in requirements.values() for r in group]
    for python in PYTHONS:
        path = LOCK_DIR / f"py{python}.txt"
        try:
            pinned = pins(path)
        except LockError as exc:
            problems.append(str(exc))
            continue
        text = path.read_text()
        if "--hash=sha256:" not in text or re.search(r"^\S+==\S+ *$", text, re.MULTILINE):
            problems.append(f"{path.name}: every pin must carry its hashes (uv pip compile --generate-hashes)")
        for tool in ("pip", "setuptools", "wheel"):
            if tool not in pinned:
                problems.append(f"{path.name}: the build tool {tool} is not pinned (lock/build.in)")
        for req in full:
            if req.marker is not None and not req.marker.evaluate({"python_version": python}):
                continue
            version = pinned.get(_normal(req.name))
            if version is None:
                problems.append(f"{path.name}: {req.name} (setup.cfg) is not pinned")
            elif not req.specifier.contains(Version(version), prereleases=True):
                problems.append(f"{path.name}: {req.name}=={version} is outside setup.cfg's {req.specifier}")
    try:
        reference = pins(LOCK_DIR / f"py{IMAGE_PYTHON}.txt")
    except LockError:
        reference = {}
    for name in IMAGES:
        try:
            subset = pins(LOCK_DIR / name)
        except LockError as exc:
            problems.append(str(exc))
            continue
        for package, version in sorted(subset.items()):
            if reference and reference.get(package) != version:
                problems.append(f"{name}: {package}=={version}, but py{IMAGE_PYTHON}.txt pins "
                                f"{reference.get(package, 'nothing')}")
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
    base = [str(uv), "pip", "compile", "--quiet", "--generate-hashes", "--annotation-style", "line",
            "--custom-compile-command", command]
    for python in PYTHONS:
        target = LOCK_DIR / f"py{python}.txt"
        _say(f"resolving {target.relative_to(ROOT)} (Python {python}, extras {', '.join(EXTRAS)})")
        extras = [arg for extra in EXTRAS for arg in ("--extra", extra)]
        _run([*base, *(["--upgrade"] if upgrade else []), "setup.cfg", "lock/build.in", *extras,
              "--python-version", python, "-o", str(target)])
    for name, extras in IMAGES.items():
        target = LOCK_DIR / name
        _say(f"resolving {target.relative_to(ROOT)} (the image's Python {IMAGE_PYTHON}, as py{IMAGE_PYTHON}.txt)")
        extra_args = [arg for extra in extras for arg in ("--extra", extra)]
        # The image's subset never upgrades on its own: py3.11.txt's pins are its constraints.
        _run([*base, "setup.cfg", "lock/build.in", *extra_args, "--python-version", IMAGE_PYTHON,
              "-c", f"lock/py{IMAGE_PYTHON}.txt", "-o", str(target)])
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
    sub.add_parser("path", help="the lock file for this interpreter")
    comp = sub.add_parser("compile", help="write the lock files with the pinned uv")
    comp.add_argument("--upgrade", action="store_true", help="every pin to the newest release setup.cfg allows")
    sub.add_parser("check", help="the lock files agree with setup.cfg and each other")
    args = parser.parse_args(argv)
    try:
        if args.command == "path":
            print(lock_for().relative_to(ROOT))
        elif args.command == "compile":
            compile_all(upgrade=args.upgrade)
            _say("done; review `git diff lock/` before committing")
        else:
            problems = check()
            for problem in problems:
                print(f"lock: {problem}", file=sys.stderr)
            if problems:
                return 1
            _say(f"lock/ agrees with setup.cfg ({', '.join(PYTHONS)}, both images)")
    except LockError as exc:
        print(f"lock: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
