"""Measure end-to-end mirroring latency (source CreateTime to destination receipt) of ureplicator and MirrorMaker 2.

    .venv/bin/python -m bench.latency            # 4 variants x 5k, 20k, 50k records/s, 5 s + 30 s each (~13 min)
    .venv/bin/python -m bench.latency --quick    # 4 variants x 5k, 20k records/s, 3 s + 10 s each (~5 min)
    .venv/bin/python -m bench.latency --render bench/results/latency-2026-11-23.json

Each variant runs alone on one local stack; the method (probes, legs, loop thread, *sustained*) is in
docs/benchmarks.md, beside the latency-bench section.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import os
import queue
import re
import signal
import statistics
import sys
import time
from array import array
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from bench import mm2, window
from bench.common import REPO, code_version, fmt_load, load_average, machine_info, proc_sample
from bench.harness import KEY, MEASURING, BenchError, Child, Flow, Load, load_line
from bench.recording import parser, rendered, run_and_record
from bench.render import machine, table
from bench.window import Mirror, Threads
from devtools import stack
from devtools.harness import Offsets, bench_dir, create_topic, own_stack, say, wait_for

PARTITIONS = 16
VALUE_BYTES = 100
IDLE_S = 5.0  # idle seconds before a variant's first rate
WARMUP_TAG = 0  # priming and warm-up records: received, never counted
MAX_TAGS = 64
GOAL_RATE = 20_000
GOAL_P99_MS = 50.0
TIE_FRACTION = 0.05  # p99s closer than 5 % are reported as a tie, not a winner
STARVED_PERCENT = 10.0  # loop thread waiting for a CPU this share of the window: contention, not settings

# The documented low-latency setting (docs/configuration.md, "Low-latency settings").
LOW_LATENCY: dict[str, Any] = {
    "worker.fetch_wait_ms": 5,
    "worker.batch_size": 1000,
    "destination.properties.linger.ms": 0,
    "source.properties.fetch.wait.max.ms": 10,
}
# MirrorMaker 2's best low-latency settings; "{source}" is the run's source alias.
MM2_LOW_LATENCY: dict[str, Any] = {
    f"{mm2.DESTINATION}.producer.linger.ms": 0,
    "{source}.consumer.fetch.max.wait.ms": 10,
}
# All four by default: the yardstick compares both systems at both settings in one run.
VARIANTS = ("ureplicator-default", "ureplicator-low-latency", "mirrormaker2-low-latency", "mirrormaker2-default")


# ----------------------------------------------------------------------------- pure arithmetic


def nested_overrides(settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Dotted pipeline keys (``worker.fetch_wait_ms``) as YAML sections; ``<section>.properties.<librdkafka key>``
    keeps the librdkafka key whole (it has dots of its own)."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        section, _, rest = key.partition(".")
        if not rest:
            raise ValueError(f"{key!r} is not <section>.<key>")
        if rest.startswith("properties."):
            out.setdefault(section, {}).setdefault("properties", {})[rest[len("properties."):]] = value
        else:
            out.setdefault(section, {})[rest] = value
    return out


def parse_setting(text: str) -> tuple[str, Any]:
    """``key=value`` from the command line; the value is read as YAML (``5`` is an int, ``lz4`` a string)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), yaml.safe_load(value)


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The smallest value with at least ``q`` % of the values at or below it (0 when empty)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered), max(1, math.ceil(round(q * len(ordered) / 100, 9)))) - 1]


