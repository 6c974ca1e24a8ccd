"""The shared worker pool on real ZooKeeper and Kafka: a worker moves between routes through the hand-off gate."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from kazoo.client import KazooClient

from devtools.ports import free_port
from tests.support import kafka_io
from tests.support.kafka_io import wait_for
from tests.support.rounds import wait_rounds
from ureplicator.common.zkschema import PoolBinding

pytestmark = pytest.mark.integration


def bindings(client: KazooClient, root: str) -> dict[str, str | None]:
    node = f"{root}/pool/bindings"
    if not client.exists(node):
        return {}
    return {w: PoolBinding.decode(client.get(f"{node}/{w}")[0]).route for w in client.get_children(node)}


def holders(pipeline, route: str) -> set[str]:
    """The workers of ``route`` that were written an assignment and applied it, with no hand-off under way."""
    status, body = pipeline.api("GET", f"/routes/{route}/validation")
    if status != 200 or not body["ok"] or body["withheld"]:
        return set()
    return {w["worker"] for w in body["workers"] if w["desired_generation"]}


def events(pipeline, label: str) -> list[dict]:
    """The JSON log lines of one of the pipeline's processes."""
    (proc,) = [p for p in pipeline.processes if p.name == label]
    found = []
    for line in proc.log.read_text(errors="replace").splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def same_records(source: str, destination: str, topic: str, dest_topic: str, partitions: int) -> None:
    for p in range(partitions):
        expected = [r.logical() for r in kafka_io.read_partition(source, topic, p)]
        assert [r.logical() for r in kafka_io.read_partition(destination, dest_topic, p)] == expected, p


def test_a_pool_worker_rebound_between_routes_under_load_loses_and_duplicates_nothing(pipeline, services):
    # Given routes a (src -> dst) and b (dst -> src, min 0 workers) and two pool workers, both on route a
    # while its topic is written without pause
    topic, back, partitions = f"{pipeline.name}-pool", f"{pipeline.name}-back", 4
    kafka_io.create_topic(services["source"], topic, partitions)
    kafka_io.create_topic(services["destination"], back, 2)
    pipeline.declare_routes({"src": services["source"], "dst": services["destination"]}, [
        {"id": "a", "source": "src", "destination": "dst"},
        {"id": "b", "source": "dst", "destination": "src", "topic_naming": "prefix",
         "workers": {"min": 0}}])
    root = f"/ureplicator/{pipeline.name}"
    pipeline.start_controller()
    assert pipeline.api("POST", "/routes/a/topics", {"topic": topic})[0] == 201
    probes = free_port()  # p2's probes: served by each mirror loop it runs, on one port
    pipeline.start_worker("p1", worker={"pool": True})
    pipeline.start_worker("p2", worker={"pool": True, "metrics_port": probes, "metrics_host": "127.0.0.1"})
    written = {"count": 0}
    loading = threading.Event()

    def load() -> None:
        while not loading.is_set():
            kafka_io.produce(services["source"], topic, 40, partitions, start=written["count"])
            written["count"] += 40
            time.sleep(0.1)

    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    client = KazooClient(hosts=services["zookeeper"])
    client.start(15)
    try:
        wait_for(lambda: bindings(client, root) == {"p1": "a", "p2": "a"} and holders(pipeline, "a") == {"p1", "p2"},
                 60, "both pool workers serve route a")
        assert pipeline.api("GET", "/routes/b")[1]["state"] == "waiting_for_workers"

        # When route b gets a topic (it has partitions and no worker: the neediest route)
        assert pipeline.api("POST", "/routes/b/topics", {"topic": back})[0] == 201
        kafka_io.produce(services["destination"], back, 100, 2, tag="back")

        # Then one worker is drained from route a through the gate and rebound to b, in-process
        wait_for(lambda: bindings(client, root) == {"p1": "a", "p2": "b"}, 60, "p2 rebound to route b")
        wait_for(lambda: holders(pipeline, "a") == {"p1"} and holders(pipeline, "b") == {"p2"}, 60,
                 "each route served by one pool worker")
        wait_for(lambda: kafka_io.end_offsets(services["destination"], back, 2)
                 == kafka_io.end_offsets(services["source"], f"dst.{back}", 2), 60, "route b mirrored")
        assert all(p.alive() for p in pipeline.processes)
        # p2 held none of route a's partitions when it left it (the gate had drained it)
        left = [e for e in events(pipeline, "p2") if e.get("event") == "worker_stopped"]
        assert left and left[0]["partitions"] == 0, left
        wait_for(lambda: ready(probes), 30, "p2 ready again on its port after the move")
        # And the pool stays as it is: three more of the leader's pool rounds (each of which could move a
        # worker) leave the bindings unchanged
        wait_rounds(pipeline.url, 3, kind="pool")
        assert bindings(client, root) == {"p1": "a", "p2": "b"}
    finally:
        loading.set()
        writer.join(30)
        client.stop()
        client.close()

    # And route a lost and duplicated nothing across the move
    wait_for(lambda: kafka_io.end_offsets(services["source"], topic, partitions)
             == kafka_io.end_offsets(services["destination"], topic, partitions), 60, "route a caught up")
    assert sum(kafka_io.end_offsets(services["destination"], topic, partitions).values()) == written["count"]
    same_records(services["source"], services["destination"], topic, topic, partitions)
    same_records(services["destination"], services["source"], back, f"dst.{back}", 2)


