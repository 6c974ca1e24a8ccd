"""The warm verifier: ``verify --every`` keeps one SparkSession, runs incremental passes on schedule, stops on SIGTERM.

It runs as its own process, the way the chart's Deployment runs it, against
the real clusters; the test mirrors by hand (the replicator's records and
commits) while it runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import kafka_io
from tests.support import verifier_env as env
from tests.support.kafka_io import wait_for
from tests.support.verifier_env import mirrored

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 2
KEEP = {"retention.ms": "-1"}


def _mirror(services: dict, topic: str, destination: str, pipeline: str, done: dict[int, int]) -> None:
    """Copy what is new on the source, as the replicator would, and commit the source ends for its group."""
    for p in range(PARTITIONS):
        new = [r for r in kafka_io.read_partition(services["source"], topic, p) if r.offset >= done[p]]
        env.write(services["destination"], destination, p, [mirrored(r, p) for r in new])
        if new:
            done[p] = new[-1].offset + 1
    env.commit(services["source"], f"ureplicator.{pipeline}", topic,
               kafka_io.end_offsets(services["source"], topic, PARTITIONS))


def _history(reports: Path) -> list[dict]:
    path = reports / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_every_keeps_one_session_verifies_new_records_incrementally_and_stops_on_sigterm(services, tmp_path):
    # Given two topics of one pipeline, each a clean mirror of 2 x 50 records (verified concurrently)
    pipeline = f"vw{int(time.time() * 1000)}"
    topics = [(f"{pipeline}-{name}", f"{pipeline}-{name}.mirror") for name in ("a", "b")]
    done = {}
    for topic, destination in topics:
        kafka_io.create_topic(services["source"], topic, PARTITIONS, KEEP)
        kafka_io.create_topic(services["destination"], destination, PARTITIONS, KEEP)
        kafka_io.produce(services["source"], topic, 100, PARTITIONS)
        done[topic] = dict.fromkeys(range(PARTITIONS), 0)
        _mirror(services, topic, destination, pipeline, done[topic])
    config = env.config_file(tmp_path, services, pipeline)
    reports = tmp_path / "reports"

    # When the warm verifier runs every second
    process = subprocess.Popen(
        [sys.executable, "-m", "ureplicator.verifier", "--config", str(config),
         *(f"--topic={topic}={destination}" for topic, destination in topics),
         "--every", "1s", "--master", "local[2]", "--output", str(reports), "--bucket-size", "16",
         "--conf", "spark.driver.memory=512m"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "UREPLICATOR_SPARK_CDS": "off"},  # no class archive dumped into the user's cache
    )
    try:
        wait_for(lambda: len(_history(reports)) >= 1, 120, "the first run")
        # and 2 x 10 more records of the first topic are mirrored while it runs
        (topic, destination), _ = topics
        kafka_io.produce(services["source"], topic, 20, PARTITIONS, start=100)
        _mirror(services, topic, destination, pipeline, done[topic])
        wait_for(lambda: any(h["verified_records"] == 20 for h in _history(reports)), 120,
                 "a run that verifies the new records")
        # and it gets SIGTERM
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    # Then it finishes the run it was in and exits 0 (every run was OK)
    assert process.returncode == 0, stderr
    assert "stopping after the current run" in stderr
    # with one SparkSession for all its runs
    assert stderr.count("this process keeps it for every run") == 1
    history = _history(reports)
    assert len(history) >= 3 and len(stdout.strip().splitlines()) == len(history)
    assert all(h["status"] == "OK" for h in history)
    # the first run was a full pass of both topics, every later one incremental: only the 20 new records
    # were verified, once
    assert history[0]["mode"] == "full" and history[0]["verified_records"] == 200
    assert {h["mode"] for h in history[1:]} == {"incremental"}
    assert sum(h["verified_records"] for h in history[1:]) == 20
