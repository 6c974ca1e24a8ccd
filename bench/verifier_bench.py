"""Benchmark the verifier: pass-1 speed, start-to-verdict time, and the cost of an incremental run.

    .venv/bin/python -m bench.verifier_bench                       # 2M records, 3 rounds; writes results + docs
    .venv/bin/python -m bench.verifier_bench --records 500000 --no-write   # a smoke run
    .venv/bin/python -m bench.verifier_bench --render               # the docs table from the newest results JSON
    .venv/bin/python -m bench.verifier_bench --quick --stack /work/stack   # 200,000 records, 1 round, nothing written
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench import render as bench_render
from bench.common import REPO, RESULTS_DIR, load_average, machine_info, proc_sample
from bench.recording import parser, run_and_record
from bench.render import table
from devtools import jvm
from devtools.harness import create_topic, end_offsets, own_stack, say
from ureplicator.common import provenance
from ureplicator.common.config import from_dict

PIPELINE = "bench"
PARTITIONS = 8
VALUE_BYTES = 88  # plus a 12-byte sequence number: about 100-byte values
BUCKET_SIZE = 10_000
MASTER = "local[2]"
DRIVER_MEMORY = "1g"
TARGET_RATE = 1_000_000  # pass-1 source records per second (issue: verifier at production scale)
TARGET_START_S = 8.0
TARGET_WARM_START_S = 3.0
TARGET_INCREMENTAL = 0.05
TARGET_FLOOR_FRACTION = 0.5
TARGET_CPU_RATIO = 3.0


def fill(services: dict[str, str], topic: str, records: int, first: int = 0) -> None:
    """Records ``first`` .. ``first + records`` round-robin over the partitions, and their mirrored copies."""
    settings = {"linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4", "enable.idempotence": True,
                "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}
    source = Producer({"bootstrap.servers": services["source"], **settings})
    destination = Producer({"bootstrap.servers": services["destination"], **settings})
    filler = (b"0123456789abcdef" * (VALUE_BYTES // 16 + 1))[:VALUE_BYTES]
    base_ts = int(time.time() * 1000) - first - records
    stamp = provenance.encoder("src", "src")  # copies made by the route src -> dst (the hop source is src)
    started = time.monotonic()
    for i in range(first, first + records):
        partition, offset = i % PARTITIONS, i // PARTITIONS  # one idempotent producer per side: dense offsets
        for producer, extra in ((source, []), (destination, [(provenance.HEADER, stamp(offset, partition))])):
            while True:
                try:
                    producer.produce(topic, key=b"key-%d" % i, value=b"%012d" % i + filler, partition=partition,
                                     headers=[("trace", b"t%d" % i), *extra], timestamp=base_ts + i)
                    break
                except BufferError:
                    producer.poll(0.05)
        if i % 10_000 == 0:
            source.poll(0)
            destination.poll(0)
        if i > first and (i - first) % 1_000_000 == 0:
            rate = (i - first) / (time.monotonic() - started)
            say(f"  written {i - first:,} records to both clusters ({rate:,.0f}/s)")
    if source.flush(600) != 0 or destination.flush(600) != 0:
        raise RuntimeError("records left unacknowledged")


def commit_ends(services: dict[str, str], topic: str) -> None:
    """The replicator group's committed offsets at the source's ends (everything mirrored)."""
    consumer = Consumer({"bootstrap.servers": services["source"], "group.id": f"ureplicator.{PIPELINE}"})
    try:
        ends = end_offsets(services["source"], topic, PARTITIONS) or {}
        consumer.commit(offsets=[TopicPartition(topic, p, e) for p, e in ends.items()], asynchronous=False)
    finally:
        consumer.close()


def _config_doc(services: dict[str, str]) -> dict[str, Any]:
    return {"pipeline": PIPELINE, "zookeeper": {"connect": services["zookeeper"]},
            "source": {"alias": "src", "bootstrap_servers": services["source"]},
            "destination": {"alias": "dst", "bootstrap_servers": services["destination"]}}


def _config_file(services: dict[str, str], work: Path) -> Path:
    """The pipeline's config as ``ureplicator verify --config`` reads it (JSON is YAML)."""
    config = work / "bench.yaml"
    config.write_text(json.dumps(_config_doc(services)))
    return config


