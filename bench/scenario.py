"""The one runner of the fault benchmarks (stalls, drill, soak): a scenario is data, this executes it.

docs/benchmarks.md ("Methods") describes the runner; each benchmark says only *what* happens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.common import REPO, fmt_load, load_average, machine_info, repo_relative
from bench.harness import (
    KEY,
    TAG_SHIFT,
    TP,
    Arrivals,
    BenchError,
    Comparison,
    Flow,
    Load,
    LoadResult,
    LogRead,
    Pipeline,
    compare,
    load_line,
    longest_gap,
    read_log,
)
from devtools import jvm, stack
from devtools.harness import Processes, bench_dir, caught_up, create_topic, own_stack, say, stalled_ends, wait_for

PARTITIONS = 16
PAUSED_S = 2.0  # a partition with no arrival for longer than this counts as paused
Entry = dict[str, Any]


@dataclass(frozen=True)
class Profile:
    """The pipeline and the load a scenario runs under."""

    rate: int  # records/s per topic
    controllers: tuple[str, ...] = ("c1", "c2")
    workers: tuple[str, ...] = ("w1", "w2")
    tag: int = 1  # the load keys' run tag (the acknowledged-records check decodes it)
    track_acked: bool = False  # keep the key of every record the source acknowledged
    overrides: dict[str, dict[str, Any]] | None = None  # pipeline config sections
    isolation: str = "read_uncommitted"  # of the destination consumer and the log comparison


@dataclass
class Window:
    """When a step acted, was repaired, answered, recovered, flowed again and closed (epoch seconds); ``act``
    may set ``settled`` itself (it waited for the recovery its own way)."""

    t0: float
    notes: Entry = field(default_factory=dict)  # recorded with the step
    hit: Any = None  # what ``act`` hit (a worker, a controller, a service)
    restart: float = 0.0
    ready: float = 0.0
    settled: float = 0.0
    flowing: float = 0.0
    t1: float = 0.0


@dataclass(frozen=True)
class Step:
    """One fault: ``act`` breaks something, ``undo`` repairs it after ``down_s``; then the runner waits for
    ``recovered`` and (``flowing``) every partition flowing, and observes ``observe_s`` (default: the scenario's).
    ``recovery`` marks the undoing of the previous step; ``after`` adds measures to the record."""

    name: str
    act: Callable[[Window], Any]
    undo: Callable[[], Any] | None = None
    down_s: float = 0.0
    recovered: Callable[[], bool] | None = None
    timeout_s: float = 120
    flowing: bool = True
    observe_s: float | None = None
    recovery: bool = False
    after: Callable[[Window, Entry], None] | None = None


class Measure:
    """A step's record: the outage (drill, soak); ``from_settled``: flowing again counts from the recovery."""

    from_settled = False

    def before(self, runner: Runner, step: Step) -> Any:
        """What the record needs from before the step acted."""
        return None

    def record(self, runner: Runner, step: Step, w: Window, before: Any) -> Entry:
        gaps = list(runner.gaps(w.t0, w.t1, 0.5).values())
        record = {
            "name": step.name, "load_before": w.notes["load_before"], "killed": w.hit,
            "down_s": round(w.restart - w.t0, 2), "restart_took_s": round(w.ready - w.restart, 2),
            "flowing_after_ready_s": round(w.flowing - w.ready, 2), "flowing_after_restart_s": round(
                w.flowing - w.restart, 2), "flowing_after_kill_s": round(w.flowing - w.t0, 2),
            "max_gap_s": round(max(g for g, _ in gaps), 2),
            "partitions_paused": sum(1 for g, _ in gaps if g > PAUSED_S),
            "t0": w.t0, "t1": w.t1, "load_after": w.notes["load_after"],
        }
        say(f"  down {record['down_s']:.1f}s; restart took {record['restart_took_s']:.1f}s; flowing "
            f"{record['flowing_after_ready_s']:.1f}s after it was back; longest gap {record['max_gap_s']:.1f}s")
        return record

    def duplicates(self, record: Entry, t0: float, found: list[tuple[float, TP]]) -> None:
        """The re-arrivals from the step's start until the next step's."""
        record["duplicates"] = len(found)


@dataclass(frozen=True)
class Scenario:
    """The profile, the fault script (given the runner; a generator may draw it at random), the measure, the
    steady load before the first step, between steps and after the last, and the time observed after each."""

    profile: Profile
    script: Callable[[Runner], Iterable[Step]]
    measure: Measure = Measure()
    warm_s: float = 0.0
    pause: Callable[[], float] = lambda: 0.0
    tail_s: float = 0.0
    observe_s: float = 2.0


def new_entry(benchmark: str, setup: Entry, **extra: Any) -> tuple[Entry, str]:
    """A results entry's common head (date, machine, load at start) and the run's timestamp."""
    now = datetime.now(timezone.utc)
    entry = {"benchmark": benchmark, "date": now.isoformat(timespec="seconds"), **extra,
             "machine": machine_info(), "setup": setup, "load_at_start": load_average()}
    return entry, now.strftime("%Y%m%dT%H%M%SZ")


def defaults(args: argparse.Namespace, quick: bool, **values: tuple[Any, Any]) -> None:
    """Fill every option left at None with its (full, quick) default."""
    for name, (full, smoke) in values.items():
        if getattr(args, name, None) is None:
            setattr(args, name, smoke if quick else full)


def measured_on(entry: Entry) -> str:
    """The machine, date, duration and load of a run, for its section's first lines."""
    m = entry["machine"]
    return (f"on {m['cpu_model']}, {m['cores']} cores, {m['ram_bytes'] / 2**30:.0f} GiB RAM, Python {m['python']}, "
            f"{m['java']}, Kafka {m['kafka_brokers']}, {entry['date'][:10]}; {entry['elapsed_s'] / 60:.1f} min. Load "
            f"average at start {fmt_load(entry['load_at_start'])}, at end {fmt_load(entry['load_at_end'])}")


@contextlib.contextmanager
def stage(name: str, heap: str, stamp: str) -> Iterator[tuple[dict[str, str], Path, Path]]:
    """The benchmark's own stack and its run folder: ``(services, stack root, workdir)``."""
    with own_stack(name, heap=heap) as (services, root):
        workdir = bench_dir(name) / f"run-{stamp}"
        workdir.mkdir(parents=True, exist_ok=True)
        yield services, root, workdir


def run_script(name: str, args: argparse.Namespace, entry: Entry, stamp: str, scenario: Scenario, timeout_s: float,
               strict: bool = False) -> tuple[dict[int, LogRead], dict[int, LogRead]]:
    """The drill's and the soak's run on their own stack: one topic under load and the fault script, then
    :meth:`Runner.outcome` into ``entry[name]``; both logs as read."""
    topic = f"{name}-{stamp}"
    entry[name] = {"topic": topic}
    with stage(name, args.broker_heap, stamp) as (services, root, workdir), \
            Runner(services, root, workdir, f"{name}{stamp[-7:-1]}", scenario) as runner:
        say(f"{name}: {topic} x {PARTITIONS} at {scenario.profile.rate:,} records/s (logs in {workdir})")
        runner.start(topic)
        runner.execute()
        return runner.outcome(entry[name], topic, timeout_s, args.verify, strict)


class Runner:
    """Executes one scenario: its processes, topics, load and destination consumer (stopped on exit)."""

    def __init__(self, services: dict[str, str], root: Path | None, workdir: Path, name: str, scenario: Scenario,
                 ident: str = "urep", stop_timeout_s: float = 30) -> None:
        self.services, self.root, self.workdir, self.scenario = services, root, workdir, scenario
        self.profile = scenario.profile
        self.processes = Processes(workdir)
        self.pipeline = Pipeline(services, self.processes, name, overrides=self.profile.overrides)
        self.arrivals = Arrivals(services["destination"], ident=ident, isolation=self.profile.isolation)
        self.topics: dict[str, int] = {}  # mirrored topics -> partitions
        self.loads: list[Load] = []
        self.steps: list[Entry] = []  # each executed step's record
        self.starts: list[float] = []  # when each step acted (duplicates are attributed from there)
        self.crashed: list[Entry] = []  # pipeline processes that exited without a step stopping them
        self.stop_timeout_s = stop_timeout_s

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        for load in self.loads:
            load.kill()
        self.arrivals.stop()
        self.pipeline.stop_all()
        self.processes.stop_all(self.stop_timeout_s)

    def load(self, topic: str, tag: int, preload: int = 0, track_acked: bool = False) -> Load:
        """A producer writing ``topic`` at the profile's rate (after ``preload`` records at once)."""
        flow = Flow(topic, PARTITIONS, self.profile.rate, preload=preload)
        self.loads.append(Load(self.services["source"], [flow], tag=tag, track_acked=track_acked).start())
        return self.loads[-1]

    def watch(self, topic: str) -> None:
        """Record ``topic``'s arrivals on the destination from now on."""
        self.arrivals.add(topic, PARTITIONS)
        self.topics[topic] = PARTITIONS

    def mirror(self, topic: str) -> None:
        self.pipeline.add_topic(topic, PARTITIONS)
        self.watch(topic)

    def start(self, topic: str) -> Load:
        """The pipeline and ``topic`` under load; until every worker has a share and every partition delivered
        again after all of them flowed (the first step must not measure the pipeline's start)."""
        for label in self.profile.controllers:
            self.pipeline.start_controller(label)
        for worker in self.profile.workers:
            self.pipeline.start_worker(worker)
        create_topic(self.services["source"], topic, PARTITIONS)
        self.arrivals.start()
        self.mirror(topic)
        load = self.load(topic, self.profile.tag, track_acked=self.profile.track_acked)
        workers = set(self.profile.workers)
        wait_for(lambda: self.pipeline.settled(self.topics) and set(self.pipeline.owners(topic).values()) == workers,
                 90, "initial assignment")
        self.wait_flowing(self.wait_flowing(time.time(), 60, "initial flow"), 60, "steady flow")
        return load

    def execute(self) -> list[Entry]:
        """Steady load, the fault script step by step, steady load again; the steps' records."""
        time.sleep(self.scenario.warm_s)
        steps = iter(self.scenario.script(self))
        while True:
            # Before the script draws the next step: a step built on a crashed process (its pid) would miss.
            self.check_processes(f"step {len(self.steps) + 1}")
            step = next(steps, None)
            if step is None:
                break
            self.step(step)
            time.sleep(self.scenario.pause())
        time.sleep(self.scenario.tail_s)
        return self.steps

    def tps(self, topics: list[str] | None = None) -> list[TP]:
        return [(t, p) for t in (topics or list(self.topics)) for p in range(self.topics[t])]

    def flowing_since(self, since: float) -> bool:
        return all(self.arrivals.last_arrival(tp) > since for tp in self.tps())

    def wait_flowing(self, since: float, timeout_s: float, what: str) -> float:
        """Wait until every partition had an arrival after ``since``; returns when that happened."""
        wait_for(lambda: self.flowing_since(since), timeout_s, what, 0.2)
        return time.time()

    def leader(self, timeout_s: float = 30) -> str:
        """The leading controller's label, waited for: right after a leader change, on a loaded machine, no
        controller may say so at once (the exactly-once soak of 2026-11-29 stopped on one such look at load 17)."""
        return str(wait_for(self.pipeline.leader, timeout_s, "a controller to say it leads", 0.3))

    def gaps(self, t0: float, t1: float, before_s: float, tps: list[TP] | None = None) -> dict[TP, tuple[float, float]]:
        """Per partition the longest gap in ``[t0 - before_s, t1]`` and when it ended."""
        return {tp: longest_gap(self.arrivals.logs[tp].arrivals, t0, t1, before_s) for tp in tps or self.tps()}

    def check_processes(self, before: str) -> None:
        """Every controller and worker is running: every step's undo restarts what it stopped, so one that
        exited did so on its own (a crash). Recorded (the verdict fails), and started again so the run goes on."""
        pipeline = self.pipeline
        for role, procs, start in (("worker", pipeline.workers, pipeline.start_worker),
                                   ("controller", pipeline.controllers, pipeline.start_controller)):
            for label, proc in list(procs.items()):
                if proc.alive():
                    continue
                code = proc.popen.returncode
                self.crashed.append({"process": label, "role": role, "exit_status": code, "before": before})
                say(f"  {role} {label} exited on its own (status {code}) before {before}; starting it again "
                    f"(its log: {proc.log})")
                start(label)

    def step(self, step: Step) -> Entry:
        """Act, stay down, undo, wait until recovered and every partition flows again, observe; the record."""
        measure = self.scenario.measure
        say(f"step: {step.name} [load {load_line()}]")
        before = measure.before(self, step)
        w = Window(time.time(), {"recovery": step.recovery, "load_before": load_average()})
        w.hit = step.act(w)
        time.sleep(step.down_s)
        w.restart = time.time()
        if step.undo is not None:
            step.undo()
        w.ready = time.time()  # the restarted component answers (broker ready, process registered)
        if step.recovered is not None:
            wait_for(step.recovered, step.timeout_s, f"{step.name}: recovered", 0.2)
        w.settled = w.settled or time.time()
        try:
            if step.flowing:
                w.flowing = self.wait_flowing(w.settled if measure.from_settled else w.ready, 180,
                                              f"{step.name}: every partition flowing again")
        except BenchError:
            self.diagnose(step.name)
            raise
        time.sleep(self.scenario.observe_s if step.observe_s is None else step.observe_s)
        w.t1 = time.time()
        w.notes["load_after"] = load_average()
        record = measure.record(self, step, w, before)
        if step.after is not None:
            step.after(w, record)
        self.steps.append(record)
        self.starts.append(w.t0)
        return record

    def diagnose(self, name: str) -> None:
        """A step that never recovered: both ends of the stalled partitions (a source that grew tells a replicator
        that stopped fetching from a load that stopped), thread stacks, hanging transactions."""
        stalled = [tp for tp in self.tps() if self.arrivals.last_arrival(tp) <= time.time() - 10]
        for topic in sorted({t for t, _ in stalled}):
            ends = stalled_ends(self.services, topic, [p for t, p in stalled if t == topic])
            say(f"  {name}: {topic}: partitions without an arrival for 10 s: {ends}")
        # The reader's position against what it may read (read_committed: the last stable offset) tells a
        # reader that stopped (behind a readable end) from transactions that stopped committing (at it).
        readable = self.arrivals.readable_ends(stalled) if stalled else {}
        say(f"  {name}: destination reader: " + ("; ".join(
            f"{t}:{p} read to {self.arrivals.next_offset((t, p))}, readable to {readable.get((t, p), '?')}"
            for t, p in stalled) or "nothing stalled") + f"; {self.arrivals.replacements} reader replacements")
        for proc in [*self.pipeline.workers.values(), *self.pipeline.controllers.values()]:
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGUSR1)  # faulthandler: thread stacks into the process's log
        for args in (["list"], ["find-hanging", "--broker-id", "1"]):  # a last stable offset held back (exactly-once)
            say(f"  kafka-transactions {' '.join(args)}:\n{transactions_tool(self.services['destination'], args)}")
        time.sleep(1)

    def finish(self, timeout_s: float, strict: bool = False,
               done: Callable[[], bool] | None = None) -> tuple[list[LoadResult], str | None]:
        """Stop the load; wait until ``done`` (default: committed offsets and destination at every source end);
        stop the consumer and the pipeline; attribute the duplicates. The loads' results and why the catch-up
        failed (or raise, ``strict``)."""
        self.check_processes("the end of the load")
        results = [load.stop() for load in self.loads]
        error = None
        try:
            wait_for(done or self._caught_up, timeout_s, "the destination to hold every source record", 1.0)
        except BenchError as exc:
            if strict:
                raise
            error = str(exc)
            say(f"  {exc}; comparing what is there")
        time.sleep(1)  # the last arrivals reach the reader
        self.arrivals.stop()
        self.pipeline.stop_all()
        for record, start, found in zip(self.steps, self.starts, self.duplicates(self.starts), strict=True):
            self.scenario.measure.duplicates(record, start, found)
            # When the step acted, in UTC: what its gap is read against in the processes' logs.
            if (t0 := record.pop("t0", None)) is not None:
                record["at"] = datetime.fromtimestamp(t0, timezone.utc).isoformat(timespec="milliseconds")
            record.pop("t1", None)
        return results, error

    def _caught_up(self) -> bool:
        status, body = self.pipeline.api("GET", "/offset")
        return status == 200 and body.get("total_lag") == 0 and self.destination_complete()

    def destination_complete(self) -> bool:
        """Every mirrored topic's destination end offsets at or past its source's."""
        return all(caught_up(self.services, topic, partitions) for topic, partitions in self.topics.items())

    def duplicates(self, starts: list[float]) -> list[list[tuple[float, TP]]]:
        """(arrival, partition) of the records that arrived again, from each of ``starts`` until the next."""
        found: list[tuple[float, TP]] = []
        for tp, log in self.arrivals.logs.items():
            seen: set[int] = set()
            for ident, arrival in zip(log.idents, log.arrivals, strict=True):
                if ident in seen:
                    found.append((arrival, tp))
                seen.add(ident)
        bounds = [*starts[1:], float("inf")]
        return [[(t, tp) for t, tp in found if start <= t < stop] for start, stop in zip(starts, bounds, strict=True)]

    def outcome(self, out: Entry, topic: str, timeout_s: float, verify: bool, strict: bool = False,
                ) -> tuple[dict[int, LogRead], dict[int, LogRead]]:
        """The drill's and the soak's end: catch-up, load, steps, exact comparison, every acknowledged record
        found, the verifier (``verify``); both logs as read."""
        caught = time.monotonic()
        (result,), error = self.finish(timeout_s, strict)
        if error is None:
            out["catch_up_s"] = round(time.monotonic() - caught, 1)
        else:
            out["catch_up_error"] = error
        out["load"] = {"sent": result.sent, "acked": result.acked, "failed": result.failed,
                       "producer_replacements": result.producer_replacements,
                       "reader_replacements": self.arrivals.replacements, "first_error": result.first_error}
        out["steps"] = self.steps
        out["crashed"] = self.crashed
        out["bad_headers"] = self.arrivals.bad_headers
        source, destination, cmp = compare_logs(self.services, topic, isolation=self.profile.isolation)
        out["comparison"] = cmp.to_json()
        out["acknowledged"] = acked_check(result, self.profile.tag, topic, source, destination)
        say(f"  source log {cmp.records:,} records; mirrored {cmp.mirrored:,}; lost {cmp.lost}; duplicated "
            f"{cmp.duplicated}; reordered {cmp.reordered}; acknowledged but missing from the destination: "
            f"{out['acknowledged']['missing_on_destination']}")
        out["verifier"] = run_verifier(self.pipeline.config_path, self.workdir / "verification") if verify else {
            "skipped": "--no-verify"}
        return source, destination