def latency_stats(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / p99 / p99.9 / max / mean (ms, nearest rank) of unsorted latencies; zeros when empty."""
    ordered = sorted(latencies_ms) or [0.0]
    return {**{f"p{q:g}_ms".replace(".", ""): round(nearest_rank(ordered, q), 1) for q in (50, 95, 99, 99.9)},
            "max_ms": round(ordered[-1], 1), "mean_ms": round(statistics.fmean(ordered), 1)}


def measured_window(created_ms: Sequence[float], warmup_s: float) -> float:
    """CreateTime (ms) from which records count: the first record's plus the warm-up."""
    return (min(created_ms) if created_ms else 0.0) + warmup_s * 1000.0


def latency_growth_s(created_ms: Sequence[float], latency_ms: Sequence[float], start_ms: float, end_ms: float,
                     span_s: float = 10.0) -> float:
    """Median latency of the window's last ``span_s`` minus that of its first (s): a growing backlog's age."""
    pairs = list(zip(created_ms, latency_ms, strict=True))
    head = [lat for ct, lat in pairs if start_ms <= ct < start_ms + span_s * 1000.0]
    tail = [lat for ct, lat in pairs if end_ms - span_s * 1000.0 <= ct <= end_ms]
    return (statistics.median(tail) - statistics.median(head)) / 1000.0 if head and tail else 0.0


def cpu_figures(cpu_s: float, seconds: float, records: int) -> dict[str, float]:
    """CPU of the replicator's processes over a window: percent of one core and microseconds per record."""
    return {"cpu_percent": round(100.0 * cpu_s / seconds, 1) if seconds > 0 else 0.0,
            "cpu_us_per_record": round(1e6 * cpu_s / records, 1) if records > 0 else 0.0}


def is_sustained(planned_s: float, elapsed_s: float, failed: int, acked: int, received: int, drain_s: float,
                 growth_s: float) -> dict[str, bool]:
    """The four conditions of a sustained rate and their conjunction."""
    producer_ok = elapsed_s <= planned_s * 1.05 and failed == 0
    complete = received >= acked
    return {"producer_kept_schedule": producer_ok, "all_arrived": complete,
            "sustained": producer_ok and complete and drain_s <= 5.0 and growth_s <= 1.0}


def replicator_legs(dst_seq: Sequence[int], dst_received_ms: Sequence[float], src_seq: Sequence[int],
                    src_received_ms: Sequence[float]) -> list[float]:
    """Per destination record, destination receipt − source receipt of the same record (NaN when unseen);
    one load's sequence numbers are dense from 0, so the source side is an array indexed by them."""
    at_source = array("d", [math.nan]) * (max(src_seq) + 1 if len(src_seq) else 0)
    for seq, received in zip(src_seq, src_received_ms, strict=True):
        at_source[seq] = received
    return [received - at_source[seq] if 0 <= seq < len(at_source) else math.nan
            for seq, received in zip(dst_seq, dst_received_ms, strict=True)]


def loop_thread(pid: int, tid: int, name: str, system: str) -> bool:
    """Whether a thread runs the replicator's record loop: a worker's main thread, MirrorMaker 2's task thread."""
    return name.startswith("task-thread") if system == "mirrormaker2" else tid == pid


def run_queue_figures(before: Threads, after: Threads, loop_pids: Sequence[int], system: str,
                      seconds: float) -> dict[str, float]:
    """CPU time and run-queue wait (s) of the replicator's threads, and of its loop threads, over a window."""
    cpu = wait = loop_cpu = loop_wait = 0.0
    for (pid, tid), (name, cpu_after, wait_after) in after.items():  # a thread started in the window counts from 0
        _, cpu_before, wait_before = before.get((pid, tid), (name, 0.0, 0.0))
        cpu, wait = cpu + cpu_after - cpu_before, wait + wait_after - wait_before
        if pid in loop_pids and loop_thread(pid, tid, name, system):
            loop_cpu, loop_wait = loop_cpu + cpu_after - cpu_before, loop_wait + wait_after - wait_before
    return {"threads_cpu_s": round(cpu, 2), "threads_runq_wait_s": round(wait, 2), "loop_cpu_s": round(loop_cpu, 2),
            "loop_runq_wait_s": round(loop_wait, 2),
            "loop_runq_wait_percent": round(100.0 * loop_wait / seconds, 1) if seconds > 0 else 0.0}


# ----------------------------------------------------------------------------- probe process


@dataclass
class Received:
    """What a probe saw of one tag: per record its sequence, CreateTime and receive time (epoch ms)."""

    seq: array = field(default_factory=lambda: array("q"))
    created_ms: array = field(default_factory=lambda: array("d"))
    received_ms: array = field(default_factory=lambda: array("d"))


READY = -2  # what the probe sends once assigned; -1 carries its error


def _probe_main(bootstrap: str, topic: str, requests: Any, counts: Any, stop: Any, out: Any) -> None:
    """Child process body of :class:`Probe`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    try:
        consumer = Consumer({**MEASURING, "bootstrap.servers": bootstrap,
                             "group.id": f"bench-latency-probe-{time.time_ns()}"})
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        logs: defaultdict[int, Received] = defaultdict(Received)
        unpack, key_size = KEY.unpack, KEY.size  # locals: this loop runs per record
        asked_at = 0.0
        out.put((READY, None))
        while not stop.is_set():
            first = consumer.poll(0.05)  # returns as soon as one record is there
            if first is not None:
                batch = [first, *consumer.consume(100_000, 0)]  # and what librdkafka already holds
                received = time.time() * 1000.0
                for msg in batch:
                    key = msg.key()
                    if msg.error() is None and key is not None and len(key) == key_size:
                        tag, seq = unpack(key)
                        log = logs[tag]
                        log.seq.append(seq)
                        log.created_ms.append(msg.timestamp()[1])
                        log.received_ms.append(received)
                        if tag < MAX_TAGS:
                            counts[tag] += 1
            if time.monotonic() - asked_at >= 0.1:
                asked_at = time.monotonic()
                with contextlib.suppress(queue.Empty):
                    while True:
                        tag = requests.get_nowait()
                        out.put((tag, logs.pop(tag, Received())))
        consumer.close()
    except Exception as exc:  # reported to the parent, which raises BenchError
        out.put((-1, f"{type(exc).__name__}: {exc}"))


class Probe(Child):
    """A measuring consumer in its own process: per tag, every record's CreateTime and receive time."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._requests = mp.get_context("spawn").Queue()
        super().__init__(_probe_main, "bench-latency-probe", (bootstrap, topic, self._requests), MAX_TAGS)

    def start(self, timeout_s: float = 60) -> Probe:
        super().start()
        self._reply(READY, timeout_s)
        return self

    def _reply(self, tag: int, timeout_s: float) -> Any:
        got, payload = self.receive(timeout_s, "the latency probe")
        if got != tag:
            raise BenchError(f"the latency probe failed: {payload}")
        return payload

    def count(self, tag: int) -> int:
        if not self.alive():
            raise BenchError(f"the latency probe exited: {self.receive(1, 'the exited latency probe')[1]}")
        return int(self.counters[tag])

    def take(self, tag: int, timeout_s: float = 120) -> Received:
        """Hand over (and forget) everything received of ``tag``."""
        self._requests.put(tag)
        return self._reply(tag, timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self._proc.join(15)
        self.kill()


# ----------------------------------------------------------------------------- variants


@dataclass(frozen=True)
class Variant:
    """One replicator set-up under test."""

    name: str
    system: str  # "ureplicator" | "mirrormaker2"
    settings: dict[str, Any]


def variants(names: Sequence[str], low_latency: dict[str, Any]) -> list[Variant]:
    known = {"ureplicator-default": {}, "ureplicator-low-latency": low_latency,
             "mirrormaker2-low-latency": MM2_LOW_LATENCY, "mirrormaker2-default": {}}
    if unknown := [n for n in names if n not in known]:
        raise BenchError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [Variant(n, n.split("-")[0], dict(known[n])) for n in names]


def mm2_properties(variant: Variant, alias: str, services: dict[str, str], topic: str) -> dict[str, Any]:
    props = mm2.properties(alias, services["source"], services["destination"], topic)
    props.update({key.replace("{source}", alias): value for key, value in variant.settings.items()})
    return props


def mm2_effective(log: Path, keys: Sequence[str] = ("linger.ms", "batch.size", "acks", "fetch.max.wait.ms",
                                                     "fetch.min.bytes", "max.poll.records")) -> dict[str, Any]:
    """The settings MirrorMaker 2's data-path clients logged (``ProducerConfig values:`` and
    ``ConsumerConfig values:`` blocks): what the JVM really used, not only what was asked for."""
    found: dict[str, Any] = {}
    if not log.exists():
        return found
    for block in re.split(r"^\[[^\]]*\] INFO (?=(?:Producer|Consumer)Config values:)", log.read_text(errors="replace"),
                          flags=re.M)[1:]:
        values = dict(re.findall(r"^\t([\w.]+) = (.*)$", block.split("\n[", 1)[0], re.M))
        client = values.get("client.id", "")
        if client.startswith("connector-producer-") or client.endswith("replication-consumer"):
            found[client] = {k: values[k] for k in keys if k in values}
    return found


# ----------------------------------------------------------------------------- measuring


def start_load(bootstrap: str, topic: str, rate: int, tag: int, seconds: float) -> Load:
    """``rate`` records/s of ``tag`` into every partition of ``topic`` for ``seconds``."""
    return Load(bootstrap, [Flow(topic, PARTITIONS, rate)], tag, seconds, VALUE_BYTES).start()


@dataclass
class Contestant:
    """A started variant with its topic, its two probes and what it measured so far."""

    variant: Variant
    topic: str
    mirror: Mirror
    destination: Probe
    source: Probe
    out: dict[str, Any]

    def produce_and_wait(self, source: str, rate: int, seconds: float, timeout_s: float, already: int = 0) -> int:
        """Unmeasured load (priming, warm-up): produce, wait until all of it arrived; returns the acked count."""
        result = start_load(source, self.topic, rate, WARMUP_TAG, seconds).wait(seconds + 120)
        target = already + result.acked
        # cpu_s() raises when a process died
        wait_for(lambda: self.mirror.cpu_s() >= 0 and self.destination.count(WARMUP_TAG) >= target, timeout_s,
                 f"{self.variant.name}: {result.acked:,} records of tag {WARMUP_TAG} at the destination")
        return target


@contextlib.contextmanager
def contestant(variant: Variant, services: dict[str, str], workdir: Path, topic: str) -> Iterator[Contestant]:
    """``variant`` started on a fresh topic (every partition owned) with its probes and primed; stopped after."""
    create_topic(services["source"], topic, PARTITIONS)
    say(f"{variant.name}: starting on topic {topic}")
    started = time.monotonic()
    if variant.system == "ureplicator":
        overrides = nested_overrides(variant.settings)
        mirror = window.start_ureplicator(services, workdir / variant.name, f"lat{topic[-12:].replace('-', '')}",
                                          overrides)
        notes: dict[str, Any] = {"code": str(REPO), "workers": 1, "overrides": overrides}
    else:
        props = mm2_properties(variant, f"src{topic[-6:].replace('-', '')}", services, topic)
        mirror = window.start_mirrormaker2(workdir / variant.name, props)
        notes = {"properties": {k: str(v) for k, v in props.items() if "bootstrap" not in k},
                 "log": str(mirror.log), "jvm": [*mm2.HEAP, "G1 (kafka-run-class.sh flags)"]}
    probes: list[Probe] = []
    try:
        if (pipeline := mirror.pipeline) is not None:
            pipeline.add_topic(topic, PARTITIONS)
            wait_for(lambda: pipeline.settled({topic: PARTITIONS})
                     and set(pipeline.owners(topic).values()) == set(pipeline.workers), 90,
                     f"{variant.name}: every partition mirrored")
        offsets = Offsets(services["destination"])
        wait_for(lambda: mirror.cpu_s() >= 0 and offsets.end(topic, PARTITIONS) is not None, 180,
                 f"{variant.name}: destination topic {topic}")
        probes = [Probe(services[side], topic).start() for side in ("destination", "source")]
        c = Contestant(variant, topic, mirror, probes[0], probes[1], {})
        primed = c.produce_and_wait(services["source"], 500, 2, 180)
        c.out.update({"variant": variant.name, "system": variant.system, "settings": variant.settings,
                      "topic": topic, "ready_after_s": round(time.monotonic() - started, 1), "primed": primed,
                      **notes, "rates": []})
        say(f"{variant.name}: data path live after {c.out['ready_after_s']:.0f}s")
        yield c
    finally:
        for probe in probes:
            probe.stop()
        mirror.stop()
    if variant.system == "mirrormaker2":
        c.out["mm2_logged"] = mm2_effective(Path(c.out["log"]))


def brokers_cpu_s(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each broker's JVM (``pids``: service -> pid); a broker that is gone is left out."""
    return {name: sample.cpu_s for name, pid in pids.items() if (sample := proc_sample(pid)) is not None}


def measure_rate(services: dict[str, str], c: Contestant, rate: int, tag: int, args: argparse.Namespace,
                 brokers: dict[str, int] | None = None) -> dict[str, Any]:
    """Produce ``rate`` records/s for warm-up + duration, wait for the destination, compute the numbers;
    ``brokers`` (service -> pid): their CPU over the window too."""
    brokers = brokers or {}
    mirror, destination, planned = c.mirror, c.destination, args.warmup + args.duration
    load_before = load_average()
    producer = start_load(services["source"], c.topic, rate, tag, planned)
    say(f"  {rate:,}/s: producing for {planned:.0f}s (first {args.warmup:.0f}s not counted)")
    start: tuple[float, float, Threads] | None = None
    brokers_at_start: dict[str, float] = {}
    measured_from = last = time.monotonic()
    measured_from += args.warmup
    try:
        while producer.alive():
            time.sleep(0.2)
            if start is None and time.monotonic() >= measured_from:
                start = (time.monotonic(), mirror.cpu_s(), mirror.threads())
                brokers_at_start = brokers_cpu_s(brokers)
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                say(f"    sent {producer.sent:,}, received {destination.count(tag):,}, load {load_line()}")
        result = producer.wait(120)
        end = (time.monotonic(), mirror.cpu_s(), mirror.threads())
        brokers_at_end = brokers_cpu_s(brokers)
    except BaseException:
        producer.kill()
        raise
    produced_at, load_after = time.monotonic(), load_average()
    while destination.count(tag) < result.acked and time.monotonic() < produced_at + 60:
        mirror.cpu_s()
        time.sleep(0.05)
    received, drain_s = destination.count(tag), time.monotonic() - produced_at

    got, src = destination.take(tag), c.source.take(tag)
    start_ms = measured_window(got.created_ms, args.warmup)
    latencies = [r - ct for ct, r in zip(got.created_ms, got.received_ms, strict=True)]
    in_window = [i for i, ct in enumerate(got.created_ms) if ct >= start_ms]
    measured = [latencies[i] for i in in_window]
    growth = latency_growth_s(got.created_ms, latencies, start_ms, start_ms + args.duration * 1000.0)
    legs = replicator_legs([got.seq[i] for i in in_window], [got.received_ms[i] for i in in_window],
                           src.seq, src.received_ms)
    joined = [(lat, leg) for lat, leg in zip(measured, legs, strict=True) if not math.isnan(leg)]
    replicator = latency_stats([leg for _, leg in joined])
    source_leg = latency_stats([lat - leg for lat, leg in joined])
    entry: dict[str, Any] = {
        "rate": rate, "planned_s": planned, "warmup_s": args.warmup, "sent": result.sent, "acked": result.acked,
        "failed": result.failed, "received": received, "producer_elapsed_s": round(result.elapsed_s, 2),
        "producer_rate": round(result.sent / result.elapsed_s) if result.elapsed_s else 0,
        "measured_records": len(measured), **latency_stats(measured), "joined_records": len(joined),
        "source_leg_p50_ms": source_leg["p50_ms"], "source_leg_p99_ms": source_leg["p99_ms"],
        "replicator_p50_ms": replicator["p50_ms"], "replicator_p99_ms": replicator["p99_ms"],
        "replicator_max_ms": replicator["max_ms"],
    }
    if start is not None:
        seconds = end[0] - start[0]
        entry.update(cpu_figures(end[1] - start[1], seconds, round(rate * seconds)))
        entry["cpu_window_s"] = round(seconds, 1)
        entry.update({f"{name}_broker_cpu_percent": round(100.0 * (used - brokers_at_start[name]) / seconds, 1)
                      for name, used in brokers_at_end.items() if name in brokers_at_start})
        entry.update(run_queue_figures(start[2], end[2], [p.pid for p in mirror.loop], c.variant.system, seconds))
    entry.update({"latency_growth_s": round(growth, 3), "drain_s": round(drain_s, 2),
                  **is_sustained(planned, result.elapsed_s, result.failed, result.acked, received, drain_s, growth),
                  "load_before": load_before, "load_after": load_after})
    say(f"  {rate:,}/s: p50 {entry['p50_ms']} / p99 {entry['p99_ms']} ms (replicator leg "
        f"{entry['replicator_p50_ms']} / {entry['replicator_p99_ms']} ms), CPU {entry.get('cpu_percent', 0)} %, "
        f"loop thread waiting {entry.get('loop_runq_wait_s', 0)} s; {'' if entry['sustained'] else 'NOT '}sustained")
    return entry


def warm_stack(services: dict[str, str], stamp: str, args: argparse.Namespace) -> None:
    """Before the first variant: the top rate through both brokers, read back, so no variant meets a cold broker
    (docs/benchmarks.md says why and what it did not remove)."""
    if args.stack_warmup <= 0:
        return
    topic, sides = f"lat-{stamp}-warm", (services["source"], services["destination"])
    say(f"stack warm-up: {args.stack_warmup:.0f}s at {max(args.rates):,}/s into both brokers (not counted)")
    probes = []
    try:
        for bootstrap in sides:
            create_topic(bootstrap, topic, PARTITIONS)
            probes.append(Probe(bootstrap, topic).start())
        loads = [start_load(bootstrap, topic, max(args.rates), WARMUP_TAG, args.stack_warmup) for bootstrap in sides]
        for producer in loads:
            producer.wait(args.stack_warmup + 120)
    finally:
        for probe in probes:
            probe.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Each variant alone on the stack (on 2 cores an idle neighbour is not free): start, prime, warm up, idle,
    then its rates; stopped before the next."""
    now = datetime.now(timezone.utc)
    stamp = now.strftime("%H%M%S")
    chosen = variants(args.variants, args.low_latency)
    version = code_version(REPO)
    entry: dict[str, Any] = {
        "benchmark": "latency", "date": now.isoformat(timespec="seconds"), "mode": "quick" if args.quick else "full",
        "machine": {**machine_info(), "nice": os.getpriority(os.PRIO_PROCESS, 0)},
        "setup": {
            "partitions": PARTITIONS, "ureplicator_workers": 1, "ureplicator_controllers": 1, "mm2_tasks": 1,
            "value_bytes": VALUE_BYTES, "key_bytes": KEY.size, "warmup_s": args.warmup, "duration_s": args.duration,
            "variant_warmup_s": args.variant_warmup, "stack_warmup_s": args.stack_warmup, "idle_s": IDLE_S,
            "rates": args.rates, "source_leg": True, "schedule": "alone", "code": str(REPO),
            # HEAD of the checkout whose controller and worker ran, +dirty when its worker/ or common/ differ
            "code_commit": version["commit"] + ("+dirty" if version["worker_common_modified"] else ""),
            "code_sha256": version["sources_sha256"],  # the worker's sources: runs of the same code compare
            "probe": "own process; fetch.wait.max.ms=5; poll() for the first record, then consume(n, 0); "
                     "assigned from offset 0 before producing",
            "load_producer": "own process; idempotent, acks=all, linger.ms=2, timestamp=now",
            "broker_heap": args.broker_heap,
        },
        "load_at_start": load_average(),
        "variants": [],
    }
    say(f"latency benchmark ({entry['mode']}): {', '.join(v.name for v in chosen)}; rates "
        f"{', '.join(f'{r:,}' for r in args.rates)}/s, {args.warmup:.0f}s + {args.duration:.0f}s each; "
        f"load {load_line()}")
    wall = time.monotonic()
    with own_stack("latency", heap=args.broker_heap) as (services, root):
        brokers = {name: int(svc["pid"]) for name, svc in stack.status(root).items()
                   if name in ("source", "destination") and svc.get("pid")}
        workdir = bench_dir("latency") / f"run-{now.strftime('%Y%m%dT%H%M%SZ')}"
        workdir.mkdir(parents=True, exist_ok=True)
        warm_stack(services, stamp, args)
        for index, variant in enumerate(chosen, start=1):
            with contestant(variant, services, workdir, f"lat-{stamp}-{index}") as c:
                say(f"{variant.name}: warm-up {args.variant_warmup:.0f}s at {max(args.rates):,}/s (not counted)")
                c.produce_and_wait(services["source"], max(args.rates), args.variant_warmup, 120,
                                   already=c.out["primed"])
                cpu0, t0 = c.mirror.cpu_s(), time.monotonic()
                time.sleep(IDLE_S)
                c.out["idle_cpu_percent"] = round(100 * (c.mirror.cpu_s() - cpu0) / (time.monotonic() - t0), 1)
                say(f"{variant.name}: idle {IDLE_S:.0f}s at {c.out['idle_cpu_percent']} % CPU; load {load_line()}")
                for tag, rate in enumerate(args.rates, start=1):
                    c.out["rates"].append(measure_rate(services, c, rate, tag, args, brokers))
                    time.sleep(2)
            entry["variants"].append(c.out)
    entry["elapsed_s"] = round(time.monotonic() - wall, 1)
    entry["load_at_end"] = load_average()
    return entry


# ----------------------------------------------------------------------------- report


def upgraded(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry of the first format (2026-11-21: ureplicator alone, its ``rates`` at the top, p90 instead of p95)
    in today's shape."""
    if "variants" in entry:
        return entry
    setup = {**entry["setup"], "ureplicator_workers": entry["setup"]["workers"], "schedule": "alone"}
    return {**entry, "setup": setup, "variants": [{"variant": "ureplicator-default", "system": "ureplicator",
                                                   "settings": {}, "rates": entry["rates"]}]}


# One rate's row: header and format over its entry (plus "load" and "verdict"); "–" where an older entry lacks a key.
RATE_COLUMNS = (
    ("rate", "{rate:,}/s"), ("p50", "{p50_ms:,.1f} ms"), ("p95", "{p95_ms:,.1f} ms"), ("p99", "**{p99_ms:,.1f} ms**"),
    ("max", "{max_ms:,.0f} ms"), ("source leg p50 / p99", "{source_leg_p50_ms:,.0f} / {source_leg_p99_ms:,.0f} ms"),
    ("replicator leg p50 / p99", "{replicator_p50_ms:,.0f} / {replicator_p99_ms:,.0f} ms"),
    ("replicator CPU", "{cpu_percent:.0f} %"), ("CPU per record", "{cpu_us_per_record:.0f} µs"),
    ("broker CPU: source / destination", "{source_broker_cpu_percent:.0f} % / {destination_broker_cpu_percent:.0f} %"),
    ("loop thread: on a CPU / waiting for one",
     "{loop_cpu_s:.1f} s / {loop_runq_wait_s:.1f} s ({loop_runq_wait_percent:.0f} %)"),
    ("load average before → after", "{load}"), ("sustained", "{verdict}"),
)


def _cell(fmt: str, values: dict[str, Any]) -> str:
    try:
        return fmt.format_map(values)
    except KeyError:
        return "–"


def render(entry: dict[str, Any], others: list[dict[str, Any]] | None = None) -> str:
    """The section: set-up, variants, per-rate figures, the reading; ``others``: the other stored runs."""
    entry = upgraded(entry)
    s, quick, workers = entry["setup"], entry["mode"] == "quick", entry["setup"]["ureplicator_workers"]
    lines = [
        "## End-to-end latency",
        "",
        f"`python -m bench.latency{' --quick' if quick else ''}` ({'**quick mode**: ' if quick else ''}"
        f"{s['warmup_s']:.0f} s warm-up + {s['duration_s']:.0f} s measured per rate and variant) on "
        f"{machine(entry['machine'])}, {entry['date'][:10]}; ureplicator at commit "
        f"`{s.get('code_commit', 'unknown')}`; {entry['elapsed_s'] / 60:.0f} min in all. Load average at start "
        f"{fmt_load(entry['load_at_start'])}, at end {fmt_load(entry['load_at_end'])}.",
        "",
        ("The variants ran one after another, each alone on the stack" if s.get("schedule") == "alone" else
         "All variants ran at once, measured one at a time (the others idle)")
        + f", each on its own {s['partitions']}-partition topic, {s['value_bytes']}-byte values; ureplicator = one "
        f"controller and {workers} worker process{'es' if workers > 1 else ''}; MirrorMaker 2 = dedicated mode, one "
        f"task. Stack warm-up {s.get('stack_warmup_s', 0):.0f} s; per variant a priming burst, "
        f"{s.get('variant_warmup_s', 0):.0f} s of warm-up at the top rate and {s.get('idle_s', 0):.0f} s idle "
        "(its *idle CPU*) before its first measured rate (the method is below the section).",
        "",
        *table(["variant", "settings", "idle CPU"],
               [[v["variant"], settings_cell(v), _cell("{idle_cpu_percent:.1f} %", v)] for v in entry["variants"]]),
        "",
        *table(["variant", *(header for header, _ in RATE_COLUMNS)],
               [_rate_row(v, r) for v in entry["variants"] for r in v["rates"]], "l" + "r" * (len(RATE_COLUMNS) - 1)),
        "",
    ]
    return "\n".join(lines + [f"- {line}" for line in analysis(entry)]
                     + runs_compared(entry, [upgraded(o) for o in others or []]))


def _rate_row(v: dict[str, Any], r: dict[str, Any]) -> list[str]:
    values = {**r, "load": f"{fmt_load(r['load_before'])} → {fmt_load(r['load_after'])}",
              "verdict": "yes" if r["sustained"] else f"no ({', '.join(_why_not(r))})"}
    return [v["variant"], *(_cell(fmt, values) for _, fmt in RATE_COLUMNS)]


def settings_cell(v: dict[str, Any]) -> str:
    """A variant's settings; MirrorMaker 2's producer overrides (``bench/mm2.py`` gives it the worker's producer
    settings, so its "default" variant is not the Java clients' defaults) are named, not called defaults."""
    own = {k.replace("{source}", "<source alias>"): val for k, val in v["settings"].items()}
    shown = ", ".join(f"`{k}={val}`" for k, val in own.items())
    prefix = f"{mm2.DESTINATION}.producer."
    producer = {k[len(prefix):]: val for k, val in v.get("properties", {}).items()
                if k.startswith(prefix) and k not in own}
    if producer:
        given = ", ".join(f"`{k}={val}`" for k, val in producer.items())
        return (f"{shown}; " if shown else "") + f"the worker's producer settings: {given}"
    return shown or "defaults"


def _why_not(r: dict[str, Any]) -> list[str]:
    drained = "records missing" if not r["all_arrived"] else (
        f"backlog drained {r['drain_s']:.0f} s after the end" if r["drain_s"] > 5 else "")
    return [why for why in ("" if r["producer_kept_schedule"] else "producer fell behind", drained,
                            f"latency grew {r['latency_growth_s']:.1f} s" if r["latency_growth_s"] > 1 else "") if why]


def _at_goal(entry: dict[str, Any], system: str, sustained: bool = False) -> dict[str, dict[str, Any]]:
    """Per variant of ``system``, its figures at the goal rate (only sustained ones when asked)."""
    return {v["variant"]: r for v in entry["variants"] if v["variant"].startswith(system)
            for r in v["rates"] if r["rate"] == GOAL_RATE and (r["sustained"] or not sustained)}


def headline(entry: dict[str, Any]) -> str | None:
    """The goal's verdict, read least favourably: ureplicator's best sustained p99 at the goal rate (or a miss),
    the defaults' p99 when a tuned variant set it, then (:func:`pairwise`) each rate, setting and percentile
    where MirrorMaker 2 is lower."""
    ours, theirs = _at_goal(entry, "ureplicator"), _at_goal(entry, "mirrormaker2", sustained=True)
    if not ours:
        return None
    best_theirs = min(theirs.items(), key=lambda item: item[1]["p99_ms"], default=None)
    versus = f"; MirrorMaker 2's best: p99 {best_theirs[1]['p99_ms']:,.1f} ms ({best_theirs[0]})" if best_theirs else ""
    sustained = {name: r for name, r in ours.items() if r["sustained"]}
    if not sustained:
        return f"**Headline: goal missed** — no ureplicator variant sustained {GOAL_RATE:,} records/s{versus}."
    name, best = min(sustained.items(), key=lambda item: item[1]["p99_ms"])
    defaults = ours.get("ureplicator-default")
    with_defaults = (f"; with the defaults: p99 {defaults['p99_ms']:,.1f} ms"
                     if defaults is not None and name != "ureplicator-default" else "")
    if best_theirs:
        them = best_theirs[1]
        if abs(them["p99_ms"] - best["p99_ms"]) <= TIE_FRACTION * max(them["p99_ms"], best["p99_ms"]):
            versus += ", a tie on p99 at this resolution"
        elif them["p99_ms"] < best["p99_ms"]:
            versus += ", **lower than ours**"
        if them["p50_ms"] < best["p50_ms"]:
            versus += f"; its p50 is lower than ours ({them['p50_ms']:,.1f} vs {best['p50_ms']:,.1f} ms)"
    return (f"**Headline: goal {'met' if best['p99_ms'] < GOAL_P99_MS else 'missed'}** — ureplicator's best p99 at "
            f"{GOAL_RATE:,} records/s was {best['p99_ms']:,.1f} ms ({name}; goal < {GOAL_P99_MS:.0f} ms)"
            f"{with_defaults}{versus}{pairwise(entry)}.")


def pairs(entry: dict[str, Any]) -> dict[tuple[str, int], tuple[dict[str, Any], dict[str, Any]]]:
    """Issue 25's yardstick: per (setting, rate), ureplicator's figures and MirrorMaker 2's at the same setting."""
    rates = {(v["variant"], r["rate"]): r for v in entry["variants"] for r in v["rates"]}
    return {(setting, rate): (ours, rates[f"mirrormaker2-{setting}", rate])
            for setting in ("default", "low-latency")
            for (variant, rate), ours in sorted(rates.items(), key=lambda item: item[0][1])
            if variant == f"ureplicator-{setting}" and (f"mirrormaker2-{setting}", rate) in rates}


def pairwise(entry: dict[str, Any]) -> str:
    """At every rate, each setting against MirrorMaker 2's same setting, p50 and p99: where ours is higher."""
    compared = pairs(entry)
    behind = [f"{setting} {rate:,}/s {q} {ours[f'{q}_ms']:,.1f} vs {theirs[f'{q}_ms']:,.1f} ms"
              for (setting, rate), (ours, theirs) in compared.items() for q in ("p50", "p99")
              if ours[f"{q}_ms"] > theirs[f"{q}_ms"]]
    if not compared:
        return ""
    if not behind:
        return "; at every rate and setting, ureplicator's p50 and p99 are at or below MirrorMaker 2's"
    return "; **MirrorMaker 2 is lower at** " + ", ".join(behind)


def runs_compared(entry: dict[str, Any], others: list[dict[str, Any]], most: int = 10) -> list[str]:
    """The yardstick over the stored full runs with the shown run's pairs (newest first, at most ``most``), and per
    figure how many of the runs of the shown run's worker sources had ours at or below MirrorMaker 2's."""
    shown = pairs(entry)
    stored = ((o, p) for o in others if o.get("mode") == "full" and set(shown) <= set(p := pairs(o)))
    runs = sorted([(entry, shown), *stored], key=lambda run: run[0]["date"], reverse=True)[:most]
    if not shown or len(runs) < 2:
        return []
    digest = entry["setup"].get("code_sha256")
    same = [paired for e, paired in runs if digest and e["setup"].get("code_sha256") == digest]
    marked = {id(paired) for paired in same}
    figures = [(pair, f"{q}_ms") for pair in shown for q in ("p50", "p99")]
    header = [f"{setting} {rate // 1000:,}k {key[:3]}" for (setting, rate), key in figures]
    rows = [[e["date"][:16].replace("T", " ") + (" (shown)" if e is entry else ""),
             f"`{e['setup'].get('code_commit', '?')}`" + (" ·" if id(paired) in marked else ""),
             f"{e['load_at_start'][0]:.1f}", e["variants"][0]["variant"],
             *(f"{paired[pair][0][key]:,.1f} / {paired[pair][1][key]:,.1f}" for pair, key in figures)]
            for e, paired in runs]
    lines = ["", "The same yardstick over the stored full runs with these pairs (ms, ureplicator / MirrorMaker 2; "
             "· marks a run of the shown run's worker sources, `code_sha256`):", "",
             *table(["run (UTC)", "commit", "load at start", "ran first", *header], rows, "llrl" + "r" * len(header))]
    if len(same) > 1:
        counts = [sum(1 for paired in same if paired[pair][0][key] <= paired[pair][1][key]) for pair, key in figures]
        lines += ["", f"In how many of the {len(same)} runs of the shown run's worker sources ureplicator was at or "
                  "below MirrorMaker 2: " + ", ".join(f"{h} {n}" for h, n in zip(header, counts, strict=True)) + "."]
    return lines


def analysis(entry: dict[str, Any]) -> list[str]:
    """The headline, then what the machine's contention did to the figures."""
    out = [top] if (top := headline(entry)) is not None else []
    cores, nice = entry["machine"].get("cores") or 1, entry["machine"].get("nice")
    peak = max([entry["load_at_start"][0], entry["load_at_end"][0],
                *(r[k][0] for v in entry["variants"] for r in v["rates"] for k in ("load_before", "load_after"))])
    if peak > 2 * cores:
        out.append(f"**The machine was saturated**: the 1-minute load average reached {peak:.0f} on {cores} cores"
                   f"{f' (this benchmark ran at nice {nice})' if nice else ''}: the percentiles measure CPU "
                   "starvation as much as the replicators.")
    starved = [f"{r['loop_runq_wait_percent']:.0f} % ({v['variant']})" for v in entry["variants"] for r in v["rates"]
               if r["rate"] == GOAL_RATE and r.get("loop_runq_wait_percent", 0.0) >= STARVED_PERCENT]
    if starved:
        out.append(f"At {GOAL_RATE:,}/s the loop thread was ready to work but waited for a CPU for "
                   f"{', '.join(starved)} of the window: the percentiles include the machine's contention.")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    cli = parser("python -m bench.latency", __doc__, "512m", render=True)
    cli.add_argument("--quick", action="store_true", help="smoke run: rates 5k and 20k, 3 s + 10 s per rate")
    cli.add_argument("--rates", default=None, help="records/s, comma-separated (5000,20000,50000; quick 5000,20000)")
    cli.add_argument("--variants", default=",".join(VARIANTS),
                     help=f"comma-separated, run in this order (known: {', '.join(VARIANTS)})")
    cli.add_argument("--set", dest="sets", action="append", default=[], type=parse_setting, metavar="KEY=VALUE",
                     help="override a key of ureplicator-low-latency, e.g. worker.fetch_wait_ms=2 (repeatable)")
    cli.add_argument("--warmup", type=float, default=None, help="seconds not counted per rate (5; quick 3)")
    cli.add_argument("--duration", type=float, default=None, help="measured seconds per rate (30; quick 10)")
    cli.add_argument("--variant-warmup", type=float, default=None,
                     help="seconds of unmeasured load per variant before it idles (15; quick 5)")
    cli.add_argument("--stack-warmup", type=float, default=None,
                     help="seconds of unmeasured load through both brokers before the first variant (60; quick 10)")
    args = cli.parse_args(argv)
    args.rates = [int(r) for r in (args.rates or ("5000,20000" if args.quick else "5000,20000,50000")).split(",")
                  if r.strip()]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for name, full, quick in (("warmup", 5.0, 3.0), ("duration", 30.0, 10.0), ("variant_warmup", 15.0, 5.0),
                              ("stack_warmup", 60.0, 10.0)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    args.low_latency = {**LOW_LATENCY, **dict(args.sets)}
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if rendered(args, "latency-bench"):
        return 0
    return run_and_record(lambda: run(args), section="latency-bench", no_write=args.no_write)


if __name__ == "__main__":
    sys.exit(main())
