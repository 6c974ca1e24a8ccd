"""Soak: continuous load under a random schedule of faults for N minutes, then the exact comparison and the verifier.

    make soak MINUTES=30                 # the issue's target run
    make soak MINUTES=5 SEED=1234        # replay a schedule: the seed is printed at the start
    .venv/bin/python -m bench.soak --minutes 5 --no-verify --no-write

Own local stack (``.cache/bench-soak/stack``, always stopped again), two
controllers, three workers, one 16-partition topic under an idempotent
producer that keeps the key of every record the source acknowledged. Until
the time is up, faults are drawn from the seeded random generator, each
followed by recovery (every partition flowing again) and a random quiet spell:

* kill -9 / SIGTERM of a worker, restarted;
* a worker frozen (SIGSTOP) past its ZooKeeper session, resumed;
* a worker *and* the destination broker frozen past the session, the worker
  resumed first (it must purge, not write), then the broker;
* kill -9 / SIGTERM of the leading controller, restarted;
* the leader frozen past its session, resumed (it must write nothing);
* restarts of the source broker, the destination broker and ZooKeeper.

Then the load stops, the committed offsets catch up, the pipeline stops and
source and destination are compared per partition (lost must be 0, order
kept, duplicates counted per fault) and the PySpark verifier runs. Exit 0 when
nothing was lost or reordered and the verifier says OK/WARN. Results:
``bench/results/soak-<date>.json`` (appended) and the soak section of
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import drill as drill_module
from bench.common import load_average, machine_info
from bench.harness import (
    Arrivals,
    BenchError,
    Flow,
    Load,
    LogRead,
    Pipeline,
    compare,
    install_signal_handlers,
    load_line,
    read_log,
)
from bench.recording import run_and_record
from devtools import stack
from devtools.harness import Processes, bench_dir, create_topic, own_stack, say, wait_for

START = "<!-- soak:start -->"
END = "<!-- soak:end -->"
# ``--exactly-once``: its own results file and section; duplicates must be 0, read read_committed.
EOS_START = "<!-- soak-eos:start -->"
EOS_END = "<!-- soak-eos:end -->"
TRANSACTION_INTERVAL_MS = 1000
PARTITIONS = drill_module.PARTITIONS
SESSION_S = 10.0  # the bench pipeline's zookeeper.session_timeout_s (the default)
COMMIT_INTERVAL_S = 5.0  # the bench pipeline's worker.commit_interval_s (the default)
# "Duplicates bounded by the commit interval", made checkable: one fault repeats at most the
# records of the partitions it hit since their last commit (one commit interval of the load)
# plus what was in flight when it struck, allowed as much again.
DUPLICATES_BOUND_S = 2 * COMMIT_INTERVAL_S
WORKERS = ("w1", "w2", "w3")
TAG = drill_module.TAG  # the drill's acknowledged-records check decodes its tag


class Soak:
    """The fault menu, on top of the drill's step (fault, stay down, recover, wait for flow)."""

    def __init__(self, drill: drill_module.Drill, pipeline: Pipeline, root: Path, rng: random.Random) -> None:
        self.drill = drill
        self.pipeline = pipeline
        self.root = root
        self.rng = rng

    def faults(self) -> dict[str, Callable[[], None]]:
        return {
            "kill -9 worker": self.kill_worker,
            "SIGTERM worker": self.term_worker,
            "worker frozen past its session": self.freeze_worker,
            "worker and destination frozen": self.freeze_worker_and_destination,
            "kill -9 leader": self.kill_leader,
            "SIGTERM leader": self.term_leader,
            "leader frozen past its session": self.freeze_leader,
            "source broker restart": lambda: self.restart_service("source"),
            "destination broker restart": lambda: self.restart_service("destination"),
            "zookeeper restart": lambda: self.restart_service("zookeeper"),
        }

    def _step(self, name: str, down_s: float, fault: Callable[[], Any], repair: Callable[[], Any]) -> None:
        self.drill.args.down = down_s
        self.drill.step(name, fault, repair, lambda: self.pipeline.settled({self.drill.topic: PARTITIONS}))

    def _worker(self) -> str:
        return self.rng.choice(WORKERS)

    def kill_worker(self) -> None:
        w = self._worker()
        self._step(f"kill -9 worker {w}", 3, lambda: self.pipeline.workers[w].kill() or w,
                   lambda: self.pipeline.start_worker(w, timeout_s=90))

    def term_worker(self) -> None:
        w = self._worker()
        self._step(f"SIGTERM worker {w}", 3, lambda: self.pipeline.workers[w].terminate(60) and w,
                   lambda: self.pipeline.start_worker(w, timeout_s=90))

    def freeze_worker(self) -> None:
        w = self._worker()
        pid = self.pipeline.workers[w].pid
        self._step(f"worker {w} frozen", SESSION_S + 4, lambda: os.kill(pid, signal.SIGSTOP) or w,
                   lambda: os.kill(pid, signal.SIGCONT))

    def freeze_worker_and_destination(self) -> None:
        w = self._worker()
        pid = self.pipeline.workers[w].pid
        broker = int(stack.status(self.root)["destination"]["pid"])

        def freeze() -> str:
            os.kill(broker, signal.SIGSTOP)
            os.kill(pid, signal.SIGSTOP)
            return w

        def thaw() -> None:
            os.kill(pid, signal.SIGCONT)  # the zombie first: it must purge, not write
            time.sleep(3)
            os.kill(broker, signal.SIGCONT)

        self._step(f"worker {w} and destination frozen", SESSION_S + 4, freeze, thaw)

    def _leader(self) -> str:
        label = self.pipeline.leader()
        if label is None:
            raise BenchError("no controller says it leads")
        return label

    def kill_leader(self) -> None:
        label = self._leader()
        self._step(f"kill -9 leader {label}", 3, lambda: self.pipeline.controllers[label].kill() or label,
                   lambda: self._restart_controller(label))

    def term_leader(self) -> None:
        label = self._leader()
        self._step(f"SIGTERM leader {label}", 3, lambda: self.pipeline.controllers[label].terminate(60) and label,
                   lambda: self._restart_controller(label))

    def _restart_controller(self, label: str) -> None:
        wait_for(lambda: self.pipeline.leader() is not None, 60, "the standby to lead", 0.3)
        self.pipeline.start_controller(label)

    def freeze_leader(self) -> None:
        label = self._leader()
        pid = self.pipeline.controllers[label].pid
        self._step(f"leader {label} frozen", SESSION_S + 4, lambda: os.kill(pid, signal.SIGSTOP) or label,
                   lambda: os.kill(pid, signal.SIGCONT))

    def restart_service(self, name: str) -> None:
        self._step(f"{name} restart", 3, lambda: stack.stop_service(self.root, name) or name,
                   lambda: stack.start_service(self.root, name, timeout_s=120))


