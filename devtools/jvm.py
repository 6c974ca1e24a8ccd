"""Fetch and locate the pinned JVM artifacts (Kafka, ZooKeeper, MirrorMaker 2, Spark-Kafka); build the digest reader."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from devtools.locking import file_lock
from ureplicator.common import java

REPO_ROOT: Path = Path(__file__).resolve().parent.parent
CACHE_DIR: Path = Path(os.environ.get("UREPLICATOR_CACHE") or REPO_ROOT / ".cache").resolve()
POM_DIR: Path = REPO_ROOT / "jvm"

# Module folder names in jvm/ and the folders their jars land in under CACHE_DIR/jvm.
COMPONENTS: tuple[str, ...] = ("kafka", "zookeeper", "mirrormaker", "spark-kafka")
# The one module compiled from our own sources (jvm/digest): built into its target/ folder, apart from
# the pinned-jar cache, so editing it never invalidates (or rewrites) the shared cache.
DIGEST_DIR: Path = POM_DIR / "digest"
DIGEST_JAR: Path = DIGEST_DIR / "target" / "ureplicator-digest.jar"

STAMP_NAME = ".poms.sha256"
MAVEN_LOG_NAME = "maven.log"
_ERROR_TAIL_LINES = 40


class JvmError(Exception):
    """The JVM artifacts or the tools to fetch/run them are missing or broken."""


def jvm_dir() -> Path:
    """Folder holding one sub-folder of jars per component (read at call time so tests can
    point CACHE_DIR elsewhere)."""
    return CACHE_DIR / "jvm"


def pom_digest(pom_dir: Path | None = None) -> str:
    """sha256 over every jvm/**/pom.xml (relative path and content), so any version bump,
    new dependency or exclusion invalidates the cache."""
    root = pom_dir if pom_dir is not None else POM_DIR
    poms = sorted(
        p for p in root.rglob("pom.xml")
        if "target" not in p.relative_to(root).parts and p.relative_to(root).parts[0] != DIGEST_DIR.name
    )
    if not poms:
        raise JvmError(f"no pom.xml found under {root}")
    h = hashlib.sha256()
    for pom in poms:
        h.update(pom.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(pom.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def read_stamp(dest: Path) -> str | None:
    try:
        return (dest / STAMP_NAME).read_text().strip() or None
    except OSError:
        return None


def write_stamp(dest: Path, digest: str) -> None:
    tmp = dest / (STAMP_NAME + ".tmp")
    tmp.write_text(digest + "\n")
    os.replace(tmp, dest / STAMP_NAME)


def jar_counts(dest: Path) -> dict[str, int]:
    """Number of jars per component folder under dest (0 when the folder is missing)."""
    counts = {}
    for component in COMPONENTS:
        folder = dest / component
        counts[component] = len(list(folder.glob("*.jar"))) if folder.is_dir() else 0
    return counts


def is_current(dest: Path, digest: str) -> bool:
    """True when dest was filled from exactly these poms and every component has jars."""
    return read_stamp(dest) == digest and all(n > 0 for n in jar_counts(dest).values())


def _display(path: Path) -> str:
    """Short form for messages: relative when under the working directory."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{c} {n} jars" for c, n in counts.items())


def _log(message: str) -> None:
    print(f"jvm: {message}", file=sys.stderr, flush=True)


def java_executable() -> str:
    """The java binary to run (see common.java), with its absence as a JvmError."""
    try:
        return java.java_executable()
    except java.JavaNotFound as exc:
        raise JvmError(str(exc)) from None


def _maven_executable() -> str:
    found = shutil.which("mvn")
    if not found:
        raise JvmError(
            "Maven not found: `mvn` is not on PATH. Install Maven 3.8+ "
            "(e.g. `apt-get install maven`); it fetches the pinned jars from Maven Central"
        )
    return found


def maven_command(mvn: str, output_dir: Path, pom_dir: Path | None = None) -> list[str]:
    """The one maven invocation that copies every module's runtime jars into
    output_dir/<component>/ (see jvm/pom.xml)."""
    root = pom_dir if pom_dir is not None else POM_DIR
    # -B: no colours/interactive prompts. Transfer progress stays on (no -ntp) because
    # the "Downloaded from" lines are what shows a first run is moving.
    return [
        mvn,
        "-B",
        "-f",
        str(root / "pom.xml"),
        f"-DcacheDir={output_dir}",
        "dependency:copy-dependencies",
    ]


_BUILDING = re.compile(r"Building ureplicator-jvm-(\S+) \S+\s+\[(\d+/\d+)\]")
_DOWNLOADED = re.compile(r"Downloaded from \S+: (\S+?\.jar) \((.*)\)")


def _progress(line: str) -> str | None:
    """The progress line a waiting person sees for one maven output line, if any."""
    m = _BUILDING.search(line)
    if m:
        return f"resolving {m.group(1)} [{m.group(2)}]"
    m = _DOWNLOADED.search(line)
    if m:
        return f"  downloaded {m.group(1).rsplit('/', 1)[-1]} ({m.group(2)})"
    if line.startswith("[ERROR]") and line.strip() != "[ERROR]":
        return line.strip()
    return None


