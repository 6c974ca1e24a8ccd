"""Incremental verification against real clusters: a run reads only what is new and still judges late copies.

Each scenario mirrors by hand (the records the replicator would write, with
their ``urep`` headers), commits for the replicator's group, runs the
verifier, adds traffic and defects, and runs it again with the same reports
directory, so the second run continues from the first one's checkpoint.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.support import kafka_io
from tests.support import verifier_env as env
from tests.support.kafka_io import wait_for
from tests.support.verifier_env import mirrored, nonzero, ranges

pytestmark = pytest.mark.integration

PARTITIONS = 3
FIRST = 40  # records per partition before the first run
MORE = 20  # records per partition added before the second
KEEP = {"retention.ms": "-1"}


class Mirror:
    """A source topic, its hand-written mirror and the verifier's reports directory."""

    def __init__(self, services: dict, workdir: Path, name: str) -> None:
        self.services = services
        self.pipeline = f"{name}{int(time.time() * 1000)}"
        self.topic, self.destination = f"{self.pipeline}-t", f"{self.pipeline}-t.mirror"
        self.reports = workdir / "reports"
        self.config = env.config_file(workdir, services, self.pipeline)
        self.mirrored_up_to = dict.fromkeys(range(PARTITIONS), 0)
        self.create()

    def create(self) -> None:
        kafka_io.create_topic(self.services["source"], self.topic, PARTITIONS, KEEP)
        kafka_io.create_topic(self.services["destination"], self.destination, PARTITIONS, KEEP)

    def produce(self, per_partition: int, start: int) -> None:
        kafka_io.produce(self.services["source"], self.topic, per_partition * PARTITIONS, PARTITIONS,
                         start=start * PARTITIONS)

    def source(self, partition: int) -> list[kafka_io.Record]:
        return kafka_io.read_partition(self.services["source"], self.topic, partition)

    def mirror(self, skip: dict[int, set[int]] | None = None, extra: dict[int, list[env.Copy]] | None = None) -> None:
        """Copy every source record not copied yet (but ``skip``), then ``extra``; commit the source ends."""
        skip, extra = skip or {}, extra or {}
        for p in range(PARTITIONS):
            new = [r for r in self.source(p) if r.offset >= self.mirrored_up_to[p]]
            copies = [mirrored(r, p) for r in new if r.offset not in skip.get(p, set())]
            env.write(self.services["destination"], self.destination, p, copies + extra.get(p, []))
            if new:
                self.mirrored_up_to[p] = new[-1].offset + 1
        env.commit(self.services["source"], f"ureplicator.{self.pipeline}", self.topic,
                   kafka_io.end_offsets(self.services["source"], self.topic, PARTITIONS))

    def verify(self, *args: str) -> env.Outcome:
        return env.run_verifier(
            ["--config", str(self.config), "--topic", f"{self.topic}={self.destination}", "--bucket-size", "8",
             *args],
            self.reports,
        )


def _topic(outcome: env.Outcome) -> dict:
    assert outcome.report is not None, outcome.stderr
    (topic,) = outcome.report["topics"]
    return topic


def test_incremental_run_reads_only_new_ranges_and_judges_late_copies(spark, services, tmp_path):
    # Given a clean mirror of 3 x 40 records, verified once (a full pass: there is no checkpoint yet)
    m = Mirror(services, tmp_path, "vi")
    m.produce(FIRST, 0)
    m.mirror()
    first = m.verify()
    assert first.status == 0, first.stderr
    topic = _topic(first)
    assert (topic["mode"], topic["mode_reason"]) == ("full", "no checkpoint for this topic yet")
    assert topic["records_read"] == {"source": 120, "destination": 120}
    assert (m.reports / "checkpoint.json").exists()

    # When 20 more records per partition arrive and the destination also gets defects:
    # p0 a late second copy of the verified offset 5, p1 a late copy of offset 7 with another value,
    # p2 records 45-49 committed by the replicator but never written
    p0, p1 = m.source(0), m.source(1)
    m.produce(MORE, FIRST)
    m.mirror(
        skip={2: {45, 46, 47, 48, 49}},
        extra={0: [mirrored(p0[5], 0)], 1: [mirrored(p1[7], 1).with_value(b"changed")]},
    )
    second = m.verify()

    # Then only the new source ranges and the new destination records are read
    assert second.status == 1, second.stderr
    topic = _topic(second)
    assert topic["mode"] == "incremental" and topic["mode_reason"] is None
    assert second.report["mode"] == "incremental"
    for p in range(PARTITIONS):
        part = second.partition(m.topic, p)
        assert part["mode"] == "incremental"
        assert part["verified_range"] == [FIRST, FIRST + MORE]
        assert part["destination_range"][0] == FIRST
    assert topic["records_read"] == {"source": 3 * MORE, "destination": 3 * MORE - 5 + 2}
    # and it runs once: no log start moved, so no repeat and no note saying one kept moving
    assert "verifying again" not in second.stderr
    assert not [n for p in topic["partitions"] for n in p["notes"] if "kept moving" in n]
    # and each defect is reported with its exact offsets, nothing else
    late = second.partition(m.topic, 0)
    assert nonzero(late) == {"DUPLICATE": 1} and late["status"] == "WARN"
    assert ranges(late, "DUPLICATE") == [[5, 5]]
    (sample,) = late["categories"]["DUPLICATE"]["samples"]
    assert (sample["source_offset"], sample["destination_offset"]) == (5, FIRST + MORE)
    assert sample["note"] == "late copy of a record verified in an earlier run"
    changed = second.partition(m.topic, 1)
    assert nonzero(changed) == {"DUPLICATE": 1, "CORRUPTED": 1}
    assert ranges(changed, "CORRUPTED") == [[7, 7]] and ranges(changed, "DUPLICATE") == [[7, 7]]
    lost = second.partition(m.topic, 2)
    assert nonzero(lost) == {"MISSING": 5} and ranges(lost, "MISSING") == [[45, 49]]
    history = [json.loads(line) for line in (m.reports / "history.jsonl").read_text().splitlines()]
    assert [h["mode"] for h in history] == ["full", "incremental"]
    assert history[-1]["ranges"][m.topic]["source"]["2"] == [FIRST, FIRST + MORE]
    assert "incremental" in (m.reports / "latest.html").read_text()

    # When it runs again with nothing new
    third = m.verify()
    # Then the partitions that failed are looked at again from where they were last clean (the failure
    # stays visible), and the one that only warned has moved on
    assert third.status == 1
    assert nonzero(third.partition(m.topic, 0)) == {}
    assert third.partition(m.topic, 0)["verified_range"] == [FIRST + MORE, FIRST + MORE]
    assert nonzero(third.partition(m.topic, 1)) == {"DUPLICATE": 1, "CORRUPTED": 1}
    assert nonzero(third.partition(m.topic, 2)) == {"MISSING": 5}
    assert third.partition(m.topic, 2)["verified_range"] == [FIRST, FIRST + MORE]

    # When a full pass is asked for
    full = m.verify("--full")
    # Then everything retained is read again, and the same defects are found in it
    topic = _topic(full)
    assert full.status == 1, full.stderr
    assert (topic["mode"], topic["mode_reason"]) == ("full", "--full was given")
    assert full.partition(m.topic, 2)["verified_range"] == [0, FIRST + MORE]
    assert nonzero(full.partition(m.topic, 1)) == {"DUPLICATE": 1, "CORRUPTED": 1}
    assert nonzero(full.partition(m.topic, 2)) == {"MISSING": 5}


