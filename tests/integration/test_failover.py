"""Consumer groups fail over to the destination exactly: replays, compaction, prefix naming, ahead of mirroring.

Real clusters and real processes: a worker killed with -9 leaves replayed
duplicates on the destination, one source partition is compacted, and the
destination topic is prefix-named (``src.<topic>``). A consumer of the same
group on the destination must then read exactly the records after its last
source commit: none lost, none twice.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from devtools import stack
from tests.support import kafka_io
from tests.support.kafka_io import wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 2
COMPACTED = 1  # partition whose keys repeat, so the log cleaner leaves offset gaps in it
COMPACT = {"cleanup.policy": "compact", "segment.ms": "200", "min.cleanable.dirty.ratio": "0.01",
           "min.compaction.lag.ms": "0"}


def produce(bootstrap: str, topic: str, partition: int, keys: list[str], tag: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, key in enumerate(keys):
        producer.produce(topic, key=key.encode(), value=f"{tag}-{i}".encode(), partition=partition,
                         headers=[("trace", f"{tag}{i}".encode())])
    assert producer.flush(30) == 0


def consume_and_commit(bootstrap: str, group: str, topic: str, upto: dict[int, int]) -> None:
    """The group reads each partition from its start and commits ``upto[p]`` (the next offset it would read)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in upto])
        pending = {p for p, offset in upto.items() if offset > 0}
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None and msg.offset() >= upto[msg.partition()] - 1:
                    pending.discard(msg.partition())
        assert not pending, f"could not read up to {upto}"
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in upto.items()], asynchronous=False)
    finally:
        consumer.close()


