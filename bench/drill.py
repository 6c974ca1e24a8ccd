"""Failure drill: mirror under load while a worker, the leader controller and both brokers are killed and restarted.

    .venv/bin/python -m bench.drill            # 2,000 records/s, 15 s outages (~6-8 min with the verifier)
    .venv/bin/python -m bench.drill --quick    # 1,000 records/s, 5 s outages (~3 min, most of it Spark)
"""

from __future__ import annotations

import sys
import time

from bench.common import load_average
from bench.harness import load_line
from bench.recording import parser, run_and_record
from bench.render import table
from bench.scenario import (
    PARTITIONS,
    PAUSED_S,
    Entry,
    Profile,
    Runner,
    Scenario,
    Step,
    defaults,
    measured_on,
    new_entry,
    outcome_lines,
    run_script,
    stop_leader,
    stop_service,
    stop_worker,
    verdict,
)
from devtools.harness import say

TAG = 7
COLUMNS = (  # (header, key, format) of a step's record
    ("down", "down_s", "{:.1f} s"),
    ("restart took", "restart_took_s", "{:.1f} s"),
    ("every partition flowing after it was back", "flowing_after_ready_s", "{:.1f} s"),
    ("longest gap", "max_gap_s", "{:.1f} s"),
    (f"partitions paused > {PAUSED_S:.0f} s", "partitions_paused", "{}"),
    ("duplicates", "duplicates", "{:,}"),
)


def script(runner: Runner, down_s: float) -> list[Step]:
    """Each component in turn, killed -9, left down ``down_s`` and restarted."""
    pipeline, topics = runner.pipeline, runner.topics
    return [
        stop_worker(runner, "w1", "kill -9 worker", down_s=down_s, recovered=lambda: "w1" in {
            w for t in topics for w in pipeline.owners(t).values()} and pipeline.settled(topics)),
        stop_leader(runner, "kill -9 leader controller", down_s=down_s,
                    recovered=lambda: pipeline.leader() is not None and pipeline.settled(topics)),
        stop_service(runner, "destination", "kill -9 destination broker", kill=True, down_s=down_s),
        stop_service(runner, "source", "kill -9 source broker", kill=True, down_s=down_s),
    ]


def render(entry: Entry) -> str:
    quick = entry["mode"] == "quick"
    return "\n".join([
        "## Failure drill",
        "",
        f"`make drill` (`python -m bench.drill{' --quick' if quick else ''}`){' — **quick mode**' if quick else ''} "
        f"{measured_on(entry)}. {entry['setup']['rate']:,} records/s on {PARTITIONS} partitions; each component left "
        f"down {entry['setup']['down_s']:.0f} s.",
        "",
        *table(["step", *(header for header, _, _ in COLUMNS)], [[s["name"], *(
            fmt.format(s.get(key, 0)) for _, key, fmt in COLUMNS)] for s in entry["drill"].get("steps", [])],
               "l" + "r" * len(COLUMNS)),
        "",
        *outcome_lines(entry, entry["drill"]),
    ])


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.drill", __doc__, "512m")
    cli.add_argument("--quick", action="store_true", help="smoke run: 1,000 records/s, 5 s outages")
    cli.add_argument("--rate", type=int, default=None, help="records/s (default 2000; quick 1000)")
    cli.add_argument("--down", type=float, default=None, help="seconds each component stays down (15; quick 5)")
    cli.add_argument("--warm", type=float, default=None,
                     help="seconds of steady load before the first and after the last step (15; quick 5)")
    cli.add_argument("--no-verify", dest="verify", action="store_false", help="skip the PySpark verifier")
    args = cli.parse_args(argv)
    defaults(args, args.quick, rate=(2000, 1000), down=(15.0, 5.0), warm=(15.0, 5.0))
    entry, stamp = new_entry("drill", {
        "rate": args.rate, "partitions": PARTITIONS, "down_s": args.down, "warm_s": args.warm,
        "tail_s": args.warm, "controllers": 2, "workers": 2,
        "pipeline_config": "defaults (zookeeper.session_timeout_s=10, worker.commit_interval_s=5)",
        "load_producer": "idempotent, acks=all, message.timeout.ms=600000"}, mode="quick" if args.quick else "full")
    wall = time.monotonic()
    say(f"failure drill ({entry['mode']}) at {args.rate:,} records/s; load {load_line()}")
    scenario = Scenario(Profile(args.rate, tag=TAG, track_acked=True), lambda runner: script(runner, args.down),
                        warm_s=args.warm, tail_s=args.warm, observe_s=2.0 if args.quick else 5.0)

    def summary(entry: Entry) -> int:
        entry["elapsed_s"] = round(time.monotonic() - wall, 1)
        entry["load_at_end"] = load_average()
        status, entry["verdict"] = verdict(entry["drill"])
        print(render(entry))
        return status

    def go() -> Entry:
        run_script("drill", args, entry, stamp, scenario, 240)
        return entry

    return run_and_record(go, section="drill", summary=summary, no_write=args.no_write, failed_status=2)


if __name__ == "__main__":
    sys.exit(main())
