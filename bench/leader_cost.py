"""The leader's cost on real ZooKeeper: many routes, workers and partitions, workers refreshing their status.

    .venv/bin/python -m bench.leader_cost --quick            # 2 routes, 10 workers, 1,000 partitions (~1 min)
    .venv/bin/python -m bench.leader_cost                    # 20 routes, 200 workers, 50,000 partitions
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench import common
from bench.harness import BenchError
from bench.recording import parser, run_and_record
from bench.render import section, table
from devtools.harness import Processes, wait_for
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Assignment, PartitionStatus, Paths, TopicRecord, WorkerInfo, WorkerStatus

ZK_ROOT = "/ureplicator-bench"
READS = ("GetData", "GetChildren", "GetChildren2", "Exists")
TOPIC_WIDTH = 50  # partitions per topic
SESSIONS = 4  # ZooKeeper sessions the simulated workers share
SETTLE_TIMEOUT_S = 300.0
WORKDIR = Path("/tmp/ureplicator-leader-cost")
# (routes, workers, partitions, steady-state window s) of the route view, and of the code before it at the issue's
# own measurement; quick: both at one small scale.
SCALES = {"full": ((20, 200, 50_000, 60.0), (1, 100, 10_000, 60.0)), "quick": ((2, 10, 1000, 15.0),) * 2}
NO_STATS = {"reads": 0, "rounds": [], "round_count": 0, "is_leader": False}


def _started(hosts: str, timeout_s: float = 10) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=timeout_s)
    client.start(15)
    return client


def _closed(client: KazooClient) -> None:
    client.stop()
    client.close()


class CountingClient(KazooClient):
    """A KazooClient that counts the read requests it sends."""

    reads = 0

    def _call(self, request: Any, async_object: Any) -> Any:  # kazoo's one door to the server
        if type(request).__name__ in READS:
            CountingClient.reads += 1
        return super()._call(request, async_object)


def leader_child(config_file: Path, stats_file: Path, before: bool) -> int:
    """Run the leader until SIGTERM, writing its counters to ``stats_file`` twice a second."""
    from ureplicator.controller import leader as leader_module
    from ureplicator.controller.routeset import RouteSet, register_declared

    cfg = config_module.from_dict(json.loads(config_file.read_text()))
    client = CountingClient(hosts=cfg.zookeeper.connect, timeout=cfg.zookeeper.session_timeout_s)
    client.start(15)
    register_declared(cfg, client)
    rounds: list[tuple[float, float, int]] = []  # (end time, seconds, reads inside)
    original = leader_module.Leadership._reconcile

    def counted(self: Any, fence: str) -> None:
        started, reads = time.perf_counter(), CountingClient.reads
        original(self, fence)
        rounds.append((time.time(), time.perf_counter() - started, CountingClient.reads - reads))

    leader_module.Leadership._reconcile = counted  # type: ignore[method-assign]
    routes = RouteSet(cfg, client, "bench-leader", admins=None, cache=not before)
    routes.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(0.5):
        snapshot = list(rounds)
        tmp = stats_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"reads": CountingClient.reads, "rounds": snapshot[-2000:],
                                   "round_count": len(snapshot), "is_leader": routes.state.is_leader}))
        os.replace(tmp, stats_file)
    routes.stop()
    _closed(client)
    return 0


class Leader:
    """The leader in a child process (its CPU and memory its own), and the counters it writes twice a second."""

    def __init__(self, workdir: Path, doc: dict[str, Any], before: bool) -> None:
        config = workdir / "leader-config.json"
        config.write_text(json.dumps(doc))
        self.stats_file = workdir / "leader-stats.json"
        self.proc = Processes(workdir).spawn("leader", [sys.executable, "-m", "bench.leader_cost", "--leader-child",
                                                        str(config), "--stats", str(self.stats_file),
                                                        *(["--before"] if before else [])])

    def stats(self) -> dict[str, Any]:
        try:
            return json.loads(self.stats_file.read_text())
        except (OSError, ValueError):
            return NO_STATS

    def sample(self) -> tuple[common.ProcSample, dict[str, Any], float]:
        """The leader's CPU and memory, its counters, and the time they were read."""
        if (sample := common.proc_sample(self.proc.pid)) is None:
            raise BenchError(f"the leader exited:\n{self.proc.tail(60)}")
        return sample, self.stats(), time.monotonic()


