"""Measure steady-state mirroring throughput and CPU per record: ureplicator vs MirrorMaker 2 vs a raw client pair.

    .venv/bin/python -m bench.throughput           # 100 B + 1 KB, 3 variants, scaling 1/2/4; 40 s warm-up, 60 s window
    .venv/bin/python -m bench.throughput --quick   # smoke run: small backlogs, 2 s warm-up, 4 s window, scaling 1/2
    .venv/bin/python -m bench.throughput --exactly-once   # ours at-least-once and exactly-once vs MM2 exactly-once
    .venv/bin/python -m bench.throughput --render bench/results/throughput-<date>.json   # only the docs section

The method (backlog, window, CPU, exact check, variants) is in docs/benchmarks.md, under the throughput-bench section.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import random
import shutil
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from bench import common, mm2, window
from bench.harness import BenchError
from bench.recording import BENCH_ERRORS, rendered, run_and_record
from bench.recording import parser as cli_parser
from bench.render import by_name, machine, table
from bench.window import Mirror, Point
from devtools import harness, jvm
from devtools.harness import Offsets, say

SCHEMA = 2  # results entries of the steady-window method; schema 1 entries are migrated by upgraded()
PARTITIONS = 16
KEY_BYTES = 8
VARIANTS: tuple[str, ...] = ("ureplicator", "mirrormaker2", "raw")
SCALED: tuple[str, ...] = ("ureplicator", "mirrormaker2")
# ``--exactly-once``: ours with 1 s transactions and MirrorMaker 2 with KIP-618's support, beside our at-least-once.
EOS_VARIANTS: tuple[str, ...] = ("ureplicator", "ureplicator-eos", "mirrormaker2-eos")
ALL_VARIANTS: tuple[str, ...] = (*VARIANTS, "ureplicator-eos", "mirrormaker2-eos")
TRANSACTION_INTERVAL_MS = 1000
POLL_S, THREADS_EVERY_S, PROGRESS_S = 0.5, 1.0, 5.0
SETTLE_S = 3.0  # after the destination stopped moving: late duplicates would show by then
PRELOAD_PROCESSES = 2  # a divisor of PARTITIONS: each preload process owns whole partitions


def label(variant: str, scale: int) -> str:
    mode, plural = (", exactly-once" if variant.endswith("-eos") else ""), ("s" if scale != 1 else "")
    if variant.startswith("ureplicator"):
        return f"ureplicator ({scale} worker{plural}{mode})"
    if variant.startswith("mirrormaker2"):
        return f"MirrorMaker 2 ({scale} task{plural}{mode})"
    return "raw client pair"


class BacklogTooShort(BenchError):
    """The variant drained the backlog before its window closed; ``rate`` is what it reached (records/s)."""

    def __init__(self, message: str, rate: float) -> None:
        super().__init__(message)
        self.rate = rate


@dataclass
class Dataset:
    label: str
    value_bytes: int
    records: int

    @property
    def topic(self) -> str:
        return f"bench.v{self.value_bytes}.p{PARTITIONS}"

    @property
    def record_bytes(self) -> int:
        return KEY_BYTES + self.value_bytes

    def targets(self) -> list[int]:
        """Records per partition (round-robin preload)."""
        return [self.records // PARTITIONS + (1 if p < self.records % PARTITIONS else 0) for p in range(PARTITIONS)]


@dataclass
class Run:
    variant: str
    scale: int  # worker processes (ureplicator) or tasks.max (MirrorMaker 2); 1 for raw
    dataset: str
    round: int
    run_no: int
    records: int  # backlog in the source topic
    ok: bool = False
    error: str | None = None
    first_record_s: float = 0.0  # launch (MM2, raw) or POST /topics (ureplicator) -> first destination record
    window_s: float = 0.0
    window_records: int = 0
    records_per_s: float = 0.0
    mb_per_s: float = 0.0  # keys + values
    cpu_s: float = 0.0
    compiler_cpu_s: float = 0.0
    cpu_s_per_m: float = 0.0
    cpu_s_per_m_without_compiler: float = 0.0
    drained_s: float = 0.0  # kept in the results format; the "stop" end never drains
    count_diff: dict[str, int] = field(default_factory=dict)  # partition -> destination - source (exact: empty)
    peak_rss_bytes: int = 0  # sum of the mirroring processes' VmHWM (controller excluded)
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_window: tuple[float, float, float] = (0.0, 0.0, 0.0)  # when the window closed
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Bench:
    """Everything one invocation shares between runs."""

    services: dict[str, str]
    workdir: Path
    stamp: str
    warmup_s: float  # from each variant's first destination record to its window
    steady_s: float  # the window
    drain_timeout_s: float
    repo: Path = common.REPO  # checkout the controller and worker run from (--worker-repo)
    runs: list[Run] = field(default_factory=list)
    counter: int = 0
    destination: Offsets = field(init=False)

    def __post_init__(self) -> None:
        self.destination = Offsets(self.services["destination"])


# ----------------------------------------------------------------------------- measuring


def machine_busy() -> tuple[float, float, int | None]:
    """(busy, total) CPU seconds of all cores since boot, and the microseconds some task waited for a CPU
    (``/proc/pressure/cpu``, which psutil does not read; None without PSI)."""
    times = psutil.cpu_times()
    try:
        line = next(x for x in Path("/proc/pressure/cpu").read_text().splitlines() if x.startswith("some "))
        pressure: int | None = int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, StopIteration):
        pressure = None
    return sum(times) - times.idle - getattr(times, "iowait", 0.0), sum(times), pressure


def observe(bench: Bench, run: Run, name: str, topic: str, ds: Dataset, mirror: Mirror, started: float,
            transactional: bool = False) -> None:
    """Measure the window, then stop the mirror (gracefully) and check the destination exactly; fill ``run``.

    ``started`` is when the mirror got its work. ``transactional``: markers take offsets but are no records,
    so the end check reads ``read_committed`` and every rate is scaled by the records per offset it counted.
    """
    targets, timeout = ds.targets(), max(bench.drain_timeout_s, ds.records / 10_000)
    ledger: window.Threads = {}  # threads as last seen: those that exit mid-window (HotSpot's compilers) still count
    edges: list[tuple[Point, window.Threads, tuple[float, float, int | None]]] = []  # opened, closed
    series: list[tuple[float, int]] = []
    first_at: float | None = None
    last_threads, last_print, last_n = 0.0, started, 0
    while True:
        ends = bench.destination.end(topic, PARTITIONS) or []
        now, n = time.monotonic(), sum(ends)
        if n > 0 and first_at is None:
            first_at = now
            run.first_record_s = round(now - started, 3)
        if now - last_threads >= THREADS_EVERY_S:
            ledger.update(mirror.threads())
            last_threads = now
        if ends and all(e >= t for e, t in zip(ends, targets, strict=True)):  # idle time would lower the rate
            since, base = (edges[0][0].t, edges[0][0].records) if edges else (first_at or started, 0)
            raise BacklogTooShort(f"{name}: the {ds.records:,}-record backlog was drained " + (
                f"{now - since:.1f}s into the {bench.steady_s:.0f}s window" if edges else "during the warm-up"),
                (n - base) / max(now - since, 1e-3))
        if first_at is not None and now >= (edges[0][0].t + bench.steady_s if edges else first_at + bench.warmup_s):
            ledger.update(mirror.threads())
            edges.append((Point(now, n, mirror.cpu_s()), dict(ledger), machine_busy()))
        if edges:
            series.append((round(now - edges[0][0].t, 3), n))
        if len(edges) == 2:
            break
        if problem := mirror.problem():
            raise BenchError(f"{name}: {problem} after {now - started:.1f}s at {n:,}/{ds.records:,} records")
        if now - started > timeout:
            raise BenchError(f"{name}: timed out after {timeout:.0f}s at {n:,}/{ds.records:,} records")
        if now - last_print >= PROGRESS_S:
            say(f"  {name}: {n:>11,}/{ds.records:,} ({100 * n / ds.records:5.1f}%) "
                f"{(n - last_n) / (now - last_print) / 1000:7.1f}k rec/s [{'window' if edges else 'warm-up'}]")
            last_print, last_n = now, n
        time.sleep(POLL_S)
    (opened, start_threads, busy0), (closed, end_threads, busy1) = edges
    run.load_window = common.load_average()
    # The workers' (not the controller's) or the one process's.
    run.peak_rss_bytes = sum(p.hwm_bytes for p in (common.proc_sample(x.pid) for x in mirror.loop) if p)
    say(f"  {name}: window closed: {(closed.records - opened.records) / (closed.t - opened.t) / 1000:.1f}k rec/s; "
        "stopping it")
    # Stop gracefully, wait until nothing more arrives, then check every record by identity.
    stopping = time.monotonic()
    mirror.stop()
    final = settled_ends(bench.destination, topic)
    run.extra["stop_s"] = round(time.monotonic() - stopping, 1)
    checked = time.monotonic()
    bad, records = verify(bench.services["destination"], topic, final,
                          "read_committed" if transactional else "read_uncommitted")
    factor = 1.0
    if transactional:  # offsets -> records: markers are not copied records
        factor = run.extra["records_per_offset"] = round(records / sum(final), 6) if sum(final) else 1.0
    run.count_diff = {str(p): -n for p, n in bad.items()}
    run.extra["end"] = {"mode": "stop", "records_checked": records, "ends": final,
                        "check_s": round(time.monotonic() - checked, 1)}
    say(f"  {name}: stopped in {run.extra['stop_s']}s; {records:,} destination records checked by identity "
        f"in {run.extra['end']['check_s']}s: " + ("exact" if not bad else f"MISMATCHES {bad}"))
    groups = window.thread_cpu_between(start_threads, end_threads)
    scaled = (edge._replace(records=round(edge.records * factor)) for edge in (opened, closed))
    for key, value in window.measure(*scaled, window.compiler_cpu(groups)).items():
        setattr(run, key, value)
    run.mb_per_s = round(run.records_per_s * ds.record_bytes / 1e6, 2)
    run.extra["thread_cpu_window_s"] = {k: round(v, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])
                                        if v >= 0.05}
    run.extra["rate_thirds"] = [round(r) for r in window.rate_spread(series, 3)]
    if busy0[2] is not None and busy1[2] is not None:
        run.extra["cpu_pressure_some_pct"] = round((busy1[2] - busy0[2]) / 1e4 / run.window_s, 1)
    busy, total = busy1[0] - busy0[0], busy1[1] - busy0[1]
    run.extra["machine_busy_pct"] = round(100 * busy / total, 1) if total else None
    run.ok = not run.count_diff
    if run.count_diff:
        run.error = f"count check failed: destination - source per partition {run.count_diff}"


def preload_key(index: int) -> bytes:
    """The key of the preload's record number ``index`` (8 ASCII digits)."""
    return b"%08d" % (index % 100_000_000)


