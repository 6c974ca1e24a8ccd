"""Security turned on against the real stack: ZooKeeper digest ACLs, TLS + SASL/SCRAM Kafka, redacted secrets."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import KafkaException
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from ureplicator.common import config as config_module
from ureplicator.common import zk
from ureplicator.common.errors import ConfigError
from ureplicator.common.zkschema import Paths

pytestmark = pytest.mark.integration

ZK_AUTH = "replicator:zk-Secret-4711"


def _config(pipeline, **sections) -> config_module.Config:
    return config_module.from_dict(pipeline.config_doc(**sections))


def _mirrored(source: kafka_io.Cluster, destination: kafka_io.Cluster, topic: str, partitions: int) -> bool:
    """The destination's end offsets equal the source's (False while the destination topic is missing)."""
    try:
        return kafka_io.end_offsets(destination, topic, partitions) == kafka_io.end_offsets(source, topic, partitions)
    except KafkaException:
        return False


def _anonymous(services) -> KazooClient:
    client = KazooClient(hosts=services["zookeeper"])
    client.start(timeout=15)
    return client


def _start_with_zookeeper_auth(pipeline, services, suffix: str, partitions: int, records: int) -> str:
    """A source topic holding ``records``, and a controller and worker w1 that share the ZooKeeper credential."""
    pipeline.overrides["zookeeper"] = {"auth": ZK_AUTH}
    topic = f"{pipeline.name}-{suffix}"
    kafka_io.create_topic(services["source"], topic, partitions)
    kafka_io.produce(services["source"], topic, records, partitions)
    pipeline.start_controller()
    pipeline.start_worker("w1")
    return topic


def _assert_read_only_for(client: KazooClient, paths: Paths, topic: str) -> None:
    """``client`` reads the pipeline's nodes but every change is refused with NoAuthError."""
    data, _ = client.get(paths.topic(topic))
    assert b'"topic"' in data
    assert client.get_children(paths.assignments)
    with pytest.raises(NoAuthError):
        client.set(paths.topic(topic), b"{}")
    with pytest.raises(NoAuthError):
        client.delete(paths.topic(topic))
    with pytest.raises(NoAuthError):
        client.create(paths.assignment("intruder"), b"{}")
    with pytest.raises(NoAuthError):
        client.create(paths.topic("intruder"), b"{}")


def test_zookeeper_auth_pipeline_mirrors_and_others_can_read_but_not_write(pipeline, services):
    # Given a controller and a worker that share the digest credential
    topic = _start_with_zookeeper_auth(pipeline, services, "acl", partitions=2, records=500)

    # When a topic is added, the pipeline still mirrors every record
    status, body = pipeline.api("POST", "/topics", {"topic": topic})
    assert status == 201, body
    wait_for(lambda: _mirrored(services["source"], services["destination"], topic, 2), 90, "mirror")
    source_end = kafka_io.end_offsets(services["source"], topic, 2)
    assert sum(source_end.values()) == 500
    wait_for(lambda: kafka_io.committed(services["source"], pipeline.group, topic, 2) == source_end, 30, "commits")

    # Then a client without the credential (or with a wrong password) can read but not change assignments
    paths = Paths(_config(pipeline).root)
    anonymous = _anonymous(services)
    wrong = KazooClient(hosts=services["zookeeper"], auth_data=[("digest", "replicator:wrong-password")])
    wrong.start(timeout=15)
    try:
        for client in (anonymous, wrong):
            _assert_read_only_for(client, paths, topic)
        # and the ephemeral nodes the worker and the election made carry the same ACL (ZooKeeper shows
        # the digest only to a client with ADMIN permission: the credential's holder)
        holder = zk.connect(_config(pipeline), read_only=True)
        for parent in (paths.workers, paths.status, paths.election):
            children = holder.get_children(parent)
            assert children, parent
            for child in children:
                acl, _ = holder.get_acls(f"{parent}/{child}")
                assert set(acl) == set(zk.pipeline_acl(ZK_AUTH)), (parent, child)
        holder.stop()
        holder.close()
    finally:
        for client in (anonymous, wrong):
            client.stop()
            client.close()
    # and the controller and worker never hit an authorization error
    assert "NoAuth" not in pipeline.logs()


def test_nodes_from_before_auth_are_secured_at_start_and_a_missing_credential_is_refused(pipeline, services):
    # Given a pipeline created without authentication (open ACLs), with a topic registered
    open_config = _config(pipeline)
    paths = Paths(open_config.root)
    client = zk.connect(open_config)
    client.create(paths.topic("legacy"), b'{"topic": "legacy", "destination": "legacy", "partitions": 1}')
    client.create(paths.assignment("old-worker"), b'{"generation": 1, "partitions": {}}')
    client.stop()
    client.close()

    # When a process starts with zookeeper.auth, it secures every node already there
    secured = zk.connect(_config(pipeline, zookeeper={"auth": ZK_AUTH}))
    try:
        for path in (open_config.root, paths.topics, paths.topic("legacy"), paths.assignment("old-worker")):
            acl, _ = secured.get_acls(path)
            assert set(acl) == set(zk.pipeline_acl(ZK_AUTH)), path
    finally:
        secured.stop()
        secured.close()
    anonymous = _anonymous(services)
    try:
        _assert_read_only_for(anonymous, paths, "legacy")
    finally:
        anonymous.stop()
        anonymous.close()

    # Then a process without the credential, or with another one, is refused at start with what to do
    with pytest.raises(ConfigError, match=r"zookeeper.auth: .* protected by ZooKeeper ACLs \(digest:replicator all"):
        zk.connect(open_config)
    with pytest.raises(ConfigError, match="protected by another ZooKeeper credential"):
        zk.connect(_config(pipeline, zookeeper={"auth": "replicator:not-the-password"}))