class Verifier:
    """A warm SparkSession and the CPU clock of its JVM."""

    def __init__(self, services: dict[str, str]) -> None:
        from ureplicator.verifier import route, sparkjob
        from ureplicator.verifier.watermarks import Clusters

        # Adaptive query execution sizes the shuffles (the verifier's default).
        self.spark = sparkjob.session(MASTER, {"spark.driver.memory": DRIVER_MEMORY})
        self.pid = int(self.spark.sparkContext._jvm.ProcessHandle.current().pid())
        self.config = from_dict(_config_doc(services))
        self.clusters = Clusters(self.config.source, self.config.destination)
        self.sides = (route.KafkaSide(services["source"]), route.KafkaSide(services["destination"], alias="dst"))

    def cpu_s(self) -> float:
        sample = proc_sample(self.pid)
        return sample.cpu_s if sample else 0.0

    def verify(self, topic: str, checkpoint: Path | None = None, full: bool = False) -> dict[str, Any]:
        """One verification of ``topic``: wall and CPU seconds, the report's verdict and what it read."""
        from ureplicator.verifier import run

        incremental = run.Incremental(checkpoint, full=full, full_every_s=None) if checkpoint else None
        cpu, load, started = self.cpu_s(), load_average()[0], time.monotonic()
        report = run.verify(self.spark, self.config, self.clusters, [run.Target(topic, topic)], self.sides,
                            self.config.consumer_group, BUCKET_SIZE, incremental=incremental).to_dict()
        seconds = time.monotonic() - started
        (entry,) = report["topics"]
        return {"seconds": round(seconds, 3), "cpu_s": round(self.cpu_s() - cpu, 2),
                "load": round(max(load, load_average()[0]), 1), "status": report["status"], "mode": entry["mode"],
                "verified": report["totals"]["verified_records"], "read": report["totals"]["records_read"],
                "reader": report["spark"]["reader"]}


