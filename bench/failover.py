"""Consumer-group failover: ureplicator's exact translation against MirrorMaker 2's checkpoints, record by record.

    .venv/bin/python -m bench.failover [--partitions 4] [--records 3000] [--mm2-wait 90] [--render]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench import mm2
from bench import render as bench_render
from bench.common import machine_info
from bench.harness import BenchError, Pipeline
from bench.recording import parser, run_and_record
from devtools.harness import (
    Proc,
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


def score(got: dict[int, list[int]], commits: dict[int, int], n: int) -> dict[str, int]:
    return {"reread": sum(sum(1 for o in offsets if o < commits[p]) for p, offsets in got.items()),
            "lost": sum(len(set(range(commits[p], n)) - set(offsets)) for p, offsets in got.items()),
            "delivered_twice": sum(len(offsets) - len(set(offsets)) for offsets in got.values()),
            "expected": sum(n - c for c in commits.values()), "delivered": sum(len(v) for v in got.values())}


def ahead_scenario(services: dict[str, str], topic: str, records: int, partitions: int,
                   group: str) -> tuple[dict[int, int], int]:
    """The replicator is stopped: a quarter more records arrive and ``group`` commits halfway into them."""
    extra = records // 4
    produce(services["source"], topic, partitions, extra, start=records)
    commits = {p: records + extra // 2 + p for p in range(partitions)}
    commit(services["source"], group, topic, commits)
    return commits, records + extra


def wait_mirrored(services: dict[str, str], topic: str, mirror: str, partitions: int, what: str,
                  alive: Callable[[], None] = lambda: None) -> None:
    """Until the destination's ``mirror`` ends where the source's ``topic`` ends (``alive`` raises when it cannot)."""
    source_end = end_offsets(services["source"], topic, partitions) or {}
    wait_for(lambda: alive() or caught_up(services, topic, partitions, mirror, source_end, exact=True), 300, what, 1.0)


def run_ureplicator(services: dict[str, str], workdir: Path, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    processes = Processes(workdir)
    pipeline = Pipeline(services, processes, f"fo{int(time.time()) % 100000}",
                        overrides={"controller": {"topic_naming": "prefix", "reconcile_interval_s": 1},
                                   "worker": {"commit_interval_s": 1}})
    mirror = f"src.{topic}"

    def sync(group: str, commits: dict[int, int], records: int) -> dict[str, Any]:
        """``POST /groups/<g>/sync`` (timed), then what the group's consumer receives on the destination."""
        started = time.monotonic()
        status, body = pipeline.api("POST", f"/groups/{group}/sync", timeout_s=60)
        if status != 200:
            raise BenchError(f"sync of {group} answered {status}: {body}")
        synced_s = time.monotonic() - started
        got = resume(services["destination"], group, mirror, args.partitions)
        return {"commits": commits, "synced_after_s": round(synced_s, 3), **score(got, commits, records)}

    try:
        pipeline.start_controller("controller")
        pipeline.start_worker("w1")
        pipeline.add_topic(topic, args.partitions)
        wait_mirrored(services, topic, mirror, args.partitions, "mirroring")
        groups = {}
        for name, commits in commit_points(args.records, args.partitions).items():
            group = f"{pipeline.name}-{name}"
            commit(services["source"], group, topic, commits)
            groups[name] = sync(group, commits, args.records)
            say(f"ureplicator {name}: {groups[name]}")
        pipeline.workers["w1"].terminate()  # ahead of mirroring: records arrive, the group reads half of them
        group = f"{pipeline.name}-ahead"
        commits, total = ahead_scenario(services, topic, args.records, args.partitions, group)
        status, early = pipeline.api("GET", f"/groups/{group}/translation", timeout_s=60)
        if status != 200 or pipeline.api("POST", f"/groups/{group}/sync", timeout_s=60)[0] != 200:
            raise BenchError(f"translation of {group} answered {status}: {early}")
        pipeline.start_worker("w2")
        wait_mirrored(services, topic, mirror, args.partitions, "catch-up")
        groups["ahead"] = {**sync(group, commits, total), "ahead_by_before_catch_up": early["summary"]["ahead_by"]}
        say(f"ureplicator ahead: {groups['ahead']}")
        return {"groups": groups}
    finally:
        pipeline.stop_all()
        processes.stop_all()


