"""ZooKeeper client TLS against the stack's real TLS port: a pipeline runs over it, and `check` names a wrong CA."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import kafka_io
from tests.support.kafka_io import wait_for

pytestmark = pytest.mark.integration


def _zookeeper_tls(pipeline, services) -> dict:
    from devtools import stack

    secure = services.get("secure", {})
    if "zookeeper" not in secure:
        pytest.fail("the stack has no ZooKeeper TLS port: a reused stack (UREPLICATOR_TEST_STACK) must be started "
                    "with `ureplicator stack up --secure` by code that opens ZooKeeper's secureClientPort")
    section = {**stack.secure_zookeeper(secure), "session_timeout_s": 6}
    pipeline.overrides["zookeeper"] = section
    return section


def _check(config, timeout_s: int = 6) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ureplicator", "check", "--config", str(config),
                           "--timeout", str(timeout_s), "--json"],
                          capture_output=True, text=True, timeout=120)


def test_a_controller_and_a_worker_mirror_over_zookeeper_tls(pipeline, services):
    # Given a pipeline whose every ZooKeeper client speaks TLS with a client certificate
    section = _zookeeper_tls(pipeline, services)
    assert section["connect"] != services["zookeeper"]
    topic = f"{pipeline.name}-zktls"
    kafka_io.create_topic(services["source"], topic, 2)
    kafka_io.produce(services["source"], topic, 200, 2)

    # When a controller and a worker run and the topic is added
    pipeline.start_controller()
    pipeline.start_worker("w1")
    status, body = pipeline.api("POST", "/topics", {"topic": topic})
    assert status == 201, body

    # Then the worker (which found its assignment in ZooKeeper over TLS) mirrors every record
    ends = kafka_io.end_offsets(services["source"], topic, 2)
    wait_for(lambda: kafka_io.end_offsets(services["destination"], topic, 2, settle_s=0) == ends, 60,
             "mirrored with ZooKeeper over TLS")
    # And the assignment and the worker's registration live in the TLS ZooKeeper
    code, status_doc = pipeline.api("GET", "/status")
    assert code == 200, status_doc
    assert [(w["worker"], w["live"]) for w in status_doc["workers"]] == [("w1", True)]


def test_check_over_zookeeper_tls_passes_and_a_wrong_ca_names_zookeeper_tls(pipeline, services, tmp_path):
    from devtools import certs

    # Given a config whose ZooKeeper section points at the TLS port with the stack's CA
    section = _zookeeper_tls(pipeline, services)
    good = _check(pipeline.write_config("check"))
    # And one that trusts another CA (one that did not sign ZooKeeper's certificate)
    other = certs.write(tmp_path / "other-ca")
    wrong = _check(pipeline.write_config("check-wrong-ca", zookeeper={**section, "tls_ca": str(other.ca)}), 3)

    # Then the first passes its ZooKeeper check
    assert good.returncode == 0, good.stdout + good.stderr
    findings = json.loads(good.stdout)["findings"]
    assert any(f["target"] == "zookeeper" and f["level"] == "ok" for f in findings), findings
    # And the second exits 1 with a ZooKeeper finding that names TLS and the certificate failure
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    (failure,) = [f for f in json.loads(wrong.stdout)["findings"] if f["level"] == "fail"]
    assert failure["target"] == "zookeeper"
    assert "ZooKeeper TLS" in failure["message"] and "CERTIFICATE_VERIFY_FAILED" in failure["message"], failure
    assert "zookeeper.tls_ca" in failure["message"]
