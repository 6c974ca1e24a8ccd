"""The class data sharing archive: ``python -m ureplicator.verifier.cds`` writes one, and a verifier JVM maps it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ureplicator.verifier import cds

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PROBE = """
from ureplicator.verifier import sparkjob
spark = sparkjob.session("local[1]")
spark.range(10).selectExpr("xxhash64(id) AS h").collect()
"""


def test_an_archive_written_by_a_training_run_is_mapped_by_the_next_driver(tmp_path):
    # Given an archive written by the training command (no cluster needed)
    archive = tmp_path / "spark.jsa"
    trained = subprocess.run([sys.executable, "-m", "ureplicator.verifier.cds", str(archive)], cwd=REPO,
                             capture_output=True, text=True, timeout=600, check=False)
    assert trained.returncode == 0 and archive.stat().st_size > 10 * 2**20, trained.stderr[-2000:]
    # When a driver starts with UREPLICATOR_SPARK_CDS naming it (and the JVM logs where each class came from)
    loads = tmp_path / "class-load.log"
    env = {**os.environ, cds.CDS_ENV: str(archive), "JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={loads}"}
    probe = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300, check=False)
    # Then Spark's classes come from the archive (its "top" layer), not from the jars
    assert probe.returncode == 0, probe.stderr[-2000:]
    log = loads.read_text()
    assert "org.apache.spark.sql.SparkSession source: shared objects file (top)" in log
    assert "org.apache.spark.sql.catalyst.expressions.XxHash64 source: shared objects file (top)" in log


def test_without_a_readable_archive_the_driver_starts_as_before(tmp_path):
    assert cds.java_options({}) == []
    assert cds.java_options({cds.CDS_ENV: str(tmp_path / "missing.jsa")}) == []
    (tmp_path / "spark.jsa").write_bytes(b"x")
    assert cds.java_options({cds.CDS_ENV: str(tmp_path / "spark.jsa")})[:2] == [
        f"-XX:SharedArchiveFile={tmp_path / 'spark.jsa'}", "-Xshare:auto"]