def source_index(offset: int, partition: int) -> int:
    """Which preload record sits at ``offset`` of ``partition`` (round robin, in order per partition)."""
    return offset * PARTITIONS + partition


def settled_ends(offsets: Offsets, topic: str, quiet_s: float = SETTLE_S, timeout_s: float = 120) -> list[int]:
    """The destination's end offsets once they stopped moving for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    last, since = offsets.end(topic, PARTITIONS), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = offsets.end(topic, PARTITIONS)
        if now != last or now is None:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return now
    raise BenchError(f"the destination's end offsets of {topic} did not settle within {timeout_s:.0f}s")


def verify(bootstrap: str, topic: str, ends: list[int], isolation: str = "read_uncommitted",
           timeout_s: float = 900) -> tuple[dict[int, int], int]:
    """Read every destination record below ``ends``: per partition, how many are not the source's record at
    their position (by key), and how many records were read. Empty: each partition is an exact, in-order
    prefix of its source; ``read_committed`` skips aborted copies and the markers (which take offsets)."""
    consumer = Consumer({**common.CONSUMER_SETTINGS, "bootstrap.servers": bootstrap, "group.id": "bench-verify",
                         "enable.auto.commit": False, "isolation.level": isolation, "log_level": 2})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS) if ends[p] > 0])
    position = [0] * PARTITIONS  # records read so far per partition = the source offset expected next
    left = {p for p in range(PARTITIONS) if ends[p] > 0}
    bad: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while left:
            if time.monotonic() > deadline:
                raise BenchError(f"reading {topic} back took longer than {timeout_s:.0f}s")
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    continue
                p, o = msg.partition(), msg.offset()
                if o < ends[p]:
                    if msg.key() != preload_key(source_index(position[p], p)):
                        bad[p] = bad.get(p, 0) + 1
                    position[p] += 1
                if o >= ends[p] - 1:
                    left.discard(p)
            # A partition whose last offsets are markers has no record at ends - 1: its position says done.
            for p in list(left):
                try:
                    if consumer.position([TopicPartition(topic, p)])[0].offset >= ends[p]:
                        left.discard(p)
                except KafkaException:
                    pass
    finally:
        consumer.close()
    return bad, sum(position)


# ----------------------------------------------------------------------------- variants


def run_variant(bench: Bench, ds: Dataset, variant: str, scale: int, rnd: int) -> Run:
    """One run of ``variant``: start it idle where it can be (ureplicator), give it the backlog, observe it."""
    bench.counter += 1
    run = Run(variant, scale, ds.label, rnd, bench.counter, ds.records)
    folder = bench.workdir / f"run{run.run_no:02d}-{variant}{scale}-{ds.label}"
    exactly_once, services = variant.endswith("-eos"), bench.services
    destination = {"ureplicator": f"{ds.topic}.urep{run.run_no}", "raw": f"{ds.topic}.raw{run.run_no}"}.get(
        variant.removesuffix("-eos"), ds.topic)  # MirrorMaker 2's identity naming keeps the source's name
    alias = f"src{run.run_no}"
    mirror: Mirror | None = None
    try:
        if variant.startswith("ureplicator"):
            # Exactly-once is pipeline-wide: the controller records the mode, the workers must agree.
            mode = {"exactly_once": True, "transaction_interval_ms": TRANSACTION_INTERVAL_MS} if exactly_once else {}
            mirror = window.start_ureplicator(services, folder, f"bench{bench.stamp}r{run.run_no}",
                                              {"worker": mode}, scale, bench.repo, worker_python(bench.repo))
            run.load_before, started = common.load_average(), time.monotonic()
            assert mirror.pipeline is not None
            mirror.pipeline.add_topic(ds.topic, PARTITIONS, destination)
            controller = common.proc_sample(mirror.procs[0].pid)
            run.extra.update({"controller_peak_rss_bytes": controller.hwm_bytes if controller else 0,
                              "pipeline": mirror.pipeline.name})
        elif variant.startswith("mirrormaker2"):
            cleanup_topics(bench, [ds.topic])
            run.load_before, started = common.load_average(), time.monotonic()
            mirror = window.start_mirrormaker2(folder, mm2.properties(
                alias, services["source"], services["destination"], ds.topic, scale, exactly_once))
            run.extra["source_alias"] = alias
        else:
            if scale != 1:
                raise BenchError("the raw client pair runs as one process only")
            harness.create_topic(services["destination"], destination, PARTITIONS)  # auto-create is off
            run.load_before, started = common.load_average(), time.monotonic()
            mirror = window.start_process(folder, "rawcopy", [
                sys.executable, "-m", "bench.rawcopy", "--source", services["source"], "--destination",
                services["destination"], "--topic", ds.topic, "--to", destination, "--partitions", str(PARTITIONS),
                "--records", str(ds.records)], stop_s=10)
        run.extra["destination_topic"] = destination
        observe(bench, run, f"{label(variant, scale)} {ds.label}", destination, ds, mirror, started, exactly_once)
    finally:
        if mirror is not None:
            mirror.stop()
        topics = [destination]
        if variant.startswith("mirrormaker2"):  # and its internal topics
            topics += [t for t in harness.list_topics(services["destination"]) if alias in t.split(".")]
        cleanup_topics(bench, topics)
    return run


def cleanup_topics(bench: Bench, topics: list[str]) -> None:
    """Delete this run's destination topics (frees the disk, keeps runs independent)."""
    try:
        existing = set(harness.list_topics(bench.services["destination"]))
        harness.delete_topics(bench.services["destination"], [t for t in topics if t in existing], timeout_s=120)
    except Exception as exc:  # cleanup must not hide the run's own error
        say(f"  could not delete {', '.join(topics)} on the destination: {exc}")