def test_the_leader_rebinds_a_pool_worker_only_once_its_route_drained_it(services):
    # Given (on real ZooKeeper, no processes) routes a and b, pool workers p1 and p2 both bound to a,
    # p2 holding partitions of a, and route b with a topic and no worker
    import uuid

    from ureplicator.common import config
    from ureplicator.common.zkschema import (
        POOL_DRAIN,
        Assignment,
        PartitionStatus,
        Paths,
        RouteRecord,
        TopicRecord,
        WorkerStatus,
    )
    from ureplicator.controller.pooling import PoolKeeper

    cfg = config.from_dict({
        "pipeline": f"pool{uuid.uuid4().hex[:8]}",
        "zookeeper": {"connect": services["zookeeper"]},
        "clusters": {"src": {"bootstrap_servers": services["source"]},
                     "dst": {"bootstrap_servers": services["destination"]}},
        "routes": [{"id": "a", "source": "src", "destination": "dst"},
                   {"id": "b", "source": "dst", "destination": "src", "topic_naming": "prefix",
                    "workers": {"min": 0}}],
    })
    root = Paths(cfg.pipeline_root)
    a, b = Paths(f"{cfg.pipeline_root}/routes/a"), Paths(f"{cfg.pipeline_root}/routes/b")
    client = KazooClient(hosts=services["zookeeper"])
    client.start(15)
    try:
        fence = client.create(f"{root.election}/fence-", ephemeral=True, sequence=True, makepath=True)
        client.create(a.topic("t"), TopicRecord("t", "t", 4).encode(), makepath=True)
        client.create(b.topic("u"), TopicRecord("u", "dst.u", 2).encode(), makepath=True)
        held = Assignment(3, frozenset({("t", 2), ("t", 3)}))
        for worker in ("p1", "p2"):
            client.create(root.pool_worker(worker), ephemeral=True, makepath=True)
            client.create(root.pool_binding(worker), PoolBinding("a").encode(), makepath=True)
            client.create(a.worker(worker), ephemeral=True, makepath=True)
            client.create(a.assignment(worker), held.encode(), makepath=True)
            status = WorkerStatus(3, {tp: PartitionStatus(records_per_s=10) for tp in held.partitions})
            client.create(a.worker_status(worker), status.encode(), ephemeral=True, makepath=True)
        client.create(a.blacklisted_worker("p1"), b"", makepath=True)  # an operator's entry
        routes = {r.id: (r, RouteRecord(r.definition())) for r in cfg.routes}
        keeper = PoolKeeper(cfg, client, lambda: routes)

        # When the leader runs its rounds while route a's loop hands p2's partitions on
        keeper.round(fence)
        # Then p2 is asked to drain (an entry in route a), and stays bound to a while it holds anything
        assert client.get(a.blacklisted_worker("p2"))[0] == POOL_DRAIN
        assert bindings(client, cfg.pipeline_root) == {"p1": "a", "p2": "a"}
        client.set(a.assignment("p2"), Assignment(4).encode())  # released by the route's loop...
        keeper.round(fence)
        assert bindings(client, cfg.pipeline_root)["p2"] == "a"  # ...but not yet confirmed by p2
        client.set(a.worker_status("p2"), WorkerStatus(4).encode())
        keeper.round(fence)
        assert bindings(client, cfg.pipeline_root) == {"p1": "a", "p2": "b"}
        # The drain entry stays until p2 left route a; the operator's entry is never touched
        assert client.exists(a.blacklisted_worker("p2"))
        client.delete(a.worker_status("p2"))
        client.delete(a.worker("p2"))
        keeper.round(fence)
        assert not client.exists(a.blacklisted_worker("p2"))
        assert client.get(a.blacklisted_worker("p1"))[0] == b""
        # A pool worker that left keeps its binding while it is still registered in its route
        client.delete(root.pool_worker("p1"))
        keeper.round(fence)
        assert bindings(client, cfg.pipeline_root)["p1"] == "a"
        client.delete(a.worker("p1"))
        keeper.round(fence)
        # then it is unbound, and route a, below its minimum, takes p2 back from b (min 0); p2 is not
        # registered in b here, so there is nothing to drain
        assert bindings(client, cfg.pipeline_root) == {"p2": "a"}
        # And a stale leader cannot write: its fence is gone
        client.create(root.pool_worker("p3"), ephemeral=True)
        client.delete(fence)
        with pytest.raises(Exception, match="fence"):
            keeper.round(fence)
        assert bindings(client, cfg.pipeline_root) == {"p2": "a"}
    finally:
        client.delete(cfg.pipeline_root, recursive=True)
        client.stop()
        client.close()


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_an_unbound_pool_worker_answers_its_probes_and_worker_metrics_name_their_route(pipeline, services):
    # Given routes a (src -> dst) and b (dst -> src), and a pool worker started while no controller runs,
    # so nobody binds it
    topic = f"{pipeline.name}-probed"
    kafka_io.create_topic(services["source"], topic, 2)
    kafka_io.produce(services["source"], topic, 50, 2)
    pipeline.declare_routes({"src": services["source"], "dst": services["destination"]}, [
        {"id": "a", "source": "src", "destination": "dst"},
        {"id": "b", "source": "dst", "destination": "src", "topic_naming": "prefix", "workers": {"min": 0}}])
    pool_port, pinned_port = free_port(), free_port()
    pipeline.start_worker("p1", worker={"pool": True, "metrics_port": pool_port, "metrics_host": "127.0.0.1"})

    # Then, unbound, it is alive (its ZooKeeper session is up) and ready (registered in the pool)
    wait_for(lambda: probe(pool_port, "/ready")[0] == 200, 30, "the unbound pool worker ready")
    status, body = probe(pool_port, "/healthz")
    assert status == 200 and json.loads(body) == {"route": None, "zookeeper": "connected"}, body
    assert json.loads(probe(pool_port, "/ready")[1]) == {"route": None, "pool_member": True, "ready": True}
    assert 'route="' not in probe(pool_port, "/metrics")[1]  # no route served, no route's series

    # When a controller binds it to route a, which gets a topic, and a worker pinned to route b starts
    pipeline.start_controller()
    assert pipeline.api("POST", "/routes/a/topics", {"topic": topic})[0] == 201
    pipeline.start_worker("w-b", worker={"route": "b", "metrics_port": pinned_port, "metrics_host": "127.0.0.1"})
    mirrored = f'ureplicator_worker_records_mirrored_total{{route="a",topic="{topic}"}} 50.0'
    wait_for(lambda: mirrored in probe(pool_port, "/metrics")[1], 60, "the pool worker's route a series")

    # Then the same port serves the bound loop's probes, and every worker series names its route
    assert json.loads(probe(pool_port, "/ready")[1])["route"] == "a"
    wait_for(lambda: probe(pool_port, "/ready")[0] == 200 and probe(pool_port, "/healthz")[0] == 200, 30,
             "the bound pool worker alive and ready")
    families = {"ureplicator_worker_partitions_owned", "ureplicator_worker_assignment_generation",
                "ureplicator_worker_in_flight_bytes", "ureplicator_worker_replication_latency_seconds_count"}
    pool_series = probe(pool_port, "/metrics")[1].splitlines()
    for family in families:
        assert any(line.startswith(f'{family}{{route="a"}}') for line in pool_series), family
    assert not [line for line in pool_series if line.startswith("ureplicator_worker_") and 'route="a"' not in line]
    wait_for(lambda: 'ureplicator_worker_partitions_owned{route="b"} 0.0' in probe(pinned_port, "/metrics")[1],
             30, "the pinned worker's route b series")