def run_soak(services: dict[str, str], root: Path, workdir: Path, stamp: str, args: argparse.Namespace,
             rng: random.Random) -> dict[str, Any]:
    processes = Processes(workdir)
    exact = args.exactly_once
    overrides = ({"worker": {"exactly_once": True, "transaction_interval_ms": TRANSACTION_INTERVAL_MS}}
                 if exact else None)
    isolation = "read_committed" if exact else "read_uncommitted"
    pipeline = Pipeline(services, processes, f"soak{stamp[-7:-1]}", overrides=overrides)
    arrivals = Arrivals(services["destination"], ident="urep", isolation=isolation)
    topic = f"soak-{stamp}"
    load: Load | None = None
    out: dict[str, Any] = {"topic": topic}
    try:
        pipeline.start_controller("c1")
        pipeline.start_controller("c2")
        for w in WORKERS:
            pipeline.start_worker(w)
        create_topic(services["source"], topic, PARTITIONS)
        arrivals.start()
        pipeline.add_topic(topic, PARTITIONS)
        arrivals.add(topic, PARTITIONS)
        load = Load(services["source"], [Flow(topic, PARTITIONS, args.rate)], tag=TAG, track_acked=True).start()
        wait_for(lambda: pipeline.settled({topic: PARTITIONS}), 90, "initial assignment")
        drill = drill_module.Drill(services, root, pipeline, arrivals, topic, argparse.Namespace(down=0, settle=2))
        drill.wait_flowing(time.time(), 60, "initial flow")
        soak = Soak(drill, pipeline, root, rng)
        menu = soak.faults()
        deadline = time.monotonic() + args.minutes * 60
        say(f"soak: {args.minutes:g} min of faults at {args.rate:,} records/s (logs in {workdir})")
        while time.monotonic() < deadline:
            name = rng.choice(sorted(menu))
            menu[name]()
            time.sleep(rng.uniform(2, 10))
        result = load.stop()
        out["load"] = {"sent": result.sent, "acked": result.acked, "failed": result.failed}
        drill_module._wait_caught_up(pipeline, services, topic, 300)
        out["steps"] = drill.steps
        arrivals.stop()
        pipeline.stop_all()
        source = read_log(services["source"], topic, PARTITIONS)
        destination = read_log(services["destination"], topic, PARTITIONS, isolation=isolation)
        out["comparison"] = compare(source, destination, by="urep").to_json()
        out["corrupted"] = corrupted(source, destination)
        out["exactly_once"] = exact
        out["duplicates_bound_per_fault"] = 0 if exact else int(args.rate * DUPLICATES_BOUND_S)
        out["acknowledged"] = drill_module._acked_check(result, topic, source, destination)
        drill_module._dups_per_step(drill.steps, arrivals, topic)
        out["verifier"] = (drill_module.run_verifier(pipeline.config_path, workdir / "verification", 900)
                           if args.verify else {"skipped": "--no-verify"})
    finally:
        if load is not None:
            load.kill()
        arrivals.stop()
        pipeline.stop_all()
        processes.stop_all()
    return out


