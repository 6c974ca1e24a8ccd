"""Measure how long partitions stop flowing when topics, workers and controllers come and go under load.

    .venv/bin/python -m bench.stalls            # ureplicator events + MirrorMaker 2 (default 5-min rebalance delay)
    .venv/bin/python -m bench.stalls --quick    # shorter windows, MM2 with a 20 s rebalance delay (~3 min)
    .venv/bin/python -m bench.stalls --no-mm2   # ureplicator only (~3-4 min)
    .venv/bin/python -m bench.stalls --render bench/results/stalls-2026-11-25.json   # re-render the section
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import mm2
from bench.common import fmt_load, load_average
from bench.harness import TP, BenchError, Pipeline, load_line
from bench.recording import parser, rendered, run_and_record
from bench.scenario import (
    PARTITIONS,
    PAUSED_S,
    Profile,
    Runner,
    compare_logs,
    defaults,
    duplicate_arrivals,
    duplicates_after,
    new_entry,
    stage,
)
from devtools import jvm, stack
from devtools.harness import Proc, admin_client, create_topic, say, wait_for
from devtools.kproxy import KafkaProxy
from devtools.ports import free_port

GAP_BEFORE_S = 0.5  # the gap window opens this long before the event
COORDINATOR_TARGET_S = 0.5  # issue 25: the unmoved partitions' longest gap while a coordinator hangs
SLOW_COORDINATOR = "slow coordinator during an acquisition"
# What the worker logs when its coordinator calls fail or wait (worker/commits.py, handoff.py): counted per run.
_COORDINATOR_LOG_EVENTS = ("acquisition_retry", "committed_offsets_retry", "commit_failed", "commit_client_replaced",
                           "commit_timed_out", "release_commit_failed")


@dataclass
class Event:
    """One disturbance and what was observed around it (epoch seconds: acted, settled, window closed)."""

    name: str
    system: str
    t0: float = 0.0
    t_settled: float = 0.0
    t1: float = 0.0
    topics: list[str] = field(default_factory=list)  # topics that were flowing before the event
    owners_before: dict[str, dict[int, str | None]] = field(default_factory=dict)
    owners_after: dict[str, dict[int, str | None]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)

    def moved(self) -> set[TP] | None:
        """Partitions whose applier changed; None when the system does not say (MM2)."""
        if not self.owners_before:
            return None
        return {(t, p) for t, before in self.owners_before.items() for p, w in before.items()
                if self.owners_after.get(t, {}).get(p) != w}

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "system": self.system, "notes": self.notes, **self.result}


@dataclass(frozen=True)
class Disturbance:
    """One step of the ureplicator script: act, then wait until ``condition`` holds and the assignment settled;
    ``recovery`` marks the undoing of the previous step (reported, not measured); ``after`` adds measures."""

    name: str
    action: Callable[[Event], Any]
    condition: Callable[[], bool] = lambda: True
    timeout_s: float = 90
    recovery: bool = False
    after: Callable[[Event], None] | None = None


def observe(runner: Runner, event: Event, act: Callable[[], float], post_s: float) -> Event:
    """Act (returns when the system settled), keep observing ``post_s`` seconds, then analyse the window."""
    event.notes["load_before"] = load_average()
    event.t0 = time.time()
    event.t_settled = act()
    time.sleep(post_s)
    event.t1 = time.time()
    event.notes["load_after"] = load_average()
    event.result = analyze(event, runner)
    return event


def analyze(event: Event, runner: Runner) -> dict[str, Any]:
    """Gaps of moved / unmoved partitions in the event's window and the worst latency of records in it."""
    gaps = runner.gaps(event.t0, event.t1, GAP_BEFORE_S, runner.tps(event.topics))
    moved = event.moved()
    classified_by = "gap" if moved is None else "applied_by"
    if moved is None:  # MM2: class partitions by whether they paused
        moved = {tp for tp, (gap, _) in gaps.items() if gap > PAUSED_S}
    unmoved = [tp for tp in gaps if tp not in moved]
    moved_list = [tp for tp in gaps if tp in moved]
    result: dict[str, Any] = {
        "classified_by": classified_by,
        "partitions": len(gaps),
        "moved": len(moved_list),
        "moved_partitions": [f"{t}:{p}" for t, p in sorted(moved_list)],
        "unmoved_max_gap_s": round(max((gaps[tp][0] for tp in unmoved), default=0.0), 3),
        "unmoved_paused": sum(1 for tp in unmoved if gaps[tp][0] > PAUSED_S),
        "moved_max_gap_s": round(max((gaps[tp][0] for tp in moved_list), default=0.0), 3),
        "moved_flowing_after_s": round(max((gaps[tp][1] - event.t0 for tp in moved_list), default=0.0), 3),
        "all_paused": sum(1 for g, _ in gaps.values() if g > PAUSED_S),
        "window_s": round(event.t1 - event.t0, 2),
        "settled_after_s": round(event.t_settled - event.t0, 2) if event.t_settled else None,
    }
    for label, tps in (("unmoved", unmoved), ("moved", moved_list)):  # what a consumer felt
        logs = [runner.arrivals.logs[tp] for tp in tps]
        result[f"{label}_max_latency_s"] = round(max([0.0, *(
            lat for log in logs for a, lat in zip(log.arrivals, log.latency_ms, strict=True)
            if event.t0 <= a <= event.t1)]) / 1000, 3)
    return result