# ----------------------------------------------------------------------------- the fault library


def stop_worker(runner: Runner, worker: str, name: str, kill: bool = True, down_s: float = 0.0,
                recovered: Callable[[], bool] | None = None) -> Step:
    """kill -9 (or SIGTERM) ``worker``; the undo starts it again."""
    pipeline = runner.pipeline

    def act(w: Window) -> str:
        pipeline.workers[worker].kill() if kill else pipeline.workers[worker].terminate(60)
        return worker

    return Step(name, act, lambda: pipeline.start_worker(worker, timeout_s=90), down_s, recovered)


def stop_leader(runner: Runner, name: str, label: str | None = None, kill: bool = True,
                down_s: float = 0.0, recovered: Callable[[], bool] | None = None) -> Step:
    """kill -9 (or SIGTERM) the leading controller (``label``, or whichever leads when the step acts); the undo
    waits for the standby to lead, then starts it again."""
    pipeline = runner.pipeline
    hit: list[str] = []

    def act(w: Window) -> str:
        hit.append(label or runner.leader())
        pipeline.controllers[hit[-1]].kill() if kill else pipeline.controllers[hit[-1]].terminate(60)
        return hit[-1]

    def undo() -> None:
        wait_for(lambda: pipeline.leader() is not None, 60, "the standby to lead", 0.3)
        pipeline.start_controller(hit[-1])

    return Step(name, act, undo, down_s, recovered)


