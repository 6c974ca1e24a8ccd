"""Routes on real ZooKeeper and Kafka: today's state is taken over untouched; routes never disturb each other.

"Today's code" is the commit before routes (``BEFORE_ROUTES``), unpacked with ``git archive``
and run from its own directory, so the state it writes is exactly what an upgrade meets.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kazoo.client import KazooClient

from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.pipeline import Pipeline, Process
from tests.support.rounds import wait_rounds

pytestmark = pytest.mark.integration

BEFORE_ROUTES = "24f4f04463b8197d7de1ebef8b9b82dc93ee2298"  # main before routes: a single pipeline, no route registry
CHECKOUT = Path(__file__).resolve().parents[2]


def todays_code(directory: Path) -> Path:
    """The tree of ``BEFORE_ROUTES`` (only what the processes import) in ``directory``."""
    archive = subprocess.run(["git", "-C", str(CHECKOUT), "archive", BEFORE_ROUTES, "cli", "common", "controller",
                              "worker", "failover", "reports", "verifier"], check=True, capture_output=True).stdout
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory


def spawn_in(pipeline: Pipeline, code: Path, label: str, role: str, config: Path) -> Process:
    """A ``ureplicator <role>`` process that imports its packages from ``code`` (it is first on sys.path)."""
    log = pipeline.workdir / f"{pipeline.name}-{label}.log"
    # The old code predates the ureplicator namespace: its packages are top-level.
    popen = subprocess.Popen([sys.executable, "-m", "ureplicator", role, "--config", str(config)], cwd=code,
                             stdout=log.open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    proc = Process(label, popen, log)
    pipeline.processes.append(proc)
    return proc


def todays_config(pipeline: Pipeline, label: str, **extra) -> Path:
    """A config file today's code reads: without the keys added since (the heartbeat's)."""
    doc = pipeline.config_doc(**extra)
    doc["controller"].pop("heartbeat_interval_s", None)
    path = pipeline.workdir / f"{pipeline.name}-{label}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def wait_healthy(pipeline: Pipeline, proc: Process) -> None:
    def healthy() -> bool:
        assert proc.alive(), f"{proc.name} exited:\n{proc.tail()}"
        try:
            return pipeline.api("GET", "/health")[0] == 200
        except Exception:  # noqa: BLE001 - not listening yet
            return False

    wait_for(healthy, 30, f"{proc.name} healthy")


def assignment_versions(client: KazooClient, root: str) -> dict[str, tuple[int, int]]:
    """Per worker: (creation zxid, version) of its assignment node; any write changes one of them."""
    found = {}
    for worker in client.get_children(f"{root}/assignments"):
        _, stat = client.get(f"{root}/assignments/{worker}")
        found[worker] = (stat.czxid, stat.version)
    return found


def metrics(pipeline: Pipeline) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{pipeline.url}/metrics", timeout=5) as resp:
        return resp.read().decode()


def settled(pipeline: Pipeline, route: str = "") -> list[dict] | bool:
    prefix = f"/routes/{route}" if route else ""
    status, body = pipeline.api("GET", f"{prefix}/validation")
    return status == 200 and body["ok"] and not body["withheld"] and body["workers"]


def settled_with(pipeline: Pipeline, workers: set[str], route: str = "") -> bool:
    """Settled, with exactly ``workers`` registered, each written an assignment (worker processes start slowly)."""
    rows = settled(pipeline, route)
    return bool(rows) and {w["worker"] for w in rows} == workers and all(w["desired_generation"] for w in rows)


def mirrored_exactly(services: dict, source: str, destination: str, topic: str, dest_topic: str,
                     partitions: int) -> bool:
    return kafka_io.end_offsets(services[source], topic, partitions) == \
        kafka_io.end_offsets(services[destination], dest_topic, partitions)


def test_todays_single_pipeline_state_is_taken_over_without_a_move_or_a_copy(pipeline, services, tmp_path):
    # Given today's controller and two of today's workers mirroring a topic
    old = todays_code(tmp_path / "before-routes")
    topic, partitions = f"{pipeline.name}-upgrade", 4
    kafka_io.create_topic(services["source"], topic, partitions)
    kafka_io.produce(services["source"], topic, 400, partitions)
    old_controller = spawn_in(pipeline, old, "old-controller", "controller", todays_config(pipeline, "old-controller"))
    wait_healthy(pipeline, old_controller)
    for worker in ("w1", "w2"):
        spawn_in(pipeline, old, worker, "worker", todays_config(pipeline, worker, worker={"id": worker}))
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 201
    wait_for(lambda: settled_with(pipeline, {"w1", "w2"}), 60, "today's assignment applied")
    wait_for(lambda: mirrored_exactly(services, "source", "destination", topic, topic, partitions), 60, "mirrored")
    root = f"/ureplicator/{pipeline.name}"
    client = KazooClient(hosts=services["zookeeper"])
    client.start(15)
    try:
        before = assignment_versions(client, root)
        assert set(before) == {"w1", "w2"}

        # When the new controller, with the same config file, takes over from it
        old_controller.terminate()
        new_controller = pipeline.start_controller("new-controller")
        wait_for(lambda: pipeline.api("GET", "/health")[1]["is_leader"], 30, "the new controller leads")
        wait_rounds(pipeline.url, 5)  # five reconcile rounds of the new leader

        # Then it sees today's state as the route "default", moves nothing and copies nothing again
        status, routes = pipeline.api("GET", "/routes")
        assert status == 200 and [r["id"] for r in routes["routes"]] == ["default"]
        assert routes["routes"][0]["state"] == "running" and routes["routes"][0]["zookeeper_root"] == root
        assert routes["routes"][0]["consumer_group"] == pipeline.group
        assert assignment_versions(client, root) == before
        assert settled(pipeline) and settled(pipeline, "default")
        kafka_io.produce(services["source"], topic, 400, partitions, start=400)
        wait_for(lambda: mirrored_exactly(services, "source", "destination", topic, topic, partitions), 60,
                 "new records mirrored")
        assert sum(kafka_io.end_offsets(services["destination"], topic, partitions).values()) == 800
        assert assignment_versions(client, root) == before
        assert sum(kafka_io.committed(services["source"], pipeline.group, topic, partitions).values()) <= 800
        wait_for(lambda: sum(kafka_io.committed(services["source"], pipeline.group, topic, partitions).values())
                 == 800, 30, "offsets committed in today's group")
        assert new_controller.alive()

        # And a worker of the new code joins: it takes partitions over from today's workers and
        # continues from today's group, still copying nothing twice
        pipeline.start_worker("w3")
        wait_for(lambda: settled_with(pipeline, {"w1", "w2", "w3"}), 60, "w3 settled in")
        kafka_io.produce(services["source"], topic, 400, partitions, start=800)
        wait_for(lambda: mirrored_exactly(services, "source", "destination", topic, topic, partitions), 60,
                 "mirrored with w3")
        assert sum(kafka_io.end_offsets(services["destination"], topic, partitions).values()) == 1200
        owners = {p["worker"] for p in pipeline.api("GET", f"/topics/{topic}")[1]["assignment"]}
        assert "w3" in owners
    finally:
        client.stop()
        client.close()


def test_adding_and_deleting_a_route_leaves_another_routes_assignment_untouched(pipeline, services):
    # Given a deployment whose route "default" (src -> dst) mirrors a topic under load
    topic, back_topic, partitions = f"{pipeline.name}-iso", f"{pipeline.name}-back", 4
    kafka_io.create_topic(services["source"], topic, partitions)
    kafka_io.create_topic(services["destination"], back_topic, 2)
    routes_config = {
        "clusters": {"src": {"bootstrap_servers": services["source"]},
                     "dst": {"bootstrap_servers": services["destination"]}},
        "routes": [{"id": "default", "source": "src", "destination": "dst", "forward": "transit"}],
    }
    pipeline.overrides = {"source": None, "destination": None, **routes_config}
    pipeline.start_controller()
    for worker in ("w1", "w2"):
        pipeline.start_worker(worker)
    assert pipeline.api("POST", "/routes/default/topics", {"topic": topic})[0] == 201
    kafka_io.produce(services["source"], topic, 200, partitions)
    wait_for(lambda: settled_with(pipeline, {"w1", "w2"}, "default"), 60, "route default settled")
    root = f"/ureplicator/{pipeline.name}"
    client = KazooClient(hosts=services["zookeeper"])
    client.start(15)
    try:
        before = assignment_versions(client, root)
        assert set(before) == {"w1", "w2"}

        # When a route the other way is added through the API, gets a topic and a worker of its own
        status, body = pipeline.api("POST", "/routes", {"id": "back", "source": "dst", "destination": "src",
                                                        "topic_naming": "prefix", "forward": "origin"})
        assert status == 201 and body["state"] == "waiting_for_workers", body
        waiting = 'ureplicator_controller_route_waiting_for_workers{route="back"}'
        wait_for(lambda: f"{waiting} 1.0" in metrics(pipeline), 30, "route back waiting for workers (metric)")
        assert 'ureplicator_controller_route_waiting_for_workers{route="default"} 0.0' in metrics(pipeline)
        status, body = pipeline.api("POST", "/topics", {"topic": back_topic})
        assert status == 400 and "(back, default)" in body["error"]["message"]
        status, body = pipeline.api("POST", "/routes/back/topics", {"topic": back_topic})
        assert status == 201 and body["destination"] == f"dst.{back_topic}"
        # A worker of route "back": its ZooKeeper paths are the route's (the file names them as a pipeline).
        back_worker = pipeline.start_worker("b1", zookeeper={"root": f"{root}/routes"}, pipeline="back",
                                            clusters=routes_config["clusters"],
                                            routes=[{"id": "default", "source": "dst", "destination": "src",
                                                     "topic_naming": "prefix"}])
        kafka_io.produce(services["destination"], back_topic, 100, 2)
        wait_for(lambda: settled(pipeline, "back"), 60, "route back settled")
        wait_for(lambda: mirrored_exactly(services, "destination", "source", back_topic, f"dst.{back_topic}", 2),
                 60, "route back mirrored")
        assert pipeline.api("GET", "/routes/back")[1]["state"] == "running"
        wait_for(lambda: f"{waiting} 0.0" in metrics(pipeline), 30, "route back has a worker (metric)")

        # Pausing it takes its partitions back from its worker; resuming gives them back
        def back_owned() -> int:
            rows = pipeline.api("GET", "/routes/back/validation")[1]["workers"]
            return sum(int(r["ok"]) for r in rows) == len(rows) and sum(
                len(p["status"] or {}) > 0 for p in pipeline.api("GET", f"/routes/back/topics/{back_topic}")[1]
                ["assignment"] if p["applied_by"])

        assert pipeline.api("POST", "/routes/back/pause")[1]["state"] == "paused"
        wait_for(lambda: back_owned() == 0 and settled(pipeline, "back"), 30, "route back released everything")
        assert pipeline.api("POST", "/routes/back/resume")[1]["state"] == "running"
        wait_for(lambda: back_owned() == 2 and settled(pipeline, "back"), 30, "route back owns its partitions again")

        # and is deleted again once its worker stopped
        assert pipeline.api("DELETE", "/routes/back")[0] == 409  # a live worker
        back_worker.terminate()
        wait_for(lambda: pipeline.api("DELETE", "/routes/back")[0] == 200, 30, "route back deleted")
        assert not client.exists(f"{root}/routes/back")
        wait_for(lambda: waiting not in metrics(pipeline), 30, "route back's series dropped")
        kafka_io.produce(services["source"], topic, 200, partitions, start=200)
        wait_rounds(pipeline.url, 3)  # rounds after the delete: any move they would make is made

        # Then route default mirrored everything once and its workers' assignment nodes never changed
        wait_for(lambda: mirrored_exactly(services, "source", "destination", topic, topic, partitions), 60,
                 "route default mirrored")
        assert sum(kafka_io.end_offsets(services["destination"], topic, partitions).values()) == 400
        assert assignment_versions(client, root) == before
        assert [r["id"] for r in pipeline.api("GET", "/routes")[1]["routes"]] == ["default"]
    finally:
        client.stop()
        client.close()


def test_a_worker_resolves_a_route_added_through_the_api_from_zookeeper(pipeline, services):
    # Given a deployment whose only declared route is not "default" (its state has a root of its own)
    from ureplicator.common import config as config_module
    from ureplicator.common import zk
    from ureplicator.common.errors import ConfigError
    from ureplicator.common.zkschema import RouteRecord

    clusters = {"src": {"bootstrap_servers": services["source"]},
                "dst": {"bootstrap_servers": services["destination"]}}
    pipeline.overrides = {"source": None, "destination": None, "clusters": clusters,
                          "routes": [{"id": "east", "source": "src", "destination": "dst"}]}
    pipeline.start_controller()
    status, body = pipeline.api("GET", "/routes/east")
    assert status == 200 and body["declared_in"] == "config" and body["state"] == "waiting_for_workers"
    root = f"/ureplicator/{pipeline.name}"
    client = KazooClient(hosts=services["zookeeper"])
    client.start(15)
    try:
        assert RouteRecord.decode(client.get(f"{root}/routes/east")[0]).id == "east"
        assert client.exists(f"{root}/routes/east/topics") and client.exists(f"{root}/routes/east/status")
    finally:
        client.stop()
        client.close()
    # When a route the workers' file does not declare is added through the API
    assert pipeline.api("POST", "/routes", {"id": "back", "source": "dst", "destination": "src",
                                            "topic_naming": "prefix"})[0] == 201
    worker_file = config_module.from_dict(pipeline.config_doc(worker={"route": "east"}))
    # Then a worker pinned to it finds it in ZooKeeper, with the route's paths, group and clusters
    view = zk.route_config(worker_file, "back")
    assert (view.root, view.consumer_group) == (f"{root}/routes/back", f"{pipeline.group}.back")
    assert (view.source.alias, view.destination.alias, view.forward) == ("dst", "src", "origin")
    assert view.controller.topic_naming == "prefix"
    assert zk.route_config(worker_file, "east").root == f"{root}/routes/east"
    with pytest.raises(ConfigError, match="unknown route 'nope'"):
        zk.route_config(worker_file, "nope")


def test_a_route_to_an_unreachable_cluster_never_holds_up_another_routes_hand_offs(pipeline, services):
    # Given route default (src -> dst) and route "lost" to a cluster nobody answers for, whose topic sync hangs
    from devtools.ports import free_port

    topic, partitions = f"{pipeline.name}-alive", 4
    kafka_io.create_topic(services["source"], topic, partitions)
    kafka_io.produce(services["source"], topic, 100, partitions)
    pipeline.overrides = {
        "source": None, "destination": None,
        "clusters": {"src": {"bootstrap_servers": services["source"]},
                     "dst": {"bootstrap_servers": services["destination"]},
                     "lost": {"bootstrap_servers": f"127.0.0.1:{free_port()}"}},
        "routes": [{"id": "default", "source": "src", "destination": "dst"},
                   {"id": "lost", "source": "src", "destination": "lost", "topic_naming": "prefix"}],
        "controller": {"topic_sync_interval_s": 1},
    }
    root = f"/ureplicator/{pipeline.name}"
    client = KazooClient(hosts=services["zookeeper"])
    client.start(15)
    try:
        from ureplicator.common.zkschema import TopicRecord

        # A topic of route "lost" (registered as the API would have, while "lost" still answered)
        client.create(f"{root}/routes/lost/topics/{topic}", TopicRecord(topic, f"src.{topic}", partitions).encode(),
                      makepath=True)
    finally:
        client.stop()
        client.close()
    pipeline.start_controller()
    pipeline.start_worker("w1", worker={"route": "default"})  # two routes: a worker names its own
    assert pipeline.api("POST", "/routes/default/topics", {"topic": topic})[0] == 201
    wait_for(lambda: mirrored_exactly(services, "source", "destination", topic, topic, partitions), 60, "mirrored")
    # When a second worker joins route default
    pipeline.start_worker("w2", worker={"route": "default"})
    # Then the hand-off completes and mirroring goes on, while route "lost" only waits
    wait_for(lambda: (rows := settled(pipeline, "default")) and len(rows) == 2
             and all(w["desired_generation"] and (w["missing"], w["extra"]) == ([], [])
                     for w in pipeline.api("GET", "/routes/default/validation")[1]["workers"])
             and pipeline.api("GET", "/routes/default/topics/" + topic)[1]["assignment"][0]["worker"] is not None
             and len({p["worker"] for p in pipeline.api("GET", f"/routes/default/topics/{topic}")[1]["assignment"]})
             == 2, 30, "the partitions shared by w1 and w2")
    kafka_io.produce(services["source"], topic, 100, partitions, start=100)
    wait_for(lambda: mirrored_exactly(services, "source", "destination", topic, topic, partitions), 60,
             "mirrored after the hand-off")
    assert sum(kafka_io.end_offsets(services["destination"], topic, partitions).values()) == 200
    status, lost = pipeline.api("GET", "/routes/lost")
    assert status == 200 and lost["state"] == "waiting_for_workers"


def test_active_active_in_one_deployment_copies_each_record_once_each_way_and_then_stays_still(pipeline, services):
    # Given one topic name written on both clusters, and one deployment with a route each way,
    # each route with a worker pinned to it by its file (worker.route)
    topic, partitions = f"{pipeline.name}-aa", 2
    for side in ("source", "destination"):
        kafka_io.create_topic(services[side], topic, partitions)
    kafka_io.produce(services["source"], topic, 100, partitions, tag="src")
    kafka_io.produce(services["destination"], topic, 100, partitions, tag="dst")
    pipeline.declare_routes({"src": services["source"], "dst": services["destination"]}, [
        {"id": "default", "source": "src", "destination": "dst"},
        {"id": "back", "source": "dst", "destination": "src"}])
    pipeline.start_controller()
    pipeline.start_worker("w-default", worker={"route": "default"})
    pipeline.start_worker("w-back", worker={"route": "back"})
    assert pipeline.api("POST", "/routes/default/topics", {"topic": topic})[0] == 201
    assert pipeline.api("POST", "/topics", {"topic": topic})[0] == 400  # two routes: name one
    assert pipeline.api("POST", f"/topics/{topic}?src=dst&dst=src")[0] == 201

    # Then each cluster holds its own 100 records and the other's 100, once
    def both_hold(count: int) -> bool:
        return all(sum(kafka_io.end_offsets(services[side], topic, partitions).values()) == count
                   for side in ("source", "destination"))

    wait_for(lambda: both_hold(200), 90, "each side mirrored the other's records")
    for side, other in (("source", "dst"), ("destination", "src")):
        records = [r for p in range(partitions) for r in kafka_io.read_partition(services[side], topic, p)]
        copies = [r for r in records if r.provenance() is not None]
        assert len(copies) == 100 and {c.provenance().origin for c in copies} == {other}
        assert len({(r.key, r.value) for r in records}) == 200
    # each route committed in its own group on its own source (past the copies it skipped, too)
    wait_for(lambda: sum(kafka_io.committed(services["source"], pipeline.group, topic, partitions).values()) == 200
             and sum(kafka_io.committed(services["destination"], f"{pipeline.group}.back", topic,
                                        partitions).values()) == 200, 30, "both routes committed")
    # and nothing bounces back: with every record consumed and acknowledged on both sides, an echo
    # would already be written, and the end offsets still hold
    assert both_hold(200)
