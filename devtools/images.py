"""Build the two container images with buildah and run them against the local stack (``make image``, ``image-test``).

buildah builds from the repository's Dockerfile without a daemon (``--storage-driver vfs
--isolation chroot``, so it also runs inside a container). The base is
``python:3.11-slim-bookworm`` when a registry can be reached; otherwise a local base is made
with debootstrap from Debian's packages (Debian's python3 is the same 3.11), carrying this
machine's CA bundle and pointing pip and apt at it, as ``FROM scratch`` + ``ADD rootfs.tar /``::

    python -m devtools.images build        # what `make image` runs; prints sizes and build times
    python -m devtools.images test         # what `make image-test` runs: mirror 10,000 records, verify
    python -m devtools.images base         # only the base (reused when present)

Set ``UREPLICATOR_BASE_IMAGE`` to choose the base yourself (skips the registry probe).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from devtools.jvm import CACHE_DIR, REPO_ROOT, jvm_dir

REGISTRY_BASE = "python:3.11-slim-bookworm"
LOCAL_BASE = "localhost/ureplicator-base:bookworm"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3 = 3.11 on bookworm, like the registry base; venv for `python -m venv`, python-is-python3
# for `python`; ca-certificates for pip and apt over TLS.
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_LOCAL_CAS = Path("/usr/local/share/ca-certificates")
TAGS = {"runtime": "localhost/ureplicator-py", "verifier": "localhost/ureplicator-py-verifier"}
STORAGE = ("--storage-driver", "vfs")


class ImageError(Exception):
    """buildah or debootstrap is missing, or a build or an image test failed."""


def image_dir() -> Path:
    return CACHE_DIR / "image"


def version() -> str:
    return metadata.version("ureplicator-py")


def image_name(target: str) -> str:
    return f"{TAGS[target]}:{version()}"


def _say(message: str) -> None:
    print(f"image: {message}", file=sys.stderr, flush=True)


def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if not found:
        raise ImageError(f"`{name}` not found: install it with `apt-get install -y {package}`")
    return found


def buildah(*args: str, timeout_s: float | None = None, capture: bool = True) -> subprocess.CompletedProcess[str]:
    """Run buildah with the storage driver every call must share; raises ImageError on failure."""
    cmd = [_tool("buildah", "buildah"), *STORAGE, *args]
    done = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                          check=False)
    if done.returncode != 0:
        tail = f": {(done.stderr or '')[-3000:]}" if capture else ""
        raise ImageError(f"`buildah {' '.join(args[:3])} ...` failed (exit {done.returncode}){tail}")
    return done


def image_exists(name: str) -> bool:
    try:
        buildah("inspect", "--type", "image", name, timeout_s=60)
    except ImageError:
        return False
    return True


def image_size(name: str) -> int:
    """Bytes of the image's layers (uncompressed tars), what `buildah images` shows rounded."""
    manifest = json.loads(json.loads(buildah("inspect", "--type", "image", name, timeout_s=60).stdout)["Manifest"])
    return sum(int(layer["size"]) for layer in manifest["layers"])


# --- base ---------------------------------------------------------------------------------------


def registry_reachable(image: str = REGISTRY_BASE, timeout_s: float = 45) -> bool:
    """True when `buildah pull image` succeeds within timeout_s."""
    try:
        buildah("pull", "--quiet", image, timeout_s=timeout_s)
    except (ImageError, subprocess.TimeoutExpired):
        return False
    return True


