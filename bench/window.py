"""The mirror under measurement (throughput and latency): its processes, their CPU per thread, the steady window.

A :class:`Mirror` is a started replicator (ureplicator's controller and workers, or one MirrorMaker 2 or raw
process); a window's rates and CPU come from its two edge samples only (:func:`measure`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from bench import mm2
from bench.common import REPO, proc_sample
from bench.harness import BenchError, CheckoutProcesses, Pipeline
from devtools.harness import Proc, Processes, wait_for

Threads = dict[tuple[int, int], tuple[str, float, float]]  # (pid, tid) -> (name, CPU s, run-queue wait s)


@dataclass
class Mirror:
    """A started replicator: every process (CPU, liveness), the ones carrying records (``loop``), how to stop it."""

    procs: list[Proc]
    loop: list[Proc]  # ureplicator's workers; MirrorMaker 2's or the raw pair's one process
    stop: Callable[[], None]
    log: Path | None = None  # MirrorMaker 2's log: it keeps running after refusing its connector config
    pipeline: Pipeline | None = None
    _read: int = field(default=0, repr=False)

    def problem(self) -> str | None:
        """The first process that exited (status, last log lines) or MirrorMaker 2's refusal; None while all is well."""
        for proc in self.procs:
            if not proc.alive():
                return f"{proc.name} exited with status {proc.popen.returncode}; last log lines:\n{proc.tail(15)}"
        if self.log is None or not self.log.exists():
            return None
        with open(self.log, "rb") as handle:
            handle.seek(self._read)
            chunk = handle.read()
        cut = chunk.rfind(b"\n") + 1  # whole lines only: the rest is read next time
        self._read += cut
        refused = [line for line in chunk[:cut].decode(errors="replace").splitlines()
                   if "Failed to configure MirrorSourceConnector" in line]
        return f"MirrorMaker 2 refused its config: {refused[0].strip()} (see {self.log})" if refused else None

    def cpu_s(self) -> float:
        """User + system seconds of every process (exited threads included); raises when one is gone."""
        samples = [proc_sample(proc.pid) for proc in self.procs]
        if problem := self.problem() or ("a mirroring process vanished" if None in samples else None):
            raise BenchError(problem)
        return sum(s.cpu_s for s in samples if s is not None)

    def threads(self) -> Threads:
        return threads([proc.pid for proc in self.procs])


def start_ureplicator(services: dict[str, str], folder: Path, name: str, overrides: dict[str, dict[str, Any]],
                      workers: int = 1, code: Path = REPO, python: str = sys.executable) -> Mirror:
    """A controller (leading) and ``workers`` registered, idle workers of a fresh pipeline run from ``code``."""
    folder.mkdir(parents=True, exist_ok=True)
    processes = CheckoutProcesses(folder, code, python)
    pipeline = Pipeline(services, processes, name, overrides)

    def stop() -> None:  # workers first (they commit), then the controller
        pipeline.stop_all()
        processes.stop_all()

    try:
        pipeline.start_controller("controller")
        wait_for(lambda: pipeline.leader() is not None, 60, "the controller to lead", 0.2)
        for i in range(workers):
            pipeline.start_worker(f"bench-worker-{i}", timeout_s=90)
    except BaseException:
        stop()
        raise
    return Mirror([*pipeline.controllers.values(), *pipeline.workers.values()], list(pipeline.workers.values()),
                  stop, pipeline=pipeline)


def start_process(folder: Path, name: str, cmd: list[str], cwd: Path = REPO, log: Path | None = None,
                  stop_s: float = 20) -> Mirror:
    """A replicator that is one process (MirrorMaker 2 with its ``log``, the raw pair)."""
    folder.mkdir(parents=True, exist_ok=True)
    processes = Processes(folder)
    proc = processes.spawn(name, cmd, cwd)
    return Mirror([proc], [proc], lambda: processes.stop_all(stop_s), log)


