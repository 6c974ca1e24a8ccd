"""The verifier over routes on three clusters (``clusters3``), with a real controller and workers.

One deployment, mirrored once (module fixture): c1 <-> c2 active-active and c2 -> c3, identity-named, every
route ``forward: origin``. Then: each route verifies on its own (its reports under OUTPUT/<route>/), the
``origin`` policy decides what is expected, and the deployment check proves each origin record once on every
cluster it should reach, and fails naming a planted copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import kafka_io
from tests.support import verifier_env as env
from tests.support.kafka_io import wait_for
from tests.support.pipeline import Pipeline

pytestmark = pytest.mark.integration

ROUTES = (("c1", "c2"), ("c2", "c1"), ("c2", "c3"))
PARTITIONS, PER_CLUSTER = 2, 60


@pytest.fixture(scope="module")
def mesh(clusters3, tmp_path_factory):
    """The deployment above, mirrored and stopped; yields (config path, topic, clusters)."""
    services = clusters3
    clusters = services["clusters"]
    workdir = tmp_path_factory.mktemp("mesh")
    pipeline = Pipeline(services={k: v for k, v in services.items() if k != "dir"}, workdir=workdir)
    topic = f"{pipeline.name}-mesh"
    for address in clusters.values():
        kafka_io.create_topic(address, topic, PARTITIONS)
    for alias in ("c1", "c2"):
        kafka_io.produce(clusters[alias], topic, PER_CLUSTER, PARTITIONS, tag=alias)
    routes = [{"id": f"{a}-{b}", "source": a, "destination": b} for a, b in ROUTES]
    pipeline.declare_routes(clusters, routes)
    try:
        pipeline.start_controller()
        for route in routes:
            pipeline.start_worker(f"w-{route['id']}", worker={"route": route["id"]})
            assert pipeline.api("POST", f"/routes/{route['id']}/topics", {"topic": topic})[0] == 201

        def total(alias: str) -> int:
            return sum(kafka_io.end_offsets(clusters[alias], topic, PARTITIONS).values())

        # c1 and c2 hold both origins' records; c3 only c2's (origin: c2 -> c3 does not relay c1's)
        wait_for(lambda: total("c1") == total("c2") == 2 * PER_CLUSTER and total("c3") == PER_CLUSTER, 90,
                 "the mesh mirrored")
        # every route committed its source's end: nothing in flight when the verifier looks
        for a, b in ROUTES:
            group = f"ureplicator.{pipeline.name}.{a}-{b}"
            wait_for(lambda g=group, s=a: committed_at_end(clusters[s], g, topic), 60, f"{group} committed")
    finally:
        pipeline.stop_all()
    config = pipeline.write_config("verify")
    yield config, topic, clusters


def committed_at_end(bootstrap: str, group: str, topic: str) -> bool:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        done = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in done} == kafka_io.end_offsets(bootstrap, topic, PARTITIONS)


def deployment_check(config: Path, output: Path) -> tuple[int, str, dict]:
    import contextlib
    import io

    from ureplicator.verifier import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(["--config", str(config), "--deployment", "--output", str(output),
                           "--conf", "spark.sql.shuffle.partitions=2"])
    report = output / "deployment.json"
    return status, out.getvalue() + err.getvalue(), json.loads(report.read_text()) if report.exists() else {}


def test_each_route_verifies_on_its_own_under_its_forwarding_policy(spark, mesh, tmp_path):
    config, topic, _ = mesh
    output = tmp_path / "verification"
    # Given three routes: a run naming none is refused, listing them
    refused = env.run_verifier(["--config", str(config)], output)
    assert refused.status == 2 and "3 routes (c1-c2, c2-c1, c2-c3)" in refused.stderr, refused.stderr
    assert not (output / "latest.json").exists()

    # When route c2 -> c3 is verified: c2 also holds c1's copies, which forward: origin does not relay
    outcome = env.run_verifier(["--config", str(config)], output, route="c2-c3")
    # Then its report lives under OUTPUT/c2-c3 (run_verifier reads it there), is OK, and counts
    # c1's copies as skipped, not missing
    assert outcome.status == 0, outcome.stderr
    assert outcome.report["route"] == "c2-c3" and outcome.report["forward"] == "origin"
    for p in range(PARTITIONS):
        partition = outcome.partition(topic, p)
        assert env.nonzero(partition) == {"SKIPPED": PER_CLUSTER // PARTITIONS}, partition
        assert partition["verified_records"] == PER_CLUSTER // PARTITIONS

    # And route c1 -> c2 is OK: c2's own records on the destination are not this route's (a note, not orphans),
    # and c2's copies on c1 are not c1's to forward
    outcome = env.run_verifier(["--config", str(config)], output, route="c1-c2")
    assert outcome.status == 0, outcome.stderr
    partition = outcome.partition(topic, 0)
    assert env.nonzero(partition) == {"SKIPPED": PER_CLUSTER // PARTITIONS}, partition
    assert partition["verified_records"] == PER_CLUSTER // PARTITIONS
    assert any("not written by this route" in note for note in partition["notes"]), partition["notes"]
    # and their copies, interleaved with c2's own records, are proven in order while read: no record pass
    assert "checking those records" not in outcome.stderr, outcome.stderr


def test_all_routes_keep_their_reports_and_checkpoints_apart(spark, mesh, tmp_path):
    from ureplicator.verifier import cli

    config, _, _ = mesh
    output = tmp_path / "verification"
    status = cli.main(["--config", str(config), "--all-routes", "--output", str(output),
                       "--conf", "spark.sql.shuffle.partitions=2"])
    assert status == 0
    for a, b in ROUTES:
        route = output / f"{a}-{b}"
        assert json.loads((route / "latest.json").read_text())["route"] == f"{a}-{b}"
        assert (route / "checkpoint.json").is_file()
    assert not (output / "latest.json").exists() and not (output / "checkpoint.json").exists()


def test_deployment_check_passes_then_names_a_planted_copy(spark, mesh, tmp_path):
    config, topic, clusters = mesh
    output = tmp_path / "verification"
    # When the deployment is checked as mirrored
    status, text, report = deployment_check(config, output)
    # Then every cluster holds each origin record exactly where the routes bring it
    assert status == 0, text
    (family,) = report["families"]
    counts = family["clusters"]
    assert {c: (n["originals"], n["copies"]) for c, n in counts.items()} == {
        "c1": (PER_CLUSTER, PER_CLUSTER), "c2": (PER_CLUSTER, PER_CLUSTER), "c3": (0, PER_CLUSTER)}

    assert "reused_from" not in family

    # When it is checked again with nothing new: the family is not read again, and its verdict stands
    status, text, again = deployment_check(config, output)
    assert status == 0 and "not read again" in text, text
    assert again["families"][0]["reused_from"] and again["families"][0]["clusters"] == counts

    # When c1 gets new records (no worker runs: they stay in flight) and a second copy of one of c2's
    # records is planted on c3 (its urep header copied)
    kafka_io.produce(clusters["c1"], topic, 10, PARTITIONS, start=10_000, tag="late")
    original = kafka_io.read_partition(clusters["c3"], topic, 1)[3]
    env.write(clusters["c3"], topic, 1, [env.Copy(original.key, original.value, original.headers, original.timestamp)])
    stamp = original.provenance()
    status, text, report = deployment_check(config, output)
    # Then the run reads only the 11 new records, from the checkpoint, and still names the planted copy
    assert status == 1, text
    (family,) = report["families"]
    assert family["from_checkpoint"] is True and family["read"] == 11, family
    assert family["clusters"]["c1"]["originals"] == 10 and family["clusters"]["c3"]["duplicate"] == 1
    (sample,) = family["samples"]
    assert {k: sample[k] for k in ("cluster", "problem", "origin", "partition", "offset", "route")} == {
        "cluster": "c3", "problem": "duplicate", "origin": "c2", "partition": stamp.source_partition,
        "offset": stamp.source_offset, "route": "c2-c3"}
    assert "duplicate" in text and "FAIL" in text

    # And a run with no checkpoint reads everything and names the same copy
    status, text, report = deployment_check(config, tmp_path / "full")
    assert status == 1, text
    assert report["families"][0]["from_checkpoint"] is False
    (sample,) = report["families"][0]["samples"]
    assert sample == {"cluster": "c3", "topic": topic, "problem": "duplicate", "origin": "c2", "origin_topic": topic,
                      "partition": stamp.source_partition, "offset": stamp.source_offset, "copies": 2,
                      "expected_at_least": 1, "expected_at_most": 1}
    assert report["families"][0]["clusters"]["c3"]["duplicate"] == 1
