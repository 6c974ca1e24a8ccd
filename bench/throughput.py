"""Measure mirroring throughput: one ureplicator worker against MirrorMaker 2 and a raw confluent-kafka loop.

    .venv/bin/python -m bench.throughput            # 3 rounds, 2M x 100 B + 400k x 1 KB: 5 min idle, ~8 min busy
    .venv/bin/python -m bench.throughput --quick    # smoke run: 1 round, 500k x 100 B + 100k x 1 KB: 1-3 min
    .venv/bin/python -m bench.throughput --profile  # also py-spy the worker in one extra, untimed run

One invocation starts its own local stack (``devtools.stack``; always stopped
again, also on Ctrl-C), preloads two source topics of 8 partitions (100-byte
and 1 KB values, 8-byte keys), then mirrors each topic with

  A  ``ureplicator``:  one worker process plus a controller, topic added with
     ``POST /topics``; the clock starts at the POST;
  B  ``mirrormaker2``: MirrorMaker 2 in dedicated mode, one task (``bench/mm2.py``);
     the clock starts when the JVM is launched;
  C  ``raw``: ``bench/rawcopy.py``, the simplest consume/produce loop;
     the clock starts when the process is launched;

and stops the clock when every destination partition's end offset equals
the source's. Runs alternate A B C per dataset and round, every run to a fresh
destination topic (and a fresh pipeline / Connect group, so nothing resumes),
which is deleted afterwards. Per run it records records/s and MB/s (key +
value bytes), the same from the first mirrored record on ("steady"), CPU
seconds (user + system of the mirroring processes, from /proc) per million
records, peak RSS (VmHWM) and the load average. Medians per variant, ratios
ureplicator/MM2 and ureplicator/raw go to ``bench/results/throughput-<date>.json``
(appended) and, for full runs (not ``--quick``), to the throughput-bench section
of ``docs/benchmarks.md`` together with the hand-written findings in
``bench/throughput-notes.md``. ``--worker-repo DIR`` runs controller and worker
from another checkout (to measure a patch, e.g. ``bench/patches/``);
``--render FILE`` only re-writes the docs section from a results file.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench import mm2
from bench.common import (
    CLK_TCK,
    CONSUMER_SETTINGS,
    DOC,
    PRODUCER_SETTINGS,
    REPO,
    RESULTS_DIR,
    Offsets,
    ProcSample,
    append_json,
    create_topic,
    delete_topics,
    end_offsets,
    free_port,
    list_topics,
    load_average,
    machine_info,
    proc_sample,
    replace_section,
    say,
    stop_process,
)
from common.errors import UReplicatorError
from controller.client import request
from devtools import jvm, stack

START = "<!-- throughput-bench:start -->"
END = "<!-- throughput-bench:end -->"
PARTITIONS = 8
KEY_BYTES = 8
VARIANTS: tuple[str, ...] = ("ureplicator", "mirrormaker2", "raw")
LABELS = {"ureplicator": "ureplicator (1 worker)", "mirrormaker2": "MirrorMaker 2 (1 task)", "raw": "raw client loop"}
POLL_S = 0.2
# Hand-written findings (profiles, A/B tests of worker patches) appended to the docs section;
# kept next to the code so a re-run keeps them. Update it when the worker changes.
NOTES = REPO / "bench" / "throughput-notes.md"
PROGRESS_S = 3.0


class BenchError(Exception):
    """A run could not be completed (process died, timed out, API refused)."""


@dataclass(frozen=True)
class Dataset:
    label: str
    value_bytes: int
    records: int

    @property
    def topic(self) -> str:
        return f"bench.v{self.value_bytes}.n{self.records}"

    @property
    def payload_bytes(self) -> int:
        return self.records * (KEY_BYTES + self.value_bytes)

    def targets(self) -> list[int]:
        """Records per partition (round-robin preload)."""
        return [self.records // PARTITIONS + (1 if p < self.records % PARTITIONS else 0) for p in range(PARTITIONS)]


@dataclass
class Run:
    variant: str
    dataset: str
    round: int
    run_no: int
    records: int
    payload_bytes: int
    ok: bool = False
    error: str | None = None
    elapsed_s: float = 0.0  # clock start -> destination complete
    first_record_s: float = 0.0  # clock start -> first record seen on the destination
    steady_records: int = 0  # records that arrived after the first was seen
    cpu_s: float = 0.0  # mirroring process(es), over the whole measured window
    cpu_steady_s: float = 0.0  # the same from the first record on
    peak_rss_bytes: int = 0  # VmHWM of the mirroring process
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.ok and self.elapsed_s else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / 1e6 / self.elapsed_s if self.ok and self.elapsed_s else 0.0

    @property
    def steady_records_per_s(self) -> float:
        span = self.elapsed_s - self.first_record_s
        return self.steady_records / span if self.ok and span > 0 else 0.0

    @property
    def cpu_s_per_m(self) -> float:
        return self.cpu_s / (self.records / 1e6) if self.ok else 0.0

    @property
    def cpu_steady_s_per_m(self) -> float:
        return self.cpu_steady_s / (self.steady_records / 1e6) if self.ok and self.steady_records else 0.0

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        for name in ("records_per_s", "mb_per_s", "steady_records_per_s", "cpu_s_per_m", "cpu_steady_s_per_m"):
            doc[name] = round(getattr(self, name), 3)
        return doc


@dataclass
class Bench:
    """Everything one invocation shares between runs."""

    services: dict[str, str]
    workdir: Path
    stamp: str
    run_timeout_s: float
    repo: Path = REPO  # checkout the controller and worker run from (--worker-repo)
    runs: list[Run] = field(default_factory=list)
    counter: int = 0
    destination: Offsets | None = None

    def next_run(self) -> int:
        self.counter += 1
        return self.counter

    def run_dir(self, run_no: int, variant: str, dataset: Dataset) -> Path:
        path = self.workdir / f"run{run_no:02d}-{variant}-{dataset.label}"
        path.mkdir(parents=True, exist_ok=True)
        return path


# ----------------------------------------------------------------------------- measuring


@dataclass
class Window:
    """What ``watch`` saw between the clock start and the destination being complete."""

    elapsed_s: float
    first_record_s: float
    steady_records: int
    first: ProcSample | None
    done: ProcSample | None
    threads_first: dict[str, list[float]]
    threads_done: dict[str, list[float]]
    pressure_pct: float | None  # share of the steady window in which some task waited for a CPU


def thread_stats(pid: int) -> dict[str, list[float]]:
    """Per thread group of ``pid``: [CPU seconds, seconds runnable but waiting for a core].

    Groups: "main" (tid == pid, the Python thread running the mirror loop) and thread
    names with digits folded ("rdk:broker#", "kafka-producer-network-thread | ...").
    CPU comes from ``task/<tid>/stat``, the run-queue wait from ``task/<tid>/schedstat``.
    """
    groups: dict[str, list[float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            sched = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        key = "main" if tid == str(pid) else re.sub(r"\d+", "#", name)
        entry = groups.setdefault(key, [0.0, 0.0])
        entry[0] += (int(fields[11]) + int(fields[12])) / CLK_TCK
        entry[1] += int(sched[1]) / 1e9
    return groups


def cpu_pressure_us() -> int | None:
    """Total microseconds some task waited for a CPU (PSI), or None without PSI."""
    try:
        for line in Path("/proc/pressure/cpu").read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def watch(bench: Bench, label: str, topic: str, ds: Dataset, pid: int, started: float,
          alive: Callable[[], str | None]) -> Window:
    """Poll the destination's end offsets until they equal the source's; sample ``pid`` on the way."""
    assert bench.destination is not None
    targets = ds.targets()
    first_at: float | None = None
    first_n = 0
    first: ProcSample | None = None
    threads_first: dict[str, list[float]] = {}
    pressure_first = None
    last_print = started
    last_n = 0
    while True:
        ends = bench.destination.end(topic, PARTITIONS)
        now = time.monotonic()
        n = sum(ends) if ends else 0
        if n > 0 and first_at is None:
            first_at, first_n = now, n
            first = proc_sample(pid)
            threads_first = thread_stats(pid)
            pressure_first = cpu_pressure_us()
        if ends and all(e >= t for e, t in zip(ends, targets, strict=True)):
            done = proc_sample(pid)
            threads_done = thread_stats(pid)
            pressure_done = cpu_pressure_us()
            assert first_at is not None
            if n > ds.records:
                say(f"  {label}: destination holds {n - ds.records} more records than the source (duplicates)")
            pressure = None
            if pressure_first is not None and pressure_done is not None and now > first_at:
                pressure = round((pressure_done - pressure_first) / 1e4 / (now - first_at), 1)
            return Window(now - started, first_at - started, n - first_n, first, done, threads_first, threads_done,
                          pressure)
        problem = alive()
        if problem:
            raise BenchError(f"{label}: {problem} after {now - started:.1f}s at {n:,}/{ds.records:,} records")
        if now - started > bench.run_timeout_s:
            raise BenchError(f"{label}: timed out after {bench.run_timeout_s:.0f}s at {n:,}/{ds.records:,} records")
        if now - last_print >= PROGRESS_S:
            rate = (n - last_n) / (now - last_print)
            say(f"  {label}: {n:>10,}/{ds.records:,} ({100 * n / ds.records:5.1f}%)  {rate / 1000:7.1f}k rec/s now")
            last_print, last_n = now, n
        time.sleep(POLL_S)


def _finish(run: Run, window: Window, cpu_before: float, extra_cpu: float = 0.0) -> None:
    if window.done is None or window.first is None:
        raise BenchError("the mirroring process vanished before it could be sampled")
    run.elapsed_s = round(window.elapsed_s, 3)
    run.first_record_s = round(window.first_record_s, 3)
    run.steady_records = window.steady_records
    run.cpu_s = round(window.done.cpu_s - cpu_before + extra_cpu, 3)
    run.cpu_steady_s = round(window.done.cpu_s - window.first.cpu_s, 3)
    run.peak_rss_bytes = window.done.hwm_bytes
    cpu: dict[str, float] = {}
    wait: dict[str, float] = {}
    for name, (cpu_done, wait_done) in sorted(window.threads_done.items(), key=lambda kv: -kv[1][0]):
        cpu_first, wait_first = window.threads_first.get(name, [0.0, 0.0])
        if cpu_done - cpu_first >= 0.05:
            cpu[name] = round(cpu_done - cpu_first, 2)
            wait[name] = round(wait_done - wait_first, 2)
    run.extra["thread_cpu_steady_s"] = cpu
    run.extra["thread_runq_wait_steady_s"] = wait
    run.extra["steady_s"] = round(window.elapsed_s - window.first_record_s, 3)
    run.extra["cpu_pressure_some_pct"] = window.pressure_pct
    run.ok = True


def _exited(popen: subprocess.Popen[bytes], log: Path) -> Callable[[], str | None]:
    def check() -> str | None:
        if popen.poll() is None:
            return None
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.exists() else ""
        return f"process exited with status {popen.returncode}; last log lines:\n{tail}"

    return check


def _mm2_alive(popen: subprocess.Popen[bytes], log: Path) -> Callable[[], str | None]:
    """MM2 keeps running when its connector config is refused; its log says so."""
    exited = _exited(popen, log)
    checked = {"offset": 0}

    def check() -> str | None:
        if problem := exited():
            return problem
        try:
            with open(log, "rb") as handle:
                handle.seek(checked["offset"])
                chunk = handle.read()
        except OSError:
            return None
        cut = chunk.rfind(b"\n") + 1
        checked["offset"] += cut
        for line in chunk[:cut].decode(errors="replace").splitlines():
            if "Failed to configure MirrorSourceConnector" in line:
                return f"MirrorMaker 2 refused its config: {line.strip()} (see {log})"
        return None

    return check


def _spawn(cmd: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(cwd))


# ----------------------------------------------------------------------------- variants


def run_ureplicator(bench: Bench, ds: Dataset, rnd: int, profile_to: Path | None = None) -> Run:
    """A: controller + one worker of a fresh pipeline; the clock starts at ``POST /topics``."""
    run_no = bench.next_run()
    run = Run("ureplicator", ds.label, rnd, run_no, ds.records, ds.payload_bytes)
    folder = bench.run_dir(run_no, "ureplicator", ds)
    destination = f"{ds.topic}.urep{run_no}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = {
        "pipeline": f"bench{bench.stamp}r{run_no}",
        "zookeeper": {"connect": bench.services["zookeeper"]},
        "source": {"alias": "src", "bootstrap_servers": bench.services["source"]},
        "destination": {"alias": "dst", "bootstrap_servers": bench.services["destination"]},
        "controller": {"rest_host": "127.0.0.1", "rest_port": port},
        "worker": {"id": "bench-worker"},  # every other key at its default
    }
    config_path = folder / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(config))
    python = [sys.executable, "-m", "cli"]
    procs: list[subprocess.Popen[bytes]] = []
    spy: subprocess.Popen[bytes] | None = None
    try:
        controller = _spawn([*python, "controller", "--config", str(config_path)], folder / "controller.log",
                            bench.repo)
        procs.append(controller)
        _wait_http(url, "/health", controller, folder / "controller.log")
        worker = _spawn([*python, "worker", "--config", str(config_path)], folder / "worker.log", bench.repo)
        procs.append(worker)
        _wait_worker(url, worker, folder / "worker.log")
        worker_before = proc_sample(worker.pid)
        controller_before = proc_sample(controller.pid)
        assert worker_before is not None and controller_before is not None
        run.load_before = load_average()
        started = time.monotonic()
        status, body = request(f"{url}/topics", "POST",
                               {"topic": ds.topic, "numPartitions": PARTITIONS, "destination": destination})
        if status != 201:
            raise BenchError(f"POST /topics answered {status}: {body}")
        if profile_to is not None:
            spy = _start_py_spy(worker.pid, profile_to)
        worker_alive = _exited(worker, folder / "worker.log")
        controller_alive = _exited(controller, folder / "controller.log")
        window = watch(bench, f"ureplicator {ds.label}", destination, ds, worker.pid, started,
                       lambda: worker_alive() or controller_alive())
        controller_done = proc_sample(controller.pid)
        controller_cpu = (controller_done.cpu_s - controller_before.cpu_s) if controller_done else 0.0
        run.load_after = load_average()
        _finish(run, window, worker_before.cpu_s, extra_cpu=controller_cpu)
        run.extra.update({
            "worker_cpu_s": round(run.cpu_s - controller_cpu, 3),
            "controller_cpu_s": round(controller_cpu, 3),
            "controller_peak_rss_bytes": controller_done.hwm_bytes if controller_done else 0,
            "destination_topic": destination,
            "pipeline": config["pipeline"],
        })
    finally:
        if spy is not None:
            _stop_py_spy(spy)
        for proc in reversed(procs):
            stop_process(proc, 30)
        _cleanup(bench, [destination])
    return run


def run_mirrormaker2(bench: Bench, ds: Dataset, rnd: int) -> Run:
    """B: MirrorMaker 2, dedicated mode, one task, identity naming; the clock starts at the JVM launch."""
    run_no = bench.next_run()
    run = Run("mirrormaker2", ds.label, rnd, run_no, ds.records, ds.payload_bytes)
    folder = bench.run_dir(run_no, "mirrormaker2", ds)
    alias = f"src{run_no}"
    destination = ds.topic  # IdentityReplicationPolicy
    _cleanup(bench, [destination])
    cmd = mm2.command(folder, alias, bench.services["source"], bench.services["destination"], ds.topic)
    popen: subprocess.Popen[bytes] | None = None
    try:
        run.load_before = load_average()
        started = time.monotonic()
        popen = _spawn(cmd, folder / "stdout.log", folder)
        window = watch(bench, f"mirrormaker2 {ds.label}", destination, ds, popen.pid, started,
                       _mm2_alive(popen, folder / "mm2.log"))
        run.load_after = load_average()
        _finish(run, window, 0.0)
        run.extra.update({"destination_topic": destination, "source_alias": alias})
    finally:
        if popen is not None:
            stop_process(popen, 20)
        internal = [t for t in list_topics(bench.services["destination"]) if alias in t.split(".")]
        _cleanup(bench, [destination, *internal])
    return run


def run_raw(bench: Bench, ds: Dataset, rnd: int) -> Run:
    """C: the plain consume/produce loop; the clock starts at the process launch."""
    run_no = bench.next_run()
    run = Run("raw", ds.label, rnd, run_no, ds.records, ds.payload_bytes)
    folder = bench.run_dir(run_no, "raw", ds)
    destination = f"{ds.topic}.raw{run_no}"
    create_topic(bench.services["destination"], destination, PARTITIONS)  # auto-create is off
    cmd = [sys.executable, "-m", "bench.rawcopy", "--source", bench.services["source"],
           "--destination", bench.services["destination"], "--topic", ds.topic, "--to", destination,
           "--partitions", str(PARTITIONS), "--records", str(ds.records)]
    popen: subprocess.Popen[bytes] | None = None
    try:
        run.load_before = load_average()
        started = time.monotonic()
        popen = _spawn(cmd, folder / "rawcopy.log", REPO)
        window = watch(bench, f"raw {ds.label}", destination, ds, popen.pid, started,
                       _exited(popen, folder / "rawcopy.log"))
        run.load_after = load_average()
        _finish(run, window, 0.0)
        run.extra["destination_topic"] = destination
    finally:
        if popen is not None:
            stop_process(popen, 10)
        _cleanup(bench, [destination])
    return run


def _busiest(run: Run, top: int = 3) -> str:
    """The busiest threads of the steady window: CPU seconds / seconds waiting for a core."""
    cpu = run.extra.get("thread_cpu_steady_s", {})
    wait = run.extra.get("thread_runq_wait_steady_s", {})
    busiest = sorted(cpu, key=lambda k: -cpu[k])[:top]
    pressure = run.extra.get("cpu_pressure_some_pct")
    return (", ".join(f"{k} {cpu[k]:.1f}s cpu/{wait.get(k, 0):.1f}s runq" for k in busiest)
            + (f"; CPU pressure {pressure:.0f}%" if pressure is not None else ""))


RUNNERS: dict[str, Callable[[Bench, Dataset, int], Run]] = {
    "ureplicator": run_ureplicator,
    "mirrormaker2": run_mirrormaker2,
    "raw": run_raw,
}


def _wait_http(url: str, path: str, popen: subprocess.Popen[bytes], log: Path, timeout_s: float = 60) -> None:
    alive = _exited(popen, log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if problem := alive():
            raise BenchError(f"controller: {problem}")
        with contextlib.suppress(UReplicatorError):
            status, body = request(f"{url}{path}", timeout_s=2)
            if status == 200 and isinstance(body, dict) and body.get("is_leader"):
                return
        time.sleep(0.2)
    raise BenchError(f"controller at {url} not healthy (leader) within {timeout_s:.0f}s")


def _wait_worker(url: str, popen: subprocess.Popen[bytes], log: Path, timeout_s: float = 60) -> None:
    alive = _exited(popen, log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if problem := alive():
            raise BenchError(f"worker: {problem}")
        status, body = request(f"{url}/instances", timeout_s=5)
        rows = body.get("instances", []) if status == 200 and isinstance(body, dict) else []
        if any(row.get("live") and row.get("generation") is not None for row in rows):
            return
        time.sleep(0.2)
    raise BenchError(f"worker did not register within {timeout_s:.0f}s")


def _cleanup(bench: Bench, topics: list[str]) -> None:
    """Delete this run's destination topics (frees the disk, keeps runs independent)."""
    try:
        existing = set(list_topics(bench.services["destination"]))
        delete_topics(bench.services["destination"], [t for t in topics if t in existing])
    except Exception as exc:  # cleanup must not hide the run's own error
        say(f"  could not delete {', '.join(topics)} on the destination: {exc}")


