"""Routes that need three clusters: a stack of its own (`stack up --clusters 3`) for this module only."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.pipeline import Pipeline

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """ZooKeeper and clusters c1, c2, c3; stopped when the module's tests are done."""
    from devtools import stack

    directory = tmp_path_factory.mktemp("stack3")
    addresses = stack.up(directory, timeout_s=240, clusters=3)
    yield addresses
    stack.down(directory)


def test_two_regions_fan_into_one_aggregate_cluster_exactly_per_partition(three, tmp_path: Path):
    # Given two regions writing the same topic name, and routes us -> agg and eu -> agg with prefix naming
    clusters = three["clusters"]
    pipeline = Pipeline(services={k: three[k] for k in ("zookeeper", "source", "destination")}, workdir=tmp_path)
    topic, partitions = f"{pipeline.name}-orders", 3
    for alias in ("c1", "c2"):
        kafka_io.create_topic(clusters[alias], topic, partitions)
        kafka_io.produce(clusters[alias], topic, 150, partitions, tag=alias)
    pipeline.overrides = {
        "source": None, "destination": None,
        "clusters": {alias: {"bootstrap_servers": address} for alias, address in clusters.items()},
        "routes": [{"id": "us", "source": "c1", "destination": "c3", "topic_naming": "prefix"},
                   {"id": "eu", "source": "c2", "destination": "c3", "topic_naming": "prefix"}],
    }
    try:
        pipeline.start_controller()
        assert [c["alias"] for c in pipeline.api("GET", "/clusters")[1]["clusters"]] == ["c1", "c2", "c3"]
        # A relay c3 -> c2 next to a direct c1 -> c2 would bring c1's records to c2 twice: refused, nothing changes
        assert pipeline.api("POST", "/routes", {"id": "x", "source": "c1", "destination": "c2"})[0] == 201
        status, body = pipeline.api("POST", "/routes", {"id": "y", "source": "c3", "destination": "c2",
                                                        "forward": "transit", "topic_naming": "prefix"})
        assert status == 400 and "a record produced on c1 would reach c2 twice" in body["error"]["message"], body
        assert [r["id"] for r in pipeline.api("GET", "/routes")[1]["routes"]] == ["eu", "us", "x"]
        assert pipeline.api("DELETE", "/routes/x")[0] == 200
        for route in ("us", "eu"):
            pipeline.start_worker(f"w-{route}", worker={"route": route})
            assert pipeline.api("POST", f"/routes/{route}/topics", {"topic": topic})[0] == 201

        # Then the aggregate holds c1.<topic> and c2.<topic>, each partition exactly its source's records
        def exact(alias: str) -> bool:
            return kafka_io.end_offsets(clusters[alias], topic, partitions) == \
                kafka_io.end_offsets(clusters["c3"], f"{alias}.{topic}", partitions)

        wait_for(lambda: exact("c1") and exact("c2"), 90, "both regions mirrored")
        for alias in ("c1", "c2"):
            for p in range(partitions):
                source = [r.logical() for r in kafka_io.read_partition(clusters[alias], topic, p)]
                copied = kafka_io.read_partition(clusters["c3"], f"{alias}.{topic}", p)
                assert [r.logical() for r in copied] == source
                assert {r.provenance().origin for r in copied} == {alias}
    finally:
        pipeline.stop_all()