def start_mirrormaker2(folder: Path, props: dict[str, Any]) -> Mirror:
    return start_process(folder, "mirrormaker2", mm2.launch(folder, props), folder, folder / "mm2.log")


# ----------------------------------------------------------------------------- threads


def threads(pids: list[int]) -> Threads:
    """Every thread of ``pids``: name, CPU seconds (psutil) and run-queue wait (``schedstat``, which psutil lacks)."""
    out: Threads = {}
    for pid in pids:
        try:
            listed = psutil.Process(pid).threads()
        except psutil.Error:
            continue
        for thread in listed:
            task = Path(f"/proc/{pid}/task/{thread.id}")
            try:  # psutil has neither a thread's name nor its wait for a CPU
                name = (task / "comm").read_text().strip()
                wait_ns = int((task / "schedstat").read_text().split()[1])
            except (OSError, ValueError, IndexError):
                continue
            out[(pid, thread.id)] = (name, thread.user_time + thread.system_time, wait_ns / 1e9)
    return out


def is_compiler_thread(name: str) -> bool:
    """Linux truncates thread names to 15 characters: "C2 CompilerThread0" is "C2 CompilerThre"."""
    return bool(re.match(r"C[\d#] CompilerThre", name))  # raw or digit-folded (thread_group)


def thread_group(name: str, main: bool) -> str:
    """Fold per-instance digits away ("rdk:broker3" -> "rdk:broker#"); the process's first thread is "main"."""
    return "main" if main else re.sub(r"\d+", "#", name)


def thread_cpu_between(start: Threads, end: Threads) -> dict[str, float]:
    """CPU seconds per thread group between two snapshots (threads born in between count from 0)."""
    out: dict[str, float] = {}
    for (pid, tid), (name, cpu, _) in end.items():
        group = thread_group(name, pid == tid)
        out[group] = out.get(group, 0.0) + max(cpu - start.get((pid, tid), (name, 0.0, 0.0))[1], 0.0)
    return out


def compiler_cpu(groups: dict[str, float]) -> float:
    return sum(cpu for name, cpu in groups.items() if is_compiler_thread(name))


# ----------------------------------------------------------------------------- the window


class Point(NamedTuple):
    """One sample at a window edge: time, destination records, CPU of the variant's processes."""

    t: float
    records: int
    cpu_s: float


def measure(opened: Point, closed: Point, compiler_s: float) -> dict[str, float]:
    """The window's figures under the names a throughput run records them: length, records, rate, CPU
    (of which the JIT compiler threads'), CPU per million records with and without them."""
    seconds, records = closed.t - opened.t, closed.records - opened.records
    if seconds <= 0:
        raise ValueError(f"the window closed {seconds:.3f}s after it opened")
    if records <= 0:
        raise ValueError(f"no records arrived in the {seconds:.1f}s window")
    cpu = max(closed.cpu_s - opened.cpu_s, 0.0)
    compiler_s = min(max(compiler_s, 0.0), cpu)  # thread samples are up to a second stale
    return {"window_s": round(seconds, 3), "window_records": records, "records_per_s": round(records / seconds, 1),
            "cpu_s": round(cpu, 3), "compiler_cpu_s": round(compiler_s, 3),
            "cpu_s_per_m": round(cpu / records * 1e6, 3),
            "cpu_s_per_m_without_compiler": round((cpu - compiler_s) / records * 1e6, 3)}


def rate_spread(series: list[tuple[float, int]], parts: int = 3) -> list[float]:
    """Records/s in ``parts`` equal slices of the window (from (time, records) samples): is it steady?"""
    if len(series) < 2 or parts < 1 or series[-1][0] <= series[0][0]:
        return []
    t0, t1 = series[0][0], series[-1][0]
    # Each slice's edges: the last sample at or before its time (the first sample if none is).
    cuts = [next((x for x in reversed(series) if x[0] <= t0 + (t1 - t0) * i / parts), series[0])
            for i in range(parts + 1)]
    return [(b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else 0.0 for a, b in zip(cuts, cuts[1:], strict=False)]