def run_mm2(services: dict[str, str], workdir: Path, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    alias = f"src{int(time.time()) % 100000}"
    props = mm2.properties(alias, services["source"], services["destination"], topic)
    props.update(MM2_SETTINGS)
    props["replication.policy.class"] = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
    props[f"{alias}->{mm2.DESTINATION}.groups"] = ".*"
    cmd = mm2.launch(workdir, props)
    processes = Processes(workdir)
    mirror = f"{alias}.{topic}"
    points = commit_points(args.records, args.partitions)
    for name, commits in points.items():  # before MirrorMaker 2 starts, as on a long-running source
        commit(services["source"], f"{alias}-{name}", topic, commits)

    def mirrored(proc: Proc, what: str) -> None:
        def alive() -> None:
            if not proc.alive():
                raise BenchError(f"MirrorMaker 2 exited:\n{proc.tail()}")

        wait_mirrored(services, topic, mirror, args.partitions, what, alive)

    def synced(group: str, commits: dict[int, int], records: int, started: float) -> dict[str, Any]:
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
        synced_s = time.monotonic() - started
        got = resume(services["destination"], group, mirror, args.partitions)
        return {"commits": commits, "synced": ok, "synced_after_s": round(synced_s, 3),
                "destination_offsets": seen[-1] if seen else {}, **score(got, commits, records)}

    try:
        proc = processes.spawn("mm2", cmd)
        started = time.monotonic()
        mirrored(proc, "MirrorMaker 2 mirroring")
        out: dict[str, Any] = {}
        for name, commits in points.items():
            out[name] = synced(f"{alias}-{name}", commits, args.records, started)
            say(f"mirrormaker2 {name}: {out[name]}")
        proc.terminate()  # ahead of mirroring: records arrive, the group reads half of them
        commits, total = ahead_scenario(services, topic, args.records, args.partitions, f"{alias}-ahead")
        proc = processes.spawn("mm2-restarted", cmd)
        started = time.monotonic()
        mirrored(proc, "MirrorMaker 2 catching up")
        out["ahead"] = synced(f"{alias}-ahead", commits, total, started)
        say(f"mirrormaker2 ahead: {out['ahead']}")
        return {"groups": out, "settings": MM2_SETTINGS}
    finally:
        processes.stop_all()


def render(entry: dict[str, Any]) -> str:
    lines = [
        "## Consumer-group failover: exact translation vs MirrorMaker 2 checkpoints",
        "",
        f"`python -m bench.failover` ({entry['date'][:10]}, Kafka {entry['machine'].get('kafka_brokers', '?')}): "
        f"{entry['partitions']} partitions x {entry['records']:,} records, mirrored completely; each group "
        "commits on the source, the replicator syncs it, then a consumer of the same group on the destination "
        "(`auto.offset.reset=earliest`) reads to the end. *ahead*: the replicator stops, a quarter more records "
        "arrive, the group commits halfway into them, the replicator restarts and catches up (ureplicator syncs "
        "the group while it is ahead, to the destination end, and again after the catch-up). "
        "*Re-read*: records consumed on the source before the "
        "commit and delivered again; *lost*: records after the commit never delivered. Raw numbers: "
        f"`bench/results/{entry['file']}`.",
        "",
        "| group commits at | replicator | re-read | lost | delivered twice | delivered / expected | synced offsets |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in entry["ureplicator"]["groups"]:
        for label, key in (("ureplicator", "ureplicator"), ("MirrorMaker 2", "mirrormaker2")):
            g = entry[key]["groups"][name]
            if key == "ureplicator":
                synced = f"exact ({g['synced_after_s']:.1f} s sync call)"
            elif g.get("synced", True):
                synced = ", ".join(str(o) for o in g["destination_offsets"].values())
            else:
                synced = f"none after {entry['mm2_wait_s']:.0f} s"
            lines.append(f"| {name} ({', '.join(str(c) for c in g['commits'].values())}) | {label} | "
                         f"{g['reread']:,} | {g['lost']:,} | {g['delivered_twice']:,} | "
                         f"{g['delivered']:,} / {g['expected']:,} | {synced} |")
    lines += [
        "",
        "The destination here is a one-to-one copy, so the exact destination offset equals the source commit. "
        "ureplicator reads the `urep` header of a few destination records per partition and lands on it. "
        "MirrorMaker 2 translates from its offset syncs (one per `offset.lag.max` records, thinned out for older "
        "offsets) to the last sync at or below the commit, so a group re-reads what lies between: up to "
        "`offset.lag.max` records for a recent commit, and far more for an older one. It loses nothing in this "
        "scenario (it never translates forward). The sync call times are one REST call (translation of 4 "
        "partitions plus the commit) on a 2-core machine shared with the brokers (load average above 10). "
        "Not compared here: duplicates after a worker crash and compacted partitions (ureplicator: "
        "tests/integration/test_failover.py).",
        "",
        "MirrorMaker 2 settings: " + ", ".join(f"`{k}={v}`" for k, v in entry["mirrormaker2"]["settings"].items())
        + "; `offset.lag.max` default (100).",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    date = datetime.now(timezone.utc)
    root = bench_dir("failover")
    with own_stack("failover", heap=args.broker_heap) as (services, _):
        base = f"orders{int(time.time()) % 100000}"
        topics = {"ureplicator": f"{base}u", "mirrormaker2": f"{base}m"}  # the same records, one per replicator
        for topic in topics.values():
            create_topic(services["source"], topic, args.partitions, {"retention.ms": "-1"})
            say(f"producing {args.partitions} x {args.records:,} records to {topic}")
            produce(services["source"], topic, args.partitions, args.records)
        ours = run_ureplicator(services, root / "ureplicator", topics["ureplicator"], args)
        theirs = run_mm2(services, root / "mm2", topics["mirrormaker2"], args)
    return {"date": date.isoformat(timespec="seconds"), "file": f"failover-{date.date()}.json",
            "partitions": args.partitions, "records": args.records, "mm2_wait_s": args.mm2_wait,
            "machine": machine_info(), "ureplicator": ours, "mirrormaker2": theirs}


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.failover", __doc__, "384m")
    cli.add_argument("--partitions", type=int, default=4)
    cli.add_argument("--records", type=int, default=3000, help="records per partition")
    cli.add_argument("--mm2-wait", type=float, default=90.0, help="seconds to wait for MM2 to sync a group")
    cli.add_argument("--render", action="store_true", help="only rewrite the docs section from the newest result")
    args = cli.parse_args(argv)
    if args.render:
        return bench_render.main(["failover-bench"])
    return run_and_record(lambda: run(args), section="failover-bench", no_write=args.no_write,
                          summary=lambda e: print(json.dumps({k: e[k] for k in ("ureplicator", "mirrormaker2")},
                                                             indent=2)),
                          written="results in {path}; {doc} section updated")


if __name__ == "__main__":
    sys.exit(main())
