"""Both pass-1 readers give the same report: the digest reader (jvm/digest) and Spark's Kafka source.

The same faulty topics (missing, duplicate, corrupted, orphan, reordered records, a compacted topic, a
transactional one, version 2 urep headers) are verified once with each reader; apart from timings, run
ids and the reader's name, the reports must be identical.
"""

from __future__ import annotations

import copy
import time

import pytest

from tests.support import verifier_env as env
from tests.support import verifier_topics
from tests.support.verifier_env import nonzero, ranges
from tests.support.verifier_topics import PER_PARTITION
from tests.support.verifier_xxh64 import content_hash, xxh64
from ureplicator.common import config as config_module
from ureplicator.common import provenance
from ureplicator.verifier import digest
from ureplicator.verifier.route import ORDER, KafkaSide, RouteRule
from ureplicator.verifier.watermarks import Clusters

pytestmark = pytest.mark.integration

VOLATILE = ("run_id", "started_at", "finished_at", "duration_s")


@pytest.fixture(scope="module")
def scenarios(spark, services, planted_defects, planted_gaps):
    return {
        "defects": planted_defects,
        "gaps": planted_gaps,
        "v2": verifier_topics.plant_v2_headers(services),
    }


@pytest.fixture(scope="module")
def kafka_reports(spark, services, scenarios, tmp_path_factory):
    """Each planted topic verified alone with Spark's Kafka source: the reports both tests compare with."""
    with pytest.MonkeyPatch.context() as patch:
        return {name: _verify(services, tmp_path_factory.mktemp(name), planted, "kafka", patch)
                for name, planted in scenarios.items()}


def _verify(services, workdir, planted, reader: str, monkeypatch) -> env.Outcome:
    """``reader``: kafka (Spark's Kafka source), digest (the digest reader; these small topics are read in the
    driver) or digest-job (the digest reader as a Spark job, as for large ranges)."""
    with monkeypatch.context() as patch:
        if reader == "digest":
            patch.delenv(digest.READER_ENV, raising=False)
        else:
            patch.setenv(digest.READER_ENV, reader)
        config = env.config_file(workdir, services, planted.pipeline)
        return env.run_verifier(
            ["--config", str(config), "--topic", f"{planted.topic}={planted.destination}", "--bucket-size", "4"],
            workdir / f"reports-{reader}",
        )


def _comparable(report: dict) -> dict:
    body = copy.deepcopy(report)
    for key in VOLATILE:
        body.pop(key)
    body["spark"].pop("reader")
    for topic in body["topics"]:
        topic.pop("duration_s")
    return body


@pytest.mark.parametrize("reader", ["digest", "digest-job"])
@pytest.mark.parametrize("name", ["defects", "gaps", "v2"])
def test_the_digest_reader_and_sparks_kafka_source_give_identical_reports(
    spark, services, scenarios, kafka_reports, tmp_path, monkeypatch, name, reader
):
    # Given a topic with planted defects
    planted = scenarios[name]
    # When it is verified with each reader (the digest reader in the driver and as a Spark job)
    kafka = kafka_reports[name]
    digested = _verify(services, tmp_path, planted, reader, monkeypatch)
    # Then each run says which reader it used, and the reports are the same
    assert kafka.report["spark"]["reader"] == "kafka"
    assert digested.report["spark"]["reader"] == "digest"
    assert kafka.status == digested.status == 1, digested.stderr
    assert _comparable(digested.report) == _comparable(kafka.report)


def test_version_2_urep_headers_are_read_like_version_1(spark, services, scenarios, kafka_reports, tmp_path,
                                                       monkeypatch):
    planted = scenarios["v2"]
    # Spark's Kafka source: the module's run of this topic (the same command line), not a second one
    for reader, outcome in (("digest", _verify(services, tmp_path, planted, "digest", monkeypatch)),
                            ("kafka", kafka_reports["v2"])):
        assert outcome.report["spark"]["reader"] == reader
        part = {p: outcome.partition(planted.topic, p) for p in range(3)}
        # every copy of p0 carries a version 2 header: all verified, nothing wrong
        assert part[0]["status"] == "OK" and part[0]["verified_records"] == 30 and nonzero(part[0]) == {}
        # a version 2 header whose hop length is wrong is unreadable: that copy is an orphan, its record missing
        assert nonzero(part[1]) == {"ORPHAN": 1, "MISSING": 2}
        assert ranges(part[1], "MISSING") == [[4, 4], [9, 9]] and ranges(part[1], "ORPHAN") == [[4, 4]]
        # source records whose version 2 header names the destination as origin are skipped, a mirrored-back one
        # is an orphan; version 1 and 2 copies mixed in one partition verify alike
        assert nonzero(part[2]) == {"SKIPPED": 3, "ORPHAN": 1}
        assert part[2]["verified_records"] == 27


