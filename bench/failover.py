"""Consumer-group failover: ureplicator's exact translation against MirrorMaker 2's checkpoints, record by record.

    .venv/bin/python -m bench.failover [--partitions 4] [--records 3000] [--mm2-wait 90]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench import mm2
from bench.common import machine_info
from bench.harness import BenchError, Pipeline
from bench.recording import parser, run_and_record
from bench.render import table
from devtools.harness import (
    Processes,
    bench_dir,
    caught_up,
    committed,
    create_topic,
    end_offsets,
    own_stack,
    say,
    wait_for,
)

Entry = dict[str, Any]
Sync = Callable[[str, dict[int, int], int], Entry]  # (group, its source commits, records per partition) -> score
MM2_SETTINGS = {
    "emit.checkpoints.enabled": "true",
    "emit.checkpoints.interval.seconds": "1",
    "sync.group.offsets.enabled": "true",
    "sync.group.offsets.interval.seconds": "1",
    "refresh.groups.interval.seconds": "1",
    "emit.offset-syncs.enabled": "true",
    "offset-syncs.topic.replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
}


def commit_points(n: int, partitions: int) -> dict[str, dict[int, int]]:
    """Where each group stops on the source: early, middle (odd offsets), and at the end."""
    return {"early": {p: 13 + 97 * p for p in range(partitions)},
            "middle": {p: n // 2 + 37 * p + 1 for p in range(partitions)},
            "end": {p: n for p in range(partitions)}}


def produce(bootstrap: str, topic: str, partitions: int, n: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i in range(start, start + n):
        for p in range(partitions):
            while True:
                try:
                    producer.produce(topic, key=f"k{i}".encode(), value=f"{p}:{i}".encode(), partition=p)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise BenchError("the source did not acknowledge every record")


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def resume(bootstrap: str, group: str, topic: str, partitions: int, timeout_s: float = 120) -> dict[int, list[int]]:
    """Source offsets per partition a consumer of ``group`` on the destination receives to the end
    (``auto.offset.reset=earliest``, as a DR consumer would: a partition without a synced offset is read whole)."""
    target = end_offsets(bootstrap, topic, partitions) or {}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: dict[int, list[int]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    p, offset = msg.value().decode().split(":")
                    got[int(p)].append(int(offset))
            assignment = consumer.assignment()
            if len(assignment) == partitions:
                # Nothing fetched yet on a partition (already at its end): its position is the committed offset
                fetched = {tp.partition: tp.offset for tp in consumer.position(assignment)}
                stored = {tp.partition: tp.offset for tp in consumer.committed(assignment, timeout=10)}
                if all((fetched[p] if fetched[p] >= 0 else stored[p]) >= target[p] for p in range(partitions)):
                    return got
        raise BenchError(f"the destination consumer of {group} did not reach the end")
    finally:
        consumer.close()


def score(got: dict[int, list[int]], commits: dict[int, int], n: int) -> Entry:
    return {"reread": sum(sum(1 for o in offsets if o < commits[p]) for p, offsets in got.items()),
            "lost": sum(len(set(range(commits[p], n)) - set(offsets)) for p, offsets in got.items()),
            "delivered_twice": sum(len(offsets) - len(set(offsets)) for offsets in got.values()),
            "expected": sum(n - c for c in commits.values()), "delivered": sum(len(v) for v in got.values())}


def measure(services: dict[str, str], topic: str, mirror: str, prefix: str, args: argparse.Namespace,
            start: Callable[[], None], sync: Sync, stop: Callable[[], None], restart: Callable[[str], Entry],
            alive: Callable[[], None] = lambda: None) -> Entry:
    """The groups of :func:`commit_points` commit on the source before the replicator starts (``start``), as on a
    long-running source; once it mirrored everything, each is synced and resumed on the destination. Then *ahead*:
    the replicator stops (``stop``), a quarter more records arrive, a group commits halfway into them, the
    replicator restarts (``restart``, given the group) and catches up, and that group is synced."""
    points = commit_points(args.records, args.partitions)
    for name, commits in points.items():
        commit(services["source"], f"{prefix}-{name}", topic, commits)

    def mirrored(what: str) -> None:
        source_end = end_offsets(services["source"], topic, args.partitions) or {}
        wait_for(lambda: alive() or caught_up(services, topic, args.partitions, mirror, source_end, exact=True), 300,
                 what, 1.0)

    start()
    mirrored("mirroring")
    groups = {}
    for name, commits in points.items():
        groups[name] = sync(f"{prefix}-{name}", commits, args.records)
        say(f"{prefix} {name}: {groups[name]}")
    stop()
    extra, group = args.records // 4, f"{prefix}-ahead"
    produce(services["source"], topic, args.partitions, extra, start=args.records)
    commits = {p: args.records + extra // 2 + p for p in range(args.partitions)}
    commit(services["source"], group, topic, commits)
    before = restart(group)
    mirrored("the catch-up")
    groups["ahead"] = {**sync(group, commits, args.records + extra), **before}
    say(f"{prefix} ahead: {groups['ahead']}")
    return groups


def run_ureplicator(services: dict[str, str], topic: str, args: argparse.Namespace) -> Entry:
    workdir = bench_dir("failover") / "ureplicator"
    workdir.mkdir(parents=True, exist_ok=True)
    processes = Processes(workdir)
    pipeline = Pipeline(services, processes, f"fo{int(time.time()) % 100000}",
                        overrides={"controller": {"topic_naming": "prefix", "reconcile_interval_s": 1},
                                   "worker": {"commit_interval_s": 1}})
    mirror = f"src.{topic}"

    def start() -> None:
        pipeline.start_controller("controller")
        pipeline.start_worker("w1")
        pipeline.add_topic(topic, args.partitions)

    def sync(group: str, commits: dict[int, int], records: int) -> Entry:
        """``POST /groups/<g>/sync`` (timed), then what the group's consumer receives on the destination."""
        started = time.monotonic()
        status, body = pipeline.api("POST", f"/groups/{group}/sync", timeout_s=60)
        if status != 200:
            raise BenchError(f"sync of {group} answered {status}: {body}")
        synced_s = time.monotonic() - started
        got = resume(services["destination"], group, mirror, args.partitions)
        return {"commits": commits, "synced_after_s": round(synced_s, 3), **score(got, commits, records)}

    def restart(group: str) -> Entry:
        """Sync the group while the replicator is behind (to the destination end), then start a worker."""
        status, early = pipeline.api("GET", f"/groups/{group}/translation", timeout_s=60)
        if status != 200 or pipeline.api("POST", f"/groups/{group}/sync", timeout_s=60)[0] != 200:
            raise BenchError(f"translation of {group} answered {status}: {early}")
        pipeline.start_worker("w2")
        return {"ahead_by_before_catch_up": early["summary"]["ahead_by"]}

    try:
        return {"groups": measure(services, topic, mirror, pipeline.name, args, start, sync,
                                  lambda: pipeline.workers["w1"].terminate(), restart)}
    finally:
        pipeline.stop_all()
        processes.stop_all()


