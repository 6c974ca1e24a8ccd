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
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import mm2
from bench.common import load_average
from bench.harness import TP, BenchError, load_line
from bench.recording import parser, rendered, run_and_record
from bench.render import table
from bench.scenario import (
    PARTITIONS,
    PAUSED_S,
    Entry,
    Measure,
    Profile,
    Runner,
    Scenario,
    Step,
    Window,
    compare_logs,
    defaults,
    measured_on,
    new_entry,
    stage,
)
from devtools import jvm, stack
from devtools.harness import Proc, create_topic, end_offsets, say, wait_for
from devtools.kproxy import KafkaProxy
from devtools.ports import free_port

GAP_BEFORE_S = 0.5  # the gap window opens this long before the event
COORDINATOR_TARGET_S = 0.5  # issue 25: the unmoved partitions' longest gap while a coordinator hangs
SLOW_COORDINATOR = "slow coordinator during an acquisition"
# What the worker logs when its coordinator calls fail or wait (worker/commits.py, handoff.py): counted per run.
_COORDINATOR_LOG_EVENTS = ("acquisition_retry", "committed_offsets_retry", "commit_failed", "commit_client_replaced",
                           "commit_timed_out", "release_commit_failed")
PLANNED_MOVES = ("add worker", "blacklist worker", "whitelist worker", "SIGTERM worker", "restart worker")


class Moves(Measure):
    """A stalls event's record: the longest gaps and worst latencies of the partitions it moved and of the others,
    when it settled and flowed again, the assignment generations it cost."""

    from_settled = True  # a moved partition flows again once its new owner applies it

    def __init__(self, system: str) -> None:
        self.system = system

    def before(self, runner: Runner, step: Step) -> tuple[list[str], dict[str, dict[int, str | None]], int | None]:
        """The topics flowing before the event, their owners and the newest generation (ureplicator)."""
        if self.system != "ureplicator":
            return list(runner.topics), {}, None
        return list(runner.topics), {t: runner.pipeline.owners(t) for t in runner.topics}, _generation(runner)

    def record(self, runner: Runner, step: Step, w: Window, before: Any) -> Entry:
        topics, owners, generation = before
        gaps = runner.gaps(w.t0, w.t1, GAP_BEFORE_S, runner.tps(topics))
        if owners:
            after = {t: runner.pipeline.owners(t) for t in topics}
            moved = {(t, p) for t, was in owners.items() for p, worker in was.items() if after[t].get(p) != worker}
        else:  # MM2 does not say who applies a partition: class partitions by whether they paused
            moved = {tp for tp, (gap, _) in gaps.items() if gap > PAUSED_S}
        split = {"unmoved": [tp for tp in gaps if tp not in moved], "moved": [tp for tp in gaps if tp in moved]}
        r = {"name": step.name, "system": self.system, "notes": w.notes,
             "classified_by": "applied_by" if owners else "gap", "partitions": len(gaps),
             "moved": len(split["moved"]), "moved_partitions": [f"{t}:{p}" for t, p in sorted(split["moved"])],
             "unmoved_paused": sum(1 for tp in split["unmoved"] if gaps[tp][0] > PAUSED_S),
             "moved_flowing_after_s": round(max((gaps[tp][1] - w.t0 for tp in split["moved"]), default=0.0), 3),
             "all_paused": sum(1 for g, _ in gaps.values() if g > PAUSED_S), "window_s": round(w.t1 - w.t0, 2),
             "settled_after_s": round(w.settled - w.t0, 2)}
        for label, tps in split.items():  # the gaps, and the latency a consumer felt
            r[f"{label}_max_gap_s"] = round(max((gaps[tp][0] for tp in tps), default=0.0), 3)
            logs = [runner.arrivals.logs[tp] for tp in tps]
            r[f"{label}_max_latency_s"] = round(max([0.0, *(
                lat for log in logs for a, lat in zip(log.arrivals, log.latency_ms, strict=True)
                if w.t0 <= a <= w.t1)]) / 1000, 3)
        if self.system == "ureplicator":
            r["flowing_after_s"] = round(w.flowing - w.t0, 2)
            if generation is not None and (now := _generation(runner)) is not None:
                r["generations_written"] = now - generation
        say(f"  {r['moved']}/{r['partitions']} moved; longest gap: unmoved {r['unmoved_max_gap_s']:.2f}s, moved "
            f"{r['moved_max_gap_s']:.2f}s, flowing again {r['moved_flowing_after_s']:.2f}s after the event")
        return r

    def duplicates(self, record: Entry, t0: float, found: list[tuple[float, TP]]) -> None:
        """How many, on which partitions, and how long after the event the first one arrived."""
        per_partition = Counter(f"{topic}:{p}" for _, (topic, p) in found)
        record.update(duplicates=len(found), duplicate_partitions=dict(per_partition))
        if found:
            record["duplicates_first_at_s"] = round(min(t for t, _ in found) - t0, 2)