def finish(runner: Runner, out: dict[str, Any], events: list[Event], by: str = "urep",
           caught_up: Callable[[], Any] | None = None) -> None:
    """Stop producing, wait for the mirror to catch up, attribute duplicates to events, compare the logs exactly."""
    say("stopping the load; waiting for the mirror to catch up")
    if caught_up is None:
        results, error = runner.finish(120)
        time.sleep(1)  # the last arrivals reach the reader
    else:
        results, error = [load.stop() for load in runner.loads], None
        try:
            wait_for(caught_up, 180, "the destination to hold every source record", 1.0)
        except BenchError as exc:
            error = str(exc)
            say(f"  {exc}; comparing what is there")
    out["load"] = [{"sent": r.sent, "acked": r.acked, "failed": r.failed} for r in results]
    if error is not None:
        out["catch_up_error"] = error
    per_event = duplicates_after([e.t0 for e in events], duplicate_arrivals(runner.arrivals), time.time())
    for event, mine in zip(events, per_event, strict=True):
        event.result["duplicates"] = len(mine)
        per_partition: dict[str, int] = {}
        for _, (topic, p) in mine:
            per_partition[f"{topic}:{p}"] = per_partition.get(f"{topic}:{p}", 0) + 1
        event.result["duplicate_partitions"] = per_partition
        if mine:
            event.result["duplicates_first_at_s"] = round(min(t for t, _ in mine) - event.t0, 2)
    out["comparison"] = {}
    for topic in runner.topics:
        cmp = compare_logs(runner.services, topic, by=by)[2]
        out["comparison"][topic] = cmp.to_json()
        say(f"  {topic}: {cmp.records:,} records, lost {cmp.lost}, duplicated {cmp.duplicated}, "
            f"reordered {cmp.reordered}")
    if by == "urep":
        out["bad_headers"] = runner.arrivals.bad_headers
    out["events"] = [e.to_json() for e in events]