def _lock(dest: Path) -> contextlib.AbstractContextManager[None]:
    # Two runs at once (make install in one shell, a test fixture in another) must not
    # both swap the same files; serialise them.
    return file_lock(dest / ".lock")


def _run_maven(cmd: list[str], log_path: Path) -> None:
    tail: deque[str] = deque(maxlen=_ERROR_TAIL_LINES)
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=str(REPO_ROOT),
        )
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                tail.append(line.rstrip("\n"))
                shown = _progress(line)
                if shown:
                    _log(shown)
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0:
        raise JvmError(
            f"maven failed (exit {rc}) fetching the JVM artifacts; full log in "
            f"{_display(log_path)}; last lines:\n" + "\n".join(tail)
        )


def fetch(force: bool = False) -> list[str]:
    """Make sure CACHE_DIR/jvm/<component>/ holds the jars the poms pin; returns the
    component names. Reuses the cache when the poms did not change (unless force)."""
    dest = jvm_dir()
    digest = pom_digest()
    if not force and is_current(dest, digest):
        _log(f"reused {len(COMPONENTS)} components in {_display(dest)} (pom unchanged): " + _summary(jar_counts(dest)))
        return list(COMPONENTS)

    mvn = _maven_executable()
    java_executable()  # maven needs it too; fail with our message rather than maven's
    with _lock(dest):
        # Someone else may have fetched while we waited for the lock.
        if not force and is_current(dest, digest):
            _log(f"reused {len(COMPONENTS)} components in {_display(dest)}: " + _summary(jar_counts(dest)))
            return list(COMPONENTS)
        started = time.monotonic()
        # Maven writes into a staging folder that replaces the old jars only on success:
        # an upgrade never leaves old versions next to new ones, and a failed fetch
        # leaves the previous (still consistent) set in place.
        staging = dest / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            _log(f"fetching {', '.join(COMPONENTS)} with maven into {_display(dest)}")
            _run_maven(maven_command(mvn, staging), dest / MAVEN_LOG_NAME)
            counts = jar_counts(staging)
            empty = [c for c, n in counts.items() if n == 0]
            if empty:
                raise JvmError(
                    f"maven succeeded but copied no jars for {', '.join(empty)}; "
                    f"check jvm/pom.xml and {_display(dest / MAVEN_LOG_NAME)}"
                )
            (dest / STAMP_NAME).unlink(missing_ok=True)
            for component in COMPONENTS:
                shutil.rmtree(dest / component, ignore_errors=True)
                os.replace(staging / component, dest / component)
            write_stamp(dest, digest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    _log(
        f"fetched {len(COMPONENTS)} components into {_display(dest)} in "
        f"{time.monotonic() - started:.1f}s: " + _summary(counts)
    )
    return list(COMPONENTS)


def _sources_digest(module: Path) -> str:
    h = hashlib.sha256()
    for path in sorted([module / "pom.xml", *(module / "src").rglob("*")]):
        if path.is_file():
            h.update(path.relative_to(module).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def build_digest(force: bool = False) -> Path:
    """Compile the verifier's digest reader (jvm/digest) with Maven into jvm/digest/target/ (git-ignored).

    Reuses the jar while its pom and sources are unchanged. Its dependencies are all `provided`, so
    Maven fetches only the handful of Spark and Kafka jars it compiles against.
    """
    digest = _sources_digest(DIGEST_DIR)
    if not force and DIGEST_JAR.is_file() and read_stamp(DIGEST_JAR.parent) == digest:
        _log(f"reused the digest reader {_display(DIGEST_JAR)} (sources unchanged)")
        return DIGEST_JAR
    mvn = _maven_executable()
    java_executable()
    started = time.monotonic()
    DIGEST_JAR.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(DIGEST_JAR.parent / ".lock"):
        _log(f"building the digest reader with maven into {_display(DIGEST_JAR.parent)}")
        _run_maven([mvn, "-B", "-f", str(DIGEST_DIR / "pom.xml"), "package"], DIGEST_JAR.parent / MAVEN_LOG_NAME)
        if not DIGEST_JAR.is_file():
            raise JvmError(f"maven succeeded but built no {_display(DIGEST_JAR)}")
        write_stamp(DIGEST_JAR.parent, digest)
    _log(f"built {_display(DIGEST_JAR)} in {time.monotonic() - started:.1f}s")
    return DIGEST_JAR


def classpath(component: str) -> str:
    """os.pathsep-joined jars of one component."""
    if component not in COMPONENTS:
        raise JvmError(f"unknown JVM component {component!r}; expected one of {COMPONENTS}")
    folder = jvm_dir() / component
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    if not jars:
        raise JvmError(
            f"the {component} jars are missing (no *.jar in {folder}); run `make install` "
            "(or `python -m devtools.jvm fetch`) to download the pinned JVM artifacts"
        )
    return os.pathsep.join(str(j) for j in jars)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.jvm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_fetch = sub.add_parser("fetch", help="download the pinned jars (reuses the cache) and build the digest reader")
    p_fetch.add_argument("--force", action="store_true", help="re-run maven even if unchanged")
    p_cp = sub.add_parser("classpath", help="print one component's classpath")
    p_cp.add_argument("component", choices=COMPONENTS)
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            fetch(force=args.force)
            build_digest(force=args.force)
        else:
            print(classpath(args.component))
    except JvmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
