"""Benchmark the verifier: pass-1 speed, start-to-verdict time, and the cost of an incremental run.

    .venv/bin/python -m bench.verifier_bench                  # 2M records, 3 rounds; writes results + docs
    .venv/bin/python -m bench.verifier_bench --quick          # 200,000 records, 1 round, nothing written
    .venv/bin/python -m bench.verifier_bench --render         # the docs section from the newest results JSON
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from unittest import mock

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.common import REPO, RESULTS_DIR, entries, load_average, machine_info, proc_sample
from bench.recording import parser, run_and_record
from bench.render import main as render_main
from bench.render import section, table
from devtools import jvm
from devtools.harness import create_topic, end_offsets, own_stack, say
from ureplicator.common import provenance
from ureplicator.common.config import from_dict

PIPELINE = "bench"
PARTITIONS = 8
VALUE_BYTES = 88  # plus a 12-byte sequence number: about 100-byte values
SMALL = 100_000  # records of the start-to-verdict topics
BUCKET_SIZE = 10_000
MASTER = "local[2]"
DRIVER_MEMORY = "1g"
# What the issue asks of each measurement: the target as shown, and when a value meets it.
TARGETS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "rate": ("1,000,000 records/s", lambda v: v >= 1_000_000),  # pass 1: the verifier at production scale
    "floor": ("≥ 0.5×", lambda v: v >= 0.5),
    "cpu": ("≤ 3×", lambda v: v <= 3.0),
    "start": ("< 8 s", lambda v: v < 8.0),
    "warm": ("< 3 s", lambda v: v < 3.0),
    "incremental": ("≤ 5 %", lambda v: v <= 0.05),
}
Services = dict[str, str]


def fill(services: Services, topic: str, records: int, first: int = 0) -> None:
    """Records ``first`` .. ``first + records`` round-robin over the partitions, and their mirrored copies."""
    settings = {"linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4", "enable.idempotence": True,
                "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}
    source, destination = (Producer({"bootstrap.servers": services[side], **settings})
                           for side in ("source", "destination"))
    filler = (b"0123456789abcdef" * (VALUE_BYTES // 16 + 1))[:VALUE_BYTES]
    base_ts = int(time.time() * 1000) - first - records
    stamp = provenance.encoder("src", "src")  # copies made by the route src -> dst (the hop source is src)
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
    if source.flush(600) != 0 or destination.flush(600) != 0:
        raise RuntimeError("records left unacknowledged")


def write_topic(services: Services, topic: str, records: int, config: dict[str, str] | None = None) -> None:
    """``topic`` on both clusters holding ``records`` records, the replicator group's offsets at the source's ends."""
    for bootstrap in (services["source"], services["destination"]):
        create_topic(bootstrap, topic, PARTITIONS, {"retention.ms": "-1", **(config or {})})
    fill(services, topic, records)
    commit_ends(services, topic)


def commit_ends(services: Services, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": services["source"], "group.id": f"ureplicator.{PIPELINE}"})
    try:
        ends = end_offsets(services["source"], topic, PARTITIONS) or {}
        consumer.commit(offsets=[TopicPartition(topic, p, e) for p, e in ends.items()], asynchronous=False)
    finally:
        consumer.close()


def _config_doc(services: Services) -> dict[str, Any]:
    return {"pipeline": PIPELINE, "zookeeper": {"connect": services["zookeeper"]},
            "source": {"alias": "src", "bootstrap_servers": services["source"]},
            "destination": {"alias": "dst", "bootstrap_servers": services["destination"]}}


def _config_file(services: Services, work: Path) -> Path:
    """The pipeline's config as ``ureplicator verify --config`` reads it (JSON is YAML)."""
    config = work / "bench.yaml"
    config.write_text(json.dumps(_config_doc(services)))
    return config