def run_mm2(services: dict[str, str], topic: str, args: argparse.Namespace) -> Entry:
    workdir = bench_dir("failover") / "mm2"
    alias = f"src{int(time.time()) % 100000}"
    props = mm2.properties(alias, services["source"], services["destination"], topic)
    props.update(MM2_SETTINGS)
    props["replication.policy.class"] = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
    props[f"{alias}->{mm2.DESTINATION}.groups"] = ".*"
    cmd = mm2.launch(workdir, props)
    processes = Processes(workdir)
    mirror = f"{alias}.{topic}"
    started: list[float] = []

    def start(label: str) -> None:
        processes.spawn(label, cmd)
        started.append(time.monotonic())

    def alive() -> None:
        if not processes.procs[-1].alive():
            raise BenchError(f"MirrorMaker 2 exited:\n{processes.procs[-1].tail()}")

    def sync(group: str, commits: dict[int, int], records: int) -> Entry:
        """Wait until MM2 synced ``group`` (or gave up), then what its consumer receives on the destination."""
        seen: list[dict[int, int]] = []

        def settled() -> bool:
            now = committed(services["destination"], group, mirror, args.partitions)
            seen.append(now)
            # Synced on every partition, and unchanged over the last 3 polls (one sync interval each).
            return all(o >= 0 for o in now.values()) and len(seen) >= 3 and seen[-3] == seen[-2] == now

        try:
            wait_for(settled, args.mm2_wait, f"MirrorMaker 2 syncing {group}", 1.0)
            ok = True
        except BenchError:
            ok = False  # measured as it is: the consumer then falls back to auto.offset.reset
        synced_s = time.monotonic() - started[-1]
        got = resume(services["destination"], group, mirror, args.partitions)
        return {"commits": commits, "synced": ok, "synced_after_s": round(synced_s, 3),
                "destination_offsets": seen[-1] if seen else {}, **score(got, commits, records)}

    try:
        groups = measure(services, topic, mirror, alias, args, lambda: start("mm2"), sync,
                         lambda: processes.procs[-1].terminate(), lambda group: start("mm2-restarted") or {}, alive)
        return {"groups": groups, "settings": MM2_SETTINGS}
    finally:
        processes.stop_all()


