"""The verifier on a real Spark standalone cluster: executors in their own JVM give the same report as local[2].

A master and one worker are started from pyspark's own jars on loopback
(``spark-class org.apache.spark.deploy.master.Master`` / ``...deploy.worker.Worker``);
``python -m ureplicator.verifier --master spark://…`` runs as its own process (one
SparkContext per JVM: the session's local Spark cannot share this process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools import jvm
from devtools.ports import free_port
from tests.support import kafka_io
from tests.support import verifier_env as env
from tests.support.kafka_io import wait_for
from tests.support.verifier_env import mirrored, nonzero, ranges
from ureplicator.verifier import digest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 4


def _spark_class(*args: str, log: Path) -> subprocess.Popen[bytes]:
    import pyspark

    home = Path(pyspark.__file__).parent
    environment = {
        **os.environ, "SPARK_HOME": str(home), "JAVA_HOME": str(Path(jvm.java_executable()).parents[1]),
        "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m", "SPARK_NO_DAEMONIZE": "1",
        # no REST submission server: it takes the fixed port 6066
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    with log.open("wb") as out:
        return subprocess.Popen([str(home / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                env=environment, start_new_session=True)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A Spark standalone master with one worker (1 core, 1 GiB for executors) on loopback."""
    logs = tmp_path_factory.mktemp("spark-standalone")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    master = _spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                          "--webui-port", str(ui), log=logs / "master.log")
    worker = _spark_class("org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
                          "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(worker_ui),
                          "--work-dir", str(logs / "work"), log=logs / "worker.log")
    try:
        wait_for(lambda: "Successfully registered with master" in (logs / "worker.log").read_text(errors="replace"),
                 120, "the Spark worker to register with the master")
        yield f"spark://127.0.0.1:{port}", logs
    finally:
        for process in (worker, master):
            process.terminate()
        for process in (worker, master):
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_a_standalone_cluster_gives_the_same_report_as_local(spark, services, standalone, tmp_path):
    master, logs = standalone
    # Given a mirror with a lost record, a replayed one and a changed one
    pipeline = f"vs{int(time.time() * 1000)}"
    topic, destination = f"{pipeline}-t", f"{pipeline}-t.mirror"
    kafka_io.create_topic(services["source"], topic, PARTITIONS, {"retention.ms": "-1"})
    kafka_io.create_topic(services["destination"], destination, PARTITIONS, {"retention.ms": "-1"})
    kafka_io.produce(services["source"], topic, 400, PARTITIONS)
    for p in range(PARTITIONS):
        copies = [mirrored(r, p) for r in kafka_io.read_partition(services["source"], topic, p)]
        if p == 1:
            del copies[30]
        if p == 2:
            copies.append(copies[12])
        if p == 3:
            copies[7] = copies[7].with_value(b"changed")
        env.write(services["destination"], destination, p, copies)
    env.commit(services["source"], f"ureplicator.{pipeline}", topic,
               kafka_io.end_offsets(services["source"], topic, PARTITIONS))
    config = env.config_file(tmp_path, services, pipeline)
    args = ["--config", str(config), "--topic", f"{topic}={destination}", "--bucket-size", "16"]

    # When it is verified on local[2] (this process) and on the standalone cluster (its own driver process)
    local = env.run_verifier(args, tmp_path / "local")
    cluster_out = tmp_path / "cluster"
    driver = subprocess.run(
        [sys.executable, "-m", "ureplicator.verifier", *args, "--master", master, "--output", str(cluster_out),
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--conf", "spark.executor.memory=512m", "--conf", "spark.sql.shuffle.partitions=2"],
        # pass 1 as a Spark job, not in the driver (as for a small run): the executor must read
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, digest.READER_ENV: "digest-job"},
    )

    # Then both find the same defects, at the same offsets, with the same hashes
    assert local.status == 1, local.stderr[-3000:]
    assert driver.returncode == 1, driver.stderr[-3000:]
    remote = json.loads((cluster_out / "latest.json").read_text())
    assert remote["spark"]["master"] == master
    # with the digest reader on both: its jar reached the executor through spark.jars
    assert remote["spark"]["reader"] == local.report["spark"]["reader"] == "digest"
    assert _findings(remote) == _findings(local.report)
    assert nonzero(local.partition(topic, 1)) == {"MISSING": 1} and ranges(local.partition(topic, 1), "MISSING") == [
        [30, 30]]
    # and the work ran in the worker's executor JVM, not in the driver
    executors = list((logs / "work").glob("app-*/*/stderr"))
    assert executors, "no executor ran on the standalone worker"


def _findings(report: dict) -> list:
    """What a report says about the records, without run ids, times and the master."""
    return [
        (p["partition"], p["status"], p["verified_range"], p["destination_range"], p["counts"],
         {c: (v["ranges"], [(s["source_offset"], s["destination_offset"], s["source_hash"], s["destination_hash"])
                            for s in v["samples"]]) for c, v in p["categories"].items()})
        for t in report["topics"] for p in t["partitions"]
    ]