class DestinationMember:
    """A consumer of ``group`` on the destination (subscribed: an active member there)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        # latest: a partition without a synced offset would show up as missing records
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "latest"})
        self.consumer.subscribe([topic])
        self.topic = topic

    def read_to_end(self, ends: dict[int, int], timeout_s: float = 60) -> dict[int, list[int]]:
        """Source offsets (from urep) of everything delivered per partition until each reached ``ends``."""
        got: dict[int, list[int]] = {p: [] for p in ends}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(500, 0.5):
                if msg.error() is None:
                    record = kafka_io.Record(msg.offset(), msg.key(), msg.value(), tuple(msg.headers() or ()), 0)
                    got[msg.partition()].append(record.provenance().source_offset)
            assignment = self.consumer.assignment()
            if len(assignment) == len(ends):
                # Nothing fetched yet on a partition (already at its end): its position is the committed offset
                fetched = {tp.partition: tp.offset for tp in self.consumer.position(assignment)}
                stored = {tp.partition: tp.offset for tp in self.consumer.committed(assignment, timeout=10)}
                positions = {p: fetched[p] if fetched[p] >= 0 else stored[p] for p in fetched}
                if all(positions[p] >= ends[p] for p in ends):
                    return got
        raise AssertionError(f"destination consumer did not reach {ends}: {got}")

    def commit(self) -> None:
        self.consumer.commit(asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


def source_offsets(bootstrap: str, topic: str, partition: int) -> list[int]:
    return [r.offset for r in kafka_io.read_partition(bootstrap, topic, partition)]


def destination_committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    return kafka_io.committed(bootstrap, group, topic, PARTITIONS)


def scrape(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def cli(pipeline, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ureplicator", "groups", "--url", pipeline.url, *args],
                          capture_output=True, text=True, timeout=60)


def test_groups_resume_on_the_destination_exactly_after_their_last_source_commit(pipeline, services):
    src, dst = services["source"], services["destination"]
    topic = f"{pipeline.name}-orders"
    mirror = f"src.{topic}"
    billing, audit = f"{pipeline.name}-billing", f"{pipeline.name}-audit"
    pipeline.overrides = {"controller": {"topic_naming": "prefix", "group_sync": {
        "enabled": True, "interval_s": 1, "include": re.escape(pipeline.name) + "-.*"}}}

    # Given a source topic whose partition 1 is compacted (its keys repeat), with gaps the cleaner left
    kafka_io.create_topic(src, topic, PARTITIONS, COMPACT)
    produce(src, topic, 0, [f"a-{i}" for i in range(80)], "a")
    produce(src, topic, COMPACTED, [f"hot-{i % 4}" for i in range(80)], "a")
    time.sleep(0.5)  # segment.ms passes: the next record rolls the segment and makes it cleanable
    produce(src, topic, COMPACTED, ["roll"], "roll")
    wait_for(lambda: len(source_offsets(src, topic, COMPACTED)) < 81, 90, "the log cleaner compacting partition 1")

    # And a worker that mirrored it and was killed with -9 before committing, so its successor replayed it
    pipeline.start_controller()
    first = pipeline.start_worker("w1", worker={"commit_interval_s": 600})
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    counts = {p: len(source_offsets(src, topic, p)) for p in range(PARTITIONS)}
    wait_for(lambda: kafka_io.end_offsets(dst, mirror, PARTITIONS) == counts, 60, "the first copy mirrored")
    first.kill()
    pipeline.start_worker("w2")
    source_end = kafka_io.end_offsets(src, topic, PARTITIONS)
    wait_for(lambda: kafka_io.committed(src, pipeline.group, topic, PARTITIONS) == source_end, 90, "the replay")
    assert kafka_io.end_offsets(dst, mirror, PARTITIONS) == {p: 2 * counts[p] for p in range(PARTITIONS)}
    # and more records mirrored once
    for p in range(PARTITIONS):
        produce(src, topic, p, [f"b-{p}-{i}" for i in range(40)], "b")
    source_end = kafka_io.end_offsets(src, topic, PARTITIONS)
    wait_for(lambda: kafka_io.committed(src, pipeline.group, topic, PARTITIONS) == source_end, 60, "mirroring")

    # When group billing consumed part of it on the source: p0 to 50, p1 to an offset the cleaner removed
    gap = next(o for o in range(81) if o not in set(source_offsets(src, topic, COMPACTED)))
    commits = {0: 50, COMPACTED: gap}
    consume_and_commit(src, billing, topic, commits)

    # Then the CLI translates it: behind mirroring, p0 to the replayed copy of 50 (the unbroken tail)
    shown = cli(pipeline, "--json", "translate", billing)
    assert shown.returncode == 0, shown.stderr
    translation = json.loads(shown.stdout)
    rows = {r["partition"]: r for r in translation["partitions"]}
    assert {r["state"] for r in rows.values()} == {"behind"}
    assert {r["destination_topic"] for r in rows.values()} == {mirror}
    assert rows[0]["destination_offset"] == counts[0] + 50
    assert translation["summary"]["unmirrored_records"] == 0
    text = cli(pipeline, "translate", billing)
    assert text.returncode == 0 and "a failover now loses nothing" in text.stdout

    # When the sync runs (the leader's periodic job, and on request)
    status, synced = pipeline.api("POST", f"/groups/{billing}/sync")
    assert status == 200, synced
    targets = {p: rows[p]["destination_offset"] for p in range(PARTITIONS)}
    assert destination_committed(dst, billing, mirror) == targets

    # Then a billing consumer on the destination reads exactly what follows each commit: none lost, none twice
    member = DestinationMember(dst, billing, mirror)
    got = member.read_to_end(kafka_io.end_offsets(dst, mirror, PARTITIONS))
    assert got[0] == [o for o in source_offsets(src, topic, 0) if o >= 50]
    assert got[COMPACTED] == sorted(set(got[COMPACTED]))
    assert all(o > gap for o in got[COMPACTED])
    assert set(got[COMPACTED]) >= {o for o in source_offsets(src, topic, COMPACTED) if o >= gap}

    # When that consumer committed its position and is still a member, sync never rewinds it, even forced
    member.commit()
    moved_on = destination_committed(dst, billing, mirror)
    assert moved_on == kafka_io.end_offsets(dst, mirror, PARTITIONS)
    status, refused = pipeline.api("POST", f"/groups/{billing}/sync", {"force": True})
    assert status == 409 and "active member" in refused["error"]["message"]
    skipped = scrape(pipeline.url, "ureplicator_groupsync_groups_skipped_total")
    wait_for(lambda: scrape(pipeline.url, "ureplicator_groupsync_groups_skipped_total") > skipped, 30,
             "a periodic round that found billing active")
    assert destination_committed(dst, billing, mirror) == moved_on
    # and once it left, the periodic sync still does not move it backwards; only --force does
    member.close()
    rounds = scrape(pipeline.url, "ureplicator_groupsync_last_sync_timestamp_seconds")
    wait_for(lambda: scrape(pipeline.url, "ureplicator_groupsync_last_sync_timestamp_seconds") > rounds + 1, 30,
             "two more sync rounds")
    assert destination_committed(dst, billing, mirror) == moved_on
    kept = cli(pipeline, "sync", billing)
    assert kept.returncode == 0 and "would move back" in kept.stdout
    forced = cli(pipeline, "sync", billing, "--force")
    assert forced.returncode == 0, forced.stderr
    assert destination_committed(dst, billing, mirror) == targets

    # When mirroring is paused and group audit commits 20 records past what is mirrored
    assert pipeline.api("POST", f"/topics/{topic}/pause")[0] == 200
    mirrored_end = kafka_io.end_offsets(dst, mirror, PARTITIONS)
    for p in range(PARTITIONS):
        produce(src, topic, p, [f"c-{p}-{i}" for i in range(30)], "c")
    ahead = {p: source_end[p] + 20 for p in range(PARTITIONS)}
    consume_and_commit(src, audit, topic, ahead)
    # Then it is ahead of mirroring by 20 per partition, synced to the destination end meanwhile
    status, early = pipeline.api("GET", f"/groups/{audit}/translation")
    assert status == 200
    assert [(r["state"], r["ahead_by"], r["destination_offset"]) for r in early["partitions"]] == [
        ("ahead", 20, mirrored_end[p]) for p in range(PARTITIONS)]
    assert [r["unmirrored"] for r in early["partitions"]] == [[ahead[p], ahead[p] + 9] for p in range(PARTITIONS)]
    wait_for(lambda: destination_committed(dst, audit, mirror) == mirrored_end, 30, "audit synced to the end")
    wait_for(lambda: scrape(pipeline.url, "ureplicator_groupsync_partitions_ahead") >= PARTITIONS, 30,
             "the round's gauge of partitions ahead of mirroring")
    # When mirroring resumes and catches up
    assert pipeline.api("POST", f"/topics/{topic}/resume")[0] == 200
    source_end = kafka_io.end_offsets(src, topic, PARTITIONS)
    wait_for(lambda: kafka_io.committed(src, pipeline.group, topic, PARTITIONS) == source_end, 60, "catch-up")
    # Then the periodic sync moves audit forward to its exact position
    dest_end = kafka_io.end_offsets(dst, mirror, PARTITIONS)
    exact = {p: dest_end[p] - 10 for p in range(PARTITIONS)}
    wait_for(lambda: destination_committed(dst, audit, mirror) == exact, 30, "audit synced exactly")
    # and an audit consumer on the destination reads exactly the last 10 records of each partition
    member = DestinationMember(dst, audit, mirror)
    try:
        got = member.read_to_end(dest_end)
    finally:
        member.close()
    assert got == {p: list(range(ahead[p], source_end[p])) for p in range(PARTITIONS)}
    assert scrape(pipeline.url, "ureplicator_groupsync_groups_synced_total") >= 2


@pytest.mark.disruptive  # stops a broker
def test_unknown_groups_unreachable_clusters_and_controllers_are_clear_errors(pipeline, services):
    # Given a mirrored topic and a controller
    topic = f"{pipeline.name}-errs"
    kafka_io.create_topic(services["source"], topic, 1)
    kafka_io.produce(services["source"], topic, 10, 1)
    pipeline.start_controller(controller={"group_sync": {"timeout_s": 3}})  # the stopped cluster's wait below
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    status, body = pipeline.api("GET", f"/groups/{pipeline.name}-nobody/translation")
    assert status == 404
    assert "has no committed offsets on the source cluster src" in body["error"]["message"]
    status, body = pipeline.api("GET", "/groups/ureplicator.other/translation")
    assert status == 404 and "never translated" in body["error"]["message"]
    status, listed = pipeline.api("GET", "/groups")
    assert status == 200 and all(not g["group"].startswith("ureplicator.") for g in listed["groups"])
    missing = cli(pipeline, "translate", f"{pipeline.name}-nobody")
    assert missing.returncode == 1
    assert "404" in missing.stderr and "no committed offsets" in missing.stderr
    status, _ = pipeline.api("POST", f"/groups/{pipeline.name}-nobody/sync", {"force": "yes"})
    assert status == 400
    # When the destination cluster is down, the answer says which cluster did not answer
    consume_and_commit(services["source"], f"{pipeline.name}-reader", topic, {0: 3})
    stack.stop_service(services["dir"], "destination")
    try:
        status, body = pipeline.api("GET", f"/groups/{pipeline.name}-reader/translation")
        assert status == 503
        assert "the destination cluster dst" in body["error"]["message"], body
        failed = cli(pipeline, "translate", f"{pipeline.name}-reader")
        assert failed.returncode == 1 and "503" in failed.stderr and "destination cluster dst" in failed.stderr
    finally:
        stack.start_service(services["dir"], "destination")
    down = subprocess.run([sys.executable, "-m", "ureplicator", "groups", "--url", "http://127.0.0.1:9", "list"],
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 1 and "cannot reach the controller" in down.stderr