class SimWorker:
    """One worker of one route, as its ZooKeeper nodes show it; applying is instantaneous."""

    def __init__(self, client: KazooClient, paths: Paths, worker_id: str) -> None:
        self.client, self.paths, self.id = client, paths, worker_id
        self.applied = Assignment(0)
        self.refreshes = 0
        self._lock = threading.Lock()

    def register(self) -> None:
        tx = self.client.transaction()
        tx.create(self.paths.worker(self.id), WorkerInfo("bench", 0, "bench", "").encode(), ephemeral=True)
        tx.create(self.paths.worker_status(self.id), WorkerStatus(0).encode(), ephemeral=True)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            raise BenchError(f"registering {self.id}: {results}")
        self.client.DataWatch(self.paths.assignment(self.id), self._on_assignment)

    def _on_assignment(self, data: bytes | None, stat: Any) -> None:
        if data:
            with self._lock:
                self.applied = Assignment.decode(data)
            self.write_status()

    def write_status(self) -> None:
        with self._lock:
            applied = self.applied
        now = time.time()
        rate = 1000.0 + (self.refreshes % 7)  # rates move a little on each refresh, as measured ones do
        status = WorkerStatus(applied.generation, {
            tp: PartitionStatus(committed=1000, records_per_s=rate, bytes_per_s=rate * 100, lag=0, last_progress_at=now)
            for tp in applied.partitions
        }, updated_at=datetime.now(timezone.utc).isoformat())
        self.client.set_async(self.paths.worker_status(self.id), status.encode())

    def refresh(self) -> None:
        self.refreshes += 1
        self.write_status()

    def settled_with(self, written: Assignment | None) -> bool:
        with self._lock:
            return written is not None and self.applied == written


def route_settled(client: KazooClient, paths: Paths, workers: list[SimWorker], partitions: int) -> bool:
    """Every partition written to a worker, and every worker applied exactly what was written to it."""
    total = 0
    for worker in workers:
        try:
            written = Assignment.decode(client.get(paths.assignment(worker.id))[0])
        except Exception:  # noqa: BLE001 - not written yet
            return False
        if not worker.settled_with(written):
            return False
        total += len(written.partitions)
    return total == partitions


def _zookeeper(args: argparse.Namespace) -> str:
    from devtools import stack

    directory = args.stack or stack.default_dir()
    try:
        return args.zookeeper or json.loads((Path(directory) / "stack.json").read_text())["zookeeper"]
    except (OSError, KeyError, ValueError) as exc:
        raise BenchError(f"no running stack in {directory} (start one with `ureplicator stack up`, or pass "
                         f"--zookeeper): {exc}") from None


def _config(pipeline: str, zookeeper: str, routes: int) -> dict[str, Any]:
    """Routes over enough clusters for ``routes`` distinct pairs: an identity mesh, origin (accepted)."""
    clusters = 2
    while clusters * (clusters - 1) < routes:
        clusters += 1
    aliases = [f"c{i}" for i in range(1, clusters + 1)]
    chosen: list[tuple[str, str]] = []  # each pair with its reverse, so that fan-in is active-active
    for pair in itertools.chain.from_iterable(((s, d), (d, s)) for s, d in itertools.permutations(aliases, 2)):
        if len(chosen) < routes and pair not in chosen:
            chosen.append(pair)
    return {
        "pipeline": pipeline,
        "zookeeper": {"connect": zookeeper, "root": ZK_ROOT, "session_timeout_s": 10},
        "clusters": {a: {"bootstrap_servers": f"127.0.0.{i}:1"} for i, a in enumerate(aliases, 1)},
        "routes": [{"id": f"r{i:02d}", "source": s, "destination": d, "shared": True}
                   for i, (s, d) in enumerate(chosen)],
        "controller": {"reconcile_interval_s": 5.0, "rebalance_interval_s": 300.0},
    }