def freeze(pid: int, name: str, hit: str, down_s: float) -> Step:
    """SIGSTOP ``pid`` for ``down_s`` seconds, then SIGCONT (a process that stops answering, then wakes up)."""
    return Step(name, lambda w: os.kill(pid, signal.SIGSTOP) or hit, lambda: os.kill(pid, signal.SIGCONT), down_s)


def stop_service(runner: Runner, service: str, name: str, kill: bool = False, down_s: float = 0.0) -> Step:
    """Stop (or kill -9) a stack service (a broker or ZooKeeper; its data stays); the undo starts it again."""
    root = runner.root
    assert root is not None
    stop = stack.kill_service if kill else stack.stop_service
    return Step(name, lambda w: stop(root, service) or service,
                lambda: stack.start_service(root, service, timeout_s=120), down_s)


# ----------------------------------------------------------------------------- the measures


def compare_logs(services: dict[str, str], topic: str, by: str = "urep", isolation: str = "read_uncommitted",
                 ) -> tuple[dict[int, LogRead], dict[int, LogRead], Comparison]:
    """Both logs of ``topic`` read to their ends, and their exact comparison."""
    source = read_log(services["source"], topic, PARTITIONS)
    destination = read_log(services["destination"], topic, PARTITIONS, isolation=isolation)
    return source, destination, compare(source, destination, by=by)


