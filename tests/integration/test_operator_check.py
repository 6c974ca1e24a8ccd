"""`ureplicator check` and the REST API against the secure stack: a refused credential is named as such."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import kafka_io
from ureplicator.controller.client import request

pytestmark = pytest.mark.integration


def _secure_pipeline(pipeline, services, destination_password: str | None = None) -> dict:
    from devtools import stack

    secure = services["secure"]
    properties = stack.secure_client_properties(secure)
    wrong = {**properties, "sasl.password": destination_password} if destination_password else properties
    pipeline.overrides.update({
        "source": {"bootstrap_servers": secure["source"], "properties": properties},
        "destination": {"bootstrap_servers": secure["destination"], "properties": wrong},
    })
    return properties


def _check(config, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ureplicator", "check", "--config", str(config),
                           "--timeout", "6", *extra],
                          capture_output=True, text=True, timeout=120)


def test_check_passes_with_the_right_credentials_and_names_what_it_checked(pipeline, services):
    # Given a pipeline on the SASL_SSL listeners with a mirrored topic's source in place
    properties = _secure_pipeline(pipeline, services)
    topic = f"{pipeline.name}-ok"
    kafka_io.create_topic(kafka_io.client_config(services["secure"]["source"], **properties), topic, 2)
    config = pipeline.write_config("check")

    # When an operator runs the preflight, human and JSON
    human = _check(config)
    machine = _check(config, "--json")

    # Then both exit 0, every cluster is reached and the offsets group's ACLs are checked
    assert human.returncode == 0, human.stdout + human.stderr
    assert "ready to run" in human.stdout
    assert machine.returncode == 0, machine.stderr
    findings = json.loads(machine.stdout)["findings"]
    assert json.loads(machine.stdout)["ok"] is True
    targets = {f["target"] for f in findings}
    assert {"config", "zookeeper", "source src", "destination dst"} <= targets
    assert any(f"group {pipeline.group} grants DESCRIBE, READ" in f["message"] for f in findings)
    assert any("IDEMPOTENT_WRITE" in f["message"] and f["level"] == "ok" for f in findings)
    assert services["secure"]["password"] not in human.stdout + human.stderr + machine.stdout
    # and it says which copy loop a worker started from this install runs: the C loop, proven here
    loop = [f for f in findings if f["target"] == "worker"]
    assert [f["level"] for f in loop] == ["ok"] and "copy loop: C" in loop[0]["message"], loop


def test_check_says_a_worker_would_run_the_python_loop_and_why_or_refuse_to_start(pipeline, services, tmp_path):
    # Given an install whose C loop cannot load (what a missing compiler leaves)
    import os

    env = {**os.environ, "UREPLICATOR_NATIVE_MODULE": str(tmp_path / "missing_native.so")}

    def check(mode: str) -> subprocess.CompletedProcess:
        pipeline.overrides["worker"] = {"native_loop": mode}
        config = pipeline.write_config(f"loop-{mode}")
        return subprocess.run([sys.executable, "-m", "ureplicator", "check", "--config", str(config), "--timeout",
                               "6", "--json"], capture_output=True, text=True, timeout=120, env=env)

    # When the preflight runs with native_loop auto, then on
    auto, on = check("auto"), check("on")

    # Then auto warns (the worker would run, slower) naming the reason, and on fails: that worker refuses to start
    assert auto.returncode == 0, auto.stdout + auto.stderr
    worker = [f for f in json.loads(auto.stdout)["findings"] if f["target"] == "worker"]
    assert [f["level"] for f in worker] == ["warn"]
    assert "copy loop: Python" in worker[0]["message"] and "worker._native is not built" in worker[0]["message"]
    assert on.returncode == 1, on.stdout + on.stderr
    worker = [f for f in json.loads(on.stdout)["findings"] if f["target"] == "worker"]
    assert [f["level"] for f in worker] == ["fail"] and "refuses to start" in worker[0]["message"]


def test_check_with_a_wrong_sasl_password_names_the_cluster_and_the_error_and_exits_non_zero(pipeline, services):
    # Given a config whose destination password is wrong
    _secure_pipeline(pipeline, services, destination_password="not-the-password")
    config = pipeline.write_config("check")

    # When the preflight runs
    result = _check(config)

    # Then it exits 1, names the destination cluster and says the credentials were refused
    assert result.returncode == 1, result.stdout + result.stderr
    failures = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failures) == 1, result.stdout
    assert "destination dst" in failures[0]
    assert "refused our credentials" in failures[0]
    assert "SASL authentication error" in failures[0]
    assert "did not answer" not in result.stdout
    assert "not-the-password" not in result.stdout + result.stderr
    # And the source, whose credentials are right, passed
    assert any(line.startswith("OK    source src") for line in result.stdout.splitlines())


def test_check_with_an_invalid_config_exits_2_naming_the_key(pipeline, services, tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text(json.dumps({**pipeline.config_doc(), "controller": {"rest_tls_certfile": "/x.pem"}}))
    result = _check(config)
    assert result.returncode == 2
    assert "controller.rest_tls_keyfile" in result.stdout


def test_rest_api_says_authentication_failed_not_did_not_answer(pipeline, services):
    # Given a controller whose destination password is wrong (the source is fine)
    properties = _secure_pipeline(pipeline, services, destination_password="not-the-password")
    topic = f"{pipeline.name}-auth"
    kafka_io.create_topic(kafka_io.client_config(services["secure"]["source"], **properties), topic, 1)
    pipeline.start_controller()

    # When a topic is added (the controller must create it on the destination)
    # (a refused login ends the controller's 30 s wait for the destination at once: common.kafka.read_metadata)
    status, body = request(f"{pipeline.url}/topics", "POST", {"topic": topic}, timeout_s=90)

    # Then the 503 names the cluster and the refused credentials
    assert status == 503, body
    message = body["error"]["message"]
    assert "cluster dst" in message and "refused our credentials" in message, message
    assert "did not answer" not in message

    # And `ureplicator status` does not call it healthy: it names the cluster and exits 1
    result = subprocess.run([sys.executable, "-m", "ureplicator", "status", "--url", pipeline.url, "--json"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    problems = json.loads(result.stdout)["problems"]
    assert any(p.startswith("cluster dst refused this controller's credentials: authentication failed")
               for p in problems), problems

    # And its readiness answer (/health, the chart's readiness probe) is 503 "credentials refused", naming
    # the cluster and librdkafka's reason, with ZooKeeper and the leader still reported as fine
    code, health = _get(f"{pipeline.url}/health")
    assert (code, health["status"]) == (503, "credentials refused"), health
    assert list(health["auth_failures"]) == ["dst"]
    assert health["auth_failures"]["dst"].startswith("authentication failed: ")
    assert "SASL authentication error" in health["auth_failures"]["dst"]
    assert health["zookeeper"] == "connected" and health["leader"] is not None
    assert "not-the-password" not in json.dumps(health)
    # And liveness stays 200: restarting the pod cannot fix a password
    assert _get(f"{pipeline.url}/healthz") == (200, {"status": "ok", "election_thread": True})
    # And `ureplicator health` exits non-zero
    result = subprocess.run([sys.executable, "-m", "ureplicator", "health", "--url", pipeline.url],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr


def _get(url: str) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_check_with_the_wrong_zookeeper_credential_says_zookeeper_refused_the_write(pipeline, services):
    # Given a pipeline whose nodes a controller secured with a ZooKeeper digest credential
    pipeline.overrides["zookeeper"] = {"auth": "replicator:zk-Secret-4711"}
    pipeline.start_controller()
    pipeline.stop_all()

    # When the preflight runs with another password
    config = pipeline.write_config("check", zookeeper={"auth": "replicator:wrong-password"})
    result = _check(config)

    # Then it exits 1 and says ZooKeeper refused the write, naming the key to fix
    assert result.returncode == 1, result.stdout + result.stderr
    (failure,) = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert "zookeeper" in failure and "refused a write" in failure
    assert "zookeeper.auth is not the credential that secured it" in failure
    assert "wrong-password" not in result.stdout + result.stderr


def test_a_worker_the_destination_refuses_is_not_ready_and_says_why(pipeline, services):
    import urllib.error
    import urllib.request

    from devtools.ports import free_port
    from tests.support.kafka_io import wait_for

    # Given a worker whose destination password is wrong, and one whose password is right
    properties = _secure_pipeline(pipeline, services, destination_password="not-the-password")
    port, good_port = free_port(), free_port()
    pipeline.start_worker("w1", worker={"metrics_port": port})
    pipeline.start_worker("w2", worker={"metrics_port": good_port},
                          destination={"bootstrap_servers": services["secure"]["destination"],
                                       "properties": properties})

    def ready(on: int = port) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{on}/ready", timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
        except OSError:
            return 0, {}

    # Then its readiness probe fails, and the answer names the cluster and the refused login
    status, body = wait_for(lambda: (r := ready())[0] == 503 and "reason" in r[1] and r, 60,
                            "/ready names the refused credentials")
    assert body["ready"] is False
    assert body["reason"].startswith("cluster dst refused our credentials: authentication failed: ")
    assert "SASL authentication error" in body["reason"]
    # And the worker with the right password is ready, with no reason given
    assert wait_for(lambda: ready(good_port) == (200, {"ready": True}), 60, "w2 ready")