def test_damaged_or_deleted_checkpoint_means_a_correct_full_pass(spark, services, tmp_path):
    # Given a verified mirror with one record lost before the first run
    m = Mirror(services, tmp_path, "vc")
    m.produce(FIRST, 0)
    m.mirror(skip={1: {3}})
    assert m.verify().status == 1
    checkpoint = m.reports / "checkpoint.json"
    # When the checkpoint is damaged (one offset changed, so the checksum no longer matches)
    text = checkpoint.read_text()
    document = json.loads(text)
    topic_entry = document["checkpoint"]["topics"][m.topic]
    topic_entry["partitions"]["0"][0] += 1
    checkpoint.write_text(json.dumps(document))
    damaged = m.verify()
    # Then the run says so and verifies everything, finding the old loss again
    topic = _topic(damaged)
    assert topic["mode"] == "full" and "is damaged (checksum mismatch)" in topic["mode_reason"]
    assert "is damaged" in damaged.stderr
    assert damaged.partition(m.topic, 1)["verified_range"] == [0, FIRST]
    assert nonzero(damaged.partition(m.topic, 1)) == {"MISSING": 1}
    # When it is not JSON at all
    checkpoint.write_text(text[: len(text) // 2])
    assert _topic(m.verify())["mode"] == "full"
    # When it is deleted
    checkpoint.unlink()
    deleted = m.verify()
    topic = _topic(deleted)
    assert (topic["mode"], topic["mode_reason"]) == ("full", "no checkpoint for this topic yet")
    assert nonzero(deleted.partition(m.topic, 1)) == {"MISSING": 1}
    assert deleted.partition(m.topic, 0)["verified_range"] == [0, FIRST]


def test_a_recreated_topic_is_verified_in_full_with_a_note(spark, services, tmp_path):
    # Given a verified clean mirror
    m = Mirror(services, tmp_path, "vr")
    m.produce(FIRST, 0)
    m.mirror()
    assert m.verify().status == 0
    # When the source topic is deleted and created again, with fewer records, and mirrored anew
    admin = AdminClient({"bootstrap.servers": services["source"]})
    admin.delete_topics([m.topic])[m.topic].result(timeout=30)
    wait_for(lambda: m.topic not in admin.list_topics(timeout=10).topics, 30, "the source topic to go")
    kafka_io.create_topic(services["source"], m.topic, PARTITIONS, KEEP)
    m.produce(5, 0)
    m.mirrored_up_to = dict.fromkeys(range(PARTITIONS), 0)
    m.mirror()
    again = m.verify()
    # Then the checkpoint is not trusted: a full pass, saying why
    topic = _topic(again)
    assert topic["mode"] == "full"
    assert topic["mode_reason"].startswith("the source topic was deleted and created again (topic id ")
    # and its verdict covers the new topic: its 15 records, while the destination's older copies of
    # offsets 5-39 name source offsets at or above the new end (orphans)
    assert sum(p["verified_records"] for p in topic["partitions"]) == 15
    assert again.status == 1
    assert {nonzero(p).get("ORPHAN") for p in topic["partitions"]} == {FIRST - 5}