def acked_check(result: LoadResult, tag: int, topic: str, source: dict[int, LogRead],
                destination: dict[int, LogRead]) -> Entry:
    """Every record the source acknowledged must be in the source log and on the destination."""
    missing_source = missing_destination = acked = 0
    samples: list[str] = []
    for (t, p), seqs in (result.acked_keys or {}).items():
        if t != topic:
            continue
        in_source, on_destination = set(source[p].keys), set(destination[p].keys)
        for seq in seqs:
            acked += 1
            ident = (tag << TAG_SHIFT) | seq
            missing_source += ident not in in_source
            if ident not in on_destination:
                missing_destination += 1
                if len(samples) < 10:
                    samples.append(f"{p}:{seq}")
    return {"acked": acked, "missing_from_source_log": missing_source,
            "missing_on_destination": missing_destination, "samples": samples, "key_format": KEY.format}


def transactions_tool(bootstrap: str, args: list[str], timeout_s: float = 60) -> str:
    """The output of Kafka's ``kafka-transactions.sh`` (TransactionsCommand, from the pinned jars)."""
    try:
        cmd = [jvm.java_executable(), "-cp", jvm.classpath("kafka"), "org.apache.kafka.tools.TransactionsCommand",
               "--bootstrap-server", bootstrap, *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired, jvm.JvmError) as exc:
        return f"(could not run: {exc})"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("log4j:")]
    return "\n".join(lines).strip() or f"(no output, exit {done.returncode})"