def corrupted(source: dict[int, LogRead], destination: dict[int, LogRead]) -> dict[str, Any]:
    """Destination records that are not the source record their provenance header names.

    A record counts when its header is missing or unreadable, names an offset the source
    does not have, or carries another load key than the source record at that offset
    (values are compared by the verifier).
    """
    total = 0
    samples: list[str] = []
    for p, dst in destination.items():
        src = source.get(p, LogRead())
        key_at = dict(zip(src.offsets, src.keys, strict=True))
        for offset, key in zip(dst.urep, dst.keys, strict=True):
            if offset < 0 or key_at.get(offset) != key:
                total += 1
                if len(samples) < 10:
                    samples.append(f"{p}:{offset}")
    return {"records": total, "samples": samples}


def judge(soak: dict[str, Any]) -> tuple[int, str]:
    """The issue's target: 0 lost, 0 reordered, 0 corrupted, duplicates per fault within the bound."""
    c = soak["comparison"]
    problems = []
    lost = c["lost"] + soak["acknowledged"]["missing_on_destination"]
    if lost:
        problems.append(f"{lost:,} records lost")
    if c["reordered"]:
        problems.append(f"{c['reordered']:,} records reordered")
    if soak.get("corrupted", {}).get("records"):
        problems.append(f"{soak['corrupted']['records']:,} records corrupted")
    bound = soak.get("duplicates_bound_per_fault")
    over = [s["name"] for s in soak.get("steps", []) if bound is not None and s.get("duplicates", 0) > bound]
    if over:
        problems.append(f"duplicates above {bound:,} after {', '.join(over)}")
    if soak.get("exactly_once") and c["duplicated"]:
        problems.append(f"{c['duplicated']:,} records duplicated in exactly-once mode")
    if problems:
        return 1, "FAIL: " + "; ".join(problems)
    return drill_module.verdict(soak)


