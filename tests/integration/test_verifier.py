"""The verifier against real clusters and local Spark: exact findings for planted defects, a clean real mirror.

Destinations with defects are written by hand (the same records the
replicator would write, then one defect per partition); the replicator's
committed offsets are set by committing for its group. Every report is
validated against reports/report.schema.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from flask import Flask
from prometheus_client import CollectorRegistry, generate_latest

from tests.support import kafka_io, verifier_topics
from tests.support import verifier_env as env
from tests.support.kafka_io import wait_for
from tests.support.verifier_env import nonzero, ranges
from tests.support.verifier_xxh64 import content_hash
from ureplicator.controller.verification_api import make_blueprint, register_metrics
from ureplicator.verifier import digest

pytestmark = pytest.mark.integration

PARTITIONS, PER_PARTITION, KEEP = verifier_topics.PARTITIONS, verifier_topics.PER_PARTITION, verifier_topics.KEEP


def _content_hash(record: kafka_io.Record) -> str:
    """The documented hash (version 2), computed independently of Spark (docs/verification.md)."""
    return f"{content_hash(record.key, record.value, record.headers, record.timestamp):016x}"


@pytest.fixture(scope="module")
def defects(spark, services, planted_defects, tmp_path_factory):
    """Source topic with 10 partitions of 60 records; the destination gets one planted defect per partition.

    p0 missing 17 and 20-24 | p1 replay of 35-40 | p2 value of 33 changed | p3 header of 5 changed
    p4 three orphans | p5 40 and 41 swapped | p6 committed at 45, destination holds 0-51
    p7 source truncated below 25 | p8 clean
    p9 source records 10-14 came from the destination cluster (active-active); 12 was mirrored back anyway
    """
    planted = planted_defects
    pipeline, topic = planted.pipeline, planted.topic
    out = tmp_path_factory.mktemp("defects")
    config = env.config_file(out, services, pipeline)
    outcome = env.run_verifier(["--config", str(config), "--topic", topic, "--bucket-size", "16"], out / "reports")
    return {"outcome": outcome, "topic": topic, "source": planted.source, "output": out / "reports"}


def test_each_planted_defect_is_reported_with_its_exact_source_offsets_and_nothing_else(spark, defects):
    outcome, topic = defects["outcome"], defects["topic"]
    # Then the run fails (exit status 1) and says so on stdout
    assert outcome.status == 1, outcome.stderr
    assert outcome.stdout.startswith("FAIL:")
    part = {p: outcome.partition(topic, p) for p in range(PARTITIONS)}

    assert nonzero(part[0]) == {"MISSING": 6}
    assert ranges(part[0], "MISSING") == [[17, 17], [20, 24]]
    assert part[0]["status"] == "FAIL"

    assert nonzero(part[1]) == {"DUPLICATE": 6}  # a replay is not a reordering
    assert ranges(part[1], "DUPLICATE") == [[35, 40]]
    assert part[1]["status"] == "WARN"

    assert nonzero(part[2]) == {"CORRUPTED": 1}
    assert ranges(part[2], "CORRUPTED") == [[33, 33]]
    assert nonzero(part[3]) == {"CORRUPTED": 1}
    assert ranges(part[3], "CORRUPTED") == [[5, 5]]

    assert nonzero(part[4]) == {"ORPHAN": 3}
    assert part[4]["categories"]["ORPHAN"]["ranges_of"] == "destination"
    assert ranges(part[4], "ORPHAN") == [[11, 11], [32, 32], [62, 62]]
    notes = [s["note"] for s in part[4]["categories"]["ORPHAN"]["samples"]]
    assert notes == [
        "no readable urep header",
        "urep names source partition 7",
        "source offset at or above the source end offset 60",
    ]

    assert nonzero(part[5]) == {"REORDERED": 1}
    assert ranges(part[5], "REORDERED") == [[40, 40]]
    assert part[5]["categories"]["REORDERED"]["samples"][0]["note"] == "after source offset 41"

    for p in (2, 3, 4, 5):
        assert part[p]["status"] == "FAIL"
    for p in (6, 7, 8):
        assert part[p]["status"] == "OK"
    assert nonzero(part[8]) == {}
    for p in range(9):
        if p not in (6, 7):
            assert part[p]["verified_records"] == PER_PARTITION
            assert part[p]["verified_range"] == [0, PER_PARTITION]


def test_records_from_the_destination_cluster_are_skipped_unless_mirrored_back(spark, defects):
    # Loop prevention keeps records that originated at the destination out of it: not missing
    looped = defects["outcome"].partition(defects["topic"], 9)
    assert nonzero(looped) == {"SKIPPED": 5, "ORPHAN": 1}
    assert ranges(looped, "SKIPPED") == [[10, 14]]
    assert looped["verified_records"] == PER_PARTITION - 5
    # but one that was mirrored back anyway is an orphan in the destination (offset 10 there)
    assert ranges(looped, "ORPHAN") == [[10, 10]]
    (sample,) = looped["categories"]["ORPHAN"]["samples"]
    assert (sample["source_offset"], sample["destination_offset"]) == (12, 10)
    assert sample["note"] == "the source record came from dst: loop prevention should have kept it there"
    # its content (a header with a null value) hashes as documented
    assert sample["destination_hash"] == _content_hash(defects["source"][9][12])


def test_samples_carry_both_offsets_and_the_documented_hashes(spark, defects):
    outcome, topic, source = defects["outcome"], defects["topic"], defects["source"]
    corrupted = outcome.partition(topic, 2)["categories"]["CORRUPTED"]["samples"]
    assert len(corrupted) == 1
    sample = corrupted[0]
    original = source[2][33]
    tampered = kafka_io.Record(33, original.key, b"tampered", original.headers, original.timestamp)
    assert (sample["source_partition"], sample["source_offset"], sample["destination_offset"]) == (2, 33, 33)
    assert sample["source_hash"] == _content_hash(original)
    assert sample["destination_hash"] == _content_hash(tampered)
    missing = outcome.partition(topic, 0)["categories"]["MISSING"]["samples"]
    lost = (17, 20, 21, 22, 23, 24)
    assert [(s["source_offset"], s["destination_offset"]) for s in missing] == [(o, None) for o in lost]
    assert [s["source_hash"] for s in missing] == [_content_hash(source[0][o]) for o in lost]
    duplicates = outcome.partition(topic, 1)["categories"]["DUPLICATE"]["samples"]
    assert [(s["source_offset"], s["destination_offset"]) for s in duplicates] == [(35 + i, 41 + i) for i in range(6)]


def test_records_above_the_watermark_are_pending_and_below_log_start_expired(spark, defects):
    outcome, topic = defects["outcome"], defects["topic"]
    # The replicator committed 45 of 60 and the destination already holds 45-51 (in flight): pending, not missing
    pending = outcome.partition(topic, 6)
    assert pending["committed"] == 45 and pending["watermark"] == 45
    assert pending["verified_range"] == [0, 45] and pending["verified_records"] == 45
    assert nonzero(pending) == {"PENDING": 15}
    assert ranges(pending, "PENDING") == [[45, 59]]
    # delete-records removed source offsets below 25: the destination's copies are expired, nothing is missing
    expired = outcome.partition(topic, 7)
    assert expired["source"] == {"log_start": 25, "end": 60}
    assert expired["verified_range"] == [25, 60] and expired["verified_records"] == 35
    assert nonzero(expired) == {"EXPIRED": 25}
    assert ranges(expired, "EXPIRED") == [[0, 24]]


def test_only_mismatched_buckets_are_compared_record_by_record(spark, defects):
    outcome, topic = defects["outcome"], defects["topic"]
    buckets = {p: outcome.partition(topic, p)["buckets"] for p in range(PARTITIONS)}
    assert buckets[0] == {"total": 4, "mismatched": 1}  # 60 offsets in buckets of 16; 17 and 20-24 are in 16-31
    assert buckets[2] == {"total": 4, "mismatched": 1}
    assert buckets[5] == {"total": 4, "mismatched": 0}  # a swap keeps every bucket's sums: found by order only
    assert buckets[8] == {"total": 4, "mismatched": 0}


def test_report_files_history_and_controller_views(spark, defects):
    output = defects["output"]
    report = defects["outcome"].report
    assert (output / "runs" / f"{report['run_id']}.json").exists()
    page = (output / "latest.html").read_text()
    assert page.index("Failing and warning partitions") < page.index("<svg") < page.index("All topics")
    assert "MISSING" in page and "17–17" not in page and "20–24" in page
    history = [json.loads(line) for line in (output / "history.jsonl").read_text().splitlines()]
    assert [h["run_id"] for h in history] == [report["run_id"]]

    app = Flask("t")
    app.register_blueprint(make_blueprint(output))
    client = app.test_client()
    latest = client.get("/verification")
    assert latest.status_code == 200
    assert latest.get_json()["status"] == "FAIL"
    assert latest.get_json()["failing_partitions"][0] == {
        "topic": defects["topic"], "partition": 0, "status": "FAIL", "counts": {"MISSING": 6}}
    assert client.get("/verification/history").get_json()["runs"][0]["run_id"] == report["run_id"]

    registry = CollectorRegistry()
    register_metrics(registry, output)
    text = generate_latest(registry).decode()
    assert "ureplicator_verification_status 2.0" in text
    assert 'ureplicator_verification_records{category="missing"} 6.0' in text


def test_gaps_and_compaction_are_not_losses_but_a_lost_latest_value_is(spark, services, planted_gaps, tmp_path):
    """Compacted source topic: offset gaps from the log cleaner and from transaction markers are not losses.

    p0: mirrored, then compacted on the source (copies of overwritten keys remain in the destination)
    p1: transaction markers and an aborted transaction leave gaps before mirroring
    p2: the destination lacks offset 2 (key k2, overwritten at 7 -- as the destination's own compaction
        would do) and offset 9 (k4's latest value: a real loss)
    """
    # Given a compacted source topic with gaps, mirrored with one dropped-for-a-later-value record and one loss
    planted = planted_gaps
    pipeline, topic, source, ends = planted.pipeline, planted.topic, planted.source, planted.ends

    # When the topic is verified
    config = env.config_file(tmp_path, services, pipeline)
    outcome = env.run_verifier(["--config", str(config), "--topic", f"{topic}={topic}", "--bucket-size", "4"],
                               tmp_path / "reports")

    # Then gaps and compaction are no loss: p0 and p1 are OK with every existing record verified
    part = {p: outcome.partition(topic, p) for p in range(3)}
    for p in (0, 1):
        assert part[p]["status"] == "OK"
        assert part[p]["verified_records"] == len(source[p])
        assert part[p]["verified_range"] == [0, ends[p]]
    assert nonzero(part[1]) == {}
    # the destination's copies of values the source compacted away (offsets 0-24) are reported, not failed
    assert nonzero(part[0]) == {"COMPACTED": 25}
    assert ranges(part[0], "COMPACTED") == [[0, 24]]
    # And on p2, a value the destination dropped for a later one is COMPACTED; the lost latest value is MISSING
    assert nonzero(part[2]) == {"COMPACTED": 1, "MISSING": 1}
    assert ranges(part[2], "COMPACTED") == [[2, 2]] and ranges(part[2], "MISSING") == [[9, 9]]
    note = part[2]["categories"]["COMPACTED"]["samples"][0]["note"]
    assert note == "the destination holds source offset 7 with the same key"
    assert part[2]["status"] == "FAIL" and outcome.status == 1
    # And the digest reader proved every partition in source order while reading, gaps or not: pass 2 re-read
    # only the differing buckets, no partition's destination for ordering
    if digest.available(spark):
        assert "0 partition(s) out of order" in outcome.stderr, outcome.stderr


def test_clean_mirror_by_the_replicator_is_ok_and_unmirrored_records_pending(spark, pipeline, services, tmp_path):
    # Given a topic mirrored by the real controller and worker until the offsets are committed
    topic = f"{pipeline.name}-clean"
    kafka_io.create_topic(services["source"], topic, 3, KEEP)  # the controller copies it to the destination
    kafka_io.produce(services["source"], topic, 1500, 3)
    pipeline.start_controller()
    worker = pipeline.start_worker("w1")
    status, body = pipeline.api("POST", "/topics", {"topic": topic})
    assert status == 201, body
    ends = kafka_io.end_offsets(services["source"], topic, 3)
    wait_for(lambda: kafka_io.committed(services["source"], pipeline.group, topic, 3) == ends, 90, "commits")

    # When the verifier checks every topic the pipeline mirrors (topic list from ZooKeeper)
    config = pipeline.write_config("verify")
    reports = tmp_path / "reports"
    outcome = env.run_verifier(["--config", str(config)], reports)

    # Then it is OK with every record verified
    assert outcome.status == 0, outcome.stderr
    assert outcome.report["status"] == "OK"
    assert outcome.report["totals"]["verified_records"] == 1500
    assert set(outcome.report["totals"]["categories"]) >= {"MISSING", "DUPLICATE", "ORPHAN", "PENDING"}
    assert not any(outcome.report["totals"]["categories"].values())

    # And when the worker stops and 300 more records arrive, two periodic runs call them pending, not missing;
    # they continue from the first run's checkpoint, so they verify nothing again
    worker.terminate()
    kafka_io.produce(services["source"], topic, 300, 3, start=1500)
    outcome = env.run_verifier(["--config", str(config), "--every", "1s", "--runs", "2"], reports)
    assert outcome.status == 0, outcome.stderr
    assert outcome.report["mode"] == "incremental"
    assert outcome.report["totals"]["verified_records"] == 0
    assert outcome.report["totals"]["categories"]["PENDING"] == 300
    assert outcome.report["status"] == "OK"
    history = [json.loads(line) for line in (reports / "history.jsonl").read_text().splitlines()]
    assert [h["status"] for h in history] == ["OK", "OK", "OK"]
    assert [h["mode"] for h in history] == ["full", "incremental", "incremental"]
    assert [h["verified_records"] for h in history] == [1500, 0, 0]
    assert [h["categories"]["PENDING"] for h in history] == [0, 300, 300]


def test_unreachable_cluster_or_zookeeper_is_exit_status_2_with_the_reason(services, tmp_path):
    config = env.config_file(tmp_path, {**services, "source": "127.0.0.1:1"}, "vunreachable")
    outcome = env.run_verifier(["--config", str(config), "--topic", "a=b", "--timeout", "3"], tmp_path / "r1")
    assert outcome.status == 2
    assert "source cluster src (127.0.0.1:1) did not answer" in outcome.stderr
    history = json.loads((tmp_path / "r1" / "history.jsonl").read_text())
    assert history["status"] == "ERROR" and "did not answer" in history["error"]

    config = env.config_file(tmp_path, {**services, "zookeeper": "127.0.0.1:1"}, "vnozk")
    outcome = env.run_verifier(["--config", str(config), "--timeout", "2"], tmp_path / "r2")
    assert outcome.status == 2
    assert "ZooKeeper at 127.0.0.1:1 did not answer" in outcome.stderr


def test_missing_connector_jars_is_exit_status_2_naming_the_fix(services, tmp_path):
    topic = f"vj{int(time.time() * 1000)}"
    kafka_io.create_topic(services["source"], topic, 1)
    config = env.config_file(tmp_path, services, "vjars")
    result = subprocess.run(
        [sys.executable, "-m", "ureplicator.verifier", "--config", str(config), "--topic", f"{topic}={topic}",
         "--output", str(tmp_path / "r"), "--master", "local[1]"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "UREPLICATOR_CACHE": str(tmp_path / "empty-cache")},
    )
    assert result.returncode == 2, result.stderr
    assert "Kafka connector is missing" in result.stderr and "make install" in result.stderr
