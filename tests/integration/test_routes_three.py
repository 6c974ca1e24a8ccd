"""Routes that need three clusters: c1..c3 that tests only use (`clusters3`), or a stack of its own (`three`)."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.test_failover import consume_and_commit
from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.pipeline import Pipeline

pytestmark = pytest.mark.integration


def test_two_regions_fan_into_one_aggregate_cluster_exactly_per_partition(clusters3, tmp_path: Path):
    # Given two regions writing the same topic name, and routes us -> agg and eu -> agg with prefix naming
    clusters = clusters3["clusters"]
    pipeline = Pipeline(services={k: clusters3[k] for k in ("zookeeper", "source", "destination")}, workdir=tmp_path)
    topic, partitions = f"{pipeline.name}-orders", 3
    for alias in ("c1", "c2"):
        kafka_io.create_topic(clusters[alias], topic, partitions)
        kafka_io.produce(clusters[alias], topic, 150, partitions, tag=alias)
    pipeline.declare_routes(clusters, [{"id": "us", "source": "c1", "destination": "c3", "topic_naming": "prefix"},
                   {"id": "eu", "source": "c2", "destination": "c3", "topic_naming": "prefix"}])
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


def _by_origin(cluster: str, alias: str, topic: str, partitions: int) -> dict[str, list[tuple]]:
    """Every record of ``topic`` on ``cluster``, grouped by origin (no ``urep`` header: produced there)."""
    found: dict[str, list[tuple]] = {}
    for p in range(partitions):
        for record in kafka_io.read_partition(cluster, topic, p):
            stamp = record.provenance()
            found.setdefault(stamp.origin if stamp else alias, []).append((record.key, record.value))
    return found


def test_three_clusters_active_active_copy_each_origin_record_once_everywhere_and_then_stay_still(clusters3, tmp_path):
    # Given one topic name on c1, c2 and c3, and six identity-named routes (every ordered pair,
    # forward: origin), each served by one worker pinned to it
    clusters = clusters3["clusters"]
    pipeline = Pipeline(services={k: clusters3[k] for k in ("zookeeper", "source", "destination")}, workdir=tmp_path)
    topic, partitions, batches, per_batch = f"{pipeline.name}-mesh", 2, 4, 50
    for address in clusters.values():
        kafka_io.create_topic(address, topic, partitions)
    routes = [{"id": f"{a}-{b}", "source": a, "destination": b} for a in clusters for b in clusters if a != b]
    pipeline.declare_routes(clusters, routes)
    try:
        pipeline.start_controller()
        for route in routes:
            pipeline.start_worker(f"w-{route['id']}", worker={"route": route["id"]})
            assert pipeline.api("POST", f"/routes/{route['id']}/topics", {"topic": topic})[0] == 201
        wait_for(lambda: all(r["state"] == "running" for r in pipeline.api("GET", "/routes")[1]["routes"]), 60,
                 "every route has its worker")

        # When all three clusters are written at once, in batches, while the routes mirror
        def load(alias: str) -> None:
            for batch in range(batches):
                kafka_io.produce(clusters[alias], topic, per_batch, partitions, start=batch * per_batch, tag=alias)
                time.sleep(0.3)

        writers = [threading.Thread(target=load, args=(alias,)) for alias in clusters]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(120)
        total = len(clusters) * batches * per_batch

        def everywhere(count: int) -> bool:
            return all(sum(kafka_io.end_offsets(a, topic, partitions).values()) == count for a in clusters.values())

        wait_for(lambda: everywhere(total), 120, "every cluster holds every origin's records")

        # Then each cluster holds each origin's records exactly once (the urep header names the origin)
        for alias, address in clusters.items():
            held = _by_origin(address, alias, topic, partitions)
            assert sorted(held) == sorted(clusters), (alias, sorted(held))
            for origin, records in held.items():
                assert len(records) == len(set(records)) == batches * per_batch, (alias, origin, len(records))
                assert all(value.startswith(f"{origin}-value-".encode()) for _, value in records)
        # and nothing bounces on: once every route has consumed and acknowledged every record of its
        # source (mirrored or skipped), an echo would already be written; the end offsets still hold
        still = {a: kafka_io.end_offsets(address, topic, partitions) for a, address in clusters.items()}
        groups = {r["id"]: r["consumer_group"] for r in pipeline.api("GET", "/routes")[1]["routes"]}

        def caught_up(route: dict) -> bool:
            source = clusters[route["source"]]
            return kafka_io.committed(source, groups[route["id"]], topic, partitions) == still[route["source"]]

        wait_for(lambda: all(caught_up(r) for r in routes), 60, "every route committed its source's end")
        assert {a: kafka_io.end_offsets(address, topic, partitions) for a, address in clusters.items()} == still
    finally:
        pipeline.stop_all()


def test_the_same_mesh_under_transit_is_refused_naming_the_path(clusters3, tmp_path):
    # Given a deployment with c1 -> c2 under transit
    clusters = clusters3["clusters"]
    pipeline = Pipeline(services={k: clusters3[k] for k in ("zookeeper", "source", "destination")}, workdir=tmp_path)
    pipeline.declare_routes(clusters, [{"id": "c1-c2", "source": "c1", "destination": "c2", "forward": "transit"}])
    try:
        pipeline.start_controller()
        # When the rest of the six-route mesh is added under transit, one route at a time
        for source, destination in (("c2", "c1"), ("c1", "c3")):
            status, body = pipeline.api("POST", "/routes", {"id": f"{source}-{destination}", "source": source,
                                                            "destination": destination, "forward": "transit"})
            assert status == 201, body
        status, body = pipeline.api("POST", "/routes", {"id": "c3-c1", "source": "c3", "destination": "c1",
                                                        "forward": "transit"})
        # Then the route that closes a loop is refused with the path; nothing else changes
        assert status == 400, body
        assert body["error"]["message"] == ("a record produced on c2 loops: c2/t -[c2-c1]-> c1/t -[c1-c3]-> c3/t "
                                            "-[c3-c1]-> c1/t (route 'c3-c1' forwards transit)"), body
        assert [r["id"] for r in pipeline.api("GET", "/routes")[1]["routes"]] == ["c1-c2", "c1-c3", "c2-c1"]
    finally:
        pipeline.stop_all()


@pytest.mark.disruptive  # stops c3 of a stack of its own (`three`)
def test_a_route_whose_destination_is_stopped_leaves_the_others_mirroring(three, tmp_path):
    # Given routes c1 -> c2 and c1 -> c3 with a worker each, both mirroring one topic
    from devtools import stack

    clusters = three["clusters"]
    pipeline = Pipeline(services={k: three[k] for k in ("zookeeper", "source", "destination")}, workdir=tmp_path)
    topic, partitions = f"{pipeline.name}-down", 2
    kafka_io.create_topic(clusters["c1"], topic, partitions)
    kafka_io.produce(clusters["c1"], topic, 100, partitions, tag="c1")
    pipeline.declare_routes(clusters, [{"id": "to2", "source": "c1", "destination": "c2", "topic_naming": "prefix"},
                   {"id": "to3", "source": "c1", "destination": "c3", "topic_naming": "prefix"}])
    copy = f"c1.{topic}"
    stopped = False
    try:
        pipeline.start_controller()
        for route in ("to2", "to3"):
            pipeline.start_worker(f"w-{route}", worker={"route": route})
            assert pipeline.api("POST", f"/routes/{route}/topics", {"topic": topic})[0] == 201
        for alias in ("c2", "c3"):
            wait_for(lambda a=alias: sum(kafka_io.end_offsets(clusters[a], copy, partitions).values()) == 100, 90,
                     f"mirrored to {alias}")

        # When c3 stops and c1 gets new records
        stack.stop_service(three["dir"], "c3")
        stopped = True
        kafka_io.produce(clusters["c1"], topic, 100, partitions, start=100, tag="c1")

        # Then route c1 -> c2 mirrors them all, exactly, while c3 is down
        wait_for(lambda: kafka_io.end_offsets(clusters["c1"], topic, partitions)
                 == kafka_io.end_offsets(clusters["c2"], copy, partitions), 60, "c1 -> c2 kept mirroring")
        assert sum(kafka_io.end_offsets(clusters["c2"], copy, partitions).values()) == 200
        assert pipeline.api("GET", "/routes/to2")[1]["state"] == "running"

        # And once c3 is back, route c1 -> c3 catches up with nothing lost
        stack.start_service(three["dir"], "c3")
        stopped = False
        wait_for(lambda: sum(kafka_io.end_offsets(clusters["c3"], copy, partitions).values()) >= 200, 120,
                 "c1 -> c3 caught up")
        held = {(r.key, r.value) for p in range(partitions) for r in kafka_io.read_partition(clusters["c3"], copy, p)}
        assert len(held) == 200
    finally:
        if stopped:
            stack.start_service(three["dir"], "c3")
        pipeline.stop_all()


def test_group_sync_and_status_cover_every_route_not_only_the_first(clusters3, tmp_path):
    # Given one topic on c1 fanned out to c2 and c3 by two declared routes, each served by its worker,
    # and the scheduled consumer-group sync on for this test's groups
    clusters = clusters3["clusters"]
    pipeline = Pipeline(services={k: clusters3[k] for k in ("zookeeper", "source", "destination")},
                        workdir=tmp_path)
    topic, partitions = f"{pipeline.name}-orders", 2
    kafka_io.create_topic(clusters["c1"], topic, partitions)
    kafka_io.produce(clusters["c1"], topic, 100, partitions)
    pipeline.declare_routes(clusters, [{"id": "to2", "source": "c1", "destination": "c2"},
                                       {"id": "to3", "source": "c1", "destination": "c3"}])
    pipeline.overrides["controller"] = {"group_sync": {"enabled": True, "interval_s": 1,
                                                       "include": re.escape(pipeline.name) + "-.*"}}
    try:
        pipeline.start_controller()
        for route in ("to2", "to3"):
            pipeline.start_worker(f"w-{route}", worker={"route": route})
            assert pipeline.api("POST", f"/routes/{route}/topics", {"topic": topic})[0] == 201
        source_end = kafka_io.end_offsets(clusters["c1"], topic, partitions)
        for route in ("to2", "to3"):
            wait_for(lambda r=route: kafka_io.committed(clusters["c1"], f"{pipeline.group}.{r}", topic, partitions)
                     == source_end, 90, f"route {route} mirrored")

        # When a consumer group on c1 commits part of the topic
        billing = f"{pipeline.name}-billing"
        commits = {0: 30, 1: 40}
        consume_and_commit(clusters["c1"], billing, topic, commits)

        # Then the scheduled sync writes its translated offsets on both destinations, c2 (the first
        # route's) and c3 (the second's)
        for alias in ("c2", "c3"):
            wait_for(lambda a=alias: kafka_io.committed(clusters[a], billing, topic, partitions) == commits, 60,
                     f"billing synced to {alias}")
        # And /status covers both routes: their partitions, their workers and their group sync
        status, doc = pipeline.api("GET", "/status")
        assert status == 200, doc
        assert set(doc["routes"]) == {"to2", "to3"}
        assert {(p["route"], p["topic"], p["partition"]) for p in doc["partitions"]} == {
            (r, topic, p) for r in ("to2", "to3") for p in range(partitions)}
        assert {(w["route"], w["worker"]) for w in doc["workers"]} == {("to2", "w-to2"), ("to3", "w-to3")}
        for route in ("to2", "to3"):
            assert doc["routes"][route]["group_sync"]["last_sync_at"] is not None, doc["routes"][route]
        with urllib.request.urlopen(f"{pipeline.url}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        for route in ("to2", "to3"):
            assert f'ureplicator_groupsync_groups_synced_total{{route="{route}"}} 1.0' in metrics, metrics
    finally:
        pipeline.stop_all()