def build_base(force: bool = False) -> str:
    """The local debootstrap base image (built once, reused): returns its name."""
    if not force and image_exists(LOCAL_BASE):
        _say(f"reused the local base {LOCAL_BASE}")
        return LOCAL_BASE
    workdir = image_dir() / "base"
    tarball = workdir / "rootfs.tar"
    if force or not tarball.is_file():
        debootstrap = _tool("debootstrap", "debootstrap")
        rootfs = workdir / "rootfs"
        shutil.rmtree(rootfs, ignore_errors=True)
        rootfs.mkdir(parents=True)
        started = time.monotonic()
        _say(f"debootstrap {SUITE} ({', '.join(BASE_PACKAGES)}) into {rootfs}: a few minutes")
        log = workdir / "debootstrap.log"
        with open(log, "w") as out:
            done = subprocess.run(
                ["nice", debootstrap, "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE,
                 str(rootfs), MIRROR],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False,
            )
        if done.returncode != 0:
            raise ImageError(f"debootstrap failed (exit {done.returncode}); see {log}")
        _trust_this_machine(rootfs)
        _slim(rootfs)
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        shutil.rmtree(rootfs, ignore_errors=True)
        _say(f"base rootfs {tarball} ({tarball.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - started:.0f}s")
    (workdir / "Containerfile").write_text("FROM scratch\nADD rootfs.tar /\nCMD [\"python\"]\n")
    buildah("bud", "--isolation", "chroot", "--layers=false", "-t", LOCAL_BASE, "-f",
            str(workdir / "Containerfile"), str(workdir), timeout_s=1800)
    _say(f"built the local base {LOCAL_BASE}")
    return LOCAL_BASE


def _trust_this_machine(rootfs: Path) -> None:
    """Package downloads here go through TLS signed by this machine's CA: give the base its bundle."""
    shutil.copy2(HOST_CA_BUNDLE, rootfs / HOST_CA_BUNDLE.relative_to("/"))
    local = rootfs / HOST_LOCAL_CAS.relative_to("/")
    local.mkdir(parents=True, exist_ok=True)
    for cert in sorted(HOST_LOCAL_CAS.glob("*.crt")) if HOST_LOCAL_CAS.is_dir() else []:
        shutil.copy2(cert, local / cert.name)  # survives an update-ca-certificates in a later layer
    (rootfs / "etc" / "pip.conf").write_text(f"[global]\ncert = {HOST_CA_BUNDLE}\n")
    host_sources = Path("/etc/apt/sources.list.d/debian.sources")
    if host_sources.is_file():  # the same suites as this machine: updates and security too
        shutil.copy2(host_sources, rootfs / "etc" / "apt" / "sources.list.d" / "debian.sources")
        (rootfs / "etc" / "apt" / "sources.list").unlink(missing_ok=True)


def _slim(rootfs: Path) -> None:
    """What python's slim images also leave out: package lists, caches, docs."""
    for sub in ("var/lib/apt/lists", "var/cache/apt/archives", "usr/share/doc", "usr/share/man", "usr/share/info"):
        folder = rootfs / sub
        if folder.is_dir():
            for child in folder.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)


def choose_base() -> str:
    chosen = os.environ.get("UREPLICATOR_BASE_IMAGE")
    if chosen:
        return chosen
    if registry_reachable():
        return REGISTRY_BASE
    _say(f"{REGISTRY_BASE} cannot be pulled: using a local base made with debootstrap")
    return build_base()


# --- build --------------------------------------------------------------------------------------


def stage_jars() -> Path:
    """Copy the connector jars `make install` fetched into the build context (jvm/jars/, git-ignored)."""
    source = jvm_dir() / "spark-kafka"
    jars = sorted(source.glob("*.jar"))
    if not jars:
        raise ImageError(f"no connector jars in {source}: run `make install` first")
    target = REPO_ROOT / "jvm" / "jars" / "spark-kafka"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for jar in jars:
        shutil.copy2(jar, target / jar.name)
    return target