# ----------------------------------------------------------------------------- profiling


def _start_py_spy(pid: int, output: Path) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        say("  py-spy not installed (.venv/bin/pip install py-spy); profiling skipped")
        return None
    # --native splits the time inside confluent-kafka/librdkafka C calls from the Python
    # frames; it has to pause the process per sample (no --nonblocking), so this run is untimed.
    cmd = [spy, "record", "--pid", str(pid), "--format", "raw", "--native", "--rate", "200", "--output", str(output)]
    say(f"  profiling the worker (pid {pid}) with py-spy into {output}")
    log = output.with_suffix(".log")
    return _spawn(cmd, log, output.parent)


def _stop_py_spy(spy: subprocess.Popen[bytes]) -> None:
    if spy.poll() is None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(10)


def summarize_profile(path: Path, top: int = 22) -> dict[str, Any]:
    """Self and inclusive shares per function of the mirror loop's thread, from py-spy's collapsed stacks.

    Only stacks through ``MirrorWorker.run`` count (kazoo's and the metrics threads
    are idle waits); line numbers and raw libc addresses are folded away.
    """
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        frames = [_frame_name(f) for f in stack_text.split(";")]
        try:
            start = next(i for i, f in enumerate(frames) if f.startswith("MirrorWorker.run "))
        except StopIteration:
            continue
        frames = frames[start:]
        count = int(count_text)
        total += count
        self_counts[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    rows = []
    for name, n in inclusive.most_common():
        share = 100 * n / total
        own = 100 * self_counts[name] / total
        if share < 1.0 or (own < 0.5 and share >= 99.9):
            continue
        if own < 0.5 and rows and rows[-1][1] - share < 0.5:
            continue  # a pass-through frame of the row above (Producer_poll -> Producer_poll0 -> ...)
        rows.append((name, round(share, 1), round(own, 1)))
    self_top = [(name, round(100 * n / total, 1)) for name, n in self_counts.most_common(top)] if total else []
    return {"samples": total, "rows": rows[:top], "self_top": self_top}


def _frame_name(frame: str) -> str:
    """"produce (worker/mirror.py:240)" -> "produce (worker/mirror.py)"; "0x7f.. (libc.so.6)" -> "(libc.so.6)"."""
    frame = frame.replace(str(REPO) + "/", "").replace(str(Path(sys.prefix)) + "/", "")
    frame = re.sub(r":\d+\)$", ")", frame)
    frame = re.sub(r"\(([^()]*?)-[0-9a-f]{8}(\.so[.\d]*)\)$", r"(\1\2)", frame)  # librdkafka-<hash>.so.1
    frame = re.sub(r"\(confluent_kafka/cimpl\.[^()]*\.so\)$", "(confluent_kafka cimpl)", frame)
    return re.sub(r"^0x[0-9a-f]+ ", "", frame)


# ----------------------------------------------------------------------------- preload


def _values(size: int, count: int, seed: int) -> list[bytes]:
    """Text-like values (lz4 compresses them about 2:1), so compression does real work."""
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(300)]
    out = []
    for _ in range(count):
        parts: list[bytes] = []
        length = 0
        while length < size:
            token = rng.choice(words) if rng.random() < 0.6 else b"%x" % rng.getrandbits(32)
            parts.append(token)
            length += len(token) + 1
        out.append(b" ".join(parts)[:size])
    return out