def baseline(runner: Runner, seconds: float) -> dict[str, Any]:
    """The longest arrival gaps over ``seconds`` of quiet flow (what the events are compared with)."""
    t0 = time.time()
    time.sleep(seconds)
    t1 = time.time()
    gaps = sorted(g for g, _ in runner.gaps(t0, t1, 0.0).values())
    out = {"window_s": round(t1 - t0, 1), "max_gap_s": round(max(gaps, default=0.0), 3),
           "median_partition_max_gap_s": round(gaps[len(gaps) // 2], 3) if gaps else 0.0}
    say(f"  baseline: longest gap of any partition {out['max_gap_s']:.2f}s")
    return out


def new_topic_timing(event: Event, runner: Runner, topic: str, preload: int) -> None:
    """When the new topic's first record, and its whole backlog, reached the destination."""
    times = sorted(a for (t, _), log in runner.arrivals.logs.items() if t == topic for a in log.arrivals)
    event.result["new_topic_first_record_s"] = round(times[0] - event.t0, 2) if times else None
    event.result["new_topic_backlog_mirrored_s"] = (round(times[preload - 1] - event.t0, 2)
                                                    if len(times) >= preload else None)


def backlogged_topic(runner: Runner, topic: str, tag: int) -> int:
    """A new source topic that already holds 10 s of load, under load; the records written."""
    create_topic(runner.services["source"], topic, PARTITIONS)
    preload = int(runner.profile.rate * 10)
    load = runner.load(topic, tag, preload=preload)
    wait_for(lambda: load.acked >= preload, 60, "backlog of the new topic written")
    return load.acked


# ----------------------------------------------------------------------------- ureplicator


def _validation_rows(pipeline: Pipeline) -> list[dict[str, Any]]:
    status, body = pipeline.api("GET", "/validation")
    return body.get("workers", []) if status == 200 and isinstance(body, dict) else []


def _generation(pipeline: Pipeline) -> int | None:
    """The newest assignment generation written (``GET /validation``)."""
    status, body = pipeline.api("GET", "/validation")
    if status != 200 or not isinstance(body, dict):
        return None
    return max((row.get("desired_generation") or 0 for row in body.get("workers", [])), default=0)


def run_event(runner: Runner, step: Disturbance, post_s: float) -> Event:
    """Owners before, act, wait until settled and flowing, keep observing ``post_s`` seconds, owners after."""
    pipeline, name = runner.pipeline, step.name
    event = Event(name, "ureplicator", topics=list(runner.topics), notes={"recovery": step.recovery})
    event.owners_before = {t: pipeline.owners(t) for t in event.topics}
    generation_before = _generation(pipeline)
    say(f"ureplicator event: {name} [load {load_line()}]")
    flowing: list[float] = []

    def act() -> float:
        step.action(event)
        wait_for(lambda: step.condition() and pipeline.settled(runner.topics), step.timeout_s, f"{name}: settled",
                 0.2)
        settled = time.time()
        flowing.append(runner.wait_flowing(settled, 60, f"{name}: every partition flowing"))
        event.owners_after = {t: pipeline.owners(t) for t in event.topics}
        return settled

    observe(runner, event, act, post_s)
    generation_after = _generation(pipeline)
    event.result["flowing_after_s"] = round(flowing[0] - event.t0, 2)
    if generation_before is not None and generation_after is not None:
        event.result["generations_written"] = generation_after - generation_before
    if step.after is not None:
        step.after(event)
    say(f"  settled after {event.result['settled_after_s']:.1f}s, {event.result['moved']} partition(s) moved; "
        f"unmoved: longest gap {event.result['unmoved_max_gap_s']:.2f}s; moved: longest gap "
        f"{event.result['moved_max_gap_s']:.2f}s, flowing again {event.result['moved_flowing_after_s']:.2f}s "
        f"after the event; {event.result.get('generations_written', '?')} assignment generation(s) written")
    return event


def script(runner: Runner, topic_b: str, preload: int) -> list[Disturbance]:
    """The ureplicator phase's events, in order (docs/benchmarks.md says why each)."""
    pipeline, root = runner.pipeline, runner.root
    takeover: dict[str, float] = {}

    def appliers() -> set[str | None]:
        return {w for t in runner.topics for w in pipeline.owners(t).values()}

    def add_topic(event: Event) -> None:
        runner.mirror(topic_b)
        event.notes["backlog_records"] = runner.loads[-1].acked

    def blacklist(event: Event) -> None:
        status, body = pipeline.api("DELETE", "/instances/w3")
        if status != 200:
            raise BenchError(f"DELETE /instances/w3 answered {status}: {body}")

    def zookeeper_restart(event: Event) -> None:
        assert root is not None
        stack.stop_service(root, "zookeeper")
        time.sleep(2)
        stack.start_service(root, "zookeeper")
        event.notes["zookeeper_away_s"] = round(time.time() - event.t0, 2)

    def kill_leader(event: Event) -> None:
        event.notes["killed"] = runner.leader()
        pipeline.controllers[event.notes["killed"]].kill()

    def new_leader() -> bool:
        led = pipeline.leader() is not None
        if led:
            takeover.setdefault("took_over_at", time.time())
        return led

    def exit_status(event: Event) -> None:
        event.notes["exit_status"] = pipeline.workers["w3"].popen.returncode

    def took_over(event: Event) -> None:
        event.result["new_leader_after_s"] = round(takeover["took_over_at"] - event.t0, 2)

    return [
        Disturbance("add topic", add_topic, after=lambda e: new_topic_timing(e, runner, topic_b, preload)),
        Disturbance("add worker", lambda e: pipeline.start_worker("w3"), lambda: "w3" in appliers()),
        Disturbance("blacklist worker", blacklist, lambda: "w3" not in appliers()),
        Disturbance("whitelist worker", lambda e: pipeline.api("POST", "/instances/w3"),
                    lambda: "w3" in appliers(), recovery=True),
        Disturbance("SIGTERM worker", lambda e: pipeline.workers["w3"].popen.terminate(),
                    lambda: not pipeline.workers["w3"].alive() and "w3" not in appliers(), after=exit_status),
        Disturbance("restart worker", lambda e: pipeline.start_worker("w3"), lambda: "w3" in appliers(),
                    recovery=True),
        Disturbance("kill -9 worker", lambda e: pipeline.workers["w3"].kill(), lambda: "w3" not in appliers(),
                    timeout_s=120),
        # Away for less than the session: nothing moves, nothing should pause.
        *([Disturbance("ZooKeeper restart", zookeeper_restart, lambda: pipeline.leader() is not None)]
          if root is not None else []),
        Disturbance("kill -9 leader controller", kill_leader, new_leader, timeout_s=60, after=took_over),
    ]


def ureplicator_phase(runner: Runner, stamp: str, args: argparse.Namespace) -> dict[str, Any]:
    topic_a, topic_b = f"stl-{stamp}-a", f"stl-{stamp}-b"
    out: dict[str, Any] = {"system": "ureplicator", "topics": [topic_a, topic_b]}
    runner.start(topic_a)
    say(f"ureplicator: 2 controllers, 2 workers, {topic_a} x {PARTITIONS} at {args.rate:,} records/s; "
        f"baseline for {args.baseline:.0f}s (logs in {runner.workdir})")
    out["baseline"] = baseline(runner, args.baseline)
    backlogged_topic(runner, topic_b, tag=2)
    events = [run_event(runner, step, args.post) for step in script(runner, topic_b, int(args.rate * 10))]
    finish(runner, out, events)
    return out


def _log_events(workdir: Path, workers: tuple[str, ...]) -> dict[str, int]:
    """How often the workers logged each of the coordinator-related events (what an operator sees)."""
    counts = dict.fromkeys(_COORDINATOR_LOG_EVENTS, 0)
    for worker in workers:
        log = workdir / f"{worker}.log"
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            for name in _COORDINATOR_LOG_EVENTS:
                counts[name] += f'"event": "{name}"' in line
    return counts


def coordinator_phase(services: dict[str, str], root: Path, workdir: Path, stamp: str,
                      args: argparse.Namespace) -> dict[str, Any]:
    """The slow-coordinator event on a pipeline of its own whose source clients go through kproxy."""
    topic = f"stl-{stamp}-coord"
    out: dict[str, Any] = {"system": "ureplicator", "topics": [topic], "source_via": "devtools.kproxy",
                           "hold_after_acquiring_s": args.coordinator_hold}
    folder = workdir / "coordinator"
    folder.mkdir(exist_ok=True)
    with KafkaProxy(services["source"]) as proxy, Runner(services, root, folder, f"stc{stamp[-7:-1]}",
                                                         Profile(args.rate, workers=("w1", "w2", "w3"))) as runner:
        # Only the pipeline goes through the proxy; the load and the arrival probe talk to the brokers.
        runner.pipeline.services = {**services, "source": proxy.address}
        runner.start(topic)
        say(f"ureplicator, slow coordinator: 2 controllers, 3 workers, {topic} x {PARTITIONS}, source clients "
            f"through kproxy {proxy.address}; baseline for {args.baseline:.0f}s (logs in {folder})")
        out["baseline"] = baseline(runner, args.baseline)
        pipeline = runner.pipeline

        def acquiring() -> bool:  # the leader wrote w1 or w2 a generation it has not applied yet
            return any(r.get("worker") in ("w1", "w2")
                       and (r.get("desired_generation") or 0) > (r.get("applied_generation") or 0)
                       for r in _validation_rows(pipeline))

        def hang_while_acquiring(event: Event) -> None:
            proxy.hang()
            pipeline.workers["w3"].kill()
            event.notes["killed"] = "w3"
            wait_for(acquiring, 90, "w1/w2 acquiring w3's partitions", 0.2)
            event.notes["acquiring_after_s"] = round(time.time() - event.t0, 2)
            time.sleep(args.coordinator_hold)  # the fault's length: the coordinator keeps hanging
            held = proxy.stats()
            proxy.release()
            event.notes.update(hang_s=round(time.time() - event.t0, 2), held_requests=held["held"],
                               held_data_requests=held["held_data_requests"],
                               mixed_connections=held["mixed_connections"])
            say(f"  coordinator hung {event.notes['hang_s']:.1f}s (acquisition from "
                f"{event.notes['acquiring_after_s']:.1f}s); withheld {held['held']}, data requests withheld "
                f"{held['held_data_requests']}")

        step = Disturbance(SLOW_COORDINATOR, hang_while_acquiring,
                           lambda: "w3" not in set(pipeline.owners(topic).values()), timeout_s=120)
        try:
            event = run_event(runner, step, args.post)
        finally:
            proxy.release()  # whatever failed, the pipeline must be able to finish
        finish(runner, out, [event])
        out["events"][0].update(worker_log_events=_log_events(folder, ("w1", "w2")),
                                proxy_errors=proxy.stats()["errors"])
    return out


# ----------------------------------------------------------------------------- MirrorMaker 2


def _connect_view(log: Path) -> tuple[str | None, list[str]]:
    """(leader URL, tasks) from the node's last "Joined group" line of the replication flow's herder."""
    leader, tasks = None, []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if "Joined group at generation" in line and "leaderUrl='" in line:
            leader = line.split("leaderUrl='", 1)[1].split("'", 1)[0].rstrip("/")
            raw = line.split("taskIds=[", 1)[1].split("]", 1)[0] if "taskIds=[" in line else ""
            tasks = [t.strip() for t in raw.split(",") if t.strip()]
    return leader, tasks


def _topic_exists(bootstrap: str, topic: str) -> bool:
    found = admin_client(bootstrap).list_topics(topic=topic, timeout=5).topics.get(topic)
    return found is not None and found.error is None and len(found.partitions) == PARTITIONS


def _say_mm2(event: Event) -> Event:
    r = event.result
    say(f"  {r['all_paused']} of {r['partitions']} partition(s) paused > {PAUSED_S:.0f}s; longest gap "
        f"{max(r['moved_max_gap_s'], r['unmoved_max_gap_s']):.2f}s; flowing again "
        f"{r['moved_flowing_after_s']:.2f}s after the event")
    return event


def mm2_phase(runner: Runner, stamp: str, args: argparse.Namespace) -> dict[str, Any]:
    services, workdir = runner.services, runner.workdir
    topic_a, topic_b = f"stl-{stamp}-mm2-a", f"stl-{stamp}-mm2-b"
    delay_ms = int(args.mm2_delay_s * 1000)
    out: dict[str, Any] = {"system": "mirrormaker2", "topics": [topic_a, topic_b], "tasks_max": 4,
                           "nodes": args.mm2_nodes,
                           "refresh_topics_interval_s": 5, "scheduled_rebalance_max_delay_ms": delay_ms}
    create_topic(services["source"], topic_a, PARTITIONS)
    runner.load(topic_a, tag=11)
    started = time.time()
    nodes: list[Proc] = []
    urls: list[str] = []
    for index in range(1, args.mm2_nodes + 1):  # dedicated mode
        props = mm2.properties(f"s{stamp[-7:-1]}", services["source"], services["destination"], f"stl-{stamp}-mm2-.*")
        urls.append(f"http://127.0.0.1:{free_port()}")
        props.update({"tasks.max": 4, "refresh.topics.interval.seconds": 5,  # default 600: a new topic waits 10 min
                      # KIP-710: followers forward task configs to the leader; needed for more than one node.
                      "dedicated.mode.enable.internal.rest": "true", "listeners": urls[-1],
                      f"{mm2.DESTINATION}.scheduled.rebalance.max.delay.ms": delay_ms})
        folder = workdir / f"mm2-node{index}"
        nodes.append(runner.processes.spawn(f"mm2-node{index}", mm2.launch(folder, props), cwd=folder))
    say(f"mirrormaker2: {args.mm2_nodes} dedicated-mode nodes, tasks.max=4, {topic_a} x {PARTITIONS} at "
        f"{args.rate:,}/s; scheduled.rebalance.max.delay.ms={delay_ms}")

    def alive(procs: list[Proc], which: str = "a") -> None:
        if not all(n.alive() for n in procs):
            raise BenchError(f"{which} MirrorMaker 2 node exited:\n" + "\n".join(n.tail() for n in procs))

    wait_for(lambda: alive(nodes) or _topic_exists(services["destination"], topic_a), 180,
             "MirrorMaker 2 to create the destination topic", 0.5)
    runner.arrivals.start()
    runner.watch(topic_a)
    runner.wait_flowing(time.time(), 180, "MirrorMaker 2 flowing on every partition")
    out["first_flow_s"] = round(time.time() - started, 1)
    say(f"  flowing after {out['first_flow_s']:.0f}s; settling {args.mm2_settle:.0f}s, then baseline")
    time.sleep(args.mm2_settle)  # both nodes joined: no start-up rebalance inside the baseline
    out["baseline"] = baseline(runner, args.baseline)

    # 1. a new topic (with a 10 s backlog) matches the regex: for MM2, creating it is adding it.
    event = Event("add topic", "mirrormaker2", topics=[topic_a])
    say(f"mirrormaker2 event: add topic [load {load_line()}]")

    def add_topic() -> float:
        event.notes["backlog_records"] = backlogged_topic(runner, topic_b, tag=12)
        wait_for(lambda: _topic_exists(services["destination"], topic_b), 120,
                 "MirrorMaker 2 to create the new destination topic", 0.2)
        runner.watch(topic_b)
        settled = runner.wait_flowing(event.t0, 180, "every partition of both topics flowing")
        runner.wait_flowing(time.time(), 60, "flowing")
        return settled

    events = [observe(runner, event, add_topic, max(args.post, 5.0))]
    new_topic_timing(event, runner, topic_b, int(args.rate * 10))
    _say_mm2(event)
    # 2. a follower node killed -9: its tasks wait for scheduled.rebalance.max.delay.ms; 3. then the group
    # leader: the new leader does not know the lost tasks and assigns them at once (after the session timeout).
    for wanted in ("follower", "group leader"):
        live = [i for i, n in enumerate(nodes) if n.alive()]
        if len(live) < 2:
            break
        views = {i: _connect_view(workdir / f"mm2-node{i + 1}" / "mm2.log") for i in live}
        alive_leaders = [u for u in (views[i][0] for i in live) if u in urls and urls.index(u) in live]
        leader_url = alive_leaders[0] if alive_leaders else None
        leader = urls.index(leader_url) if leader_url is not None else None
        if wanted == "follower":
            candidates = [i for i in live if i != leader and views[i][1]] or [i for i in live if i != leader]
        else:
            candidates = [leader] if leader in live else []
        if not candidates:
            say(f"  no live {wanted} node to kill; skipped")
            continue
        victim, tasks = candidates[0], views[candidates[0]][1]
        event = Event(f"kill -9 worker ({wanted} node)", "mirrormaker2", topics=list(runner.topics),
                      notes={"victim_role": wanted, "victim_tasks": tasks, "leader_url": leader_url})
        say(f"mirrormaker2 event: kill -9 node {victim + 1} (the Connect group's {wanted}, tasks "
            f"{', '.join(tasks) or 'none'}) [load {load_line()}]")
        events.append(_say_mm2(observe(runner, event, lambda v=victim, e=event: _kill_mm2_node(runner, nodes, v, e,
                                                                                              args, alive), args.post)))
    finish(runner, out, events, by="key", caught_up=lambda: runner.destination_complete() and time.time() - max(
        runner.arrivals.last_arrival(tp) for tp in runner.tps()) > 3)  # every record there, nothing new for 3 s
    return out


def _kill_mm2_node(runner: Runner, nodes: list[Proc], victim: int, event: Event, args: argparse.Namespace,
                   alive: Callable[..., None]) -> float:
    """Kill one MM2 node -9; until every partition flows again (or the delay + 2 min ran out)."""
    nodes[victim].kill()
    survivors = [n for n in nodes if n.alive()]
    limit = args.mm2_delay_s + 120
    time.sleep(5)
    deadline = last_say = time.monotonic()
    deadline += limit
    while not runner.flowing_since(time.time() - 1.0):
        if time.monotonic() > deadline:
            say(f"  not every partition flows again after {limit:.0f}s; ending the window")
            event.notes["gave_up_after_s"] = limit
            break
        alive(survivors, "a surviving")
        if time.monotonic() - last_say >= 15:
            last_say, now = time.monotonic(), time.time()
            stalled = sum(1 for tp in runner.tps() if runner.arrivals.last_arrival(tp) < now - PAUSED_S)
            say(f"  {now - event.t0:.0f}s after the kill: {stalled} partition(s) without arrivals")
        time.sleep(0.5)
    return time.time()


# ----------------------------------------------------------------------------- report


def render(entry: dict[str, Any], history: list[dict[str, Any]] | None = None) -> str:
    m = entry["machine"]
    phases = entry["phases"]
    urep = phases.get("ureplicator", {})
    mm = phases.get("mirrormaker2")
    lines = [
        "## Rebalance stalls",
        "",
        f"`python -m bench.stalls{' --quick' if entry['mode'] == 'quick' else ''}`"
        f"{' (**quick mode**)' if entry['mode'] == 'quick' else ''} on {m['cpu_model']}, {m['cores']} cores, "
        f"{m['ram_bytes'] / 2**30:.0f} GiB RAM, Python {m['python']}, {m['java']}, Kafka {m['kafka_brokers']}, "
        f"{entry['date'][:10]}; {entry['elapsed_s'] / 60:.1f} min. Load average at start "
        f"{fmt_load(entry['load_at_start'])}, at end {fmt_load(entry['load_at_end'])} ({load_note(entry)}).",
        "",
        f"Continuous load of {entry['setup']['rate']:,} records/s on a 16-partition topic (a second topic added "
        "by the first event gets the same rate plus a 10 s backlog). ureplicator: two controllers, two workers, "
        "every setting at its default (ZooKeeper session 10 s, commit interval 5 s). *Gap* = longest time a "
        "partition received nothing at a destination consumer, from 0.5 s before the event until the system "
        "settled plus a few seconds; *moved* partitions changed `applied_by` (`GET /topics/<t>`); "
        f"for MirrorMaker 2, which has no such map, *moved* means paused > {PAUSED_S:.0f} s. "
        "*Duplicates* are re-arrivals of an already delivered source record during the event; *lost* is "
        "counted once over the whole run (source log vs destination, exact per partition). "
        "*Generations* = assignment generations the leader wrote during the event. MirrorMaker 2: dedicated mode, "
        f"{(mm or {}).get('nodes', 3)} nodes (KIP-710 internal REST on), `tasks.max=4`, the throughput "
        "benchmark's producer settings, other settings at their defaults (`offset.flush.interval.ms` 60 s, "
        "Connect session 10 s).",
        "",
        "| system | event | moved | unmoved: longest gap | moved: longest gap | moved flow again after | "
        "settled after | generations | duplicates |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    shown = [p for p in (urep, phases.get("ureplicator-coordinator"), mm) if p]
    for phase in shown:
        label = _label(phase)
        if "baseline" in phase:
            lines.append(f"| {label} | *baseline ({phase['baseline']['window_s']:.0f} s, no event)* | – | "
                         f"{phase['baseline']['max_gap_s']:.2f} s | – | – | – | – | – |")
        for e in phase.get("events", []):
            notes, extra = e.get("notes", {}), ""
            if e.get("new_topic_first_record_s") is not None:
                extra = (f" (new topic: first record {e['new_topic_first_record_s']:.1f} s, backlog mirrored "
                         f"{_fmt_s(e.get('new_topic_backlog_mirrored_s'))})")
            if e.get("new_leader_after_s") is not None:
                extra = f" (standby led after {e['new_leader_after_s']:.1f} s)"
            if e["name"] == SLOW_COORDINATOR:
                extra = (f" (source coordinator hung {notes.get('hang_s', 0):.1f} s, w3 killed -9; the acquisition "
                         f"began {notes.get('acquiring_after_s', 0):.1f} s in)")
            name = f"*{e['name']} (recovery)*" if notes.get("recovery") else e["name"]
            generations = e.get("generations_written")
            lines.append(
                f"| {label} | {name}{extra} | {e['moved']}/{e['partitions']} | {e['unmoved_max_gap_s']:.2f} s | "
                f"{_fmt_s(e['moved_max_gap_s'] if e['moved'] else None)} | "
                f"{_fmt_s(e['moved_flowing_after_s'] if e['moved'] else None)} | "
                f"{_fmt_s(e.get('settled_after_s'))} | {'–' if generations is None else generations} | "
                f"{e.get('duplicates', 0):,} |")
    lines.append("")
    for phase in [p for p in shown if "comparison" in p]:
        totals = {k: sum(c[k] for c in phase["comparison"].values()) for k in ("records", "lost", "duplicated")}
        lines.append(f"{_label(phase)}, whole run: {totals['records']:,} source records, **lost "
                     f"{totals['lost']:,}**, duplicated {totals['duplicated']:,}.")
    if mm is None:
        lines += ["", f"MirrorMaker 2 was not measured in this run ({entry.get('mm2_skipped', 'skipped')})."]
    lines += ["", "**Analysis.**", ""] + [f"- {line}" for line in analysis(entry)]
    if history:
        lines += ["", "Other runs in `bench/results/stalls-*.json` (same script; the machine's load varied):", ""]
        lines += [f"- {line}" for line in _history(history)]
    return "\n".join(lines)


def _label(phase: dict[str, Any]) -> str:
    if phase["system"] != "ureplicator":
        return "MirrorMaker 2"
    return "ureplicator, source through kproxy" if phase.get("source_via") else "ureplicator"


def _history(entries: list[dict[str, Any]]) -> list[str]:
    out = []
    for h in entries:
        phases = h.get("phases", {})
        events = phases.get("ureplicator", {}).get("events", [])
        planned = [e for e in events if e["name"] in ("add worker", "blacklist worker", "SIGTERM worker",
                                                        "whitelist worker", "restart worker")]
        parts = [f"ureplicator planned moves: up to {max(e.get('generations_written') or 0 for e in planned)} "
                 f"generations in one event, {sum(e.get('duplicates', 0) for e in planned):,} duplicates"
                 ] if planned else []
        parts += [f"dead worker's partitions back after {e['moved_flowing_after_s']:.1f} s" for e in events
                  if e["name"] == "kill -9 worker"]
        parts += [f"slow coordinator: unmoved partitions' longest gap {e['unmoved_max_gap_s']:.2f} s"
                  for e in phases.get("ureplicator-coordinator", {}).get("events", [])]
        for e in phases.get("mirrormaker2", {}).get("events", []):
            if e["name"] == "add topic":
                parts.append(f"MM2 new topic: existing partitions' longest gap "
                             f"{max(e['unmoved_max_gap_s'], e['moved_max_gap_s']):.1f} s ({e['all_paused']} paused > "
                             f"{PAUSED_S:.0f} s)")
            elif e["name"].startswith("kill -9 worker"):
                role = e.get("notes", {}).get("victim_role")
                delay = phases["mirrormaker2"].get("scheduled_rebalance_max_delay_ms", 300000) / 1000
                if role is None:  # runs before the role was recorded
                    role = ("node (role not recorded; back before the delay, so the group leader)"
                            if e["moved_flowing_after_s"] < delay else "node (role not recorded)")
                else:
                    role = f"{role} node"
                parts.append(f"MM2 {role} killed: {e['moved']} partitions back after "
                             f"{e['moved_flowing_after_s']:.0f} s")
        parts.append(f"lost {sum(c['lost'] for p in phases.values() for c in p.get('comparison', {}).values())}")
        out.append(f"{h['date'][:16].replace('T', ' ')} UTC ({h['mode']}): " + "; ".join(parts) + ".")
    return out


def analysis(entry: dict[str, Any]) -> list[str]:
    out = []
    urep = entry["phases"].get("ureplicator", {})
    mm = entry["phases"].get("mirrormaker2")
    events = {e["name"]: e for e in urep.get("events", [])}
    base = urep.get("baseline", {}).get("max_gap_s", 0.0)
    planned = [events[n] for n in ("add topic", "add worker", "blacklist worker", "SIGTERM worker") if n in events]
    if planned:
        worst = max(e["unmoved_max_gap_s"] for e in planned)
        out.append(f"Partitions that did not move never paused in ureplicator: their longest gap during a topic "
                   f"add, worker join, blacklist or SIGTERM was {worst:.2f} s against {base:.2f} s with no event at "
                   "all — the anchor is MirrorMaker 1, which stopped *every* partition for the whole consumer-group "
                   "rebalance (minutes on large groups).")
        moved = [e for e in planned if e["moved"]]
        if moved:
            out.append("Moved partitions flowed again "
                       + ", ".join(f"{e['moved_flowing_after_s']:.1f} s after the {e['name']}" for e in moved)
                       + " (the gated hand-off: the old owner stops, waits for acks, commits; then the new owner "
                       "starts from that offset).")
        hand_offs = planned + [e for e in urep.get("events", []) if e.get("notes", {}).get("recovery")]
        dups = sum(e.get("duplicates", 0) for e in hand_offs)
        if dups == 0:
            out.append("No planned move (join, blacklist, whitelist, SIGTERM, restart) duplicated a record.")
        else:
            where = ", ".join(f"{e['duplicates']} in {e['name']}" for e in hand_offs if e.get("duplicates"))
            out.append(f"Planned moves should duplicate nothing, yet {dups:,} duplicates arrived during them "
                       f"({where}). Two workers mirrored the same partition for a moment: the hand-off gate "
                       "withholds a partition only while another worker's *status* lists it, not while another "
                       "worker holds a *written* assignment it has not applied yet, so a partition re-planned twice "
                       "within one worker's apply latency (see the churn below) starts on two workers from the same "
                       "committed offset. Reported as a bug; nothing is lost.")
        churn = max((e.get("generations_written") or 0 for e in hand_offs), default=0)
        if churn > 5:
            out.append(f"Assignment churn: the leader wrote up to {churn} assignment generations during one event "
                       "where 2-3 suffice. Weight-based swaps run on every reconcile, reconciles run on every "
                       "status write, and each move disturbs the measured rates that decide the next one "
                       "(worst while a backlog is caught up). The *moved* counts include this churn; a join "
                       "should move about P/W partitions. Reported as a bug.")
    kill = events.get("kill -9 worker")
    if kill:
        out.append(f"A worker killed -9: its {kill['moved']} partitions flowed again after "
                   f"{kill['moved_flowing_after_s']:.1f} s — the 10 s ZooKeeper session timeout plus a reconcile — "
                   f"with {kill.get('duplicates', 0):,} duplicates (records mirrored after its last commit; the "
                   "commit interval is 5 s). Original uReplicator waits 120 s before moving a dead worker's "
                   f"partitions; the others kept flowing (longest gap {kill['unmoved_max_gap_s']:.2f} s).")
    leader = events.get("kill -9 leader controller")
    if leader:
        out.append(f"Killing the leading controller moved nothing and paused nothing (longest gap "
                   f"{leader['unmoved_max_gap_s']:.2f} s); the standby led after "
                   f"{leader.get('new_leader_after_s', 0):.1f} s. Workers do not need a leader to keep mirroring.")
    out += _coordinator_analysis(entry["phases"].get("ureplicator-coordinator"))
    if mm:
        mm_events = {e["name"]: e for e in mm.get("events", [])}
        add = mm_events.get("add topic")
        if add:
            longest = max(add["unmoved_max_gap_s"], add["moved_max_gap_s"])
            base_mm = mm.get("baseline", {}).get("max_gap_s", 0.0)
            urep_add = events.get("add topic")
            line = (f"MirrorMaker 2, new topic: the existing partitions' longest gap was {longest:.1f} s against "
                    f"{base_mm:.2f} s in its baseline ({add['all_paused']} of {add['partitions']} paused > "
                    f"{PAUSED_S:.0f} s): every task is reconfigured and restarted when the partition list changes")
            if urep_add:
                line += (f"; ureplicator's unmoved partitions: {urep_add['unmoved_max_gap_s']:.1f} s against "
                         f"{base:.2f} s")
            first = add.get("new_topic_first_record_s")
            line += (". MM2 only notices a new topic through `refresh.topics.interval.seconds` (5 s here, default 10 "
                     "minutes)" + (f"; its first record arrived after {first:.1f} s" if first is not None else "")
                     + ".")
            out.append(line)
        delay = mm.get("scheduled_rebalance_max_delay_ms", 300000) / 1000
        which = "the default" if delay == 300 else "default 300 s, lowered for this run"
        for dead in [e for e in mm.get("events", []) if e["name"].startswith("kill -9 worker")]:
            role = dead.get("notes", {}).get("victim_role", "a")
            line = (f"MirrorMaker 2, {role} node killed -9: {dead['moved']} partitions stopped for up to "
                    f"{dead['moved_max_gap_s']:.0f} s (flowing again {dead['moved_flowing_after_s']:.0f} s after "
                    f"the kill; `scheduled.rebalance.max.delay.ms` = {delay:.0f} s, {which}); "
                    f"{dead.get('duplicates', 0):,} duplicates (a task restarts from the last offsets Connect "
                    "flushed).")
            if role == "follower":
                line += (" This is the anchor: a dead follower's tasks stay unassigned until the delay expires, "
                         "so the gap is the delay plus the session timeout.")
            elif role == "group leader":
                line += (" A dead group *leader* is the lucky case: its successor has no record of the lost "
                         "tasks and assigns them at the next rebalance.")
                if dead.get("duplicates", 0) > 100_000:
                    line += (" The large duplicate count is real but specific to this sequence: that node had taken "
                             "over the dead follower's task seconds earlier and caught up its 5-minute backlog, "
                             "whose offsets Connect had not flushed yet (`offset.flush.interval.ms` = 60 s), so the "
                             "backlog was mirrored a second time.")
            if kill:
                line += f" ureplicator moved a dead worker's partitions after {kill['moved_flowing_after_s']:.0f} s."
            out.append(line)
    comparisons = [c for name, phase in entry["phases"].items() if name.startswith("ureplicator")
                   for c in phase.get("comparison", {}).values()]
    if comparisons:
        lost = sum(c["lost"] for c in comparisons)
        out.append(f"Records lost by ureplicator over all events: {lost} (must be 0).")
    return out


def _coordinator_analysis(phase: dict[str, Any] | None) -> list[str]:
    event = next((e for e in (phase or {}).get("events", []) if e["name"] == SLOW_COORDINATOR), None)
    if phase is None or event is None:
        return []
    notes = event.get("notes", {})
    gap = event["unmoved_max_gap_s"]
    verdict = "within" if gap <= COORDINATOR_TARGET_S else "**over**"
    held = ", ".join(f"{name} x{n}" for name, n in notes.get("held_requests", {}).items()) or "none"
    line = (f"Slow coordinator during an acquisition (a pipeline of its own, every source client through "
            f"`devtools.kproxy`, which withheld the source's group-coordinator requests for "
            f"{notes.get('hang_s', 0):.1f} s: {held}; fetches and produces flowed): the partitions that did not "
            f"move kept flowing on the very workers that were acquiring — longest gap {gap:.2f} s, {verdict} "
            f"the {COORDINATOR_TARGET_S} s target, against {phase.get('baseline', {}).get('max_gap_s', 0):.2f} s "
            "in its baseline. The acquisitions waited for the coordinator (a committed-offsets read, or a "
            "periodic commit ahead of it on the commit thread): the moved partitions flowed again "
            f"{event['moved_flowing_after_s']:.1f} s after the event, "
            f"{event['moved_flowing_after_s'] - notes.get('hang_s', 0):.1f} s after the hang ended (w3's session "
            "expiry came first).")
    if notes.get("held_data_requests"):
        line += (f" {notes['held_data_requests']} data request(s) waited behind a group request on a shared "
                 "connection, so part of the data path hung too.")
    logged = {k: v for k, v in event.get("worker_log_events", {}).items() if v}
    if logged:
        line += " The acquiring workers logged " + ", ".join(f"`{k}` x{v}" for k, v in logged.items()) + "."
    return [line]


def _fmt_s(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def load_note(entry: dict[str, Any]) -> str:
    """Whose load the load averages are: other jobs' when the machine was busy before the run, else the run's own."""
    cores = entry["machine"].get("cores") or 1
    before = entry["load_at_start"][0]
    if before > 0.5 * cores:
        return f"busy before the benchmark: other jobs shared the {cores} cores"
    return (f"quiet before the benchmark; the load during it is the benchmark's own: both brokers, ZooKeeper, "
            f"the load producer, the probe consumer and the mirroring processes on {cores} cores")


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.stalls", __doc__, "512m", render=True)
    cli.add_argument("--quick", action="store_true",
                     help="smoke run: shorter windows, MM2 rebalance delay 20 s (~3-4 min)")
    cli.add_argument("--rate", type=int, default=None, help="records/s per topic (default 3000; quick 2000)")
    cli.add_argument("--no-mm2", action="store_true", help="skip the MirrorMaker 2 phase")
    cli.add_argument("--only-mm2", action="store_true", help="skip the ureplicator phases (debugging)")
    cli.add_argument("--no-coordinator", action="store_true", help="skip the slow-coordinator phase")
    cli.add_argument("--coordinator-hold", type=float, default=None,
                     help="seconds the source's coordinator keeps hanging once the acquisition began (15; quick 8)")
    cli.add_argument("--mm2-delay-s", type=float, default=None,
                     help="MM2 scheduled.rebalance.max.delay.ms in seconds (default 300 = MM2's default; quick 20)")
    cli.add_argument("--baseline", type=float, default=None, help="seconds of quiet flow measured (8; quick 5)")
    cli.add_argument("--post", type=float, default=None, help="seconds observed after settling (3; quick 2)")
    cli.add_argument("--mm2-nodes", type=int, default=3,
                     help="MirrorMaker 2 nodes (3: a follower, then the group leader is killed)")
    cli.add_argument("--mm2-settle", type=float, default=None,
                     help="seconds MM2 runs before its baseline (20; quick 10)")
    args = cli.parse_args(argv)
    defaults(args, args.quick, rate=(3000, 2000), mm2_delay_s=(300.0, 20.0), baseline=(8.0, 5.0), post=(3.0, 2.0),
             mm2_settle=(20.0, 10.0), coordinator_hold=(15.0, 8.0))
    if rendered(args, "stalls-bench"):  # the other runs in bench/results/stalls-*.json are listed under it
        return 0

    def summary(entry: dict[str, Any]) -> int:
        """1 when ureplicator lost a record (MirrorMaker 2's losses are reported, not failed)."""
        lost: dict[str, int] = {}
        for name, phase in entry["phases"].items():
            lost[name] = sum(c["lost"] for c in phase.get("comparison", {}).values())
            for e in phase.get("events", []):
                print(f"{phase['system']:>12} {e['name']:<26} moved {e['moved']:>2}/{e['partitions']:<2} "
                      f"unmoved gap {e['unmoved_max_gap_s']:6.2f}s  moved gap {e['moved_max_gap_s']:7.2f}s  "
                      f"flowing after {e['moved_flowing_after_s']:7.2f}s  dups {e.get('duplicates', 0):>6}")
        if urep_lost := sum(n for name, n in lost.items() if name.startswith("ureplicator")):
            say(f"ureplicator LOST {urep_lost} records")
            return 1
        say(f"records lost over the run (all systems): {sum(lost.values())}")
        return 0

    return run_and_record(lambda: run(args), section="stalls-bench", summary=summary, no_write=args.no_write)


def run(args: argparse.Namespace) -> dict[str, Any]:
    entry, stamp = new_entry("stalls", {
        "rate": args.rate, "partitions": PARTITIONS, "paused_threshold_s": PAUSED_S,
        "gap_window_opens_before_s": GAP_BEFORE_S, "baseline_s": args.baseline, "post_s": args.post,
        "ureplicator_config": "defaults (zookeeper.session_timeout_s=10, worker.commit_interval_s=5, "
                              "controller.reconcile_interval_s=5)",
        "coordinator_hold_s": None if args.no_coordinator else args.coordinator_hold,
        "broker_heap": args.broker_heap}, mode="quick" if args.quick else "full")
    entry["phases"] = {}
    wall = time.monotonic()
    say(f"stalls benchmark ({entry['mode']}) at {args.rate:,} records/s; load {load_line()}")
    with stage("stalls", args.broker_heap, stamp) as (services, root, workdir):
        if not args.only_mm2:
            with Runner(services, root, workdir, f"stl{stamp[-7:-1]}", Profile(args.rate)) as runner:
                entry["phases"]["ureplicator"] = ureplicator_phase(runner, stamp, args)
            if not args.no_coordinator:
                entry["phases"]["ureplicator-coordinator"] = coordinator_phase(services, root, workdir, stamp, args)
        if args.no_mm2:
            entry["mm2_skipped"] = "--no-mm2"
        else:
            try:
                jvm.classpath("mirrormaker")
            except jvm.JvmError as exc:
                entry["mm2_skipped"] = f"MirrorMaker 2 jars missing: {exc}"
                say(entry["mm2_skipped"])
        if "mm2_skipped" not in entry:
            with Runner(services, None, workdir, "mm2", Profile(args.rate), ident="key", stop_timeout_s=20) as runner:
                entry["phases"]["mirrormaker2"] = mm2_phase(runner, stamp, args)
    entry["elapsed_s"] = round(time.monotonic() - wall, 1)
    entry["load_at_end"] = load_average()
    return entry


if __name__ == "__main__":
    sys.exit(main())