def build(base: str | None = None) -> dict[str, Any]:
    """Build the runtime and verifier images; returns (and writes) their names, sizes and build times."""
    base = base or choose_base()
    stage_jars()
    results: dict[str, Any] = {"base": base, "images": {}}
    for target in ("runtime", "verifier"):
        name = image_name(target)
        _say(f"building {name} (target {target}) on {base}")
        started = time.monotonic()
        buildah("bud", "--isolation", "chroot", "--network", "host", "--layers", "--build-arg",
                f"PYTHON_IMAGE={base}", "--target", target, "-t", name, "-f", str(REPO_ROOT / "Dockerfile"),
                str(REPO_ROOT), timeout_s=3600, capture=False)
        seconds = time.monotonic() - started
        size = image_size(name)
        results["images"][target] = {"name": name, "size_bytes": size, "build_s": round(seconds, 1)}
        _say(f"built {name}: {size / 1e6:.0f} MB in {seconds:.0f}s")
    if base == LOCAL_BASE:
        results["base_size_bytes"] = image_size(LOCAL_BASE)
    image_dir().mkdir(parents=True, exist_ok=True)
    (image_dir() / "build.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


# --- test ---------------------------------------------------------------------------------------


class Containers:
    """Working containers of one image test; each process runs in one of its own (`buildah run`)."""

    def __init__(self, shared: Path) -> None:
        self.shared = shared
        self.names: list[str] = []

    def create(self, image: str, label: str) -> str:
        name = f"urep-{label}-{os.getpid()}"
        buildah("rm", name, timeout_s=120) if _container_exists(name) else None
        buildah("from", "--name", name, "--pull-never", image, timeout_s=900)
        self.names.append(name)
        return name

    def command(self, container: str, argv: Sequence[str]) -> list[str]:
        """`buildah run` on the host network with the shared folder mounted at the same path.

        The hostname is one /etc/hosts resolves (buildah's default, the container id, is not;
        Spark looks its own up), as a pod's is in Kubernetes.
        """
        return [_tool("buildah", "buildah"), *STORAGE, "run", "--isolation", "chroot", "--network", "host",
                "--hostname", "localhost", "--volume", f"{self.shared}:{self.shared}", container, "--", *argv]

    def remove_all(self) -> None:
        for name in self.names:
            subprocess.run([_tool("buildah", "buildah"), *STORAGE, "rm", name], capture_output=True, check=False)


def _container_exists(name: str) -> bool:
    done = subprocess.run([_tool("buildah", "buildah"), *STORAGE, "containers", "--format", "{{.ContainerName}}"],
                          capture_output=True, text=True, check=False)
    return name in done.stdout.split()


def test(records: int = 10_000, partitions: int = 4, timeout_s: float = 300.0) -> int:
    """The demo, with the controller and a worker from the image and `verify` from the verifier image."""
    from devtools import demo

    for target in TAGS:
        if not image_exists(image_name(target)):
            raise ImageError(f"no image {image_name(target)}: run `make image` first")
    shared = Path(tempfile.mkdtemp(prefix="urep-image-test-", dir=image_dir()))
    shared.chmod(0o777)  # the containers run as uid 10001
    containers = Containers(shared)

    def launch(role: str, name: str, config: Path, log: Any) -> subprocess.Popen[bytes]:
        container = containers.create(image_name("runtime"), name)
        if role == "worker":
            # The image must carry the C copy loop: with `on` a worker without it refuses to start.
            doc = yaml.safe_load(config.read_text())
            doc.setdefault("worker", {})["native_loop"] = "on"
            config.write_text(yaml.safe_dump(doc))
        config.chmod(0o644)
        return subprocess.Popen(containers.command(container, ["ureplicator", role, "--config", str(config)]),
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)

    def verify(config: Path, output: Path) -> subprocess.CompletedProcess[str]:
        container = containers.create(image_name("verifier"), "verifier")
        output.mkdir(parents=True, exist_ok=True)
        output.chmod(0o777)
        config.chmod(0o644)
        argv = ["ureplicator", "--log-level", "warning", "verify", "--config", str(config), "--output", str(output),
                "--master", "local[1]"]
        return subprocess.run(containers.command(container, argv), stdout=subprocess.PIPE, stderr=None, text=True,
                              stdin=subprocess.DEVNULL, check=False)

    try:
        return demo.run(records=records, partitions=partitions, timeout_s=timeout_s, directory=shared,
                        workers=1, launch=launch, verify=verify)
    finally:
        containers.remove_all()
        shutil.rmtree(shared, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.images", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("base", help="build the local debootstrap base (reused when present)").add_argument(
        "--force", action="store_true")
    sub.add_parser("build", help="build the runtime and verifier images")
    p_test = sub.add_parser("test", help="run the images against a local stack: mirror, compare, verify")
    p_test.add_argument("--records", type=int, default=10_000)
    args = parser.parse_args(argv)
    try:
        if args.command == "base":
            print(build_base(force=args.force))
        elif args.command == "build":
            print(json.dumps(build(), indent=2))
        else:
            return test(records=args.records)
    except ImageError as exc:
        print(f"image: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