def warm_group_coordinator(bootstrap: str, topic: str, timeout_s: float = 90) -> None:
    """Commit once for a throwaway group, retrying until the source's group coordinator answers.

    On a fresh cluster the first group operation creates ``__consumer_offsets`` and gets
    NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a while; the worker's first
    ``committed()`` call would then fail and (as of this writing) end the worker process.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-warmup", "enable.auto.commit": False})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                consumer.committed([TopicPartition(topic, 0)], timeout=10)
                return
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise BenchError(f"the source's group coordinator did not answer: {exc.args[0]}") from None
                time.sleep(0.5)
    finally:
        consumer.close()


def preload(services: dict[str, str], ds: Dataset) -> None:
    have = end_offsets(services["source"], ds.topic, PARTITIONS)
    if have == ds.targets():
        say(f"source topic {ds.topic} already holds {ds.records:,} records; reusing it")
        return
    if have is not None:
        delete_topics(services["source"], [ds.topic])
    create_topic(services["source"], ds.topic, PARTITIONS, {"retention.ms": "-1", "retention.bytes": "-1"})
    say(f"preloading {ds.records:,} records of {ds.value_bytes} B into {ds.topic} ({ds.payload_bytes / 1e6:.0f} MB)")
    producer = Producer({**PRODUCER_SETTINGS, "bootstrap.servers": services["source"], "linger.ms": 50})
    pool = _values(ds.value_bytes, 4096, seed=ds.value_bytes)
    produce = producer.produce
    started = time.monotonic()
    step = max(ds.records // 5, 1)
    for i in range(ds.records):
        while True:
            try:
                produce(ds.topic, pool[i & 4095], b"%08d" % (i % 100_000_000), i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
        if (i + 1) % step == 0:
            say(f"  preload {ds.label}: {i + 1:,}/{ds.records:,}")
    if producer.flush(120):
        raise BenchError(f"preload of {ds.topic} did not finish")
    got = end_offsets(services["source"], ds.topic, PARTITIONS)
    if got != ds.targets():
        raise BenchError(f"preload of {ds.topic}: end offsets {got}, expected {ds.targets()}")
    took = time.monotonic() - started
    say(f"preloaded {ds.topic} in {took:.1f}s ({ds.records / took / 1000:.0f}k rec/s)")


# ----------------------------------------------------------------------------- summary


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def summarize(runs: list[Run], datasets: list[Dataset]) -> dict[str, Any]:
    """Medians per dataset and variant, and the ratios ureplicator/MM2, ureplicator/raw."""
    out: dict[str, Any] = {}
    for ds in datasets:
        per: dict[str, Any] = {}
        for variant in VARIANTS:
            ok = [r for r in runs if r.dataset == ds.label and r.variant == variant and r.ok]
            failed = [r for r in runs if r.dataset == ds.label and r.variant == variant and not r.ok]
            if not ok and not failed:
                continue
            per[variant] = {
                "runs": len(ok),
                "failed": len(failed),
                "records_per_s": round(_median([r.records_per_s for r in ok])),
                "mb_per_s": round(_median([r.mb_per_s for r in ok]), 2),
                "steady_records_per_s": round(_median([r.steady_records_per_s for r in ok])),
                "first_record_s": round(_median([r.first_record_s for r in ok]), 2),
                "elapsed_s": round(_median([r.elapsed_s for r in ok]), 2),
                "cpu_s_per_m": round(_median([r.cpu_s_per_m for r in ok]), 2),
                "cpu_steady_s_per_m": round(_median([r.cpu_steady_s_per_m for r in ok]), 2),
                "peak_rss_mb": round(_median([r.peak_rss_bytes / 2**20 for r in ok]), 1),
                "records_per_s_all": [round(r.records_per_s) for r in ok],
            }
        ratios: dict[str, float | None] = {}
        urep = per.get("ureplicator")
        for other, name in (("mirrormaker2", "mm2"), ("raw", "raw")):
            them = per.get(other)
            for metric in ("records_per_s", "steady_records_per_s"):
                key = f"ureplicator/{name} {metric}"
                good = urep and them and urep[metric] and them[metric]
                ratios[key] = round(urep[metric] / them[metric], 3) if good else None  # type: ignore[index]
            cpu = "cpu_steady_s_per_m"
            good = urep and them and urep[cpu] and them[cpu]
            ratios[f"ureplicator/{name} {cpu}"] = round(urep[cpu] / them[cpu], 3) if good else None  # type: ignore[index]
        out[ds.label] = {"records": ds.records, "value_bytes": ds.value_bytes, "key_bytes": KEY_BYTES,
                         "payload_mb": round(ds.payload_bytes / 1e6, 1), "variants": per, "ratios": ratios}
    return out


def print_summary(summary: dict[str, Any]) -> None:
    for label, block in summary.items():
        say(f"results {label} ({block['records']:,} records, medians):")
        for variant, m in block["variants"].items():
            say(f"  {variant:<13} {m['records_per_s']:>9,} rec/s  {m['mb_per_s']:7.2f} MB/s  "
                f"steady {m['steady_records_per_s']:>9,} rec/s  first record {m['first_record_s']:5.1f}s  "
                f"CPU {m['cpu_s_per_m']:6.2f} s/M (steady {m['cpu_steady_s_per_m']:5.2f})  "
                f"peak RSS {m['peak_rss_mb']:6.1f} MB  ({m['runs']} ok, {m['failed']} failed)")
        for name, value in block["ratios"].items():
            say(f"  {name}: {value if value is not None else 'n/a'}")


# ----------------------------------------------------------------------------- docs section


def _fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return f"{value:.2f}×" if value else "n/a"


def render_section(entry: dict[str, Any]) -> str:
    """Markdown for the throughput-bench section of docs/benchmarks.md."""
    m = entry["machine"]
    s = entry["settings"]
    summary = entry["summary"]
    loads = [r["load_before"][0] for r in entry["runs"]] + [r["load_after"][0] for r in entry["runs"]]
    lines = [
        "## Throughput: one ureplicator worker vs MirrorMaker 2 vs the raw client loop",
        "",
        f"Measured {entry['date']} at commit `{entry['code']['commit']}`"
        f"{' (worker/common modified)' if entry['code']['worker_common_modified'] else ''} "
        f"with `{entry['command']}` "
        f"({entry['rounds_done']} round{'s' if entry['rounds_done'] != 1 else ''}, runs alternated "
        f"{' → '.join(s['variants'])} per dataset; medians; total {entry['duration_s'] / 60:.1f} min).",
        "",
        "| machine | |",
        "|---|---|",
        f"| CPU | {m['cpu_model']}, {m['cores']} cores |",
        f"| RAM | {m['ram_bytes'] / 2**30:.1f} GiB |",
        f"| kernel | {m['kernel']} |",
        f"| Python / confluent-kafka / librdkafka | {m['python']} / {m['confluent_kafka']} / {m['librdkafka']} |",
        f"| Java | {m['java']} |",
        f"| Kafka brokers / MirrorMaker 2 | {m['kafka_brokers']} / connect-mirror {m['mirrormaker2']} |",
        f"| load average (1 min) during runs | {min(loads):.2f} – {max(loads):.2f} "
        "(other jobs shared the machine; the brokers, ZooKeeper and the mirroring process share its cores) |",
        "",
        "Everything runs on this one machine: ZooKeeper and the two single-broker KRaft clusters "
        f"(`devtools.stack`, broker heap {s['broker_heap']}) and the mirroring process, so the brokers' CPU "
        "competes with the mirror's. Source topics: 8 partitions, 8-byte keys, text-like values that lz4 "
        "compresses about 2:1. Every variant produces with the worker's settings: "
        + ", ".join(f"`{k}={v}`" for k, v in s["producer"].items()) + ".",
        "",
    ]
    for label, block in summary.items():
        lines += [
            f"### {block['records']:,} records × {block['value_bytes']} B values "
            f"({block['payload_mb']:.0f} MB of keys + values)",
            "",
            "| variant | records/s | MB/s | records/s after the first record | first record after | "
            "CPU s per M records (window / steady) | peak RSS | each run: k records/s after the first record "
            "(machine CPU pressure) |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for variant, v in block["variants"].items():
            each = ", ".join(
                f"{r['steady_records_per_s'] / 1000:.0f}k ({r['extra'].get('cpu_pressure_some_pct') or 0:.0f} %)"
                if r["ok"] else "failed"
                for r in entry["runs"] if r["variant"] == variant and r["dataset"] == label
            )
            lines.append(
                f"| {LABELS[variant]} | {_fmt_int(v['records_per_s'])} | {v['mb_per_s']:.1f} | "
                f"{_fmt_int(v['steady_records_per_s'])} | {v['first_record_s']:.1f} s | "
                f"{v['cpu_s_per_m']:.1f} / {v['cpu_steady_s_per_m']:.1f} | {v['peak_rss_mb']:.0f} MB | {each} |"
            )
        r = block["ratios"]
        lines += [
            "",
            f"ureplicator / MM2: **{_ratio(r.get('ureplicator/mm2 records_per_s'))}** records/s "
            f"({_ratio(r.get('ureplicator/mm2 steady_records_per_s'))} after the first record), "
            f"{_ratio(r.get('ureplicator/mm2 cpu_steady_s_per_m'))} the CPU per record. "
            f"ureplicator / raw loop: **{_ratio(r.get('ureplicator/raw records_per_s'))}** records/s "
            f"({_ratio(r.get('ureplicator/raw steady_records_per_s'))} steady), "
            f"{_ratio(r.get('ureplicator/raw cpu_steady_s_per_m'))} the CPU per record.",
            "",
        ]
    lines += [
        "How each variant is measured:",
        "",
        "- **ureplicator**: a controller and one worker of a fresh pipeline (new consumer group) with the "
        "default config, started and registered before the clock; the clock starts at `POST /topics` "
        "(which also creates the destination topic) and stops when every destination partition's end offset "
        "equals the source's. CPU = worker + controller during that window; peak RSS = the worker's VmHWM.",
        "- **MirrorMaker 2**: `org.apache.kafka.connect.mirror.MirrorMaker` (dedicated mode) from "
        "`jvm.classpath(\"mirrormaker\")`, " + " ".join(s["mirrormaker2_jvm"]) + "; one flow, `tasks.max=1`, "
        "`IdentityReplicationPolicy`, heartbeats, checkpoints and offset-syncs off, topic config/ACL sync off, "
        "internal topics replication factor 1, a fresh source alias (so a fresh Connect group and internal "
        "topics) per run; producer overrides " + ", ".join(f"`{k}={v}`" for k, v in s["mm2_producer"].items())
        + ". The clock starts at the JVM launch, so its start-up (JVM, Connect group, internal topics, "
        "task start) is inside the window; the *after the first record* columns leave it out. CPU = the whole JVM.",
        "- **raw loop**: `bench/rawcopy.py`, one Python process: `consume(1000)` → `produce()` per record "
        "(same partition, key, value, timestamp), `poll(0)` per batch; no header, no delivery callback, no "
        "offset tracking. The clock starts at the process launch.",
        "",
        "CPU is user + system time from `/proc/<pid>/stat` (every thread, librdkafka's included); *window* "
        "divides the whole measured window by all records, *steady* only the part after the first record "
        "arrived by the records that arrived in it. *CPU pressure* is the share of the steady window in which "
        "some task on the machine waited for a core (`/proc/pressure/cpu`): above ~50 % the run measured the "
        "machine's contention more than the mirror. Raw per-run numbers, load averages, per-thread CPU and "
        f"run-queue waits: `{entry['results_file']}`.",
        "",
    ]
    lines += _analysis(entry)
    lines.append("Reproduce: `make bench-throughput` (= `.venv/bin/python -m bench.throughput`), "
                 "`--quick` for a smoke run of 1–3 minutes, `--profile` to py-spy the worker, `--worker-repo DIR` "
                 "to measure a patched checkout, `--render FILE` to re-write this section from a results file.")
    return "\n".join(lines)


def _analysis(entry: dict[str, Any]) -> list[str]:
    lines = ["### Analysis", ""]
    for label, block in entry["summary"].items():
        r = block["ratios"]
        vs_mm2 = r.get("ureplicator/mm2 records_per_s")
        vs_mm2_steady = r.get("ureplicator/mm2 steady_records_per_s")
        vs_raw = r.get("ureplicator/raw steady_records_per_s")
        if vs_mm2 is None:
            continue
        verdict = "faster than" if vs_mm2 >= 1 else "slower than"
        lines.append(
            f"- **{label}**: one worker is {verdict} MirrorMaker 2 end to end ({_ratio(vs_mm2)}); "
            f"after the first record {_ratio(vs_mm2_steady)}; it reaches {_ratio(vs_raw)} of the raw "
            "loop's steady rate."
        )
    threads = _thread_split(entry["runs"])
    if threads:
        lines += ["", "Steady-state CPU split of the worker process (median per run, seconds per million records): "
                  + "; ".join(f"{label}: " + ", ".join(f"{k} {v:.1f}" for k, v in split.items())
                              for label, split in threads.items())
                  + ". `main` is the Python thread running the mirror loop and the delivery callbacks; "
                  "`rdk:*` are librdkafka's threads (fetching, compression, network)."]
    profile = entry.get("profile")
    if profile and profile.get("rows"):
        lines += ["", f"Where the worker's mirror thread spends its time: py-spy `--native` on one extra, untimed "
                  f"{profile['dataset']} run ({profile['samples']:,} samples of the thread running "
                  "`MirrorWorker.run`; C functions are confluent-kafka's and librdkafka's code called from it; "
                  f"raw stacks in `{profile['raw_file']}`):", ""]
        lines += ["| function | inclusive | self |", "|---|---:|---:|"]
        for name, share, own in profile["rows"]:
            shown = "libc.so.6 (unsymbolized: memcpy, locks, ...)" if name == "(libc.so.6)" else name
            lines.append(f"| `{shown}` | {share:.1f} % | {own:.1f} % |")
    notes = entry.get("notes")
    if notes:
        lines += ["", *notes]
    if NOTES.exists():
        lines += ["", NOTES.read_text().strip()]
    lines.append("")
    return lines


def _thread_split(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for label in sorted({r["dataset"] for r in runs}):
        ours = [r for r in runs if r["dataset"] == label and r["variant"] == "ureplicator" and r["ok"]]
        if not ours:
            continue
        groups: dict[str, list[float]] = {}
        for r in ours:
            per_m = r["steady_records"] / 1e6 or 1.0
            folded: Counter[str] = Counter()
            for name, cpu in r["extra"].get("thread_cpu_steady_s", {}).items():
                folded["main" if name == "main" else ("rdk:*" if name.startswith("rdk:") else "other")] += cpu
            for name, cpu in folded.items():
                groups.setdefault(name, []).append(cpu / per_m)
        out[label] = {k: round(_median(v), 2) for k, v in sorted(groups.items())}
    return out


# ----------------------------------------------------------------------------- main


@contextlib.contextmanager
def local_stack(directory: Path | None, heap: str) -> Iterator[dict[str, str]]:
    """Our own stack (always stopped again), or an already running one from ``--stack``."""
    if directory is not None:
        say(f"using the running stack in {directory}")
        yield json.loads((directory / stack.STACK_FILE).read_text())
        return
    root = jvm.CACHE_DIR / "bench-throughput" / "stack"
    stack.KAFKA_HEAP = heap
    say(f"starting a local stack in {root} (broker heap {heap})")
    try:
        services = stack.up(root, timeout_s=180)
        yield services
    finally:
        say("stopping the local stack")
        stack.down(root)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round, 500k x 100 B + 100k x 1 KB")
    parser.add_argument("--records-100b", type=int, default=None, help="records of 100 B (default 2,000,000)")
    parser.add_argument("--records-1kb", type=int, default=None, help="records of 1 KB (default 400,000)")
    parser.add_argument("--rounds", type=int, default=None, help="A B C rounds per dataset (default 3)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated subset of " + ",".join(VARIANTS))
    parser.add_argument("--datasets", default="100B,1KB", help="comma-separated subset of 100B,1KB")
    parser.add_argument("--profile", action="store_true", help="py-spy the worker in one extra untimed run")
    parser.add_argument("--budget-min", type=float, default=None,
                        help="start no round that would end after this many minutes (default 20, quick 4)")
    parser.add_argument("--run-timeout", type=float, default=None, help="seconds per run before it counts as failed")
    parser.add_argument("--broker-heap", default="1g", help="heap of each local broker (default 1g)")
    parser.add_argument("--worker-repo", type=Path, default=REPO,
                        help="run controller and worker from this checkout (A/B-test a worker patch)")
    parser.add_argument("--stack", type=Path, default=None, help="use a running `ureplicator stack up --dir D`")
    parser.add_argument("--no-write", action="store_true", help="print only; no JSON, no docs section")
    parser.add_argument("--render", type=Path, default=None, metavar="RESULTS_JSON",
                        help="only re-write the docs section from the last full run in RESULTS_JSON")
    args = parser.parse_args(argv)
    args.records_100b = args.records_100b or (500_000 if args.quick else 2_000_000)
    args.records_1kb = args.records_1kb or (100_000 if args.quick else 400_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.budget_min = args.budget_min or (4.0 if args.quick else 20.0)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(sorted(unknown))}")
    return args


def code_version(repo: Path) -> dict[str, Any]:
    """The commit the worker ran from and a digest of its Python sources (to notice edits mid-run)."""
    digest = hashlib.sha256()
    for path in sorted([*repo.glob("worker/*.py"), *repo.glob("common/*.py")]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "worker", "common"],
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except OSError:
        commit, dirty = "", ""
    return {"commit": commit or "unknown", "worker_common_modified": bool(dirty), "sources_sha256": digest.hexdigest()}


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (and SIGINT, also when the shell started us in the background with it
    # ignored) unwinds like Ctrl-C, so every process and the stack are stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    if args.render is not None:
        loaded = json.loads(args.render.read_text())
        entries = [e for e in (loaded if isinstance(loaded, list) else [loaded]) if not e.get("quick")]
        if not entries:
            say(f"no full run in {args.render}")
            return 2
        replace_section(DOC, START, END, render_section(entries[-1]))
        say(f"section in {DOC.relative_to(REPO)} re-rendered from {args.render}")
        return 0
    wall = time.monotonic()
    now = datetime.now(timezone.utc)
    stamp = now.strftime("%H%M%S")
    everything = {"100B": Dataset("100B", 100, args.records_100b), "1KB": Dataset("1KB", 1024, args.records_1kb)}
    datasets = [everything[d.strip()] for d in args.datasets.split(",") if d.strip()]
    timeout = args.run_timeout or max(120.0, max(d.records for d in datasets) / 5_000)
    workdir = RESULTS_DIR / "tmp" / f"throughput-{now.strftime('%Y%m%d-%H%M%S')}"
    workdir.mkdir(parents=True, exist_ok=True)
    say("datasets: " + ", ".join(f"{d.records:,} x {d.value_bytes} B" for d in datasets)
        + f"; {args.rounds} round(s) of {' '.join(args.variants)}; logs in {workdir}")
    say(f"load average now: {load_average()}")
    try:
        jvm.classpath("mirrormaker")
        jvm.classpath("kafka")
    except jvm.JvmError as exc:
        say(str(exc))
        return 2
    machine = machine_info()
    code_before = code_version(args.worker_repo.resolve())
    notes: list[str] = []
    profile: dict[str, Any] | None = None
    rounds_done = 0
    with local_stack(args.stack, args.broker_heap) as services:
        bench = Bench(services, workdir, stamp, timeout, repo=args.worker_repo.resolve())
        bench.destination = Offsets(services["destination"])
        try:
            for ds in datasets:
                preload(services, ds)
            warm_group_coordinator(services["source"], datasets[0].topic)
            rounds_started = time.monotonic()
            for rnd in range(1, args.rounds + 1):
                spent = (time.monotonic() - wall) / 60
                per_round = (time.monotonic() - rounds_started) / 60 / max(rounds_done, 1)
                if rnd > 1 and spent + per_round > args.budget_min:
                    notes.append(f"Stopped after {rounds_done} of {args.rounds} rounds: another round "
                                 f"(~{per_round:.1f} min) would have passed the {args.budget_min:.0f}-minute budget.")
                    say(notes[-1])
                    break
                for ds in datasets:
                    for variant in args.variants:
                        say(f"round {rnd}/{args.rounds}: {variant} {ds.label} ({ds.records:,} records) "
                            f"[{(time.monotonic() - wall) / 60:.1f} min in, load {load_average()[0]}]")
                        try:
                            run = RUNNERS[variant](bench, ds, rnd)
                        except (BenchError, UReplicatorError, TimeoutError) as exc:
                            run = Run(variant, ds.label, rnd, bench.counter, ds.records, ds.payload_bytes,
                                      error=str(exc))
                            say(f"  FAILED: {exc}")
                        bench.runs.append(run)
                        if run.ok:
                            say(f"  {variant} {ds.label}: {run.records_per_s:,.0f} rec/s "
                                f"({run.mb_per_s:.1f} MB/s) in {run.elapsed_s:.1f}s, first record after "
                                f"{run.first_record_s:.1f}s, steady {run.steady_records_per_s:,.0f} rec/s, "
                                f"CPU {run.cpu_s:.1f}s ({run.cpu_s_per_m:.1f} s/M), peak RSS "
                                f"{run.peak_rss_bytes / 2**20:.0f} MB; {_busiest(run)}")
                        time.sleep(2)  # let the brokers finish deleting the last run's topics
                rounds_done = rnd
            if args.profile and "ureplicator" in args.variants:
                ds = datasets[0]
                out = workdir / f"profile-{ds.label}.txt"
                say(f"profiling run: ureplicator {ds.label} (not counted in the results)")
                try:
                    prun = run_ureplicator(bench, ds, 0, profile_to=out)
                    if out.exists():
                        profile = {"dataset": ds.label, "records_per_s_while_profiled": round(prun.records_per_s),
                                   "raw_file": str(out.relative_to(REPO)), **summarize_profile(out)}
                        keep = RESULTS_DIR / f"throughput-profile-{now.strftime('%Y-%m-%d')}-{ds.label}.txt"
                        shutil.copyfile(out, keep)
                        profile["raw_file"] = str(keep.relative_to(REPO))
                        top = ", ".join(f"{name} {share}%" for name, share, _ in profile["rows"][:6])
                        say(f"profile: {profile['samples']:,} samples of the mirror thread; {top}")
                except Exception as exc:  # optional extra: never lose the measured rounds over it
                    say(f"  profiling run failed: {exc!r}")
        finally:
            bench.destination.close()
    code = code_version(args.worker_repo.resolve())
    if code["sources_sha256"] != code_before["sources_sha256"]:
        notes.append("The worker/common sources changed while this benchmark ran (commit "
                     f"{code_before['commit']} -> {code['commit']}); runs may mix both versions.")
        say(notes[-1])
    summary = summarize(bench.runs, datasets)
    print_summary(summary)
    entry = {
        "date": now.isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.throughput", *(argv if argv is not None else sys.argv[1:])]),
        "quick": args.quick,
        "duration_s": round(time.monotonic() - wall, 1),
        "machine": machine,
        "code": code_before,  # what the runs started with; code_at_end when it changed meanwhile
        **({"code_at_end": code} if code["sources_sha256"] != code_before["sources_sha256"] else {}),
        "rounds_done": rounds_done,
        "settings": {
            "variants": args.variants,
            "partitions": PARTITIONS,
            "broker_heap": args.broker_heap,
            "producer": {k: v for k, v in PRODUCER_SETTINGS.items() if not k.startswith("queue.")},
            "consumer": CONSUMER_SETTINGS,
            "mm2_producer": mm2.producer_overrides(),
            "mirrormaker2_jvm": [*mm2.HEAP, "G1 (kafka-run-class.sh flags)"],
            "run_timeout_s": timeout,
            "worker_repo": str(args.worker_repo.resolve()),
        },
        "summary": summary,
        "runs": [r.to_json() for r in bench.runs],
        "profile": profile,
        "notes": notes,
    }
    results = RESULTS_DIR / f"throughput-{now.strftime('%Y-%m-%d')}.json"
    entry["results_file"] = str(results.relative_to(REPO))
    (workdir / "result.json").write_text(json.dumps(entry, indent=2) + "\n")
    (workdir / "section.md").write_text(render_section(entry) + "\n")
    if args.no_write:
        say(f"--no-write: result and docs section left in {workdir.relative_to(REPO)}")
    elif args.quick:
        # A smoke run's numbers are not worth publishing over a full run's.
        append_json(results, entry)
        say(f"results appended to {results.relative_to(REPO)} (quick: docs section left alone; "
            f"it is in {workdir.relative_to(REPO)}/section.md)")
    else:
        append_json(results, entry)
        replace_section(DOC, START, END, render_section(entry))
        say(f"results appended to {results.relative_to(REPO)}; section updated in {DOC.relative_to(REPO)}")
    say(f"done in {(time.monotonic() - wall) / 60:.1f} min")
    return 0 if all(r.ok for r in bench.runs) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        say("interrupted; the processes and the stack it started are stopped")
        sys.exit(130)
