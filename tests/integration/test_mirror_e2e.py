"""End to end against real clusters: controller + workers mirror a topic exactly, in order."""

from __future__ import annotations

import pytest

from tests.support import kafka_io
from tests.support.kafka_io import wait_for

pytestmark = pytest.mark.integration


def assert_exact_mirror(services, topic: str, partitions: int) -> int:
    """Per partition: same records, same order, same key/value/headers/timestamp; urep names the source."""
    total = 0
    for p in range(partitions):
        src = kafka_io.read_partition(services["source"], topic, p)
        dst = kafka_io.read_partition(services["destination"], topic, p)
        assert [r.logical() for r in dst] == [r.logical() for r in src], f"partition {p} differs"
        origins = [r.provenance() for r in dst]
        assert [(o.source_partition, o.source_offset, o.origin) for o in origins] == [
            (p, r.offset, "src") for r in src
        ]
        total += len(src)
    return total


def test_topic_added_through_rest_is_mirrored_exactly_and_offsets_committed(pipeline, services):
    # Given a source topic with 4 partitions holding keyed records with headers
    topic = f"{pipeline.name}-orders"
    kafka_io.create_topic(services["source"], topic, 4, {"retention.ms": "86400000"})
    kafka_io.produce(services["source"], topic, 4000, 4)
    # and a controller with two workers
    pipeline.start_controller()
    pipeline.start_worker("w1")
    pipeline.start_worker("w2")

    # When the topic is added with uReplicator's body (numPartitions as a string, as its docs send it)
    status, body = pipeline.api("POST", "/topics", {"topic": topic, "numPartitions": "4"})
    assert status == 201, body
    assert body["partitions"] == 4
    # and more records arrive while mirroring runs
    kafka_io.produce(services["source"], topic, 2000, 4, start=4000)

    # Then the destination holds every record, per partition, in order and unchanged
    source_end = kafka_io.end_offsets(services["source"], topic, 4)
    wait_for(lambda: kafka_io.end_offsets(services["destination"], topic, 4) == source_end, 90, "mirror")
    assert assert_exact_mirror(services, topic, 4) == 6000
    # and the replicator's group on the source committed exactly the end offsets
    wait_for(lambda: kafka_io.committed(services["source"], pipeline.group, topic, 4) == source_end, 30,
             "committed offsets")
    # and the destination topic got the source's partition count and topic config
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": services["destination"]})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    assert admin.describe_configs([res])[res].result(10)["retention.ms"].value == "86400000"

    # And the REST API shows the topic with every partition owned by one of the two workers
    status, shown = pipeline.api("GET", f"/topics/{topic}")
    assert status == 200
    assert {p["worker"] for p in shown["assignment"]} == {"w1", "w2"}
    status, listed = pipeline.api("GET", "/topics")
    assert [t["topic"] for t in listed["topics"]] == [topic]


def test_rest_errors_are_json_with_the_right_status(pipeline, services):
    pipeline.start_controller()
    topic = f"{pipeline.name}-t"
    kafka_io.create_topic(services["source"], topic, 2)
    cases = [
        ("POST", "/topics", {"numPartitions": 2}, 400),
        ("POST", "/topics", {"topic": "bad name!"}, 400),
        ("POST", "/topics", {"topic": topic, "numPartitions": 0}, 400),
        ("POST", "/topics", {"topic": topic, "numPartitions": "-3"}, 400),
        ("POST", "/topics", {"topic": topic, "numPartitions": 5}, 400),
        ("POST", "/topics", [1, 2], 400),
        ("POST", "/topics", {"topic": f"{pipeline.name}-absent"}, 404),
        ("GET", f"/topics/{pipeline.name}-absent", None, 404),
        ("DELETE", f"/topics/{pipeline.name}-absent", None, 404),
        ("POST", "/topics", {"topic": topic, "numPartitions": 2}, 201),
        ("POST", "/topics", {"topic": topic}, 409),
        ("DELETE", f"/topics/{topic}", None, 200),
        ("GET", "/no/such/path", None, 404),
    ]
    for method, path, body, expected in cases:
        status, payload = pipeline.api(method, path, body)
        assert status == expected, (method, path, body, payload)
        if expected >= 400:
            assert payload["error"]["code"] == expected and payload["error"]["message"]


def test_admin_token_guards_mutations(pipeline, services):
    pipeline.start_controller(controller={"admin_token": "correct-horse"})
    topic = f"{pipeline.name}-guarded"
    kafka_io.create_topic(services["source"], topic, 1)
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 401
    assert pipeline.api("POST", "/topics", {"topic": topic}, token="wrong-token")[0] == 403
    assert pipeline.api("GET", "/topics")[0] == 200  # reads stay open
    assert pipeline.api("POST", "/topics", {"topic": topic}, token="correct-horse")[0] == 201


def test_cli_manages_topics_and_workers_through_rest(pipeline, services):
    import subprocess
    import sys

    pipeline.start_controller()
    pipeline.start_worker("w1")
    topic = f"{pipeline.name}-cli"
    kafka_io.create_topic(services["source"], topic, 2)

    def cli(*args: str) -> subprocess.CompletedProcess:
        command, *rest = args
        return subprocess.run([sys.executable, "-m", "ureplicator", command, "--url", pipeline.url, *rest],
                              capture_output=True, text=True, timeout=60)

    assert cli("topics", "add", topic, "--partitions", "2").returncode == 0
    listed = cli("topics", "list")
    assert listed.returncode == 0 and topic in listed.stdout and "PARTITIONS" in listed.stdout
    wait_for(lambda: "w1" in cli("topics", "show", topic).stdout, 30, "owner shown")
    assert "paused" in cli("topics", "pause", topic).stdout
    assert "active" in cli("topics", "resume", topic).stdout
    assert "w1" in cli("workers", "list").stdout
    assert cli("rebalance").returncode == 0
    failed = cli("topics", "add", topic)
    assert failed.returncode == 1 and "409" in failed.stderr
    assert cli("workers", "blacklist", "nobody").returncode == 1
