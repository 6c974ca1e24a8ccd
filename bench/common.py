"""Shared benchmark helpers: process CPU and memory, machine facts, result files."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from devtools import jvm
from devtools.harness import REPO, say
from ureplicator.common import kafka

RESULTS_DIR: Path = REPO / "bench" / "results"
DOC: Path = REPO / "docs" / "benchmarks.md"

# The worker's own producer settings (common/kafka.py), minus what only makes sense for a
# long-running replicator; the raw loop and MirrorMaker 2 get the same ones.
PRODUCER_SETTINGS: dict[str, Any] = {
    k: kafka._PRODUCER_DEFAULTS[k]
    for k in ("enable.idempotence", "acks", "linger.ms", "batch.size", "compression.type",
              "queue.buffering.max.kbytes", "queue.buffering.max.messages")
}
CONSUMER_SETTINGS: dict[str, Any] = dict(kafka._CONSUMER_DEFAULTS)
# A run whose entry is bigger than this keeps its per-sample lists in a git-ignored raw file.
RAW_LIMIT_BYTES = 1_000_000


def repo_relative(text: str) -> str:
    """``text`` with the checkout's path dropped before ``.cache/``, whichever checkout the run was in."""
    return re.sub(r"(?<![\w.-])/[^\s`'\"]*?/(?=\.cache/)", "", text.replace(f"{REPO}/", ""))


class ProcSample(NamedTuple):
    """CPU seconds (user + system, every thread) and resident memory of one process."""

    cpu_s: float
    hwm_bytes: int
    rss_bytes: int


def proc_sample(pid: int) -> ProcSample | None:
    """``pid``'s CPU time and memory (psutil; the resident high-water mark, which psutil lacks, from /proc)."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            times = process.cpu_times()
            rss = process.memory_info().rss
        status = Path(f"/proc/{pid}/status").read_text()
    except (psutil.Error, OSError):
        return None
    hwm = re.search(r"^VmHWM:\s+(\d+)", status, re.M)
    return ProcSample(times.user + times.system, int(hwm.group(1)) * 1024 if hwm else 0, rss)


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = (round(v, 2) for v in os.getloadavg())
    return one, five, fifteen


def fmt_load(values: Any) -> str:
    """Load averages as ``1.2/3.4/5.6``."""
    return "/".join(f"{v:.1f}" for v in values)


def _run(*cmd: str, stderr: bool = False) -> str:
    """A command's output (``stderr``: its stderr, where ``java -version`` writes); empty when it cannot run."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return ((out.stderr or out.stdout) if stderr else out.stdout).strip()


def code_version(repo: Path) -> dict[str, Any]:
    """The commit the worker ran from and a digest of its Python sources (to notice edits mid-run)."""
    digest = hashlib.sha256()
    for path in sorted([*repo.glob("worker/*.py"), *repo.glob("common/*.py"), *repo.glob("worker/*.so")]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    commit = _run("git", "-C", str(repo), "rev-parse", "--short", "HEAD")
    dirty = _run("git", "-C", str(repo), "status", "--porcelain", "--", "worker", "common") if commit else ""
    return {"commit": commit or "unknown", "worker_common_modified": bool(dirty), "sources_sha256": digest.hexdigest()}


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    import confluent_kafka

    try:
        java = _run(jvm.java_executable(), "-version", stderr=True).splitlines()[0].strip()
    except (jvm.JvmError, IndexError):
        java = "unknown"
    model = re.search(r"^model name\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.M)  # not in psutil
    return {
        "cpu_model": model.group(1).strip() if model else "unknown",
        "cores": os.cpu_count(),
        "ram_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "java": java,
        "kernel": platform.release(),
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "kafka_brokers": _jar_version("kafka", "kafka-clients"),
        "mirrormaker2": _jar_version("mirrormaker", "connect-mirror"),
    }


def _jar_version(component: str, artifact: str) -> str:
    for jar in sorted((jvm.jvm_dir() / component).glob(f"{artifact}-*.jar")):
        if match := re.fullmatch(re.escape(artifact) + r"-(\d[\w.]*)\.jar", jar.name):
            return match.group(1)
    return "unknown"


def summarised(entry: dict[str, Any], raw_file: str, limit: int = RAW_LIMIT_BYTES) -> dict[str, Any]:
    """``entry`` with its biggest lists replaced by ``{"raw_file", "items"}`` until it fits in ``limit`` bytes
    of JSON. Lists of plain values (the per-sample data) go first; the renderers read the per-run figures."""
    entry = json.loads(json.dumps(entry))
    while len(json.dumps(entry, indent=2)) > limit and (lists := list(_lists(entry))):
        *_, parent, key = max(lists, key=lambda item: item[:2])
        parent[key] = {"raw_file": raw_file, "items": len(parent[key])}
    return entry


def _lists(node: Any) -> Iterator[tuple[bool, int, Any, Any]]:
    """(holds only plain values, JSON size, parent, key) of every non-empty list inside ``node``."""
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in children:
        if isinstance(value, list) and value:
            yield not any(isinstance(v, (dict, list)) for v in value), len(json.dumps(value)), node, key
        yield from _lists(value)


def append_json(path: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """Append ``entry`` to the JSON list in ``path``; returns what was stored: over ``RAW_LIMIT_BYTES`` the
    entry goes whole to ``<results>/raw/`` (git-ignored) and is stored :func:`summarised`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if len(json.dumps(entry, indent=2)) > RAW_LIMIT_BYTES:
        stamp = str(entry.get("date", ""))[:19].replace(":", "") or os.getpid()
        raw = path.parent / "raw" / f"{path.stem}-{stamp}.json"
        raw.parent.mkdir(exist_ok=True)
        raw.write_text(json.dumps(entry, indent=2) + "\n")
        entry = summarised(entry, f"raw/{raw.name}")
        say(f"the run's raw samples ({raw.stat().st_size:,} bytes) are in {raw}, not in git")
    try:
        runs = entries(path) if path.exists() else []
    except ValueError:
        runs, backup = [], path.with_suffix(".unreadable.json")
        os.replace(path, backup)
        say(f"{path} was not valid JSON; moved it to {backup}")
    _write(path, json.dumps([*runs, entry], indent=2) + "\n")
    return entry


def entries(path: Path) -> list[dict[str, Any]]:
    """Every entry of a results file (a list; the oldest files hold one bare entry)."""
    loaded = json.loads(path.read_text())
    return loaded if isinstance(loaded, list) else [loaded]


def replace_section(path: Path, start: str, end: str, body: str, title: str = "# Benchmarks") -> None:
    """Replace what lies between the ``start`` and ``end`` markers of ``path`` with ``body`` (appended when
    missing), re-reading the file so that concurrent owners of other sections keep theirs."""
    current = path.read_text() if path.exists() else f"{title}\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in current and end in current and current.index(start) < current.index(end):
        head, rest = current.split(start, 1)
        _write(path, head + block + rest.split(end, 1)[1])
    else:
        _write(path, current.rstrip("\n") + "\n\n" + block + "\n")


def _write(path: Path, text: str) -> None:
    """Write through a temporary file and a rename, so a reader never sees half of it."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