def measure_phase(runner: Runner, out: Entry, args: argparse.Namespace, by: str = "urep",
                  done: Callable[[], bool] | None = None, prepare: Callable[[], object] = lambda: None) -> Entry:
    """The quiet baseline (what the events are compared with), ``prepare``, the events, then: stop producing, wait
    for the mirror to catch up, compare the logs exactly."""
    t0 = time.time()
    time.sleep(args.baseline)
    t1 = time.time()
    gaps = sorted(g for g, _ in runner.gaps(t0, t1, 0.0).values())
    out["baseline"] = {"window_s": round(t1 - t0, 1), "max_gap_s": round(max(gaps, default=0.0), 3),
                       "median_partition_max_gap_s": round(gaps[len(gaps) // 2], 3) if gaps else 0.0}
    say(f"  baseline: longest gap of any partition {out['baseline']['max_gap_s']:.2f}s")
    prepare()
    runner.execute()
    say("stopping the load; waiting for the mirror to catch up")
    results, error = runner.finish(120 if done is None else 180, done=done)
    out["load"] = [{"sent": r.sent, "acked": r.acked, "failed": r.failed} for r in results]
    if error is not None:
        out["catch_up_error"] = error
    out["comparison"] = {topic: compare_logs(runner.services, topic, by=by)[2].to_json() for topic in runner.topics}
    say(f"  lost {sum(c['lost'] for c in out['comparison'].values())} records")
    if by == "urep":
        out["bad_headers"] = runner.arrivals.bad_headers
    out["events"] = runner.steps
    return out


def new_topic_timing(record: Entry, t0: float, runner: Runner, topic: str) -> None:
    """When the new topic's first record, and its whole backlog (10 s of load), reached the destination."""
    times = sorted(a for (t, _), log in runner.arrivals.logs.items() if t == topic for a in log.arrivals)
    preload = int(runner.profile.rate * 10)
    record["new_topic_first_record_s"] = round(times[0] - t0, 2) if times else None
    record["new_topic_backlog_mirrored_s"] = round(times[preload - 1] - t0, 2) if len(times) >= preload else None


def backlogged_topic(runner: Runner, topic: str, tag: int) -> int:
    """A new source topic that already holds 10 s of load, under load; the records written."""
    create_topic(runner.services["source"], topic, PARTITIONS)
    preload = int(runner.profile.rate * 10)
    load = runner.load(topic, tag, preload=preload)
    wait_for(lambda: load.acked >= preload, 60, "backlog of the new topic written")
    return load.acked


# ----------------------------------------------------------------------------- ureplicator


def _validation_rows(runner: Runner) -> list[Entry] | None:
    """``GET /validation``'s worker rows; None when no controller answers."""
    status, body = runner.pipeline.api("GET", "/validation")
    return body.get("workers", []) if status == 200 and isinstance(body, dict) else None


def _generation(runner: Runner) -> int | None:
    """The newest assignment generation written."""
    rows = _validation_rows(runner)
    return None if rows is None else max((row.get("desired_generation") or 0 for row in rows), default=0)


def settled_and(runner: Runner, condition: Callable[[], bool]) -> Callable[[], bool]:
    """An event's recovery: ``condition`` holds and the assignment settled."""
    return lambda: condition() and runner.pipeline.settled(runner.topics)


def script(runner: Runner, topic_b: str) -> list[Step]:
    """The ureplicator phase's events, in order (docs/benchmarks.md says why each)."""
    pipeline, root = runner.pipeline, runner.root
    takeover: dict[str, float] = {}

    def has_w3(present: bool) -> Callable[[], bool]:
        return settled_and(runner, lambda: ("w3" in {w for t in runner.topics for w in pipeline.owners(t).values()})
                           == present)

    def add_topic(w: Window) -> None:
        runner.mirror(topic_b)
        w.notes["backlog_records"] = runner.loads[-1].acked

    def blacklist(w: Window) -> None:
        status, body = pipeline.api("DELETE", "/instances/w3")
        if status != 200:
            raise BenchError(f"DELETE /instances/w3 answered {status}: {body}")

    def zookeeper_restart(w: Window) -> None:
        assert root is not None
        stack.stop_service(root, "zookeeper")
        time.sleep(2)
        stack.start_service(root, "zookeeper")
        w.notes["zookeeper_away_s"] = round(time.time() - w.t0, 2)

    has_leader = settled_and(runner, lambda: pipeline.leader() is not None)

    def kill_leader(w: Window) -> None:
        w.notes["killed"] = runner.leader()
        pipeline.controllers[w.notes["killed"]].kill()

    def new_leader() -> bool:
        if led := pipeline.leader() is not None:
            takeover.setdefault("took_over_at", time.time())
        return led

    return [
        Step("add topic", add_topic, recovered=settled_and(runner, lambda: True),
             after=lambda w, r: new_topic_timing(r, w.t0, runner, topic_b)),
        Step("add worker", lambda w: pipeline.start_worker("w3"), recovered=has_w3(True)),
        Step("blacklist worker", blacklist, recovered=has_w3(False)),
        Step("whitelist worker", lambda w: pipeline.api("POST", "/instances/w3"), recovered=has_w3(True),
             recovery=True),
        Step("SIGTERM worker", lambda w: pipeline.workers["w3"].popen.terminate(),
             recovered=lambda: not pipeline.workers["w3"].alive() and has_w3(False)(),
             after=lambda w, r: w.notes.update(exit_status=pipeline.workers["w3"].popen.returncode)),
        Step("restart worker", lambda w: pipeline.start_worker("w3"), recovered=has_w3(True), recovery=True),
        Step("kill -9 worker", lambda w: pipeline.workers["w3"].kill(), recovered=has_w3(False)),
        # Away for less than the session: nothing moves, nothing should pause.
        *([Step("ZooKeeper restart", zookeeper_restart, recovered=has_leader)] if root is not None else []),
        Step("kill -9 leader controller", kill_leader, recovered=settled_and(runner, new_leader), timeout_s=60,
             after=lambda w, r: r.update(new_leader_after_s=round(takeover["took_over_at"] - w.t0, 2))),
    ]


def _log_events(workdir: Path, workers: tuple[str, ...]) -> dict[str, int]:
    """How often the workers logged each of the coordinator-related events (what an operator sees)."""
    logs = [workdir / f"{worker}.log" for worker in workers]
    text = "".join(log.read_text(errors="replace") for log in logs if log.exists())
    return {name: text.count(f'"event": "{name}"') for name in _COORDINATOR_LOG_EVENTS}


def coordinator_phase(services: dict[str, str], root: Path, workdir: Path, stamp: str,
                      args: argparse.Namespace) -> Entry:
    """The slow-coordinator event on a pipeline of its own whose source clients go through kproxy."""
    topic, folder = f"stl-{stamp}-coord", workdir / "coordinator"
    out: Entry = {"system": "ureplicator", "topics": [topic], "source_via": "devtools.kproxy",
                  "hold_after_acquiring_s": args.coordinator_hold}
    folder.mkdir(exist_ok=True)
    proxy = KafkaProxy(services["source"])

    def hang_while_acquiring(runner: Runner) -> list[Step]:
        def acquiring() -> bool:  # the leader wrote w1 or w2 a generation it has not applied yet
            return any(r.get("worker") in ("w1", "w2")
                       and (r.get("desired_generation") or 0) > (r.get("applied_generation") or 0)
                       for r in _validation_rows(runner) or [])

        def act(w: Window) -> None:
            proxy.hang()
            runner.pipeline.workers["w3"].kill()
            w.notes["killed"] = "w3"
            wait_for(acquiring, 90, "w1/w2 acquiring w3's partitions", 0.2)
            w.notes["acquiring_after_s"] = round(time.time() - w.t0, 2)
            time.sleep(args.coordinator_hold)  # the fault's length: the coordinator keeps hanging
            held = proxy.stats()
            proxy.release()
            w.notes.update(hang_s=round(time.time() - w.t0, 2), held_requests=held["held"],
                           held_data_requests=held["held_data_requests"], mixed_connections=held["mixed_connections"])
            say(f"  coordinator hung {w.notes['hang_s']:.1f}s; withheld {held['held']}")

        return [Step(SLOW_COORDINATOR, act, recovered=settled_and(
            runner, lambda: "w3" not in set(runner.pipeline.owners(topic).values())))]

    scenario = Scenario(Profile(args.rate, workers=("w1", "w2", "w3")), hang_while_acquiring, Moves("ureplicator"),
                        observe_s=args.post)
    with proxy, Runner(services, root, folder, f"stc{stamp[-7:-1]}", scenario) as runner:
        # Only the pipeline goes through the proxy; the load and the arrival probe talk to the brokers.
        runner.pipeline.services = {**services, "source": proxy.address}
        runner.start(topic)
        say(f"ureplicator, slow coordinator: 3 workers, source clients through kproxy {proxy.address}")
        try:
            measure_phase(runner, out, args)
        finally:
            proxy.release()  # whatever failed, the pipeline must be able to finish
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


def mm2_phase(services: dict[str, str], workdir: Path, stamp: str, args: argparse.Namespace) -> Entry:
    """MirrorMaker 2 in dedicated mode: 1. a new topic (with a 10 s backlog) matches the regex: for MM2, creating
    it is adding it; 2. a follower node killed -9: its tasks wait for scheduled.rebalance.max.delay.ms; 3. then the
    group leader: the new leader does not know the lost tasks and assigns them at once (after the session)."""
    topic_a, topic_b = f"stl-{stamp}-mm2-a", f"stl-{stamp}-mm2-b"
    delay_ms = int(args.mm2_delay_s * 1000)
    out: Entry = {"system": "mirrormaker2", "topics": [topic_a, topic_b], "tasks_max": 4, "nodes": args.mm2_nodes,
                  "refresh_topics_interval_s": 5, "scheduled_rebalance_max_delay_ms": delay_ms}
    nodes: list[Proc] = []
    urls: list[str] = []

    def alive(procs: list[Proc], which: str = "a") -> None:
        if not all(n.alive() for n in procs):
            raise BenchError(f"{which} MirrorMaker 2 node exited:\n" + "\n".join(n.tail() for n in procs))

    def add_topic(w: Window) -> None:
        w.notes["backlog_records"] = backlogged_topic(runner, topic_b, tag=12)
        wait_for(lambda: end_offsets(services["destination"], topic_b, PARTITIONS) is not None, 120,
                 "MirrorMaker 2 to create the new destination topic", 0.2)
        runner.watch(topic_b)
        w.settled = runner.wait_flowing(w.t0, 180, "every partition of both topics flowing")
        runner.wait_flowing(time.time(), 60, "flowing")

    def kill(w: Window, victim: int, notes: Entry) -> None:
        """Kill one node -9; until every partition flows again (or the delay + 2 min ran out)."""
        w.notes.update(notes)
        nodes[victim].kill()
        survivors, limit = [n for n in nodes if n.alive()], args.mm2_delay_s + 120
        time.sleep(5)
        deadline = time.monotonic() + limit
        while not runner.flowing_since(time.time() - 1.0):
            if time.monotonic() > deadline:
                say(f"  not every partition flows again after {limit:.0f}s; ending the window")
                w.notes["gave_up_after_s"] = limit
                break
            alive(survivors, "a surviving")
            time.sleep(0.5)
        w.settled = time.time()

    def events(_: Runner) -> Iterator[Step]:
        yield Step("add topic", add_topic, flowing=False, observe_s=max(args.post, 5.0),
                   after=lambda w, r: new_topic_timing(r, w.t0, runner, topic_b))
        for wanted in ("follower", "group leader"):
            live = [i for i, n in enumerate(nodes) if n.alive()]
            if len(live) < 2:
                break
            views = {i: _connect_view(workdir / f"mm2-node{i + 1}" / "mm2.log") for i in live}
            leader_url = next((u for u, _ in views.values() if u in urls and urls.index(u) in live), None)
            leader = urls.index(leader_url) if leader_url is not None else None
            followers = [i for i in live if i != leader]
            candidates = ([i for i in followers if views[i][1]] or followers) if wanted == "follower" else [
                i for i in live if i == leader]
            if not candidates:
                say(f"  no live {wanted} node to kill; skipped")
                continue
            victim, tasks = candidates[0], views[candidates[0]][1]
            say(f"mirrormaker2: kill -9 node {victim + 1} (the Connect group's {wanted}, tasks {tasks})")
            notes = {"victim_role": wanted, "victim_tasks": tasks, "leader_url": leader_url}
            yield Step(f"kill -9 worker ({wanted} node)", lambda w, v=victim, n=notes: kill(w, v, n), flowing=False)

    scenario = Scenario(Profile(args.rate), events, Moves("mirrormaker2"), observe_s=args.post)
    with Runner(services, None, workdir, "mm2", scenario, ident="key", stop_timeout_s=20) as runner:
        create_topic(services["source"], topic_a, PARTITIONS)
        runner.load(topic_a, tag=11)
        started = time.time()
        for index in range(1, args.mm2_nodes + 1):
            props = mm2.properties(f"s{stamp[-7:-1]}", services["source"], services["destination"],
                                   f"stl-{stamp}-mm2-.*")
            urls.append(f"http://127.0.0.1:{free_port()}")
            props.update({"tasks.max": 4, "refresh.topics.interval.seconds": 5,  # default 600: a new topic waits 10 min
                          # KIP-710: followers forward task configs to the leader; needed for more than one node.
                          "dedicated.mode.enable.internal.rest": "true", "listeners": urls[-1],
                          f"{mm2.DESTINATION}.scheduled.rebalance.max.delay.ms": delay_ms})
            folder = workdir / f"mm2-node{index}"
            nodes.append(runner.processes.spawn(f"mm2-node{index}", mm2.launch(folder, props), cwd=folder))
        say(f"mirrormaker2: {args.mm2_nodes} dedicated-mode nodes, tasks.max=4, {topic_a} x {PARTITIONS} at "
            f"{args.rate:,}/s; scheduled.rebalance.max.delay.ms={delay_ms}")
        wait_for(lambda: alive(nodes) or end_offsets(services["destination"], topic_a, PARTITIONS) is not None, 180,
                 "MirrorMaker 2 to create the destination topic", 0.5)
        runner.arrivals.start()
        runner.watch(topic_a)
        runner.wait_flowing(time.time(), 180, "MirrorMaker 2 flowing on every partition")
        out["first_flow_s"] = round(time.time() - started, 1)
        time.sleep(args.mm2_settle)  # every node joined: no start-up rebalance inside the baseline
        measure_phase(runner, out, args, by="key", done=lambda: runner.destination_complete() and time.time() - max(
            runner.arrivals.last_arrival(tp) for tp in runner.tps()) > 3)  # every record there, nothing new for 3 s
    return out


# ----------------------------------------------------------------------------- report


def _label(phase: Entry) -> str:
    if phase["system"] != "ureplicator":
        return "MirrorMaker 2"
    return "ureplicator, source through kproxy" if phase.get("source_via") else "ureplicator"


def _fmt(value: float | None, key: str = "_s") -> str:
    """A cell: seconds for a ``*_s`` key, else a count; "–" for nothing."""
    if value is None:
        return "–"
    return f"{value:.2f} s" if key.endswith("_s") else f"{value:,}"


def _event(e: Entry) -> str:
    """The event's name with what happened in it (a new topic, a new leader, the coordinator hang)."""
    notes, extra = e.get("notes", {}), ""
    if e.get("new_topic_first_record_s") is not None:
        extra = (f" (new topic: first record {e['new_topic_first_record_s']:.1f} s, backlog mirrored "
                 f"{_fmt(e.get('new_topic_backlog_mirrored_s'))})")
    if e.get("new_leader_after_s") is not None:
        extra = f" (standby led after {e['new_leader_after_s']:.1f} s)"
    if e["name"] == SLOW_COORDINATOR:
        extra = (f" (source coordinator hung {notes.get('hang_s', 0):.1f} s, w3 killed -9; the acquisition "
                 f"began {notes.get('acquiring_after_s', 0):.1f} s in)")
    return (f"*{e['name']} (recovery)*" if notes.get("recovery") else e["name"]) + extra


COLUMNS = (  # (header, key) of an event's numbers; a moved-partitions column shows "–" when none moved
    ("unmoved: longest gap", "unmoved_max_gap_s"),
    ("moved: longest gap", "moved_max_gap_s"),
    ("moved flow again after", "moved_flowing_after_s"),
    ("settled after", "settled_after_s"),
    ("generations", "generations_written"),
    ("duplicates", "duplicates"),
)
HISTORY = (  # (header, phase, events (name prefixes), keys, aggregate) of another stored run
    ("planned moves: most generations", "ureplicator", PLANNED_MOVES, ("generations_written",), max),
    ("planned moves: duplicates", "ureplicator", PLANNED_MOVES, ("duplicates",), sum),
    ("killed worker's partitions back after", "ureplicator", ("kill -9 worker",), ("moved_flowing_after_s",), max),
    ("slow coordinator: unmoved gap", "ureplicator-coordinator", (SLOW_COORDINATOR,), ("unmoved_max_gap_s",), max),
    ("MM2 new topic: longest gap", "mirrormaker2", ("add topic",), ("unmoved_max_gap_s", "moved_max_gap_s"), max),
    ("MM2 new topic: paused > 2 s", "mirrormaker2", ("add topic",), ("all_paused",), max),
    ("MM2 node killed: back after (fastest)", "mirrormaker2", ("kill -9 worker",), ("moved_flowing_after_s",), min),
    ("(slowest)", "mirrormaker2", ("kill -9 worker",), ("moved_flowing_after_s",), max),
)


def _cell(e: Entry, key: str) -> str:
    value = e.get(key, 0 if key == "duplicates" else None)
    return "–" if key.startswith("moved_") and not e["moved"] else _fmt(value, key)


def _aggregate(entry: Entry, phase: str, names: tuple[str, ...], keys: tuple[str, ...],
               aggregate: Callable[[list[Any]], Any]) -> str:
    values = [v for e in entry["phases"].get(phase, {}).get("events", []) if e["name"].startswith(names)
              for k in keys if (v := e.get(k)) is not None]
    return _fmt(aggregate(values), keys[0]) if values else "–"


def _lost(entry: Entry, systems: str = "ureplicator") -> int:
    """Records lost over the phases of ``systems`` ("": every system)."""
    return sum(c["lost"] for name, phase in entry["phases"].items() if name.startswith(systems)
               for c in phase.get("comparison", {}).values())


def headline(entry: Entry) -> list[str]:
    """The findings, the least favourable reading for ureplicator first; the method is under Methods."""
    phases = entry["phases"]
    ours = [e for name, p in phases.items() if name.startswith("ureplicator") for e in p.get("events", [])]
    out = [f"ureplicator lost {_lost(entry):,} records over all events (must be 0)."]
    if ours:
        gap = max(ours, key=lambda e: e["unmoved_max_gap_s"])
        dup = max(ours, key=lambda e: e.get("duplicates", 0))
        out.append(f"ureplicator's worst pause of partitions that did not move: {gap['unmoved_max_gap_s']:.2f} s "
                   f"({gap['name']}; {phases['ureplicator'].get('baseline', {}).get('max_gap_s', 0.0):.2f} s in the "
                   f"baseline); most duplicates in one event: {dup.get('duplicates', 0):,} ({dup['name']}).")
    mine = {e["name"]: e for e in phases.get("ureplicator", {}).get("events", [])}
    for e in phases.get("mirrormaker2", {}).get("events", []):
        if ours_e := mine.get(e["name"].split(" (")[0]):
            wins = [f"{header} {_cell(e, key)} against {_cell(ours_e, key)}" for header, key in COLUMNS
                    if e.get(key) is not None and ours_e.get(key) is not None and e[key] < ours_e[key]]
            out += [f"MirrorMaker 2 did better in *{e['name']}*: {'; '.join(wins)}."] if wins else []
    coordinator = next((e for e in phases.get("ureplicator-coordinator", {}).get("events", [])
                        if e["name"] == SLOW_COORDINATOR), None)
    if coordinator:
        notes, gap = coordinator.get("notes", {}), coordinator["unmoved_max_gap_s"]
        held = ", ".join(f"{name} x{n}" for name, n in notes.get("held_requests", {}).items()) or "none"
        logged = ", ".join(f"`{k}` x{v}" for k, v in coordinator.get("worker_log_events", {}).items() if v)
        out.append(f"Slow coordinator: the unmoved partitions' longest gap {gap:.2f} s, "
                   f"{'within' if gap <= COORDINATOR_TARGET_S else '**over**'} the {COORDINATOR_TARGET_S} s target; "
                   f"the moved ones flowed again {coordinator['moved_flowing_after_s'] - notes.get('hang_s', 0):.1f} s "
                   f"after the hang ended (withheld: {held}; {notes.get('held_data_requests', 0)} data request(s) "
                   f"behind them; the workers logged {logged or 'none of the coordinator events'}).")
    return [f"- {line}" for line in out]


def render(entry: Entry, history: list[Entry] | None = None) -> str:
    phases, quick = entry["phases"], entry["mode"] == "quick"
    shown = [p for p in (phases.get("ureplicator"), phases.get("ureplicator-coordinator"),
                         phases.get("mirrormaker2")) if p]
    rows = []
    for phase in shown:
        if b := phase.get("baseline"):
            rows.append([_label(phase), f"*baseline ({b['window_s']:.0f} s, no event)*", "–", _fmt(b["max_gap_s"]),
                         *["–"] * (len(COLUMNS) - 1)])
        rows += [[_label(phase), _event(e), f"{e['moved']}/{e['partitions']}", *(_cell(e, key) for _, key in COLUMNS)]
                 for e in phase.get("events", [])]
    mm = phases.get("mirrormaker2")
    lines = [
        "## Rebalance stalls",
        "",
        f"`python -m bench.stalls{' --quick' if quick else ''}`{' (**quick mode**)' if quick else ''} "
        f"{measured_on(entry)} ({load_note(entry)}). {entry['setup']['rate']:,} records/s per topic"
        + (f"; MirrorMaker 2 `scheduled.rebalance.max.delay.ms` = "
           f"{mm.get('scheduled_rebalance_max_delay_ms', 300000) / 1000:.0f} s" if mm else "")
        + "; the columns are explained under Methods.",
        "",
        *headline(entry),
        "",
        *table(["system", "event", "moved", *(h for h, _ in COLUMNS)], rows, "ll" + "r" * (len(COLUMNS) + 1)),
        "",
    ]
    for phase in [p for p in shown if "comparison" in p]:
        totals = {k: sum(c[k] for c in phase["comparison"].values()) for k in ("records", "lost", "duplicated")}
        lines.append(f"{_label(phase)}, whole run: {totals['records']:,} source records, **lost "
                     f"{totals['lost']:,}**, duplicated {totals['duplicated']:,}.")
    if mm is None:
        lines += ["", f"MirrorMaker 2 was not measured in this run ({entry.get('mm2_skipped', 'skipped')})."]
    if history:
        lines += ["", "Other runs in `bench/results/stalls-*.json` (same script; the machine's load varied):", "",
                  *table(["run", *(spec[0] for spec in HISTORY), "lost (all systems)"], [[
                      f"{h['date'][:16].replace('T', ' ')} UTC ({h['mode']})",
                      *(_aggregate(h, *spec[1:]) for spec in HISTORY), _lost(h, "")] for h in history],
                         "l" + "r" * (len(HISTORY) + 1))]
    return "\n".join(lines)


def load_note(entry: Entry) -> str:
    """Whose load the load averages are: other jobs' when the machine was busy before the run, else the run's own."""
    cores = entry["machine"].get("cores") or 1
    if entry["load_at_start"][0] > 0.5 * cores:
        return f"busy before the benchmark: other jobs shared the {cores} cores"
    return (f"quiet before the benchmark; the load during it is the benchmark's own: both brokers, ZooKeeper, "
            f"the load producer, the probe consumer and the mirroring processes on {cores} cores")


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.stalls", __doc__, "512m", render=True)
    cli.add_argument("--quick", action="store_true",
                     help="smoke run: shorter windows, MM2 rebalance delay 20 s (~3-4 min)")
    cli.add_argument("--rate", type=int, default=None, help="records/s per topic (default 3000; quick 2000)")
    cli.add_argument("--no-mm2", action="store_true", help="skip the MirrorMaker 2 phase")
    cli.add_argument("--no-coordinator", action="store_true", help="skip the slow-coordinator phase")
    cli.add_argument("--coordinator-hold", type=float, default=None,
                     help="seconds the source's coordinator keeps hanging once the acquisition began (15; quick 8)")
    cli.add_argument("--mm2-delay-s", type=float, default=None,
                     help="MM2 scheduled.rebalance.max.delay.ms in seconds (default 300 = MM2's default; quick 20)")
    cli.add_argument("--mm2-nodes", type=int, default=3,
                     help="MirrorMaker 2 nodes (3: a follower, then the group leader is killed)")
    args = cli.parse_args(argv)
    # The quiet baseline, the seconds observed after settling, MM2's start-up before its baseline: (full, quick).
    defaults(args, args.quick, rate=(3000, 2000), mm2_delay_s=(300.0, 20.0), baseline=(8.0, 5.0), post=(3.0, 2.0),
             mm2_settle=(20.0, 10.0), coordinator_hold=(15.0, 8.0))
    if rendered(args, "stalls-bench"):  # the other runs in bench/results/stalls-*.json are listed under it
        return 0

    def summary(entry: Entry) -> int:
        """1 when ureplicator lost a record (MirrorMaker 2's losses are reported, not failed)."""
        print(render(entry))
        return 1 if _lost(entry) else 0

    return run_and_record(lambda: run(args), section="stalls-bench", summary=summary, no_write=args.no_write)


def run(args: argparse.Namespace) -> Entry:
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
        topic_a, topic_b = f"stl-{stamp}-a", f"stl-{stamp}-b"
        scenario = Scenario(Profile(args.rate), lambda runner: script(runner, topic_b), Moves("ureplicator"),
                            observe_s=args.post)
        with Runner(services, root, workdir, f"stl{stamp[-7:-1]}", scenario) as runner:
            runner.start(topic_a)
            say(f"ureplicator: 2 controllers, 2 workers, {topic_a} x {PARTITIONS} (logs in {runner.workdir})")
            out = {"system": "ureplicator", "topics": [topic_a, topic_b]}
            entry["phases"]["ureplicator"] = measure_phase(
                runner, out, args, prepare=lambda: backlogged_topic(runner, topic_b, tag=2))
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
            entry["phases"]["mirrormaker2"] = mm2_phase(services, workdir, stamp, args)
    entry["elapsed_s"] = round(time.monotonic() - wall, 1)
    entry["load_at_end"] = load_average()
    return entry


if __name__ == "__main__":
    sys.exit(main())
