"""Shared benchmark helpers: process CPU and memory from /proc, machine facts, topics, offsets, result files.

Nothing here measures by itself; ``bench/throughput.py`` composes it. Process
figures come from procfs without psutil: ``/proc/<pid>/stat`` (utime + stime,
all threads) and ``/proc/<pid>/status`` (``VmHWM``, the resident-set high-water
mark, and ``VmRSS``).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from devtools import jvm
from devtools.ports import free_port  # noqa: F401 - re-exported for the bench scripts
from ureplicator.common import kafka

REPO: Path = Path(__file__).resolve().parent.parent
RESULTS_DIR: Path = REPO / "bench" / "results"
DOC: Path = REPO / "docs" / "benchmarks.md"

CLK_TCK = os.sysconf("SC_CLK_TCK")

# The worker's own producer settings (common/kafka.py), minus what only makes sense for a
# long-running replicator; the raw loop and MirrorMaker 2 get the same ones.
PRODUCER_SETTINGS: dict[str, Any] = {
    k: kafka._PRODUCER_DEFAULTS[k]
    for k in ("enable.idempotence", "acks", "linger.ms", "batch.size", "compression.type",
              "queue.buffering.max.kbytes", "queue.buffering.max.messages")
}
CONSUMER_SETTINGS: dict[str, Any] = dict(kafka._CONSUMER_DEFAULTS)


def say(message: str) -> None:
    """One progress line for the person waiting (stderr, flushed at once)."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class ProcSample:
    """CPU seconds (user + system, every thread) and resident memory of one process."""

    cpu_s: float
    hwm_bytes: int
    rss_bytes: int


def proc_sample(pid: int) -> ProcSample | None:
    """Read ``pid``'s CPU time and memory from procfs; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    # Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    mem = {}
    for line in status.splitlines():
        if line.startswith(("VmHWM:", "VmRSS:")):
            name, value = line.split(":", 1)
            mem[name] = int(value.split()[0]) * 1024
    return ProcSample(cpu, mem.get("VmHWM", 0), mem.get("VmRSS", 0))


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def stop_process(popen: subprocess.Popen[bytes], timeout_s: float = 30) -> int | None:
    """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit status."""
    if popen.poll() is None:
        popen.terminate()
        try:
            return popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            say(f"pid {popen.pid} did not stop within {timeout_s:.0f}s; killing it")
            popen.kill()
    return popen.wait(10)


# ----------------------------------------------------------------------------- machine


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_total = 0
    try:
        match = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        mem_total = int(match.group(1)) * 1024 if match else 0
    except OSError:
        pass
    try:
        java = jvm.java_executable()
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
        java_version = (out.stderr or out.stdout).splitlines()[0].strip()
    except (jvm.JvmError, OSError, IndexError, subprocess.TimeoutExpired):
        java_version = "unknown"
    import confluent_kafka

    return {
        "cpu_model": cpu_model,
        "cores": os.cpu_count(),
        "ram_bytes": mem_total,
        "python": platform.python_version(),
        "java": java_version,
        "kernel": platform.release(),
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "kafka_brokers": _jar_version("kafka", "kafka-clients"),
        "mirrormaker2": _jar_version("mirrormaker", "connect-mirror"),
    }


def _jar_version(component: str, artifact: str) -> str:
    folder = jvm.jvm_dir() / component
    for jar in sorted(folder.glob(f"{artifact}-*.jar")):
        match = re.fullmatch(re.escape(artifact) + r"-(\d[\w.]*)\.jar", jar.name)
        if match:
            return match.group(1)
    return "unknown"


# ----------------------------------------------------------------------------- topics


def admin_client(bootstrap: str) -> AdminClient:
    """An admin client for the benchmark's own bookkeeping: its failures surface as exceptions,
    so librdkafka's own log lines (connection refused while the stack stops, purged events of
    dropped clients) stay quiet."""
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = admin_client(bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(60)
    wait_until(lambda: end_offsets(bootstrap, topic, partitions) is not None, 30, f"topic {topic} visible")


def list_topics(bootstrap: str) -> list[str]:
    admin = admin_client(bootstrap)
    return sorted(t for t in admin.list_topics(timeout=30).topics if not t.startswith("__"))


def delete_topics(bootstrap: str, topics: list[str], timeout_s: float = 60) -> None:
    """Delete ``topics`` and wait until the cluster no longer lists them."""
    if not topics:
        return
    admin = admin_client(bootstrap)
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        try:
            future.result(60)
        except KafkaException as exc:
            if exc.args[0].name() != "UNKNOWN_TOPIC_OR_PART":
                raise
    wanted = set(topics)
    wait_until(lambda: not wanted & set(admin.list_topics(timeout=30).topics), timeout_s, "topics deleted")


def wait_until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.2)


class Offsets:
    """End offsets of one cluster's partitions (``AdminClient.list_offsets``).

    librdkafka clients remember a topic they were asked about before it existed as
    unknown and may keep failing after it was created (seen with both a consumer's
    ``get_watermark_offsets`` and ``list_offsets``), so a failed question replaces
    the client: the next one starts with fresh metadata.
    """

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = admin_client(bootstrap)

    def end(self, topic: str, partitions: int) -> list[int] | None:
        """Per partition high watermark, or None while the topic does not exist (yet)."""
        wanted = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
        try:
            futures = self.admin.list_offsets(wanted, request_timeout=10)
            found = {tp.partition: future.result().offset for tp, future in futures.items()}
        except KafkaException:
            self.admin = admin_client(self.bootstrap)
            return None
        return [max(found[p], 0) for p in range(partitions)]

    def close(self) -> None:
        pass


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int] | None:
    reader = Offsets(bootstrap)
    try:
        return reader.end(topic, partitions)
    finally:
        reader.close()


# ----------------------------------------------------------------------------- result files


def append_json(path: Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` to the JSON list in ``path`` (created when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    runs: list[Any] = []
    if path.exists():
        try:
            loaded = json.loads(path.read_text())
            runs = loaded if isinstance(loaded, list) else [loaded]
        except ValueError:
            backup = path.with_suffix(".unreadable.json")
            os.replace(path, backup)
            say(f"{path} was not valid JSON; moved it to {backup}")
    runs.append(entry)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(runs, indent=2) + "\n")
    os.replace(tmp, path)


def replace_section(path: Path, start: str, end: str, body: str, title: str = "# Benchmarks") -> None:
    """Replace what lies between the ``start`` and ``end`` markers of ``path`` with ``body``.

    Read-modify-write of only that section, right before writing, so concurrent
    owners of other sections keep their text. The markers are appended when missing.
    """
    current = path.read_text() if path.exists() else f"{title}\n"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in current and end in current and current.index(start) < current.index(end):
        head, rest = current.split(start, 1)
        _, tail = rest.split(end, 1)
        updated = head + block + tail
    else:
        updated = current.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(updated)
    os.replace(tmp, path)