def consumer_performance(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    """One ConsumerPerformance run over a whole topic: its fetch rate and the CPU of its process."""
    command = [jvm.java_executable(), "-Xmx512m", "-cp", jvm.classpath("kafka"),
               "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
               "--messages", str(records), "--timeout", "60000", "--group", f"bench-floor-{time.time_ns()}"]
    before = os.times()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    after = os.times()
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or len(lines) < 2:
        raise RuntimeError(f"ConsumerPerformance failed: {done.stderr[-2000:]}")
    fields = {n.strip(): v.strip() for n, v in zip(lines[0].split(","), lines[-1].split(","), strict=False)}
    consumed = int(fields["data.consumed.in.nMsg"])
    if consumed < records:
        raise RuntimeError(f"ConsumerPerformance read {consumed:,} of {records:,} records of {topic}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"records": consumed, "fetch_s": round(float(fields["fetch.time.ms"]) / 1000, 3),
            "records_per_s": round(float(fields["fetch.nMsg.sec"])), "cpu_s": round(cpu, 2)}


def floor(services: dict[str, str], topic: str, records: int) -> dict[str, Any]:
    """Both sides read once by ConsumerPerformance: verified records per second at best, and CPU."""
    source = consumer_performance(services["source"], topic, records)
    destination = consumer_performance(services["destination"], topic, records)
    rate = round(records / (source["fetch_s"] + destination["fetch_s"]))
    cpu = source["cpu_s"] + destination["cpu_s"]
    say(f"  floor: source {source['records_per_s']:,}/s, destination {destination['records_per_s']:,}/s: "
        f"{rate:,} verified records/s reading each side once ({cpu:.1f} CPU-s with JVM start-up)")
    return {"source": source, "destination": destination, "records_per_s": rate,
            "cpu_s_per_million": round(cpu / records * 1e6, 2)}


def worker_cpu_per_million() -> dict[str, Any] | None:
    """The worker's CPU per million copied 100-byte records, from the newest full throughput results."""
    for path in sorted(RESULTS_DIR.glob("throughput-2*.json"), reverse=True):
        for entry in reversed(json.loads(path.read_text())):
            try:
                cpu = entry["summary"]["datasets"]["100B"]["variants"]["ureplicator"]["cpu_s_per_m"]
            except (KeyError, TypeError):
                continue
            if not entry.get("quick"):
                return {"cpu_s_per_million": cpu, "results_file": path.name}
    return None


def pass_one(verifier: Verifier, topic: str, records: int, rounds: int, reader: str = "digest") -> dict[str, Any]:
    from ureplicator.verifier import digest

    runs = []
    previous = os.environ.pop(digest.READER_ENV, None)
    if reader == "kafka":
        os.environ[digest.READER_ENV] = "kafka"
    try:
        for index in range(rounds):
            result = verifier.verify(topic)
            if result["status"] != "OK" or result["verified"] != records or result["reader"] != reader:
                raise RuntimeError(f"unexpected verdict: {result}")
            runs.append(result)
            say(f"  pass 1 ({reader} reader) round {index + 1}/{rounds}: {records:,} records in "
                f"{result['seconds']:.1f}s ({records / result['seconds']:,.0f}/s, {result['cpu_s']:.1f} CPU-s, "
                f"load {result['load']})")
    finally:
        os.environ.pop(digest.READER_ENV, None)
        if previous is not None:
            os.environ[digest.READER_ENV] = previous
    median = statistics.median(r["seconds"] for r in runs)
    cpu = statistics.median(r["cpu_s"] for r in runs)
    return {"records": records, "rounds": runs, "median_s": median, "records_per_s": round(records / median),
            "cpu_s_per_million": round(cpu / records * 1e6, 2)}


def start_to_verdict(services: dict[str, str], topic: str, rounds: int, work: Path) -> dict[str, Any]:
    """``python -m ureplicator.verifier`` as a new process, as a CronJob runs it; the full pass each time."""
    config = _config_file(services, work)
    runs: list[dict[str, Any]] = []
    first: dict[str, Any] = {}
    for index in range(-1, rounds):  # round -1: the first cold run, which dumps the class archive (verifier/cds.py)
        started, load = time.monotonic(), load_average()[0]
        done = subprocess.run(
            [sys.executable, "-m", "ureplicator.verifier", "--config", str(config), "--topic", f"{topic}={topic}",
             "--master", "local[2]", "--output", str(work / f"reports-{index}"), "--full"],
            cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(f"the verifier failed: {done.stderr[-2000:]}")
        result = {"seconds": round(seconds, 2), "load": round(max(load, load_average()[0]), 1)}
        if index < 0:
            first = result
        else:
            runs.append(result)
        say(f"  start to verdict {'first run' if index < 0 else f'round {index + 1}/{rounds}'}: {seconds:.1f}s")
    return {"records": 100_000, "rounds": runs, "median_s": statistics.median(r["seconds"] for r in runs),
            "first_run": first}


def incremental(verifier: Verifier, services: dict[str, str], topic: str, records: int, work: Path) -> dict[str, Any]:
    """A full run writes the checkpoint; 1 % more records arrive; incremental run vs full run of the same data."""
    checkpoint = work / "checkpoint.json"
    verifier.verify(topic, checkpoint, full=True)
    more = max(PARTITIONS, records // 100)
    fill(services, topic, more, first=records)
    commit_ends(services, topic)
    incremental_run = verifier.verify(topic, checkpoint)
    full_run = verifier.verify(topic, checkpoint, full=True)
    for result, mode, verified in ((incremental_run, "incremental", more), (full_run, "full", records + more)):
        if result["status"] != "OK" or result["mode"] != mode or result["verified"] != verified:
            raise RuntimeError(f"unexpected {mode} run: {result}")
    ratio = incremental_run["seconds"] / full_run["seconds"]
    say(f"  incremental run after {more:,} new records: {incremental_run['seconds']:.1f}s, full run "
        f"{full_run['seconds']:.1f}s (ratio {ratio:.3f})")
    return {"base_records": records, "new_records": more, "incremental": incremental_run, "full": full_run,
            "ratio": round(ratio, 4)}


def warm_new_topic(verifier: Verifier, services: dict[str, str], known: str, args: argparse.Namespace,
                   work: Path) -> dict[str, Any]:
    """A warm session (``cli.run_once`` on the bench's SparkSession) that verified ``known`` gets a new topic."""
    from ureplicator.verifier import cli

    config, output = _config_file(services, work), work / "warm-reports"
    command_line = argparse.ArgumentParser()
    cli.add_arguments(command_line)

    def run_once(*topics: str) -> int:
        command = ["--config", str(config), "--output", str(output), "--master", MASTER,
                   "--bucket-size", str(BUCKET_SIZE), *[a for t in topics for a in ("--topic", f"{t}={t}")]]
        return cli.run_once(command_line.parse_args(command), lambda: verifier.spark)

    if run_once(known) != 0:  # the session's earlier run: the known topic is in the checkpoint
        raise RuntimeError(f"the warm session's first run of {known} failed")
    runs = []
    for index in range(args.rounds):
        fresh = f"bench-new-{index}-{time.time_ns()}"
        write_topic(services, fresh, 100_000)
        load, started = load_average()[0], time.monotonic()
        status = run_once(known, fresh)
        seconds = time.monotonic() - started
        report = json.loads((output / "latest.json").read_text())
        entry = next(t for t in report["topics"] if t["topic"] == fresh)
        verified = sum(p["verified_records"] for p in entry["partitions"])
        if status != 0 or entry["status"] != "OK" or entry["mode"] != "full" or verified != 100_000:
            raise RuntimeError(f"unexpected warm run of a new topic (exit {status}): {entry}")
        runs.append({"seconds": round(seconds, 3), "load": round(max(load, load_average()[0]), 1),
                     "reader": report["spark"]["reader"]})
        say(f"  warm start to verdict, new 100,000-record topic, round {index + 1}/{args.rounds}: {seconds:.2f}s")
    return {"records": 100_000, "rounds": runs, "median_s": statistics.median(r["seconds"] for r in runs)}


def write_topic(services: dict[str, str], topic: str, records: int, config: dict[str, str] | None = None) -> None:
    """``topic`` on both clusters holding ``records`` records (mirrored copies on the destination), ends committed."""
    for bootstrap in (services["source"], services["destination"]):
        create_topic(bootstrap, topic, PARTITIONS, {"retention.ms": "-1", **(config or {})})
    fill(services, topic, records)
    commit_ends(services, topic)


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def render(entry: dict[str, Any]) -> str:
    """The docs section, from one results entry (nothing in it is typed by hand)."""
    m, p1, start, inc = entry["machine"], entry["pass1"], entry["start_to_verdict"], entry["incremental"]
    loads = [r["load"] for r in p1["rounds"]] + [r["load"] for r in start["rounds"]]
    # Rows measured later than the first results: older entries have none.
    limit, kafka, worker, warm = (entry.get(k) for k in ("floor", "pass1_kafka", "worker", "warm_new_topic"))
    ratio = p1["cpu_s_per_million"] / worker["cpu_s_per_million"] if worker else 0.0
    rows = [
        [f"pass 1, clean full verification of {p1['records']:,} records (median of {len(p1['rounds'])}, warm Spark; "
         f"{p1['records']:,} source + {p1['records']:,} destination records read)",
         f"{p1['records_per_s']:,} records/s ({p1['median_s']:.1f} s)", f"{TARGET_RATE:,} records/s",
         _verdict(p1["records_per_s"] >= TARGET_RATE)],
        ["Spark JVM CPU per million verified records (pass 1)", f"{p1['cpu_s_per_million']:.1f} CPU-s", "", ""],
        *([[f"floor: ConsumerPerformance reading the source ({limit['source']['records_per_s']:,} records/s) and "
            f"the destination ({limit['destination']['records_per_s']:,} records/s) once each",
            f"{limit['records_per_s']:,} verified records/s", "", ""],
           ["pass 1 with the digest reader as a fraction of the floor", f"{p1['floor_fraction']:.2f}×",
            f"≥ {TARGET_FLOOR_FRACTION}×", _verdict(p1["floor_fraction"] >= TARGET_FLOOR_FRACTION)]] if limit else []),
        *([["pass 1 with Spark's Kafka source (the fallback), same records", f"{kafka['records_per_s']:,} records/s "
            f"({kafka['floor_fraction']:.2f}× the floor), {kafka['cpu_s_per_million']:.1f} CPU-s per million", "",
            ""]] if limit and kafka else []),
        *([[f"CPU per verified record against the worker's per copied record ({worker['cpu_s_per_million']:.2f} "
            f"CPU-s per million, `bench/results/{worker['results_file']}`)", f"{ratio:.1f}×",
            f"≤ {TARGET_CPU_RATIO:.0f}×", _verdict(ratio <= TARGET_CPU_RATIO)]] if limit and worker else []),
        [f"start to verdict, 100,000-record topic, new `python -m ureplicator.verifier` process (median of "
         f"{len(start['rounds'])})", f"{start['median_s']:.1f} s", f"< {TARGET_START_S:.0f} s",
         _verdict(start["median_s"] < TARGET_START_S)],
        *([["the same, the first run (no class archive yet: it dumps one at exit, verifier/cds.py)",
            f"{start['first_run']['seconds']:.1f} s", "", ""]] if start.get("first_run") else []),
        *([[f"warm start to verdict: a `verify --every`-style session (warm SparkSession, one run of the command) "
            f"gets a new {warm['records']:,}-record topic (median of {len(warm['rounds'])})",
            f"{warm['median_s']:.2f} s", f"< {TARGET_WARM_START_S:.0f} s",
            _verdict(warm["median_s"] < TARGET_WARM_START_S)]] if warm else []),
        [f"incremental run after {inc['new_records']:,} new records (1 %) vs full run of the "
         f"{inc['base_records'] + inc['new_records']:,}", f"{inc['incremental']['seconds']:.2f} s vs "
         f"{inc['full']['seconds']:.1f} s = {inc['ratio'] * 100:.1f} %", f"≤ {TARGET_INCREMENTAL * 100:.0f} %",
         _verdict(inc["ratio"] <= TARGET_INCREMENTAL)],
    ]
    lines = [
        "## Verifier",
        "",
        f"`python -m bench.verifier_bench` on {entry['date']}: {m['cores']} cores ({m['cpu_model']}), "
        f"{m['ram_bytes'] / 2**30:.0f} GiB, Python {m['python']}, {m['java']}; Spark {entry['spark']} "
        f"`{entry['master']}`, driver memory {entry['driver_memory']}, {entry['partitions']} partitions, "
        f"~{entry['value_bytes'] + 12}-byte values with one header, bucket size {entry['bucket_size']:,}. Results: "
        f"`bench/results/{entry['results_file']}`. 1-minute load average during the runs: {min(loads):.1f} to "
        f"{max(loads):.1f} (2 cores: above 2 the verifier got less than the whole machine).",
        "",
        *table(["measurement", "result", "target", ""], rows, "lrr"),
        "",
        f"Records read by the incremental run: {inc['incremental']['read']['source']:,} source, "
        f"{inc['incremental']['read']['destination']:,} destination (the full run: "
        f"{inc['full']['read']['source']:,} and {inc['full']['read']['destination']:,}).",
    ]
    for note in entry.get("notes") or []:  # a paragraph each
        lines += ["", note]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="verifier-bench-"))
    with own_stack("verifier", heap="256m", running=args.stack) as (services, _):
        stamp = int(time.time())
        small, big = f"bench-100k-{stamp}", f"bench-{args.records}-{stamp}"
        for topic, records in ((small, 100_000), (big, args.records)):
            say(f"writing {records:,} records to both clusters ({topic})")
            write_topic(services, topic, records, {"segment.bytes": str(256 * 1024 * 1024)})
        say("the floor (ConsumerPerformance)")
        limit = floor(services, big, args.records)
        say("start to verdict (new processes)")
        start = start_to_verdict(services, small, args.rounds, work)
        verifier = Verifier(services)
        say("warming Spark up")
        verifier.verify(small)
        say("pass 1")
        p1 = pass_one(verifier, big, args.records, args.rounds)
        p1_kafka = pass_one(verifier, big, args.records, args.rounds, reader="kafka")
        say("incremental")
        inc = incremental(verifier, services, big, args.records, work)
        say("warm start to verdict (a new topic)")
        warm = warm_new_topic(verifier, services, small, args, work)
        entry = {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "quick": args.quick, "machine": machine_info(),
            "spark": verifier.spark.version, "master": MASTER, "driver_memory": DRIVER_MEMORY,
            "partitions": PARTITIONS, "value_bytes": VALUE_BYTES, "bucket_size": BUCKET_SIZE,
            "floor": limit,
            "pass1": {**p1, "floor_fraction": round(p1["records_per_s"] / limit["records_per_s"], 3)},
            "pass1_kafka": {**p1_kafka, "floor_fraction": round(p1_kafka["records_per_s"] / limit["records_per_s"], 3)},
            "worker": worker_cpu_per_million(), "start_to_verdict": start, "incremental": inc,
            "warm_new_topic": warm, "notes": args.note,
        }
        verifier.spark.stop()
    return entry


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.verifier_bench", __doc__)
    cli.add_argument("--records", type=int, default=2_000_000, help="records for pass 1 (default 2,000,000)")
    cli.add_argument("--rounds", type=int, default=3)
    cli.add_argument("--quick", action="store_true", help="a smoke run: 200,000 records, 1 round, nothing written")
    cli.add_argument("--stack", type=Path, default=None, metavar="DIR",
                     help="use the stack already running in DIR (its stack.json) instead of starting one")
    cli.add_argument("--render", action="store_true", help="only re-render the docs from the newest results")
    cli.add_argument("--note", action="append", default=[], metavar="TEXT",
                     help="a sentence printed under the docs table (e.g. how loaded the machine was)")
    args = cli.parse_args(argv)
    if args.render:
        return bench_render.main(["verifier-bench"])
    if args.quick:
        args.records, args.rounds, args.no_write = 200_000, 1, True
    return run_and_record(lambda: run(args), section="verifier-bench", no_write=args.no_write)


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
