"""Soak: continuous load under a random schedule of faults for N minutes, then the exact comparison and the verifier.

    make soak MINUTES=30                 # the issue's target run
    make soak MINUTES=5 SEED=1234        # replay a schedule: the seed is printed at the start
    .venv/bin/python -m bench.soak --minutes 5 --no-verify --no-write
"""

from __future__ import annotations

import os
import random
import re
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from bench.harness import LogRead, load_line
from bench.recording import parser, run_and_record
from bench.render import table
from bench.scenario import (
    PARTITIONS,
    Entry,
    Profile,
    Runner,
    Scenario,
    Step,
    crashes,
    freeze,
    new_entry,
    outcome_lines,
    run_script,
    stop_leader,
    stop_service,
    stop_worker,
    verdict,
)
from devtools import stack
from devtools.harness import say

TRANSACTION_INTERVAL_MS = 1000
SESSION_S = 10.0  # the bench pipeline's zookeeper.session_timeout_s (the default)
COMMIT_INTERVAL_S = 5.0  # the bench pipeline's worker.commit_interval_s (the default)
# "Duplicates bounded by the commit interval", made checkable: one fault repeats at most the records of the
# partitions it hit since their last commit plus what was in flight when it struck, allowed as much again.
DUPLICATES_BOUND_S = 2 * COMMIT_INTERVAL_S
WORKERS = ("w1", "w2", "w3")
TAG = 7  # the load keys' run tag, as in the drill


def menu(runner: Runner, rng: random.Random) -> dict[str, Callable[[], Step]]:
    """The soak's faults: each draws its victim (a worker, the leader) when it is chosen."""
    pipeline, root = runner.pipeline, runner.root
    assert root is not None
    frozen = SESSION_S + 4  # past the ZooKeeper session

    def freeze_worker_and_destination(w: str) -> Step:
        pid, broker = pipeline.workers[w].pid, int(stack.status(root)["destination"]["pid"])

        def thaw() -> None:
            os.kill(pid, signal.SIGCONT)  # the zombie first: it must purge, not write
            time.sleep(3)
            os.kill(broker, signal.SIGCONT)

        return Step(f"worker {w} and destination frozen",
                    lambda _: os.kill(broker, signal.SIGSTOP) or os.kill(pid, signal.SIGSTOP) or w, thaw, frozen)

    on_worker: dict[str, Callable[[str], Step]] = {
        "kill -9 worker": lambda w: stop_worker(runner, w, f"kill -9 worker {w}", down_s=3),
        "SIGTERM worker": lambda w: stop_worker(runner, w, f"SIGTERM worker {w}", kill=False, down_s=3),
        "worker frozen past its session": lambda w: freeze(pipeline.workers[w].pid, f"worker {w} frozen", w, frozen),
        "worker and destination frozen": freeze_worker_and_destination,
    }
    on_leader: dict[str, Callable[[str], Step]] = {
        "kill -9 leader": lambda c: stop_leader(runner, f"kill -9 leader {c}", c, down_s=3),
        "SIGTERM leader": lambda c: stop_leader(runner, f"SIGTERM leader {c}", c, kill=False, down_s=3),
        "leader frozen past its session": lambda c: freeze(pipeline.controllers[c].pid, f"leader {c} frozen", c,
                                                           frozen),
    }
    out: dict[str, Callable[[], Step]] = {}
    for name, make in on_worker.items():
        out[name] = lambda make=make: make(rng.choice(WORKERS))
    for name, make in on_leader.items():
        out[name] = lambda make=make: make(runner.leader())
    for service in ("source broker", "destination broker", "zookeeper"):
        short = service.split()[0]
        out[f"{service} restart"] = lambda short=short: stop_service(runner, short, f"{short} restart", down_s=3)
    return out


def schedule(runner: Runner, rng: random.Random, minutes: float) -> Iterator[Step]:
    """Faults drawn from the menu until ``minutes`` ran out (the same ``rng`` draws the pauses between them:
    one seed, one schedule); each recovered once the assignment settled."""
    faults = menu(runner, rng)
    deadline = time.monotonic() + minutes * 60
    while time.monotonic() < deadline:
        step = faults[rng.choice(sorted(faults))]()
        yield replace(step, recovered=lambda: runner.pipeline.settled(runner.topics))


def corrupted(source: dict[int, LogRead], destination: dict[int, LogRead]) -> Entry:
    """Destination records that are not the source record their provenance header names (header missing or
    unreadable, an offset the source does not have, or another load key; values are the verifier's)."""
    bad = []
    for p, dst in destination.items():
        src = source.get(p, LogRead())
        key_at = dict(zip(src.offsets, src.keys, strict=True))
        bad += [f"{p}:{offset}" for offset, key in zip(dst.urep, dst.keys, strict=True)
                if offset < 0 or key_at.get(offset) != key]
    return {"records": len(bad), "samples": bad[:10]}