def test_worker_without_the_credential_exits_2_naming_the_setting(pipeline, services):
    pipeline.overrides["zookeeper"] = {"auth": ZK_AUTH}
    pipeline.start_controller()  # creates the secured pipeline
    proc = pipeline.start_worker("w-noauth", zookeeper={"auth": None})
    assert proc.popen.wait(60) == 2
    assert "config error: zookeeper.auth: the pipeline's nodes under" in proc.tail()


def test_secrets_never_reach_the_logs_of_real_processes(pipeline, services, monkeypatch):
    # Given a controller and a worker at debug level whose config holds an admin token and the
    # ZooKeeper credential (the token from the environment, as the chart passes it)
    token = "admin-Token-90210"
    monkeypatch.setenv("UREPLICATOR_LOG_LEVEL", "debug")
    monkeypatch.setenv("UREPLICATOR_CONTROLLER_ADMIN_TOKEN", token)
    topic = _start_with_zookeeper_auth(pipeline, services, "quiet", partitions=1, records=50)
    # When mutating calls come with a wrong token and then the right one, and records are mirrored
    assert pipeline.api("POST", "/topics", {"topic": topic}, token="wrong-token-1")[0] == 403
    assert pipeline.api("POST", "/topics", {"topic": topic}, token=token)[0] == 201
    wait_for(lambda: _mirrored(services["source"], services["destination"], topic, 1), 90, "mirror")
    pipeline.stop_all()

    # Then no line of either process's output shows a secret, and the config they logged shows ***
    password = ZK_AUTH.partition(":")[2]
    for proc in pipeline.processes:
        text = proc.log.read_text(errors="replace")
        assert token not in text and password not in text, proc.name
        starting = [line for line in text.splitlines() if "_starting" in line and '"config"' in line]
        assert starting, proc.name
        logged = json.loads(starting[0])["config"]
        assert logged["zookeeper"]["auth"] == "***"
        assert logged["controller"]["admin_token"] == "***"


def _secure(services) -> dict:
    if "secure" not in services:
        pytest.fail("the stack has no SASL_SSL listeners: a reused stack (UREPLICATOR_TEST_STACK) must be started "
                    "with `ureplicator stack up --secure`")
    return services["secure"]


def test_tls_and_scram_end_to_end_mirror_then_verify(spark, pipeline, services, tmp_path):
    from devtools import stack
    from tests.support import verifier_env

    # Given the brokers' SASL_SSL listeners (SCRAM-SHA-512 over TLS, a CA of their own) and a pipeline whose
    # clients reach only those, with the ZooKeeper credential and an admin token on as well
    secure = _secure(services)
    properties = stack.secure_client_properties(secure)
    source = kafka_io.client_config(secure["source"], **properties)
    destination = kafka_io.client_config(secure["destination"], **properties)
    token = "admin-Token-31337"
    pipeline.overrides.update({
        "source": {"bootstrap_servers": secure["source"], "properties": properties},
        "destination": {"bootstrap_servers": secure["destination"], "properties": properties},
        "zookeeper": {"auth": ZK_AUTH},
        "controller": {"admin_token": token},
    })
    topic = f"{pipeline.name}-tls"
    kafka_io.create_topic(source, topic, 3)
    kafka_io.produce(source, topic, 3000, 3)

    # When the controller and a worker mirror the topic
    pipeline.start_controller()
    pipeline.start_worker("w1")
    status, body = pipeline.api("POST", "/topics", {"topic": topic}, token=token)
    assert status == 201, body
    wait_for(lambda: _mirrored(source, destination, topic, 3), 120, "mirror over SASL_SSL")
    ends = kafka_io.end_offsets(source, topic, 3)
    wait_for(lambda: kafka_io.committed(source, pipeline.group, topic, 3) == ends, 60, "commits over SASL_SSL")

    # Then the destination holds every record exactly, per partition and in order
    for p in range(3):
        src = kafka_io.read_partition(source, topic, p)
        dst = kafka_io.read_partition(destination, topic, p)
        assert [r.logical() for r in dst] == [r.logical() for r in src], f"partition {p} differs"
    assert sum(ends.values()) == 3000

    # And the verifier (Spark's Java Kafka client, options mapped from the same librdkafka properties) says OK
    config = pipeline.write_config("verify")
    outcome = verifier_env.run_verifier(["--config", str(config)], tmp_path / "reports")
    assert outcome.status == 0, outcome.stderr
    assert outcome.report["status"] == "OK"
    assert outcome.report["totals"]["verified_records"] == 3000
    assert not any(outcome.report["totals"]["categories"].values())

    # And neither the SCRAM password, the ZooKeeper password nor the token shows in any process output
    pipeline.stop_all()
    for proc in pipeline.processes:
        text = proc.log.read_text(errors="replace")
        for secret in (secure["password"], ZK_AUTH.partition(":")[2], token):
            assert secret not in text, proc.name
        assert '"sasl.password": "***"' in text, proc.name
    for secret in (secure["password"], token):
        assert secret not in outcome.stdout + outcome.stderr