def _bucket_hash(content: int, offset: int) -> int:
    """xxhash64(content_hash, offset) with seed 42, both as i64: Spark's chaining, computed in Python."""
    first = xxh64(content.to_bytes(8, "little", signed=False), 42)
    return xxh64(offset.to_bytes(8, "little", signed=True), first)


def test_the_digest_readers_record_hashes_agree_with_the_independent_implementation(
    spark, services, scenarios, tmp_path
):
    # Given partition 9 of the defect topic: null keys, headers with null values, urep headers on the source
    planted = scenarios["defects"]
    loaded = config_module.load(str(env.config_file(tmp_path, services, planted.pipeline)))
    snap = Clusters(loaded.source, loaded.destination).snapshot(planted.topic, planted.destination,
                                                                  loaded.consumer_group).only({9})
    # When the digest reader reads both sides with one offset per bucket, as a Spark job and in the driver
    reads = (
        ("source", planted.topic, {9: (0, PER_PARTITION)}),
        ("destination", planted.destination, snap.destination_ranges()),
    )
    rule = RouteRule("", "dst")
    rows = {
        which: {
            r.bucket: (r.n, r.xor & (2**64 - 1))
            for r in digest.bucket_rows(spark, KafkaSide(services[which]), topic, which, ranges, snap, 1,
                                        rule=rule).collect()
            if r.bucket >= 0 and r.cls != ORDER
        }
        for which, topic, ranges in reads
    }
    plans = [digest.reader_options(KafkaSide(services[which]), topic, which, digest.whole_ranges(ranges), snap, 1,
                                   rule) for which, topic, ranges in reads]
    in_driver = {
        which: {r.bucket: (r.n, r.xor & (2**64 - 1)) for r in found if r.bucket >= 0 and r.cls != ORDER}
        for (which, *_), found in zip(reads, digest.driver_rows(spark, plans), strict=True)
    }
    assert in_driver == rows
    # Then every bucket's hash is the one tests/support/verifier_xxh64.py computes for its record
    source = {r.offset: (1, _bucket_hash(content_hash(r.key, r.value, r.headers, r.timestamp), r.offset))
              for r in env.read_all(services["source"], planted.topic, 9)}
    assert rows["source"] == source
    copies = {}
    for r in env.read_all(services["destination"], planted.destination, 9):
        origin = provenance.decode(dict(r.headers)[provenance.HEADER])
        copies[origin.source_offset] = (1, _bucket_hash(content_hash(r.key, r.value, r.headers, r.timestamp),
                                                        origin.source_offset))
    assert rows["destination"] == copies


def test_topics_verified_together_get_the_reports_each_gets_alone(
    spark, services, scenarios, kafka_reports, tmp_path, monkeypatch
):
    from ureplicator.verifier import pass1

    # Given the planted topics under one pipeline: its group committed what each topic's own group committed
    pipeline = f"together{time.time_ns()}"
    for planted in scenarios.values():
        committed = env.committed(services["source"], f"ureplicator.{planted.pipeline}", planted.topic)
        env.commit(services["source"], f"ureplicator.{pipeline}", planted.topic, committed)
    alone = {scenarios[name].topic: outcome.report["topics"][0] for name, outcome in kafka_reports.items()}
    # When all are verified in one run with the digest reader (counting the pass-1 Spark jobs)
    jobs = []
    real = pass1.bucket_passes
    monkeypatch.setattr(pass1, "bucket_passes", lambda *a, **k: jobs.append(len(a[3])) or real(*a, **k))
    monkeypatch.delenv(digest.READER_ENV, raising=False)
    config = env.config_file(tmp_path, services, pipeline)
    topics = [f"{p.topic}={p.destination}" for p in scenarios.values()]
    together = env.run_verifier(["--config", str(config), *[a for t in topics for a in ("--topic", t)],
                                 "--bucket-size", "4"], tmp_path / "together")
    # Then pass 1 of the three topics was one job, and each topic's report is the one it got alone
    assert jobs == [3], together.stderr
    assert together.report["spark"]["reader"] == "digest"
    for entry in together.report["topics"]:
        entry.pop("duration_s")
        expected = dict(alone[entry["topic"]])
        expected.pop("duration_s")
        assert entry == expected