def render(entry: Entry) -> str:
    rows = []
    for name in entry["ureplicator"]["groups"]:
        for label, key in (("ureplicator", "ureplicator"), ("MirrorMaker 2", "mirrormaker2")):
            g = entry[key]["groups"][name]
            if key == "ureplicator":
                synced = f"exact ({g['synced_after_s']:.1f} s sync call)"
            elif g.get("synced", True):
                synced = ", ".join(str(o) for o in g["destination_offsets"].values())
            else:
                synced = f"none after {entry['mm2_wait_s']:.0f} s"
            rows.append([f"{name} ({', '.join(str(c) for c in g['commits'].values())})", label, f"{g['reread']:,}",
                         f"{g['lost']:,}", f"{g['delivered_twice']:,}", f"{g['delivered']:,} / {g['expected']:,}",
                         synced])
    compared = {"reread": "re-read", "lost": "lost", "delivered_twice": "delivered twice"}
    totals = {label: {k: sum(g[k] for g in entry[key]["groups"].values()) for k in compared}
              for label, key in (("ureplicator", "ureplicator"), ("MirrorMaker 2", "mirrormaker2"))}
    wins = [label for k, label in compared.items() if totals["MirrorMaker 2"][k] < totals["ureplicator"][k]]
    return "\n".join([
        "## Consumer-group failover: exact translation vs MirrorMaker 2 checkpoints",
        "",
        "**Headline** (all groups): " + "; ".join(f"{name} " + ", ".join(
            f"{label} {t[k]:,}" for k, label in compared.items()) for name, t in totals.items())
        + (f"; MirrorMaker 2 did better on: {', '.join(wins)}." if wins else "."),
        "",
        f"`python -m bench.failover` ({entry['date'][:10]}, Kafka {entry['machine'].get('kafka_brokers', '?')}): "
        f"{entry['partitions']} partitions x {entry['records']:,} records (Methods: the scenario and how to read "
        f"it). *Re-read*: records consumed on the source before the commit and delivered again; *lost*: records "
        f"after the commit never delivered. Raw numbers: `bench/results/{entry['file']}`.",
        "",
        *table(["group commits at", "replicator", "re-read", "lost", "delivered twice", "delivered / expected",
                "synced offsets"], rows),
        "",
        "MirrorMaker 2 settings: " + ", ".join(f"`{k}={v}`" for k, v in entry["mirrormaker2"]["settings"].items())
        + "; `offset.lag.max` default (100).",
    ])


def run(args: argparse.Namespace) -> Entry:
    date = datetime.now(timezone.utc)
    with own_stack("failover", heap=args.broker_heap) as (services, _):
        base = f"orders{int(time.time()) % 100000}"
        topics = {"ureplicator": f"{base}u", "mirrormaker2": f"{base}m"}  # the same records, one per replicator
        for topic in topics.values():
            create_topic(services["source"], topic, args.partitions, {"retention.ms": "-1"})
            say(f"producing {args.partitions} x {args.records:,} records to {topic}")
            produce(services["source"], topic, args.partitions, args.records)
        ours = run_ureplicator(services, topics["ureplicator"], args)
        theirs = run_mm2(services, topics["mirrormaker2"], args)
    return {"date": date.isoformat(timespec="seconds"), "file": f"failover-{date.date()}.json",
            "partitions": args.partitions, "records": args.records, "mm2_wait_s": args.mm2_wait,
            "machine": machine_info(), "ureplicator": ours, "mirrormaker2": theirs}


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.failover", __doc__, "384m")
    cli.add_argument("--partitions", type=int, default=4)
    cli.add_argument("--records", type=int, default=3000, help="records per partition")
    cli.add_argument("--mm2-wait", type=float, default=90.0, help="seconds to wait for MM2 to sync a group")
    args = cli.parse_args(argv)
    return run_and_record(lambda: run(args), section="failover-bench", no_write=args.no_write)


if __name__ == "__main__":
    sys.exit(main())