def judge(soak: Entry) -> tuple[int, str]:
    """The issue's target: 0 lost, 0 reordered, 0 corrupted, duplicates per fault within the bound."""
    c, bound = soak["comparison"], soak.get("duplicates_bound_per_fault")
    problems = []
    if lost := c["lost"] + soak["acknowledged"]["missing_on_destination"]:
        problems.append(f"{lost:,} records lost")
    if c["reordered"]:
        problems.append(f"{c['reordered']:,} records reordered")
    if soak.get("corrupted", {}).get("records"):
        problems.append(f"{soak['corrupted']['records']:,} records corrupted")
    if over := [s["name"] for s in soak.get("steps", []) if bound is not None and s.get("duplicates", 0) > bound]:
        problems.append(f"duplicates above {bound:,} after {', '.join(over)}")
    if soak.get("exactly_once") and c["duplicated"]:
        problems.append(f"{c['duplicated']:,} records duplicated in exactly-once mode")
    if soak.get("crashed"):
        problems.append(crashes(soak["crashed"]))
    return (1, "FAIL: " + "; ".join(problems)) if problems else verdict(soak)


def render(entry: Entry) -> str:
    s, exact = entry["soak"], bool(entry["soak"].get("exactly_once"))
    kinds: dict[str, list[Entry]] = {}  # the faults by kind: their names without the victim
    for step in s.get("steps", []):
        kinds.setdefault(" ".join(w for w in step["name"].split() if not re.fullmatch(r"[wc]\d+", w)), []).append(step)
    rows = []
    for kind, steps in sorted(kinds.items()):
        gaps = [st["max_gap_s"] for st in steps if st.get("max_gap_s") is not None]
        rows.append([kind, len(steps), f"{max(st.get('duplicates', 0) for st in steps):,}",
                     f"{statistics.median(gaps):.1f} s, {max(gaps):.1f} s" if gaps else "n/a"])
    bound, corrupt = s.get("duplicates_bound_per_fault"), s.get("corrupted", {}).get("records")
    return "\n".join([
        "## Soak, exactly-once mode" if exact else "## Soak",
        "",
        f"`make soak MINUTES={entry['setup']['minutes']:g} SEED={entry['seed']}"
        + (" BENCH_ARGS=--exactly-once" if exact else "") + f"` on {entry['date'][:10]} "
        f"({entry['machine'].get('cores', '?')} CPUs, load {'/'.join(f'{x:.1f}' for x in entry['load_at_start'])} "
        f"at the start): {entry['setup']['rate']:,} records/s into {PARTITIONS} partitions, 2 controllers, "
        f"{len(WORKERS)} workers, {len(s.get('steps', []))} faults"
        + (f"; `worker.exactly_once: true`, {TRANSACTION_INTERVAL_MS} ms transactions, the destination read "
           "`read_committed`" if exact else "")
        + (f"; duplicates allowed per fault: {bound:,}" if bound is not None else "")
        + (f" ({DUPLICATES_BOUND_S:g} s of the load)" if bound else "") + ".",
        "",
        *table(["fault", "times", "most duplicates after one",
                "longest gap of any partition (median, max over the faults)"], rows),
        "",
        *outcome_lines(entry, s, f", corrupted **{corrupt}**" if corrupt is not None else ""),
    ])


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.soak", __doc__, "384m")
    cli.add_argument("--minutes", type=float, default=30.0, help="how long faults are injected (default 30)")
    cli.add_argument("--seed", type=int, default=None, help="replay a schedule (printed at the start)")
    cli.add_argument("--rate", type=int, default=1000, help="records/s (default 1000)")
    cli.add_argument("--no-verify", dest="verify", action="store_false", help="skip the PySpark verifier")
    cli.add_argument("--exactly-once", action="store_true",
                     help="the pipeline in exactly-once mode (1 s transactions): 0 duplicates read_committed; "
                          "results in soak-eos-<date>.json and their own docs section")
    args = cli.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng, exact = random.Random(seed), args.exactly_once
    say(f"soak seed {seed} (replay: make soak MINUTES={args.minutes:g} SEED={seed}); load {load_line()}")
    entry, stamp = new_entry("soak", {
        "minutes": args.minutes, "rate": args.rate, "partitions": PARTITIONS, "workers": len(WORKERS),
        "controllers": 2, "exactly_once": exact,
        "pipeline_config": "defaults (session 10 s, commit interval 5 s)"
        + (f", exactly_once with {TRANSACTION_INTERVAL_MS} ms transactions" if exact else "")}, seed=seed)
    profile = Profile(args.rate, workers=WORKERS, tag=TAG, track_acked=True,
                      overrides={"worker": {"exactly_once": True, "transaction_interval_ms": TRANSACTION_INTERVAL_MS}}
                      if exact else None, isolation="read_committed" if exact else "read_uncommitted")
    scenario = Scenario(profile, lambda runner: schedule(runner, rng, args.minutes), pause=lambda: rng.uniform(2, 10))

    def go() -> Entry:
        source, destination = run_script("soak", args, entry, stamp, scenario, 300, strict=True)
        entry["soak"].update(corrupted=corrupted(source, destination), exactly_once=exact,
                             duplicates_bound_per_fault=0 if exact else int(args.rate * DUPLICATES_BOUND_S))
        return entry

    def summary(entry: Entry) -> int:
        status, entry["verdict"] = judge(entry["soak"])
        print(render(entry))
        print(f"soak verdict (seed {seed}): {entry['verdict']}")
        return status

    return run_and_record(go, section="soak-eos" if exact else "soak", summary=summary, no_write=args.no_write,
                          failed=f"FAILED (seed {seed})", failed_status=2)


if __name__ == "__main__":
    sys.exit(main())
