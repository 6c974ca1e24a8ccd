"""`ureplicator status` and GET /status on a running pipeline: every partition, lag in records and seconds,
the last verification, and a non-zero exit within 30 s of a worker being stopped."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import jsonschema
import pytest

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from ureplicator.controller.openapi import document

pytestmark = pytest.mark.integration


def clean_report_dir(directory):
    """A reports directory holding one passing run, as `ureplicator verify --output` writes it."""
    from tests.support.verifier_samples import sample_report
    from ureplicator.reports.model import PartitionReport, TopicReport, Watermarks
    from ureplicator.reports.store import ReportStore

    report = sample_report()
    report.topics = [TopicReport("orders", "orders", [PartitionReport(0, Watermarks(0, 0, 100, 100, 0, 100),
                                                                      verified_records=100, buckets=1)])]
    ReportStore(directory).save(report.to_dict())
    return report.run_id


def _events(log) -> list[dict]:
    """The JSON log events of one process."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def status(pipeline, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ureplicator", "status", "--url", pipeline.url, *extra],
                          capture_output=True, text=True, timeout=60)


def start_mirroring(pipeline, services, tmp_path, partitions: int = 4, records: int = 2000) -> tuple[str, str]:
    """A controller (restart grace 120 s, a verification report) and worker w1 mirroring a fresh topic."""
    run_id = clean_report_dir(tmp_path / "reports")
    topic = f"{pipeline.name}-status"
    kafka_io.create_topic(services["source"], topic, partitions)
    kafka_io.produce(services["source"], topic, records, partitions)
    pipeline.start_controller(controller={"worker_restart_grace_s": 120,
                                          "verification_dir": str(tmp_path / "reports")})
    pipeline.start_worker("w1")
    code, body = pipeline.api("POST", "/topics", {"topic": topic})
    assert code == 201, body
    return topic, run_id


def test_status_shows_every_partition_and_exits_non_zero_within_30s_of_a_worker_stopping(pipeline, services,
                                                                                         tmp_path):
    # Given a pipeline mirroring a 4-partition topic with one worker and a passing verification
    topic, run_id = start_mirroring(pipeline, services, tmp_path)

    # When everything is mirrored, `ureplicator status` exits 0 and shows each partition with its owner and lag
    def settled():
        result = status(pipeline, "--json")
        doc = json.loads(result.stdout) if result.stdout else {}
        rows = [p for p in doc.get("partitions", []) if p["topic"] == topic]
        done = rows and all(p["owner"] == "w1" and p["lag_records"] == 0 for p in rows) and sum(
            p["committed"] or 0 for p in rows) == 2000
        return (result, doc) if result.returncode == 0 and done else None

    result, doc = wait_for(settled, 90, "status healthy with every partition mirrored")
    rows = [p for p in doc["partitions"] if p["topic"] == topic]
    assert [p["partition"] for p in rows] == [0, 1, 2, 3]
    assert all(p["health"] == "ok" and p["lag_seconds"] == 0.0 and p["committed"] is not None
               for p in rows), json.dumps(rows)
    assert sum(p["committed"] for p in rows) == 2000
    assert doc["healthy"] is True and doc["problems"] == [] and doc["leader"]
    jsonschema.validate(doc, document()["components"]["schemas"]["Status"])  # as /openapi.json says
    assert [(w["worker"], w["health"]) for w in doc["workers"]] == [("w1", "ok")]
    assert doc["verification"]["status"] == "OK" and doc["verification"]["run_id"] == run_id
    assert doc["verification"]["age_s"] > 0 and doc["verification"]["report"] == "/ui/verification"
    human = status(pipeline, "--all")
    assert human.returncode == 0, human.stdout + human.stderr
    assert "HEALTHY" in human.stdout and f"verification: OK (run {run_id}" in human.stdout
    assert f"{topic}:3" in human.stdout and "-1" not in human.stdout.split()  # no cell says -1

    # And with the worker throttled below the produce rate, lag shows in records and in seconds (record age)
    code, body = pipeline.api("POST", "/admin/rate_limit", {"records_per_s": 2})
    assert code == 200, body
    (worker,) = [p for p in pipeline.processes if p.name == "w1"]
    wait_for(lambda: any(e.get("event") == "rate_limit_applied" and e.get("records_per_s") == 2
                         for e in _events(worker.log)), 30, "w1 applied the rate limit")
    kafka_io.produce(services["source"], topic, 400, 4, start=2000)

    def lagging():
        doc = json.loads(status(pipeline, "--json").stdout)
        rows = [p for p in doc["partitions"] if p["topic"] == topic and (p["lag_records"] or 0) > 0]
        return rows if rows and all(p["lag_seconds"] is not None and p["lag_seconds"] > 0 for p in rows) else None

    lagging_rows = wait_for(lagging, 60, "lag in records and seconds")
    # kafka_io.produce stamps records one hour in the past: the age comes from the record's CreateTime
    assert all(3500 < p["lag_seconds"] < 3900 for p in lagging_rows), lagging_rows

    # When the worker is stopped
    pipeline.processes[-1].terminate()
    stopped_at = time.monotonic()

    # Then within 30 s the status exits 1 and says which worker and partitions need a person
    def unhealthy():
        result = status(pipeline, "--json")
        return result if result.returncode == 1 else None

    result = wait_for(unhealthy, 30, "status exits 1 after a worker stopped")
    elapsed = time.monotonic() - stopped_at
    assert elapsed < 30
    doc = json.loads(result.stdout)
    assert [(w["worker"], w["health"]) for w in doc["workers"]] == [("w1", "lost")]
    rows = [p for p in doc["partitions"] if p["topic"] == topic]
    assert all(p["health"] == "owner down" and p["problem"] for p in rows), json.dumps(rows)
    assert sorted(doc["unowned"]) == sorted(f"{topic}:{p}" for p in range(4))
    assert any("worker w1 is lost" in p for p in doc["problems"])
    human = status(pipeline)
    assert human.returncode == 1
    assert "NEEDS ATTENTION" in human.stdout and "owner down" in human.stdout
    print(f"status turned non-zero {elapsed:.1f}s after the worker stopped")
