"""Measure the two producers alone: librdkafka's and the Java client's produce-to-acknowledgement latency.

    .venv/bin/python -m bench.ack_latency            # 20k, 50k/s x 1, 4, 16 partitions x linger 0, 1 (~16 min)
    .venv/bin/python -m bench.ack_latency --quick    # 20k records/s, 5 s each
    .venv/bin/python -m bench.ack_latency --render bench/results/ack-latency-2026-11-29.json

Why it exists: the latency benchmark's replicator leg is slower for ureplicator than for MirrorMaker 2
at the median, with the same producer settings on both. This isolates the one part the two do not
share, the producer client, on the same broker: a small C program drives librdkafka (the library
confluent-kafka bundles; no Python on the path) and a small Java program drives kafka-clients, at the
same schedule, record size and settings (bench/clients/). Both run alone, one after the other, against
the local destination broker; the method is in docs/benchmarks.md beside the section.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import common
from bench.harness import BenchError
from bench.recording import parser, rendered, run_and_record
from bench.render import machine, section, table
from devtools import jvm
from devtools.harness import bench_dir, create_topic, librdkafka_path, own_stack, say

CLIENTS = Path(__file__).resolve().parent / "clients"
CLIENT_NAMES = ("librdkafka", "java")


def int_list(text: str) -> list[int]:
    """A comma-separated list of integers (``20000,50000``)."""
    return [int(x) for x in text.split(",")]


def build(out: Path) -> dict[str, list[str]]:
    """Compile both clients into ``out``; the command line that runs each (arguments to follow)."""
    cc, javac = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc"), shutil.which("javac")
    if not cc or not javac:
        raise BenchError("bench.ack_latency needs a C compiler (cc or gcc, or $CC) and javac (a JDK) on PATH")
    kafka = jvm.classpath("kafka")
    for cmd in ([cc, "-O2", "-o", str(out / "ack_latency"), str(CLIENTS / "ack_latency.c"), "-ldl", "-lpthread"],
                [javac, "-d", str(out), "-cp", kafka, str(CLIENTS / "AckLatency.java")]):
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            raise BenchError(f"{' '.join(cmd[:2])} failed:\n{done.stderr.strip()}")
    return {"librdkafka": [str(out / "ack_latency"), librdkafka_path()],
            "java": [jvm.java_executable(), "-Xms256m", "-Xmx512m", "-cp", f"{kafka}{os.pathsep}{out}", "AckLatency"]}


def measure(command: list[str], client: str, bootstrap: str, topic: str, rate: int, partitions: int, linger: int,
            args: argparse.Namespace) -> dict[str, Any]:
    """One client at one setting: its JSON line, plus ProduceRequests per second over the whole run."""
    cmd = [*command, bootstrap, topic, str(rate), str(args.duration), str(args.warmup), str(partitions), str(linger)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              timeout=args.duration + args.warmup + 120)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{client} at {rate:,}/s, {partitions} partitions: no result in {exc.timeout:.0f}s") from exc
    lines = done.stdout.splitlines()
    if done.returncode or not lines:
        raise BenchError(f"{client} at {rate:,}/s, {partitions} partitions, linger {linger} exited "
                         f"{done.returncode}: {done.stderr.strip()[-2000:]}")
    row = json.loads(lines[0])
    if client == "librdkafka":  # its statistics: ProduceRequests sent per broker
        stats = json.loads(lines[1])
        row["requests"] = sum(b.get("req", {}).get("Produce", 0) for b in stats.get("brokers", {}).values())
    row.update(client=client, rate=rate, partitions=partitions, linger_ms=linger,
               requests_per_s=round(row["requests"] / row["produced_s"]))
    say(f"{client:>10} {rate:>6,}/s {partitions:>2} partitions linger {linger}: p50 {row['p50_ms']:.2f} ms, "
        f"p99 {row['p99_ms']:.2f} ms, {row['requests_per_s']:,} requests/s")
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    now = datetime.now(timezone.utc)
    entry: dict[str, Any] = {
        "date": now.isoformat(timespec="seconds"), "quick": args.quick, "machine": common.machine_info(),
        "code": common.code_version(common.REPO), "load_at_start": common.load_average(), "rows": [],
        "setup": {"value_bytes": 100, "duration_s": args.duration, "warmup_s": args.warmup, "rounds": args.rounds,
                  "producer": "acks=all, enable.idempotence=true, compression.type=lz4, batch.size=1000000, "
                              "max.in.flight.requests.per.connection=5", "broker_heap": args.broker_heap}}
    workdir = bench_dir("ack-latency") / f"run-{now.strftime('%Y%m%dT%H%M%SZ')}"
    workdir.mkdir(parents=True)
    commands = build(workdir)
    with own_stack("ack-latency", heap=args.broker_heap) as (services, _root):
        bootstrap = services["destination"]
        topics = {p: f"acks-{now.strftime('%H%M%S')}-{p}" for p in args.partitions}
        for partitions, topic in topics.items():
            create_topic(bootstrap, topic, partitions)
        for round_ in range(args.rounds):
            for rate in args.rates:
                for partitions in args.partitions:
                    for linger in args.lingers:  # the clients alternate who goes first, round by round
                        for client in CLIENT_NAMES[::-1] if round_ % 2 else CLIENT_NAMES:
                            entry["rows"].append(measure(commands[client], client, bootstrap, topics[partitions],
                                                         rate, partitions, linger, args))
    entry["load_at_end"] = common.load_average()
    return entry


def render(entry: dict[str, Any]) -> str:
    """The section: one row per rate, partitions and linger; both clients side by side (medians over rounds)."""
    cells: dict[tuple[int, int, int], dict[str, list[dict[str, Any]]]] = {}
    for r in entry["rows"]:
        cells.setdefault((r["rate"], r["partitions"], r["linger_ms"]), {}).setdefault(r["client"], []).append(r)
    rows, gaps = [], defaultdict(list)
    for (rate, partitions, linger), by in sorted(cells.items()):
        c, j = by.get("librdkafka", []), by.get("java", [])
        if not (c and j):
            continue
        keys = ("p50_ms", "p99_ms", "requests_per_s")
        figures = [statistics.median(r[k] for r in side) for side in (c, j) for k in keys]
        rows.append([f"{rate:,}/s", partitions, f"{linger} ms", *(f"{v:.2f} ms" for v in figures[0:2]),
                     *(f"{v:.2f} ms" for v in figures[3:5]), f"{figures[2]:,.0f}", f"{figures[5]:,.0f}"])
        gaps[partitions, linger].append(figures[0] - figures[3])
    setup = entry["setup"]
    # Every gap as a range over the rates (the least favourable end first), per partition count and linger.
    spans = [f"{partitions} partition{'s' * (partitions > 1)}, linger {linger} ms: {min(g):+.2f} to {max(g):+.2f} ms"
             for (partitions, linger), g in sorted(gaps.items(), key=lambda kv: (-kv[0][0], kv[0][1]))]
    headline = ("**Headline:** librdkafka's median acknowledgement minus the Java client's, over the rates: "
                + "; ".join(spans) + "." if spans else "**Headline:** no setting ran with both clients.")
    return section(
        "## Producer acknowledgement latency: librdkafka and the Java client",
        f"`python -m bench.ack_latency` on {machine(entry['machine'])}, {entry['date'][:10]}; ureplicator at commit "
        f"`{entry['code']['commit']}`. {setup['value_bytes']}-byte records on schedule for {setup['warmup_s']:g} s "
        f"(not counted) + {setup['duration_s']:g} s, {setup['rounds']} round(s), medians over rounds; producer "
        f"settings on both: {setup['producer']}. Load average {common.fmt_load(entry['load_at_start'])} → "
        f"{common.fmt_load(entry['load_at_end'])}.",
        table(["rate", "partitions", "linger", "librdkafka p50", "librdkafka p99", "Java p50", "Java p99",
               "librdkafka requests/s", "Java requests/s"], rows, "rrrrrrrrr"),
        headline)


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.ack_latency", __doc__, heap="512m", render=True)
    cli.add_argument("--rates", type=int_list, default=[20_000, 50_000])
    cli.add_argument("--partitions", type=int_list, default=[1, 4, 16])
    cli.add_argument("--lingers", type=int_list, default=[0, 1],
                     help="producer linger.ms values (default 0,1: the low-latency setting and the worker's default)")
    cli.add_argument("--duration", type=float, default=15.0, help="measured seconds per run (default 15)")
    cli.add_argument("--warmup", type=float, default=3.0, help="seconds not counted at the start of each run")
    cli.add_argument("--rounds", type=int, default=2, help="runs per client and setting (default 2)")
    cli.add_argument("--quick", action="store_true", help="20,000/s only, 5 s each, one round")
    args = cli.parse_args(argv)
    if rendered(args, "ack-latency"):
        return 0
    if args.quick:
        args.rates, args.duration, args.warmup, args.rounds = [20_000], 5.0, 2.0, 1
    if min(args.rates + args.partitions) < 1 or args.rounds < 1 or args.duration <= 0 or min(args.lingers) < 0:
        cli.error("rates, partitions and rounds must be positive, the duration above 0, lingers 0 or more")
    return run_and_record(lambda: run(args), section="ack-latency", no_write=args.no_write)


if __name__ == "__main__":
    sys.exit(main())