def _deploy(admin: KazooClient, sessions: list[KazooClient], cfg: Any, workers: int,
            per_route: int) -> dict[str, tuple[Paths, list[SimWorker]]]:
    """Each route's nodes and topics (``per_route`` partitions), and its simulated workers (not registered)."""
    from ureplicator.controller.routeset import register_declared

    register_declared(cfg, admin)  # as the controller does at start, before the route's nodes exist
    by_route = {}
    for i, route in enumerate(cfg.routes):
        paths = Paths(config_module.route_view(cfg, route.id).root)
        for parent in paths.all_parents():
            admin.ensure_path(parent)
        for t in range(0, per_route, TOPIC_WIDTH):
            name = f"topic-{t // TOPIC_WIDTH:04d}"
            admin.create(paths.topic(name), TopicRecord(name, name, min(TOPIC_WIDTH, per_route - t)).encode())
        count = workers // len(cfg.routes) + (1 if i < workers % len(cfg.routes) else 0)
        by_route[route.id] = (paths, [SimWorker(sessions[(i + w) % len(sessions)], paths, f"{route.id}-w{w:03d}")
                                      for w in range(count)])
    return by_route


def measure(args: argparse.Namespace, before: bool, routes: int, workers: int, partitions: int,
            window_s: float) -> dict[str, Any]:
    """One scenario: register topics, start the leader and workers, settle, join, steady state."""
    zookeeper = _zookeeper(args)
    pipeline = f"leader-cost-{os.getpid()}-{'before' if before else 'view'}-{int(time.time())}"
    doc = _config(pipeline, zookeeper, routes)
    admin = _started(zookeeper)
    sessions = [_started(zookeeper) for _ in range(SESSIONS)]
    workdir = WORKDIR / pipeline
    workdir.mkdir(parents=True, exist_ok=True)
    leader = None
    try:
        cfg = config_module.from_dict(doc)
        per_route = partitions // routes
        by_route = _deploy(admin, sessions, cfg, workers, per_route)
        everyone = [w for _, ws in by_route.values() for w in ws]
        common.say(f"{'before' if before else 'route view'}: {routes} routes, {len(everyone)} workers, "
                   f"{per_route * routes} partitions")
        leader = Leader(workdir, doc, before)
        wait_for(lambda: leader.stats()["is_leader"], 60, "the leader elected", 0.2)
        started = time.monotonic()
        for worker in everyone:
            worker.register()
        wait_for(lambda: all(route_settled(admin, p, ws, per_route) for p, ws in by_route.values()),
                 SETTLE_TIMEOUT_S, "every route settled", 0.2)
        first_settle_s = time.monotonic() - started

        # A worker joins one route: until every worker of it applied what the leader wrote.
        paths, route_workers = by_route[cfg.routes[0].id]
        joiner = SimWorker(sessions[0], paths, f"{cfg.routes[0].id}-joiner")
        route_workers.append(joiner)
        rounds_before = leader.stats()["round_count"]
        joined = time.monotonic()
        joiner.register()
        wait_for(lambda: route_settled(admin, paths, route_workers, per_route) and bool(joiner.applied.partitions),
                 60, "the join settled", 0.2)
        join_settle_s = time.monotonic() - joined
        time.sleep(0.6)  # the leader writes its counters twice a second
        after = leader.stats()
        new_rounds = after["round_count"] - rounds_before
        join_rounds = after["rounds"][-new_rounds:] if new_rounds > 0 else []
        common.say(f"settled in {first_settle_s:.2f} s, the join in {join_settle_s:.2f} s")

        # Steady state: every worker refreshes its status every refresh_s, evenly spread.
        stop = threading.Event()
        refreshes = [0]

        def refresher() -> None:
            for worker in itertools.cycle(everyone):
                worker.refresh()
                refreshes[0] += 1
                if stop.wait(args.refresh_s / len(everyone)):
                    return

        thread = threading.Thread(target=refresher, daemon=True)
        thread.start()
        time.sleep(min(args.refresh_s, window_s / 3))  # every worker refreshed once before measuring
        (s0, stats0, t0), n0 = leader.sample(), refreshes[0]
        time.sleep(window_s)
        (s1, stats1, t1), n1 = leader.sample(), refreshes[0]
        stop.set()
        thread.join(5)
        window_rounds = stats1["round_count"] - stats0["round_count"]
        window_reads = stats1["reads"] - stats0["reads"]
        recent = stats1["rounds"][-window_rounds:] if window_rounds else []
        measured = {
            "variant": "before" if before else "route_view",
            "routes": routes, "workers": len(everyone), "partitions": per_route * routes,
            "first_settle_s": round(first_settle_s, 3),
            "join_settle_s": round(join_settle_s, 3),
            "join_round_max_s": round(max((r[1] for r in join_rounds), default=0.0), 4),
            "steady_window_s": round(t1 - t0, 1),
            "status_refreshes": n1 - n0,
            "leader_cpu_share": round((s1.cpu_s - s0.cpu_s) / (t1 - t0), 4),
            "leader_rss_bytes": s1.rss_bytes,
            "leader_rss_peak_bytes": s1.hwm_bytes,
            "rounds": window_rounds,
            "reads": window_reads,
            "reads_per_refresh": round(window_reads / max(1, n1 - n0), 2),
            "reads_per_round_inside": round(sum(r[2] for r in recent) / max(1, len(recent)), 2),
            "round_p50_s": round(sorted(r[1] for r in recent)[len(recent) // 2], 4) if recent else None,
        }
        shutil.rmtree(workdir, ignore_errors=True)  # a failed scenario keeps its folder: the leader's log
        return measured
    finally:
        if leader is not None:
            leader.proc.terminate()
        for session in sessions:
            _closed(session)
        admin.delete(f"{ZK_ROOT}/{pipeline}", recursive=True)
        _closed(admin)


def render(entry: dict[str, Any]) -> str:
    m, quick = entry["machine"], entry["mode"] == "quick"
    rows = [[("re-reads every node each round (before)" if r["variant"] == "before" else "route view (TreeCache)"),
             r["routes"], r["workers"], f"{r['partitions']:,}", f"{r['first_settle_s']:.2f} s",
             f"{r['join_settle_s']:.2f} s", f"{r['join_round_max_s'] * 1000:.0f} ms",
             f"{r['leader_cpu_share'] * 100:.1f} %", f"{r['reads_per_refresh']:.2f}",
             f"{r['reads_per_round_inside']:.1f}", r["rounds"], f"{r['leader_rss_bytes'] / 2**20:.0f} MiB"]
            for r in entry["results"]]
    command = ("`python -m bench.leader_cost --quick` (**quick mode**: small, for a smoke test; the full run is 20 "
               "routes, 200 workers, 50,000 partitions)") if quick else "`python -m bench.leader_cost`"
    return section(
        "## The leader's cost (many routes, status refreshes)",
        f"{command} on {m['cpu_model']}, {m['cores']} cores, {entry['date']}. Each simulated worker rewrites its "
        f"status every {entry['refresh_s']:.0f} s; steady-state window {entry['window_s']:.0f} s; load average before "
        f"{entry['load_before'][0]:.2f}. The columns are explained under Methods.",
        table(["leader", "routes", "workers", "partitions", "first settle", "join settled", "slowest join round",
               "leader CPU (steady)", "reads / status refresh", "reads inside a round", "rounds", "RSS"], rows,
              "lrrrrrrrrrrr"))


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.leader_cost", __doc__)
    cli.add_argument("--quick", action="store_true", help="2 routes, 10 workers, 1,000 partitions, 15 s window")
    cli.add_argument("--refresh-s", type=float, default=5.0, help="each worker's status refresh interval")
    cli.add_argument("--stack", type=Path, default=None)
    cli.add_argument("--zookeeper", default=None)
    cli.add_argument("--leader-child", type=Path, help=argparse.SUPPRESS)
    cli.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    cli.add_argument("--before", action="store_true", help=argparse.SUPPRESS)
    args = cli.parse_args(argv)
    if args.leader_child:
        return leader_child(args.leader_child, args.stats, args.before)
    mode = "quick" if args.quick else "full"

    def go() -> dict[str, Any]:
        load_before = common.load_average()
        results = [measure(args, before, *scale) for before, scale in zip((False, True), SCALES[mode], strict=True)]
        return {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "mode": mode,
            "refresh_s": args.refresh_s, "window_s": SCALES[mode][0][3],
            "load_before": list(load_before),
            "machine": common.machine_info(),
            "results": results,
        }

    return run_and_record(go, section="leader-cost", no_write=args.no_write)


if __name__ == "__main__":
    sys.exit(main())