def worker_python(repo: Path) -> str:
    """The interpreter for controller and worker: the checkout's own venv when it has one."""
    own = repo / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


# ----------------------------------------------------------------------------- preload


def values(size: int, count: int, seed: int) -> list[bytes]:
    """Text-like values (lz4 compresses them about 2:1), so compression does real work."""
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(300)]
    out = []
    for _ in range(count):
        parts: list[bytes] = []
        while sum(len(p) + 1 for p in parts) < size:
            parts.append(rng.choice(words) if rng.random() < 0.6 else b"%x" % rng.getrandbits(32))
        out.append(b" ".join(parts)[:size])
    return out


def warm_group_coordinator(bootstrap: str, topic: str) -> None:
    """Ask for a throwaway group's committed offsets until the source's group coordinator answers: on a fresh
    cluster the first group calls fail for a while, which the first variant would otherwise wait out."""
    def answers() -> bool:
        with contextlib.suppress(KafkaException):
            return bool(harness.committed(bootstrap, "bench-warmup", topic, 1))
        return False

    harness.wait_for(answers, 90, "the source's group coordinator", 0.5)


def preload_part(bootstrap: str, ds: Dataset, part: int, parts: int, start: int) -> None:
    """Produce records ``i >= start`` with ``i % parts == part`` (partition ``i % PARTITIONS``) of the preload."""
    producer = Producer({**common.PRODUCER_SETTINGS, "bootstrap.servers": bootstrap, "linger.ms": 50})
    pool = values(ds.value_bytes, 4096, seed=ds.value_bytes)
    step = max(ds.records // 5, 1)
    for i in range(start + (part - start) % parts, ds.records, parts):
        while True:
            try:
                producer.produce(ds.topic, pool[i & 4095], preload_key(i), i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 < parts:
            producer.poll(0)
        if part == 0 and i % step < parts:
            say(f"  preload {ds.label}: ~{i:,}/{ds.records:,}")
    if producer.flush(300):
        raise SystemExit(f"preload part {part} of {ds.topic} did not finish")


def preload(services: dict[str, str], ds: Dataset, start: int = 0) -> None:
    """Fill ``ds.topic`` with its backlog (reused when an earlier run left exactly that), or append
    records ``start`` .. ``ds.records - 1`` to it (a top-up)."""
    have = Offsets(services["source"]).end(ds.topic, PARTITIONS)
    if start == 0:
        if have == ds.targets():
            say(f"source topic {ds.topic} already holds {ds.records:,} records; reusing it")
            return
        if have is not None:
            harness.delete_topics(services["source"], [ds.topic])
        harness.create_topic(services["source"], ds.topic, PARTITIONS, {"retention.ms": "-1", "retention.bytes": "-1"})
    elif have is None or sum(have) != start:
        raise BenchError(f"cannot top up {ds.topic}: it holds {sum(have or [])} records, expected {start:,}")
    count, started = ds.records - start, time.monotonic()
    say(f"preloading {count:,} records of {ds.value_bytes} B into {ds.topic} "
        f"({count * ds.record_bytes / 1e9:.1f} GB) with {PRELOAD_PROCESSES} producer processes")
    # Processes that exit when done: a Pool's terminate() hung once on an idle worker (it inherits our SIGTERM handler).
    procs = [mp.get_context("fork").Process(target=preload_part, daemon=True,
                                            args=(services["source"], ds, k, PRELOAD_PROCESSES, start))
             for k in range(PRELOAD_PROCESSES)]
    for proc in procs:
        proc.start()
    try:
        for proc in procs:
            proc.join()
    finally:
        for proc in (p for p in procs if p.is_alive()):
            proc.terminate()
    got = Offsets(services["source"]).end(ds.topic, PARTITIONS)
    if any(proc.exitcode != 0 for proc in procs) or got != ds.targets():
        raise BenchError(f"preload of {ds.topic} failed (exit codes {[p.exitcode for p in procs]}, end offsets "
                         f"{got}, expected {ds.targets()})")
    took = time.monotonic() - started
    say(f"preloaded {ds.topic} in {took:.1f}s ({count / took / 1000:.0f}k rec/s); it holds {ds.records:,} records")


def top_up_size(records: int, rate: float, warmup_s: float, steady_s: float) -> int:
    """The backlog after a run drained ``records`` early at ``rate``: enough for 1.5x its warm-up + window."""
    return max(int(rate * (warmup_s + steady_s + 10) * 1.5), int(records * 1.5))


def check_disk(path: Path, ds: Dataset, new_records: int) -> None:
    """Refuse a top-up that could fill the disk: the new source records plus one destination copy + 5 GB."""
    free = shutil.disk_usage(path).free
    need = (new_records - ds.records) * ds.record_bytes + new_records * ds.record_bytes + 5e9
    if need > free:
        raise BenchError(f"a {new_records:,}-record {ds.label} backlog needs up to {need / 1e9:.0f} GB of disk "
                         f"(uncompressed), {free / 1e9:.0f} GB are free")


# ----------------------------------------------------------------------------- summary

RATES = ("records_per_s", "cpu_s_per_m", "cpu_s_per_m_without_compiler")


def _block(runs: list[Run]) -> dict[str, Any]:
    ok = [r for r in runs if r.ok]

    def med(value: Callable[[Run], float], digits: int | None = None) -> float:
        return round(statistics.median([value(r) for r in ok]) if ok else 0.0, digits)

    return {
        "runs": len(ok), "failed": len(runs) - len(ok), "errors": [r.error for r in runs if not r.ok],
        "records_per_s": med(lambda r: r.records_per_s),
        "mb_per_s": med(lambda r: r.mb_per_s, 2),
        "cpu_s_per_m": med(lambda r: r.cpu_s_per_m, 3),
        "cpu_s_per_m_without_compiler": med(lambda r: r.cpu_s_per_m_without_compiler, 3),
        "compiler_share_pct": med(lambda r: 100 * r.compiler_cpu_s / r.cpu_s if r.cpu_s else 0.0, 1),
        "cores_busy": med(lambda r: r.cpu_s / r.window_s if r.window_s else 0.0, 2),
        "first_record_s": med(lambda r: r.first_record_s, 2),
        "drained_s": med(lambda r: r.drained_s, 1),
        "records_checked": med(lambda r: r.extra.get("end", {}).get("records_checked", 0)),
        "peak_rss_mb": med(lambda r: r.peak_rss_bytes / 2**20, 1),
        "records_per_s_each": [round(r.records_per_s) for r in ok],
    }


def _blocks(runs: list[Run], dataset: str, variants: tuple[str, ...], scale: int) -> dict[str, Any]:
    blocks = {v: [r for r in runs if (r.dataset, r.variant, r.scale) == (dataset, v, scale)] for v in variants}
    return {v: _block(mine) for v, mine in blocks.items() if mine}


def _ratios(a: dict[str, Any], b: dict[str, Any], name: str, keys: tuple[str, ...] = RATES) -> dict[str, Any]:
    return {f"{name}{k}": round(a[k] / b[k], 3) if a.get(k) and b.get(k) else None for k in keys}


def summarize(runs: list[Run], datasets: list[Dataset], scales: list[int]) -> dict[str, Any]:
    """Medians per dataset and variant (scale 1), ratios, and the scaling curve on the first dataset."""
    out: dict[str, Any] = {"datasets": {}, "scaling": {}}
    for ds in datasets:
        per = _blocks(runs, ds.label, ALL_VARIANTS, 1)
        u, m, w = per.get("ureplicator", {}), per.get("mirrormaker2", {}), per.get("raw", {})
        ue, me = per.get("ureplicator-eos", {}), per.get("mirrormaker2-eos", {})
        ratios = {**_ratios(u, m, "ureplicator/mm2 "), **_ratios(u, w, "ureplicator/raw ", RATES[:2])}
        if ue or me:
            ratios.update({**_ratios(ue, u, "ureplicator-eos/ureplicator ", RATES[:1]),
                           **_ratios(ue, me, "ureplicator-eos/mm2-eos ")})
        out["datasets"][ds.label] = {"records": ds.records, "value_bytes": ds.value_bytes, "key_bytes": KEY_BYTES,
                                     "variants": per, "ratios": ratios}
    if len(scales) > 1 and datasets:
        points = {str(scale): _blocks(runs, datasets[0].label, SCALED, scale) for scale in scales}
        out["scaling"] = {"dataset": datasets[0].label, "points": {
            n: {**p, "ratios": _ratios(p.get("ureplicator", {}), p.get("mirrormaker2", {}), "")}
            for n, p in points.items()}}
    rates = {k: r for k, b in out["datasets"].items() if (r := b["ratios"]["ureplicator/mm2 records_per_s"])}
    cpus = {k: r for k, b in out["datasets"].items()
            if (r := b["ratios"]["ureplicator/mm2 cpu_s_per_m_without_compiler"])}
    # The least favourable fair reading for ureplicator: lowest rate ratio, highest CPU ratio (MM2 without JIT).
    worst_rate = min(rates, key=lambda k: rates[k]) if rates else None
    worst_cpu = max(cpus, key=lambda k: cpus[k]) if cpus else None
    out["headline"] = None if worst_rate is None else {
        "rate_dataset": worst_rate, "rate_ratio": rates[worst_rate],
        "cpu_dataset": worst_cpu, "cpu_ratio_without_compiler": cpus[worst_cpu] if worst_cpu else None,
        "rate_ratios": rates, "cpu_ratios_without_compiler": cpus}
    return out


def upgraded(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry of the first method (schema 1, 2026-11-21: each variant drained the whole backlog and a *steady*
    part of the drain was measured) in today's shape: the steady part stands for the window."""
    if "datasets" in entry["summary"]:  # schema 1 summaries are keyed by dataset
        return entry
    names = {f.name for f in fields(Run)}
    runs = [Run(**{k: v for k, v in r.items() if k in names} | dict(
        scale=1, window_s=r["extra"].get("steady_s", 0.0), window_records=r["steady_records"],
        records_per_s=r["steady_records_per_s"], cpu_s=r["cpu_steady_s"], cpu_s_per_m=r["cpu_steady_s_per_m"],
        mb_per_s=round(r["steady_records_per_s"] * r["payload_bytes"] / r["records"] / 1e6, 2),
        cpu_s_per_m_without_compiler=r["cpu_steady_s_per_m"], drained_s=r["elapsed_s"], load_window=r["load_after"]))
            for r in entry["runs"]]
    for run in runs:
        run.extra["thread_cpu_window_s"] = run.extra.get("thread_cpu_steady_s", {})
    datasets = [Dataset(k, b["value_bytes"], b["records"]) for k, b in entry["summary"].items()]
    return {**entry, "schema": SCHEMA, "runs": [asdict(r) for r in runs], "load_at_start": runs[0].load_before,
            "summary": summarize(runs, datasets, [1]),
            "settings": {**entry["settings"], "warmup_s": 0.0,
                         "steady_s": statistics.median(r.window_s for r in runs)},
            "notes": [*entry.get("notes", []), "First method (schema 1): every variant drained the whole backlog, "
                      "timed from its launch; records/s and CPU are those of the drain's steady part (no warm-up), "
                      "which later runs found still included MirrorMaker 2's JIT compilation."]}


# ----------------------------------------------------------------------------- docs sections

# A variant's medians as table cells: header -> format over the summary block.
COLUMNS = {"records/s": "{records_per_s:,}", "MB/s": "{mb_per_s:.1f}", "CPU-s per M records": "{cpu_s_per_m:.2f}",
           "… without JIT compiler threads": "{cpu_s_per_m_without_compiler:.2f}",
           "compiler threads' share": "{compiler_share_pct:.0f} %", "cores busy": "{cores_busy:.2f}",
           "peak RSS": "{peak_rss_mb:.0f} MB", "first record after": "{first_record_s:.1f} s",
           "records checked exactly": "{records_checked:,}", "runs ok / failed": "{runs} / {failed}"}
EOS_COLUMNS = ("records/s", "MB/s", "CPU-s per M records", "… without JIT compiler threads", "peak RSS",
               "records checked exactly", "runs ok / failed")
# Ratio tables (ureplicator's median over the other's): header -> key in a dataset's ratios.
RATIOS = {"ureplicator / MM2 records/s": "ureplicator/mm2 records_per_s",
          "ureplicator / MM2 CPU per record": "ureplicator/mm2 cpu_s_per_m",
          "… counting MM2 without its JIT compiler threads": "ureplicator/mm2 cpu_s_per_m_without_compiler",
          "ureplicator / raw pair records/s": "ureplicator/raw records_per_s",
          "ureplicator / raw pair CPU per record": "ureplicator/raw cpu_s_per_m"}
EOS_RATIOS = {"exactly-once / our at-least-once (rate)": "ureplicator-eos/ureplicator records_per_s",
              "ours / MirrorMaker 2, both exactly-once (rate)": "ureplicator-eos/mm2-eos records_per_s",
              "(CPU per record)": "ureplicator-eos/mm2-eos cpu_s_per_m",
              "(CPU without JIT)": "ureplicator-eos/mm2-eos cpu_s_per_m_without_compiler"}
# CPU split: thread group -> the first of these that matches its name.
THREAD_FOLDS = (("main", lambda n: n == "main"), ("rdk:*", lambda n: n.startswith("rdk:")),
                ("JIT", lambda n: "CompilerThre" in n), ("GC", lambda n: n.startswith(("GC Thread", "G1 "))),
                ("Connect task", lambda n: n.startswith("task-thread")),
                ("Kafka client I/O", lambda n: n.startswith("kafka-")), ("other", lambda n: True))


def _ratio(value: float | None) -> str:
    return f"{value:.2f}×" if value else "n/a"


def _dataset_name(block: dict[str, Any]) -> str:
    return {100: "100 B", 1024: "1 KB"}.get(block["value_bytes"], f"{block['value_bytes']} B")


def _each(runs: list[dict[str, Any]], dataset: str, variant: str, scale: int) -> str:
    """Each run's records/s, its window thirds and the machine's busy share."""
    def one(r: dict[str, Any]) -> str:
        thirds = "/".join(f"{x / 1000:.0f}" for x in r["extra"].get("rate_thirds", []))
        busy = r["extra"].get("machine_busy_pct")
        return f"{r['records_per_s'] / 1000:.0f}k ({thirds}k" + (f"; {busy:.0f} %)" if busy is not None else ")")

    return ", ".join(one(r) if r["ok"] else "failed" for r in runs
                     if (r["dataset"], r["variant"], r["scale"]) == (dataset, variant, scale)) or "n/a"


def _variants(summary: dict[str, Any], columns: tuple[str, ...], runs: list[dict[str, Any]] | None) -> list[str]:
    """One row per dataset and variant (a failed one shows its errors, never a row of zeros)."""
    rows = []
    for key, block in summary["datasets"].items():
        for variant, v in block["variants"].items():
            errors = "; ".join((e or "unknown error").splitlines()[0] for e in v["errors"])
            cells = [COLUMNS[c].format(**v) for c in columns] if v["runs"] else [
                f"failed: {errors[:139] + '…' if len(errors) > 140 else errors}".replace("|", "/"),
                *[""] * (len(columns) - 1)]
            rows.append([_dataset_name(block), label(variant, 1), *cells,
                         *([_each(runs, key, variant, 1)] if runs is not None else [])])
    each = ["each run: records/s (window thirds; machine busy)"] if runs is not None else []
    return table(["dataset", "variant", *columns, *each], rows, "ll" + "r" * len(columns))


def _ratios_table(summary: dict[str, Any], ratios: dict[str, str]) -> list[str]:
    return table(["dataset", *ratios], [[_dataset_name(b), *(_ratio(b["ratios"].get(k)) for k in ratios.values())]
                                        for b in summary["datasets"].values()], "l" + "r" * len(ratios))


def _worst(summary: dict[str, Any], key: str, highest: bool = False) -> tuple[str, str, str] | None:
    """The least favourable ratio ``key`` over the datasets (the lowest, or the ``highest``; the first on a tie):
    (ratio, dataset, " (the other datasets' ratios)" or ""); None when no dataset has it."""
    found = {_dataset_name(b): r for b in summary["datasets"].values() if (r := b["ratios"].get(key))}
    if not found:
        return None
    worst = (max if highest else min)(found, key=lambda k: found[k])
    others = "; ".join(f"{_ratio(v)} at {k}" for k, v in found.items() if k != worst)
    return _ratio(found[worst]), worst, f" ({others})" if others else ""


def _headline(summary: dict[str, Any]) -> list[str]:
    """Lowest rate ratio and highest CPU ratio (MirrorMaker 2 counted without its JIT compiler threads)."""
    if not (rate := _worst(summary, "ureplicator/mm2 records_per_s")):
        return []
    text = ("**Headline (the least favourable fair reading): one ureplicator worker runs at {} MirrorMaker 2's "
            "steady-state rate (one task) at {}**{}".format(*rate))
    if cpu := _worst(summary, "ureplicator/mm2 cpu_s_per_m_without_compiler", highest=True):
        text += (", and uses {} its CPU per record at {} counting MirrorMaker 2 without its JIT compiler "
                 "threads{}".format(*cpu))
    return [text + ".", ""]


def _load_note(loads: list[float], before: float, cores: int) -> list[str]:
    """Whose load the runs met (the method below the section says what each case means for the numbers)."""
    peak = max(loads, default=0)
    if before > 0.5 * cores:  # busy before the first run: that load is not ours, so other jobs shared the cores
        return [f"**The machine was oversubscribed during these runs** (1-minute load average {before:.1f} before "
                f"the benchmark and up to {peak:.0f} during it, on {cores} cores: other jobs shared it).", ""]
    if peak > 1.5 * cores:  # quiet before: the load during it is mostly the benchmark's own runnable threads
        return [f"The machine was quiet before the benchmark (1-minute load average {before:.2f}); the load during "
                f"the runs (up to {peak:.0f} on {cores} cores) counts the benchmark's own runnable threads.", ""]
    return []


def _scaling(summary: dict[str, Any], s: dict[str, Any], cores: int, runs: list[dict[str, Any]]) -> list[str]:
    curve = summary["scaling"]
    rows = []
    for scale, point in curve["points"].items():
        u, mm = point.get("ureplicator"), point.get("mirrormaker2")
        rows.append([scale, f"{u['records_per_s']:,}" if u else "n/a", f"{u['cpu_s_per_m']:.2f}" if u else "n/a",
                     f"{mm['records_per_s']:,}" if mm else "n/a",
                     f"{mm['cpu_s_per_m']:.2f} ({mm['cpu_s_per_m_without_compiler']:.2f})" if mm else "n/a",
                     *(_ratio(point["ratios"][k]) for k in ("records_per_s", "cpu_s_per_m_without_compiler")),
                     " / ".join(_each(runs, curve["dataset"], v, int(scale)) for v in SCALED)])
    block = summary["datasets"].get(curve["dataset"])
    return [f"### Scaling: N ureplicator worker processes vs MirrorMaker 2 with `tasks.max` N "
            f"({_dataset_name(block) if block else curve['dataset']}, one {s['partitions']}-partition topic, "
            f"{cores} cores shared with both brokers and ZooKeeper)", "",
            *table(["N", "ureplicator records/s", "CPU-s per M", "MM2 records/s",
                    "CPU-s per M (without JIT compiler threads)", "records/s ratio", "CPU ratio (MM2 without JIT)",
                    "each run: records/s ureplicator / MM2"], rows, "rrrrrrr"), ""]


def _thread_split(runs: list[dict[str, Any]]) -> list[str]:
    """CPU-s per million records of each thread group in the window (median over the runs at scale 1)."""
    split: dict[str, dict[str, list[float]]] = {}
    for r in sorted((r for r in runs if r["ok"] and r["scale"] == 1), key=lambda r: (r["dataset"], r["variant"])):
        folded: Counter[str] = Counter()
        for name, cpu in r["extra"].get("thread_cpu_window_s", {}).items():
            folded[next(group for group, hit in THREAD_FOLDS if hit(name))] += cpu
        for group, cpu in folded.items():
            split.setdefault(f"{label(r['variant'], 1)} {r['dataset']}", {}).setdefault(group, []).append(
                cpu / (r["window_records"] / 1e6 or 1.0))
    if not split:
        return []
    groups = [g for g, _ in THREAD_FOLDS if any(g in s for s in split.values())]
    return ["CPU split in the window (median per run, CPU-s per million records):", "",
            *table(["run", *groups], [[run, *(f"{statistics.median(s[g]):.2f}" if g in s else "" for g in groups)]
                                      for run, s in split.items()], "l" + "r" * len(groups)), ""]


def _section(entry: dict[str, Any], title: str, headline: list[str], body: list[str]) -> str:
    """Title, headline, what was measured how and where, the load the runs met, ``body``, the run's notes."""
    m, s, summary, runs = entry["machine"], entry["settings"], entry["summary"], entry["runs"]
    loads = [x for r in runs for x in (r["load_before"][0], r["load_window"][0]) if x]
    rounds, code = entry["rounds_done"], entry["code"]
    backlogs = ", ".join(f"{b['records']:,} × ({b['key_bytes']} + {b['value_bytes']}) B"
                         for b in summary["datasets"].values())
    lines = [title, "", *headline,
             f"Measured {entry['date']} with `{entry['command']}` on {machine(m)}; worker and controller from "
             f"`{s['worker_repo']}` at commit `{code['commit']}`"
             f"{' (worker/common modified)' if code['worker_common_modified'] else ''}; backlogs {backlogs} in "
             f"{s['partitions']} partitions; {rounds} round{'s' if rounds != 1 else ''}, medians; warm-up "
             f"{s['warmup_s']:.0f} s after the first destination record, then a {s['steady_s']:.0f} s window; total "
             f"{entry['duration_s'] / 60:.1f} min. 1-minute load average at run starts and window ends "
             f"{min(loads, default=0):.2f} – {max(loads, default=0):.2f} (before the benchmark: "
             f"{entry['load_at_start'][0]:.2f}). Per-run numbers: `{entry['results_file']}`.", "",
             *_load_note(loads, entry["load_at_start"][0], m["cores"] or 1), *body]
    for note in entry.get("notes") or []:
        lines += [note, ""]
    return "\n".join(lines).rstrip("\n")


def render_section(entry: dict[str, Any]) -> str:
    """Markdown for the throughput-bench section of docs/benchmarks.md, from one results entry."""
    entry = upgraded(entry)
    m, s, summary, runs = entry["machine"], entry["settings"], entry["summary"], entry["runs"]
    body = [*_variants(summary, tuple(c for c in COLUMNS if c != "runs ok / failed"), runs), "",
            *_ratios_table(summary, RATIOS), ""]
    if (summary.get("scaling") or {}).get("points"):
        body += _scaling(summary, s, m["cores"], runs)
    body += [f"Settings: MirrorMaker 2 {' '.join(s['mirrormaker2_jvm'])}, producer overrides "
             + ", ".join(f"`{k}={v}`" for k, v in s["mm2_producer"].items()) + "; every variant's producer: "
             + ", ".join(f"`{k}={v}`" for k, v in s["producer"].items()) + f"; broker heap {s['broker_heap']}.",
             "", *_thread_split(runs)]
    return _section(entry, "## Throughput: ureplicator vs MirrorMaker 2 vs the raw client pair, steady state",
                    _headline(summary), body)


def render_eos_section(entry: dict[str, Any]) -> str:
    """Markdown for the eos-bench section of docs/benchmarks.md, from one ``--exactly-once`` entry."""
    summary = entry["summary"]
    parts = [text.format(*worst[:2]) for key, text in (
        ("ureplicator-eos/ureplicator records_per_s", "exactly-once runs at {} our own at-least-once rate at {}"),
        ("ureplicator-eos/mm2-eos records_per_s", "{} MirrorMaker 2's exactly-once rate at {}"))
        if (worst := _worst(summary, key))]
    return _section(entry, "## Throughput in exactly-once mode: ureplicator vs MirrorMaker 2 (KIP-618)",
                    [f"**Headline (the least favourable reading over the datasets): {'; '.join(parts)}.**", ""]
                    if parts else [],
                    [f"One worker or task; ours commits a transaction every {TRANSACTION_INTERVAL_MS} ms "
                     "(`worker.transaction_interval_ms`).", "", *_variants(summary, EOS_COLUMNS, None), "",
                     *_ratios_table(summary, EOS_RATIOS), ""])


# ----------------------------------------------------------------------------- main

# Options whose default depends on --quick: flag -> (type, full run, --quick, help).
SIZED = {"--records-100b": (int, 60_000_000, 4_000_000, "100 B backlog"),
         "--records-1kb": (int, 20_000_000, 1_500_000, "1 KB backlog"),
         "--warmup": (float, 40.0, 2.0, "seconds from the first destination record to the window"),
         "--steady": (float, 60.0, 4.0, "window length in seconds")}


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = cli_parser("python -m bench.throughput", __doc__, "1g", render=True)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 4M x 100 B + 1.5M x 1 KB, warm-up 2 s, window 4 s, scaling 1,2")
    for flag, (kind, full, quick, text) in SIZED.items():
        parser.add_argument(flag, type=kind, help=f"{text} (default {full:,}; --quick {quick:,})")
    parser.add_argument("--scale", type=_names, help="worker processes / tasks.max for the scaling curve on the "
                                                     "first dataset (default 1,2,4; quick 1,2; 1 = no curve)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every run (default 1)")
    parser.add_argument("--variants", type=_names, help=f"comma-separated subset of {','.join(ALL_VARIANTS)} "
                        f"(default {','.join(VARIANTS)}; with --exactly-once {','.join(EOS_VARIANTS)})")
    parser.add_argument("--exactly-once", action="store_true",
                        help="the exactly-once comparison: our at-least-once and exactly-once runs (1 s "
                             "transactions) against MirrorMaker 2 with exactly.once.source.support=enabled, "
                             "one worker / task; results in throughput-eos-<date>.json and the eos-bench section")
    parser.add_argument("--datasets", type=_names, default=["100B", "1KB"], help="comma-separated subset of 100B,1KB")
    parser.add_argument("--worker-repo", type=Path, default=common.REPO,
                        help="run controller and worker from this checkout (its .venv/bin/python if present)")
    args = parser.parse_args(argv)
    for flag, (_, full, quick, _) in SIZED.items():
        if getattr(args, name := flag[2:].replace("-", "_")) is None:
            setattr(args, name, quick if args.quick else full)
    scale = args.scale or (["1"] if args.exactly_once else ["1", "2"] if args.quick else ["1", "2", "4"])
    if not all(x.isdigit() and int(x) > 0 for x in scale):
        parser.error("--scale takes positive integers, e.g. 1,2,4")
    args.scale = sorted({1, *map(int, scale)})
    args.variants = args.variants or list(EOS_VARIANTS if args.exactly_once else VARIANTS)
    if unknown := set(args.variants) - set(ALL_VARIANTS):
        parser.error(f"unknown variant(s) {', '.join(sorted(unknown))}")
    if set(args.datasets) - {"100B", "1KB"}:
        parser.error("--datasets takes 100B and/or 1KB")
    if args.warmup < 0 or args.steady <= 0:
        parser.error(f"warm-up must be >= 0 and steady > 0 seconds, got {args.warmup}, {args.steady}")
    return args


def plan_runs(datasets: list[Dataset], variants: list[str], scales: list[int],
              rounds: int) -> list[tuple[int, Dataset, str, int]]:
    """(round, dataset, variant, scale) in run order: per round and dataset the variants at scale 1, then the
    scaling curve on the first dataset; the raw pair, the fastest, comes last for each dataset, so a top-up
    after it drained the backlog early lengthens no other run's drain. Even rounds run the compared variants
    in reverse order, so neither side always runs first (on a cooler machine, a fresher page cache)."""
    order = []
    for rnd in range(1, rounds + 1):
        compared = [variant for variant in variants if variant != "raw"]
        scaled = [variant for variant in SCALED if variant in variants]
        if rnd % 2 == 0:
            compared.reverse()
            scaled.reverse()
        for i, ds in enumerate(datasets):
            order += [(rnd, ds, variant, 1) for variant in compared]
            if i == 0:
                order += [(rnd, ds, variant, scale) for scale in scales if scale != 1 for variant in scaled]
            if "raw" in variants:
                order.append((rnd, ds, "raw", 1))
    return order


def attempt(bench: Bench, ds: Dataset, variant: str, scale: int, rnd: int, notes: list[str]) -> Run:
    """One run; a run that drained its backlog early is repeated once on a topped-up backlog."""
    for tries in (1, 2):
        try:
            return run_variant(bench, ds, variant, scale, rnd)
        except BacklogTooShort as exc:
            failed = Run(variant, scale, ds.label, rnd, bench.counter, ds.records, error=str(exc))
            if tries == 2:
                return failed
            bigger = top_up_size(ds.records, exc.rate, bench.warmup_s, bench.steady_s)
            say(f"  {exc}; topping the backlog up to {bigger:,} records and running it again")
            notes.append(f"{label(variant, scale)} {ds.label} drained the {ds.records:,}-record "
                         f"backlog before its window closed (at ~{exc.rate / 1000:.0f}k records/s); "
                         f"the backlog was topped up to {bigger:,} records and the run repeated.")
            try:
                check_disk(bench.workdir, ds, bigger)
                old, ds.records = ds.records, bigger
                preload(bench.services, ds, start=old)
            except (BenchError, KafkaException) as grow_error:
                failed.error = f"{exc}; top-up failed: {grow_error}"
                return failed
        except (*BENCH_ERRORS, ValueError) as exc:
            return Run(variant, scale, ds.label, rnd, bench.counter, ds.records, error=str(exc))
    raise AssertionError("unreachable")


def run_all(args: argparse.Namespace, bench: Bench, datasets: list[Dataset], notes: list[str]) -> bool:
    """Every planned run; False when interrupted (the completed runs are kept)."""
    order = plan_runs(datasets, args.variants, args.scale, args.rounds)
    say(f"{len(order)} runs; warm-up {args.warmup:.0f}s, window {args.steady:.0f}s; logs in {bench.workdir}")
    wall = time.monotonic()
    try:
        for rnd, ds, variant, scale in order:
            name = f"{label(variant, scale)} {ds.label}"
            say(f"round {rnd}/{args.rounds}: {name} ({ds.records:,} records) "
                f"[{(time.monotonic() - wall) / 60:.1f} min in, load {common.load_average()[0]}]")
            run = attempt(bench, ds, variant, scale, rnd, notes)
            bench.runs.append(run)
            say(f"  {name}: {run.records_per_s:,.0f} rec/s ({run.mb_per_s:.1f} MB/s) over {run.window_s:.1f}s, "
                f"thirds {run.extra['rate_thirds']}; CPU {run.cpu_s_per_m:.2f} s/M "
                f"({run.cpu_s_per_m_without_compiler:.2f} without JIT); first record after {run.first_record_s:.1f}s;"
                f" machine busy {run.extra.get('machine_busy_pct')}%" if run.ok else f"  FAILED: {run.error}")
    except KeyboardInterrupt:
        notes.append(f"Interrupted after {len(bench.runs)} of {len(order)} runs.")
        say(notes[-1] + " Writing the completed runs.")
        return False
    return True


def run(args: argparse.Namespace, command: list[str]) -> dict[str, Any]:
    """The whole benchmark on its own stack: preload, every run, the results entry."""
    wall, now = time.monotonic(), datetime.now(timezone.utc)
    everything = {"100B": Dataset("100B", 100, args.records_100b), "1KB": Dataset("1KB", 1024, args.records_1kb)}
    datasets = [everything[d] for d in args.datasets]
    workdir = common.RESULTS_DIR / "tmp" / f"throughput-{now.strftime('%Y%m%d-%H%M%S')}"
    workdir.mkdir(parents=True, exist_ok=True)
    repo = args.worker_repo.resolve()
    code_before, load_at_start = common.code_version(repo), common.load_average()
    say("backlogs: " + ", ".join(f"{d.records:,} x {d.value_bytes} B" for d in datasets)
        + f"; worker from {repo} with {worker_python(repo)}; load {load_at_start}")
    try:
        jvm.classpath("mirrormaker")
        jvm.classpath("kafka")
    except jvm.JvmError as exc:
        raise BenchError(str(exc)) from None
    notes: list[str] = []
    with harness.own_stack("throughput", args.broker_heap) as (services, _):
        bench = Bench(services, workdir, now.strftime("%H%M%S"), args.warmup, args.steady,
                      max(600.0, max(d.records for d in datasets) / 10_000), repo)
        for ds in datasets:
            preload(services, ds)
        warm_group_coordinator(services["source"], datasets[0].topic)
        completed = run_all(args, bench, datasets, notes)
    code = common.code_version(repo)
    if changed := code["sources_sha256"] != code_before["sources_sha256"]:
        notes.append("The worker/common sources changed while this benchmark ran (commit "
                     f"{code_before['commit']} -> {code['commit']}); runs may mix both versions.")
        say(notes[-1])
    prefix = by_name("eos-bench" if args.exactly_once else "throughput-bench").prefix
    return {
        "schema": SCHEMA, "date": now.isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.throughput", *command]), "quick": args.quick,
        "exactly_once": args.exactly_once, "duration_s": round(time.monotonic() - wall, 1),
        "load_at_start": load_at_start, "load_at_end": common.load_average(), "machine": common.machine_info(),
        "code": code_before,  # what the runs started with; code_at_end when it changed meanwhile
        **({"code_at_end": code} if changed else {}),
        "rounds_done": max((r.round for r in bench.runs), default=0),
        "settings": {
            "variants": args.variants, "scales": args.scale, "partitions": PARTITIONS,
            "warmup_s": args.warmup, "steady_s": args.steady, "settle_s": SETTLE_S, "end": "stop",
            "broker_heap": args.broker_heap,
            "producer": {k: v for k, v in common.PRODUCER_SETTINGS.items() if not k.startswith("queue.")},
            "consumer": common.CONSUMER_SETTINGS, "mm2_producer": mm2.producer_overrides(),
            "mirrormaker2_jvm": [*mm2.HEAP, "G1 (kafka-run-class.sh flags)"], "drain_timeout_s": bench.drain_timeout_s,
            "worker_repo": str(repo), "worker_ran_from": "the checkout in place", "worker_python": worker_python(repo),
        },
        "summary": summarize(bench.runs, datasets, args.scale),
        "runs": [asdict(r) for r in bench.runs], "profile": None, "notes": notes,
        "results_file": f"bench/results/{prefix}-{now.strftime('%Y-%m-%d')}.json", "completed": completed,
    }


def status(entry: dict[str, Any]) -> int:
    """Print the section the run renders; 130 when interrupted, 1 when a run failed."""
    print((render_eos_section if entry["exactly_once"] else render_section)(entry))
    if not entry.pop("completed"):
        return 130
    return 0 if entry["runs"] and all(r["ok"] for r in entry["runs"]) else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if rendered(args, "eos-bench" if args.render and args.render.name.startswith("throughput-eos-")
                else "throughput-bench"):
        return 0
    # SIGINT also when the shell started us in the background with it ignored: it unwinds like Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return run_and_record(lambda: run(args, argv if argv is not None else sys.argv[1:]), summary=status,
                          section="eos-bench" if args.exactly_once else "throughput-bench", no_write=args.no_write)


if __name__ == "__main__":
    sys.exit(main())
