"""Benchmark the verifier: records verified per second on local Spark for 1M and 10M mirrored records.

Standalone (not part of ``make test``)::

    .venv/bin/python bench/verifier_bench.py                      # 1M and 10M, local[2]
    .venv/bin/python bench/verifier_bench.py --records 1000000    # 1M only
    .venv/bin/python bench/verifier_bench.py --stack /tmp/s       # reuse a running `stack up --dir /tmp/s`

It starts a local stack (unless ``--stack``), writes N records to a source
topic and the same records with their ``urep`` header to a destination topic
(what the replicator writes, without running it, so only the verifier is
measured), commits the end offsets for the replicator group, then times
``verifier.run.verify`` on a warm SparkSession. Each case has a time budget
(``--budget-min``); a case that exceeds it is cancelled and recorded as such.
The result replaces the section between the verifier-bench markers in
docs/benchmarks.md (``--no-write`` to skip).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from common import provenance  # noqa: E402
from common.config import from_dict  # noqa: E402
from devtools import stack  # noqa: E402

START = "<!-- verifier-bench:start -->"
END = "<!-- verifier-bench:end -->"
DOC = REPO / "docs" / "benchmarks.md"
PIPELINE = "bench"


def say(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"retention.ms": "-1", "segment.bytes": str(256 * 1024 * 1024)}
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(60)


def fill(services: dict[str, str], topic: str, records: int, partitions: int, value_bytes: int) -> None:
    """N records round-robin over the partitions on the source; their mirrored copies on the destination."""
    settings = {"linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4", "enable.idempotence": True,
                "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}
    source = Producer({"bootstrap.servers": services["source"], **settings})
    destination = Producer({"bootstrap.servers": services["destination"], **settings})
    filler = (b"0123456789abcdef" * (value_bytes // 16 + 1))[:value_bytes]
    base_ts = int(time.time() * 1000) - records
    started = time.monotonic()
    for i in range(records):
        partition = i % partitions
        offset = i // partitions  # one idempotent producer per cluster: offsets are dense and in order
        key = b"key-%d" % i
        value = b"%012d" % i + filler
        headers = [("trace", b"t%d" % i)]
        urep = [(provenance.HEADER, provenance.encode(offset, partition, "src"))]
        for producer, extra in ((source, []), (destination, urep)):
            while True:
                try:
                    producer.produce(topic, key=key, value=value, partition=partition, headers=headers + extra,
                                     timestamp=base_ts + i)
                    break
                except BufferError:
                    producer.poll(0.05)
        if i % 10_000 == 0:
            source.poll(0)
            destination.poll(0)
        if i and i % 1_000_000 == 0:
            say(f"  written {i:,} records to both clusters ({i / (time.monotonic() - started):,.0f}/s)")
    for producer in (source, destination):
        if producer.flush(600) != 0:
            raise RuntimeError("records left unacknowledged")


def commit_ends(services: dict[str, str], topic: str, partitions: int) -> None:
    consumer = Consumer({"bootstrap.servers": services["source"], "group.id": f"ureplicator.{PIPELINE}"})
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
        consumer.commit(offsets=[TopicPartition(topic, p, e) for p, e in enumerate(ends)], asynchronous=False)
    finally:
        consumer.close()


def measure(spark: Any, services: dict[str, str], topic: str, budget_s: float, bucket_size: int) -> dict[str, Any]:
    """Verify ``topic`` once; returns the report dict and the wall time, or a timeout marker."""
    from verifier import run
    from verifier.sparkjob import KafkaSide
    from verifier.watermarks import Clusters

    config = from_dict({
        "pipeline": PIPELINE,
        "zookeeper": {"connect": services["zookeeper"]},
        "source": {"alias": "src", "bootstrap_servers": services["source"]},
        "destination": {"alias": "dst", "bootstrap_servers": services["destination"]},
    })
    clusters = Clusters(config.source, config.destination)
    sides = (KafkaSide(services["source"]), KafkaSide(services["destination"]))
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["report"] = run.verify(spark, config, clusters, [run.Target(topic, topic)], sides,
                                           config.consumer_group, bucket_size).to_dict()
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    started = time.monotonic()
    load = os.getloadavg()[0]
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(budget_s)
    elapsed = time.monotonic() - started
    load = max(load, os.getloadavg()[0])
    if thread.is_alive():
        spark.sparkContext.cancelAllJobs()
        thread.join(60)
        return {"timed_out": True, "seconds": elapsed, "load": load}
    if "error" in outcome:
        raise outcome["error"]
    return {"timed_out": False, "seconds": elapsed, "report": outcome["report"], "load": load}


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kb = int(next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
                     .split()[1])
        mem = f"{mem_kb / 1024 / 1024:.0f} GB RAM"
    except (OSError, StopIteration, ValueError):
        mem = "unknown RAM"
    system = f"{platform.system()} {platform.release()}"
    return f"{os.cpu_count()} cores ({cpu}), {mem}, {system}, Python {platform.python_version()}"


def section(rows: list[dict[str, Any]], args: argparse.Namespace, spark_version: str) -> str:
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    lines = [
        START,
        "## Verifier",
        "",
        f"Measured {today} with `bench/verifier_bench.py` on {machine()}.",
        f"Spark {spark_version} `{args.master}`, driver memory {args.driver_memory}, "
        f"`spark.sql.shuffle.partitions={args.shuffle_partitions}`, {args.partitions} partitions per topic, "
        f"~{args.value_bytes + 12}-byte values, one header, bucket size {args.bucket_size:,}; both Kafka brokers "
        "(256 MB heap each) on the same machine. Time is one clean verification (pass 1 only: no bucket differs) "
        "on a warm SparkSession, from the offset snapshot to the finished report, reading both clusters in full. "
        "The machine is shared: *load* is the higher 1-minute load average seen at the start and end of the run "
        "(2 cores, so anything above 2 means the verifier got less than the whole machine).",
        "",
        "| records | verification time | records verified / s | load | status |",
        "|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if row.get("timed_out"):
            lines.append(f"| {row['records']:,} | > {row['seconds'] / 60:.0f} min | — | {row['load']:.1f} | "
                         f"did not finish within the {args.budget_min:.0f}-minute budget |")
        else:
            rate = row["verified"] / row["seconds"]
            lines.append(f"| {row['records']:,} | {row['seconds']:.1f} s | {rate:,.0f} | {row['load']:.1f} | "
                         f"{row['status']} |")
    lines += [
        "",
        "Reproduce: `.venv/bin/python bench/verifier_bench.py` (about 8 minutes for both cases on this machine, "
        "most of it writing the 10M records).",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_section(text: str) -> None:
    current = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if START in current and END in current:
        head, rest = current.split(START, 1)
        _, tail = rest.split(END, 1)
        updated = head + text.rstrip("\n") + tail
    else:
        updated = current.rstrip("\n") + "\n\n" + text
    DOC.write_text(updated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-bytes", type=int, default=88)
    parser.add_argument("--bucket-size", type=int, default=10_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--budget-min", type=float, default=15.0, help="time budget per verification")
    parser.add_argument("--stack", type=Path, default=None, help="reuse a running stack directory")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)

    own_stack = args.stack is None
    directory = Path(tempfile.mkdtemp(prefix="verifier-bench-")) if own_stack else args.stack
    if own_stack:
        say(f"starting a local stack in {directory}")
        services = stack.up(directory)
    else:
        import json

        services = json.loads((directory / "stack.json").read_text())
    rows: list[dict[str, Any]] = []
    try:
        from verifier import sparkjob

        spark = sparkjob.session(args.master, {
            "spark.driver.memory": args.driver_memory,
            "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        })
        stamp = int(time.time())
        warm = f"bench-warmup-{stamp}"
        create(services["source"], warm, args.partitions)
        create(services["destination"], warm, args.partitions)
        fill(services, warm, 20_000, args.partitions, args.value_bytes)
        commit_ends(services, warm, args.partitions)
        say("warming Spark up on 20,000 records")
        measure(spark, services, warm, args.budget_min * 60, args.bucket_size)
        for records in args.records:
            topic = f"bench-{records}-{stamp}"
            say(f"{records:,} records: writing source and destination")
            started = time.monotonic()
            create(services["source"], topic, args.partitions)
            create(services["destination"], topic, args.partitions)
            fill(services, topic, records, args.partitions, args.value_bytes)
            commit_ends(services, topic, args.partitions)
            say(f"{records:,} records written in {time.monotonic() - started:.0f}s; verifying")
            result = measure(spark, services, topic, args.budget_min * 60, args.bucket_size)
            row: dict[str, Any] = {"records": records, **result}
            if not result["timed_out"]:
                report = result["report"]
                row["verified"] = report["totals"]["verified_records"]
                row["status"] = report["status"]
                if row["verified"] != records or report["status"] != "OK":
                    raise RuntimeError(f"unexpected result for {records:,}: {report['status']}, {row['verified']:,}")
                say(f"{records:,} records verified in {result['seconds']:.1f}s "
                    f"({row['verified'] / result['seconds']:,.0f} records/s)")
            else:
                say(f"{records:,} records: not finished within {args.budget_min:.0f} min")
            rows.append(row)
            for bootstrap in (services["source"], services["destination"]):
                AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic])
        text = section(rows, args, spark.version)
        print(text)
        if not args.no_write:
            write_section(text)
            say(f"updated {DOC}")
        spark.stop()
    finally:
        if own_stack:
            stack.down(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