def run_verifier(config: Path, output: Path, timeout_s: float = 900) -> Entry:
    """``python -m ureplicator.verifier``; its verdict line, exit status and the JSON report's totals."""
    output.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "ureplicator.verifier", "--config", str(config), "--output", str(output),
           "--master", "local[2]"]
    say(f"running the verifier: {' '.join(cmd[1:])}")
    started, log = time.monotonic(), output / "verifier.log"
    try:
        with open(log, "wb") as err:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, cwd=str(REPO), timeout=timeout_s,
                                  check=False)
    except subprocess.TimeoutExpired:
        return {"exit_status": None, "error": f"timed out after {timeout_s:.0f}s", "log": str(log)}
    stdout = proc.stdout.decode(errors="replace").strip()
    record: Entry = {
        "exit_status": proc.returncode,
        "verdict_line": stdout.splitlines()[-1].replace(f"{REPO}/", "") if stdout else "",
        "elapsed_s": round(time.monotonic() - started, 1),
        "log": str(log.relative_to(REPO)) if log.is_relative_to(REPO) else str(log),
        "command": " ".join(["python", *cmd[1:]]).replace(f"{REPO}/", ""),
    }
    match = re.search(r"report (\S+)", stdout)
    report = REPO / match.group(1) if match else None  # an absolute report path stays what it is
    if report is not None and report.exists() and report.suffix == ".json":
        try:
            doc = json.loads(report.read_text())
            record.update(status=doc.get("status"), totals=doc.get("totals"), report=str(report))
        except ValueError as exc:
            record["report_error"] = str(exc)
    if proc.returncode == 2 or not stdout:
        record["stderr_tail"] = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    say(f"  verifier exit {proc.returncode} after {record['elapsed_s']:.0f}s: {record['verdict_line'] or '-'}")
    return record