def _measured(fn: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """``fn()``, and its wall seconds with the highest 1-minute load average seen around it."""
    load, started = load_average()[0], time.monotonic()
    out = fn()
    return out, {"seconds": round(time.monotonic() - started, 3), "load": round(max(load, load_average()[0]), 1)}


def _median_s(runs: list[dict[str, Any]]) -> float:
    return statistics.median(r["seconds"] for r in runs)


class Verifier:
    """A warm SparkSession and the CPU clock of its JVM."""

    def __init__(self, services: Services) -> None:
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
        cpu = self.cpu_s()
        report, timing = _measured(lambda: run.verify(
            self.spark, self.config, self.clusters, [run.Target(topic, topic)], self.sides,
            self.config.consumer_group, BUCKET_SIZE, incremental=incremental).to_dict())
        return {**timing, "cpu_s": round(self.cpu_s() - cpu, 2), "status": report["status"],
                "mode": report["topics"][0]["mode"], "verified": report["totals"]["verified_records"],
                "read": report["totals"]["records_read"], "reader": report["spark"]["reader"]}


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
    if (consumed := int(fields["data.consumed.in.nMsg"])) < records:
        raise RuntimeError(f"ConsumerPerformance read {consumed:,} of {records:,} records of {topic}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"records": consumed, "fetch_s": round(float(fields["fetch.time.ms"]) / 1000, 3),
            "records_per_s": round(float(fields["fetch.nMsg.sec"])), "cpu_s": round(cpu, 2)}


def floor(services: Services, topic: str, records: int) -> dict[str, Any]:
    """Both sides read once by ConsumerPerformance: verified records per second at best, and CPU."""
    source, destination = (consumer_performance(services[side], topic, records) for side in ("source", "destination"))
    rate = round(records / (source["fetch_s"] + destination["fetch_s"]))
    say(f"  floor: {rate:,} verified records/s reading each side once")
    return {"source": source, "destination": destination, "records_per_s": rate,
            "cpu_s_per_million": round((source["cpu_s"] + destination["cpu_s"]) / records * 1e6, 2)}


def worker_cpu_per_million() -> dict[str, Any] | None:
    """The worker's CPU per million copied 100-byte records, from the newest full throughput results."""
    for path in sorted(RESULTS_DIR.glob("throughput-2*.json"), reverse=True):
        for entry in reversed(entries(path)):
            try:
                cpu = entry["summary"]["datasets"]["100B"]["variants"]["ureplicator"]["cpu_s_per_m"]
            except (KeyError, TypeError):
                continue
            if not entry.get("quick"):
                return {"cpu_s_per_million": cpu, "results_file": path.name}
    return None


def pass_one(verifier: Verifier, topic: str, records: int, rounds: int, reader: str = "digest") -> dict[str, Any]:
    """Median of ``rounds`` full verifications on the warm session; ``reader`` "kafka" is Spark's Kafka source."""
    from ureplicator.verifier import digest

    runs = []
    with mock.patch.dict(os.environ, {digest.READER_ENV: reader}):  # anything but "kafka" is the digest reader
        for index in range(rounds):
            result = verifier.verify(topic)
            runs.append(result)
            if result["status"] != "OK" or result["verified"] != records or result["reader"] != reader:
                raise RuntimeError(f"unexpected verdict: {result}")
            say(f"  pass 1 ({reader} reader) round {index + 1}/{rounds}: {records / result['seconds']:,.0f}/s, "
                f"{result['cpu_s']:.1f} CPU-s, load {result['load']}")
    median = _median_s(runs)
    return {"records": records, "rounds": runs, "median_s": median, "records_per_s": round(records / median),
            "cpu_s_per_million": round(statistics.median(r["cpu_s"] for r in runs) / records * 1e6, 2)}


def start_to_verdict(services: Services, topic: str, rounds: int, work: Path) -> dict[str, Any]:
    """``python -m ureplicator.verifier`` as a new process, as a CronJob runs it; the full pass each time."""
    config = _config_file(services, work)
    runs: list[dict[str, Any]] = []
    for index in range(-1, rounds):  # round -1: the first cold run, which dumps the class archive (verifier/cds.py)
        done, result = _measured(lambda i=index: subprocess.run(
            [sys.executable, "-m", "ureplicator.verifier", "--config", str(config), "--topic", f"{topic}={topic}",
             "--master", MASTER, "--output", str(work / f"reports-{i}"), "--full"],
            cwd=REPO, capture_output=True, text=True, timeout=600, check=False))
        if done.returncode != 0:
            raise RuntimeError(f"the verifier failed: {done.stderr[-2000:]}")
        runs.append(result)
        which = "the first run" if index < 0 else f"round {index + 1}/{rounds}"
        say(f"  start to verdict, {which}: {result['seconds']:.1f} s")
    return {"records": SMALL, "rounds": runs[1:], "median_s": _median_s(runs[1:]), "first_run": runs[0]}


def incremental(verifier: Verifier, services: Services, topic: str, records: int, work: Path) -> dict[str, Any]:
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
    say(f"  incremental run after {more:,} new records: {ratio:.3f} of a full run")
    return {"base_records": records, "new_records": more, "incremental": incremental_run, "full": full_run,
            "ratio": round(ratio, 4)}


def warm_new_topic(verifier: Verifier, services: Services, known: str, rounds: int, work: Path) -> dict[str, Any]:
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
    for index in range(rounds):
        fresh = f"bench-new-{index}-{time.time_ns()}"
        write_topic(services, fresh, SMALL)
        status, result = _measured(lambda t=fresh: run_once(known, t))
        report = json.loads((output / "latest.json").read_text())
        entry = next(t for t in report["topics"] if t["topic"] == fresh)
        verified = sum(p["verified_records"] for p in entry["partitions"])
        if status != 0 or entry["status"] != "OK" or entry["mode"] != "full" or verified != SMALL:
            raise RuntimeError(f"unexpected warm run of a new topic (exit {status}): {entry}")
        runs.append({**result, "reader": report["spark"]["reader"]})
        say(f"  warm start to verdict, new topic, round {index + 1}/{rounds}: {result['seconds']:.2f}s")
    return {"records": SMALL, "rounds": runs, "median_s": _median_s(runs)}


def _row(label: str, result: str, target: str = "", value: float = 0.0) -> list[str]:
    """A table row; with a ``target`` of ``TARGETS``, that target and whether ``value`` met it."""
    if not target:
        return [label, result, "", ""]
    shown, met = TARGETS[target]
    return [label, result, shown, "met" if met(value) else "**missed**"]


def render(entry: dict[str, Any]) -> str:
    """The docs section, from one results entry (older entries lack the floor, worker and warm rows)."""
    m, p1, start, inc = entry["machine"], entry["pass1"], entry["start_to_verdict"], entry["incremental"]
    limit, kafka, worker, warm = (entry.get(k) for k in ("floor", "pass1_kafka", "worker", "warm_new_topic"))
    loads = [r["load"] for r in p1["rounds"] + start["rounds"]]
    rows = [_row(f"pass 1: full verification of {p1['records']:,} records, warm Spark (median of "
                 f"{len(p1['rounds'])})", f"{p1['records_per_s']:,} records/s ({p1['median_s']:.1f} s)", "rate",
                 p1["records_per_s"]),
            _row("Spark JVM CPU per million verified records (pass 1)", f"{p1['cpu_s_per_million']:.1f} CPU-s")]
    if limit:
        rows += [_row(f"floor: ConsumerPerformance reading the source ({limit['source']['records_per_s']:,}/s) and "
                      f"the destination ({limit['destination']['records_per_s']:,}/s) once each",
                      f"{limit['records_per_s']:,} verified records/s"),
                 _row("pass 1 as a fraction of the floor", f"{p1['floor_fraction']:.2f}×", "floor",
                      p1["floor_fraction"])]
    if limit and kafka:
        rows.append(_row("pass 1 with Spark's Kafka source (the fallback reader)", f"{kafka['records_per_s']:,} "
                         f"records/s ({kafka['floor_fraction']:.2f}× the floor), {kafka['cpu_s_per_million']:.1f} "
                         "CPU-s per million"))
    if limit and worker:
        ratio = p1["cpu_s_per_million"] / worker["cpu_s_per_million"]
        rows.append(_row(f"CPU per verified record against the worker's per copied record "
                         f"({worker['cpu_s_per_million']:.2f} CPU-s per million, `bench/results/"
                         f"{worker['results_file']}`)", f"{ratio:.1f}×", "cpu", ratio))
    rows.append(_row(f"start to verdict: a new `python -m ureplicator.verifier` process, {SMALL:,} records "
                     f"(median of {len(start['rounds'])})", f"{start['median_s']:.1f} s", "start", start["median_s"]))
    if start.get("first_run"):
        rows.append(_row("the same, its first run (it dumps the class archive)",
                         f"{start['first_run']['seconds']:.1f} s"))
    if warm:
        rows.append(_row(f"warm start to verdict: a `verify --every` session gets a new {warm['records']:,}-record "
                         f"topic (median of {len(warm['rounds'])})", f"{warm['median_s']:.2f} s", "warm",
                         warm["median_s"]))
    rows.append(_row(f"incremental run after {inc['new_records']:,} new records (1 %) vs a full run of "
                     f"{inc['base_records'] + inc['new_records']:,}", f"{inc['incremental']['seconds']:.2f} s vs "
                     f"{inc['full']['seconds']:.1f} s = {inc['ratio'] * 100:.1f} %", "incremental", inc["ratio"]))
    read = {k: inc[k]["read"] for k in ("incremental", "full")}
    return section(
        "## Verifier",
        f"`python -m bench.verifier_bench` on {entry['date']}: {m['cores']} cores ({m['cpu_model']}), "
        f"{m['ram_bytes'] / 2**30:.0f} GiB, Python {m['python']}, {m['java']}; Spark {entry['spark']} "
        f"`{entry['master']}`, driver memory {entry['driver_memory']}, {entry['partitions']} partitions, "
        f"~{entry['value_bytes'] + 12}-byte values, bucket size {entry['bucket_size']:,}. Results: "
        f"`bench/results/{entry['results_file']}`. 1-minute load average during the runs: {min(loads):.1f} to "
        f"{max(loads):.1f} (above {m['cores']} the verifier got less than the whole machine).",
        table(["measurement", "result", "target", ""], rows, "lrr"),
        f"Records read by the incremental run: {read['incremental']['source']:,} source, "
        f"{read['incremental']['destination']:,} destination (the full run: {read['full']['source']:,} and "
        f"{read['full']['destination']:,}).",
        *(entry.get("notes") or []),  # a paragraph each
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="verifier-bench-"))
    with own_stack("verifier", heap="256m", running=args.stack) as (services, _):
        stamp = int(time.time())
        small, big = f"bench-100k-{stamp}", f"bench-{args.records}-{stamp}"
        for topic, records in ((small, SMALL), (big, args.records)):
            say(f"writing {records:,} records to both clusters ({topic})")
            write_topic(services, topic, records, {"segment.bytes": str(256 * 1024 * 1024)})
        say("the floor (ConsumerPerformance)")
        limit = floor(services, big, args.records)
        say("start to verdict (new processes)")
        start = start_to_verdict(services, small, args.rounds, work)
        verifier = Verifier(services)
        say("warming Spark up")
        verifier.verify(small)
        p1 = pass_one(verifier, big, args.records, args.rounds)
        p1_kafka = pass_one(verifier, big, args.records, args.rounds, reader="kafka")
        say("incremental")
        inc = incremental(verifier, services, big, args.records, work)
        say("warm start to verdict (a new topic)")
        warm = warm_new_topic(verifier, services, small, args.rounds, work)
        entry = {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "quick": args.quick, "machine": machine_info(),
            "spark": verifier.spark.version, "master": MASTER, "driver_memory": DRIVER_MEMORY,
            "partitions": PARTITIONS, "value_bytes": VALUE_BYTES, "bucket_size": BUCKET_SIZE, "floor": limit,
            **{key: {**p, "floor_fraction": round(p["records_per_s"] / limit["records_per_s"], 3)}
               for key, p in (("pass1", p1), ("pass1_kafka", p1_kafka))},
            "worker": worker_cpu_per_million(), "start_to_verdict": start, "incremental": inc,
            "warm_new_topic": warm, "notes": args.note,
        }
        verifier.spark.stop()
    shutil.rmtree(work, ignore_errors=True)  # reports and checkpoints of a finished run; a failed one keeps them
    return entry


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.verifier_bench", __doc__)
    cli.add_argument("--records", type=int, default=2_000_000, help="records for pass 1 (default 2,000,000)")
    cli.add_argument("--rounds", type=int, default=3)
    cli.add_argument("--quick", action="store_true", help="a smoke run: 200,000 records, 1 round, nothing written")
    cli.add_argument("--stack", type=Path, default=None, metavar="DIR",
                     help="use the stack already running in DIR (its stack.json) instead of starting one")
    cli.add_argument("--render", action="store_true", help="only re-render the docs from the newest results")
    cli.add_argument("--note", action="append", default=[], metavar="TEXT", help="a paragraph under the docs table")
    args = cli.parse_args(argv)
    if args.render:
        return render_main(["verifier-bench"])
    if args.quick:
        args.records, args.rounds, args.no_write = 200_000, 1, True
    return run_and_record(lambda: run(args), section="verifier-bench", no_write=args.no_write)


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
