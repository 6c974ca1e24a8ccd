"""The steady-state measuring window of the throughput benchmark: when it opens and closes, and its CPU arithmetic.

Pure logic: the window opens ``warmup_s`` after the first destination record and closes ``steady_s`` later;
rates and CPU come from the two edge samples only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Threads = dict[tuple[int, int], tuple[str, float]]  # (pid, tid) -> (group name, CPU seconds)


def is_compiler_thread(name: str) -> bool:
    """Linux truncates thread names to 15 characters: "C2 CompilerThread0" is "C2 CompilerThre"."""
    return bool(re.match(r"C[\d#] CompilerThre", name))  # raw or digit-folded (thread_group)


def thread_group(name: str, main: bool) -> str:
    """Fold per-instance digits away ("rdk:broker3" -> "rdk:broker#"); the process's first thread is "main"."""
    return "main" if main else re.sub(r"\d+", "#", name)


class ThreadLedger(dict[tuple[int, int], tuple[str, float]]):
    """CPU seconds per thread as last seen, so threads that exit mid-window (HotSpot's compilers) keep their share."""

    def snapshot(self) -> Threads:
        return dict(self)


def thread_cpu_between(start: Threads, end: Threads) -> dict[str, float]:
    """CPU seconds per thread group between two ledger snapshots (threads born in between count from 0)."""
    out: dict[str, float] = {}
    for key, (name, cpu) in end.items():
        out[name] = out.get(name, 0.0) + max(cpu - start.get(key, (name, 0.0))[1], 0.0)
    return out


def compiler_cpu(groups: dict[str, float]) -> float:
    return sum(cpu for name, cpu in groups.items() if is_compiler_thread(name))


@dataclass(frozen=True)
class Plan:
    """When the window opens (after the first destination record) and closes (after it opened)."""

    warmup_s: float
    steady_s: float

    def __post_init__(self) -> None:
        if self.warmup_s < 0 or self.steady_s <= 0:
            raise ValueError(f"warm-up must be >= 0 and steady > 0 seconds, got {self.warmup_s}, {self.steady_s}")

    def opens_at(self, first_record_at: float) -> float:
        return first_record_at + self.warmup_s

    def closes_at(self, opened_at: float) -> float:
        """``steady_s`` after the sample that opened the window (polls land late, never early)."""
        return opened_at + self.steady_s


@dataclass(frozen=True)
class Point:
    """One sample at a window edge: time, destination records, CPU of the variant's processes."""

    t: float
    records: int
    cpu_s: float


@dataclass(frozen=True)
class Measured:
    """What one window measured."""

    seconds: float
    records: int
    records_per_s: float
    cpu_s: float
    compiler_cpu_s: float
    cpu_s_per_m: float
    cpu_s_per_m_without_compiler: float

    @property
    def compiler_share(self) -> float:
        return self.compiler_cpu_s / self.cpu_s if self.cpu_s > 0 else 0.0


def measure(opened: Point, closed: Point, compiler_s: float) -> Measured:
    """Rate and CPU per million records between the two edge samples."""
    seconds, records = closed.t - opened.t, closed.records - opened.records
    if seconds <= 0:
        raise ValueError(f"the window closed {seconds:.3f}s after it opened")
    if records <= 0:
        raise ValueError(f"no records arrived in the {seconds:.1f}s window")
    cpu = max(closed.cpu_s - opened.cpu_s, 0.0)
    compiler_s = min(max(compiler_s, 0.0), cpu)
    per_m = records / 1e6
    return Measured(seconds, records, records / seconds, cpu, compiler_s, cpu / per_m, (cpu - compiler_s) / per_m)


def rate_spread(series: list[tuple[float, int]], parts: int = 3) -> list[float]:
    """Records/s in ``parts`` equal slices of the window (from (time, records) samples): is it steady?"""
    if len(series) < 2 or parts < 1 or series[-1][0] <= series[0][0]:
        return []
    t0, t1 = series[0][0], series[-1][0]

    def at(t: float) -> tuple[float, int]:  # the last sample at or before t (the first sample if none is)
        return next((s for s in reversed(series) if s[0] <= t), series[0])

    out = []
    for i in range(parts):
        a, b = at(t0 + (t1 - t0) * i / parts), at(t0 + (t1 - t0) * (i + 1) / parts)
        out.append((b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else 0.0)
    return out