def verdict(out: Entry) -> tuple[int, str]:
    """The drill's and the soak's verdict: nothing lost and the verifier says OK/WARN."""
    lost = out["comparison"]["lost"] + out["acknowledged"]["missing_on_destination"]
    status = out.get("verifier", {}).get("exit_status")
    if lost:
        return 1, f"FAIL: {lost} records lost"
    if out.get("crashed"):  # absent from runs before 2026-11-29
        return 1, "FAIL: " + crashes(out["crashed"])
    if out.get("verifier", {}).get("skipped"):
        return 0, "OK (verifier skipped)"
    if status == 1:
        return 1, "FAIL: the verifier found a problem"
    return (0, "OK") if status == 0 else (2, f"verifier could not run (exit {status})")


def crashes(crashed: list[Entry]) -> str:
    """The processes that exited on their own, in words."""
    return "exited on their own: " + ", ".join(
        f"{c['role']} {c['process']} (status {c['exit_status']}) before {c['before']}" for c in crashed)


def outcome_lines(entry: Entry, out: Entry, extra: str = "") -> list[str]:
    """The end of the drill's and the soak's sections: the totals (``extra`` after the reordered), the verifier,
    the verdict."""
    c, load, v = out["comparison"], out["load"], out.get("verifier", {})
    if v.get("skipped") or v.get("exit_status") is None:
        verifier = f"skipped ({v['skipped']})" if v.get("skipped") else f"did not finish ({v.get('error')})"
    else:
        verifier = f"exit {v['exit_status']}, `{repo_relative(v.get('verdict_line') or 'no verdict line')}`"
        if v["exit_status"] == 2 and v.get("stderr_tail", "").strip():
            verifier += f"; it could not run: `{v['stderr_tail'].strip().splitlines()[-1][:300]}`"
    return [f"Totals: **{load['acked']:,} records acknowledged by the source** ({load['sent']:,} produced, "
            f"{load['failed']:,} failed), {c['records']:,} in the source log, **{c['mirrored']:,} mirrored**, "
            f"**lost {c['lost']}** (acknowledged but missing on the destination: "
            f"{out['acknowledged']['missing_on_destination']}), reordered **{c['reordered']}**{extra}, duplicated "
            f"{c['duplicated']:,}.", "", f"Verifier: {verifier}.", "",
            *([f"Processes {crashes(out['crashed'])}.", ""] if out.get("crashed") else []),
            f"**Verdict: {entry['verdict']}.**"]