def render(entry: dict[str, Any]) -> str:
    s = entry["soak"]
    c = s["comparison"]
    counts: dict[str, int] = {}
    worst: dict[str, int] = {}
    gaps: dict[str, list[float]] = {}
    for step in s.get("steps", []):
        kind = " ".join(w for w in step["name"].split() if not re.fullmatch(r"[wc]\d+", w))
        counts[kind] = counts.get(kind, 0) + 1
        worst[kind] = max(worst.get(kind, 0), step.get("duplicates", 0))
        if step.get("max_gap_s") is not None:
            gaps.setdefault(kind, []).append(step["max_gap_s"])
    exact = bool(s.get("exactly_once"))
    bound = s.get("duplicates_bound_per_fault")
    corrupt = s.get("corrupted", {}).get("records")
    lines = [
        "## Soak, exactly-once mode" if exact else "## Soak",
        "",
        f"`make soak MINUTES={entry['setup']['minutes']:g} SEED={entry['seed']}"
        + (" BENCH_ARGS=--exactly-once" if exact else "") + f"` on {entry['date'][:10]} "
        f"({entry['machine'].get('cores', '?')} CPUs, load {'/'.join(f'{v:.1f}' for v in entry['load_at_start'])} "
        f"at the start): {entry['setup']['rate']:,} records/s into {PARTITIONS} partitions, 2 controllers, "
        f"{len(WORKERS)} workers, {len(s.get('steps', []))} faults"
        + (f"; `worker.exactly_once: true`, {TRANSACTION_INTERVAL_MS} ms transactions, the destination read "
           "`read_committed`" if exact else "") + ".",
        "",
        "| fault | times | most duplicates after one | longest gap of any partition (median, max over the faults) |",
        "|---|---|---|---|",
        *[f"| {k} | {v} | {worst[k]:,} | " + (f"{statistics.median(gaps[k]):.1f} s, {max(gaps[k]):.1f} s"
                                             if gaps.get(k) else "n/a") + " |"
          for k, v in sorted(counts.items())],
        "",
        f"Result: {c['records']:,} source records, lost **{c['lost']}**, reordered **{c['reordered']}**, "
        + (f"corrupted **{corrupt}**, " if corrupt is not None else "")
        + f"duplicated {c['duplicated']:,}"
        + (f" (bound per fault: {bound:,} = {DUPLICATES_BOUND_S:g} s of the load)" if bound is not None else "")
        + "; verifier: "
        f"{s['verifier'].get('verdict_line') or s['verifier'].get('skipped') or s['verifier'].get('error')}. "
        f"Verdict: **{entry['verdict']}**. "
        + ("In exactly-once mode any duplicate fails the run: a fault aborts the open transaction, and the "
           "aborted copies are invisible to a `read_committed` reader. Results: "
           "`bench/results/soak-eos-<date>.json`." if exact else
           "Duplicates are the at-least-once cost of the faults that cut a "
           "worker off without a final commit (kill -9, a freeze past the session, ZooKeeper restarts) or make "
           "it purge and rewind (a fence): each repeats up to `worker.commit_interval_s` (5 s) of its "
           "partitions plus what was in flight; the verifier reports them as WARN, never FAIL. "
           "Results: `bench/results/soak-<date>.json`."),
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long faults are injected (default 30)")
    parser.add_argument("--seed", type=int, default=None, help="replay a schedule (printed at the start)")
    parser.add_argument("--rate", type=int, default=1000, help="records/s (default 1000)")
    parser.add_argument("--no-verify", dest="verify", action="store_false", help="skip the PySpark verifier")
    parser.add_argument("--broker-heap", default="384m")
    parser.add_argument("--no-write", action="store_true", help="print only; no JSON, no docs section")
    parser.add_argument("--exactly-once", action="store_true",
                        help="the pipeline in exactly-once mode (1 s transactions): 0 duplicates read_committed; "
                             "results in soak-eos-<date>.json and their own docs section")
    return parser.parse_args(argv)


def print_summary(entry: dict[str, Any], seed: int) -> int:
    """Judge the run, drop the steps' raw timestamps, print the summary; returns the exit status."""
    status, text = judge(entry["soak"])
    entry["verdict"] = text
    for step in entry["soak"].get("steps", []):
        step.pop("t0", None)
        step.pop("t1", None)
    c = entry["soak"]["comparison"]
    for step in entry["soak"].get("steps", []):
        print(f"{step['name']:<36} flowing {step['flowing_after_ready_s']:5.1f}s after repair  "
              f"longest gap {step['max_gap_s']:5.1f}s  dups {step.get('duplicates', 0):>6,}")
    print(f"source {c['records']:,}  lost {c['lost']}  reordered {c['reordered']}  "
          f"corrupted {entry['soak']['corrupted']['records']}  duplicated {c['duplicated']:,}")
    print(f"soak verdict (seed {seed}): {text}")
    return status


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    install_signal_handlers()
    now = datetime.now(timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    say(f"soak seed {seed} (replay: make soak MINUTES={args.minutes:g} SEED={seed}); load {load_line()}")
    entry: dict[str, Any] = {
        "benchmark": "soak", "date": now.isoformat(timespec="seconds"), "seed": seed,
        "machine": machine_info(), "load_at_start": load_average(),
        "setup": {"minutes": args.minutes, "rate": args.rate, "partitions": PARTITIONS, "workers": len(WORKERS),
                  "controllers": 2, "exactly_once": args.exactly_once,
                  "pipeline_config": "defaults (session 10 s, commit interval 5 s)"
                  + (f", exactly_once with {TRANSACTION_INTERVAL_MS} ms transactions" if args.exactly_once else "")},
    }

    def go() -> dict[str, Any]:
        with own_stack("soak", heap=args.broker_heap) as (services, root):
            workdir = bench_dir("soak") / f"run-{stamp}"
            workdir.mkdir(parents=True, exist_ok=True)
            entry["soak"] = run_soak(services, root, workdir, stamp, args, rng)
        return entry

    exact = args.exactly_once
    return run_and_record(go, prefix="soak-eos" if exact else "soak", start=EOS_START if exact else START,
                          end=EOS_END if exact else END, render=render,
                          summary=lambda e: print_summary(e, seed), no_write=args.no_write,
                          failed=f"FAILED (seed {seed})", failed_status=2)


if __name__ == "__main__":
    sys.exit(main())
