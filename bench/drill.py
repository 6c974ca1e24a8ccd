"""Failure drill: mirror under load while a worker, the leader controller and both brokers are killed and restarted.

    .venv/bin/python -m bench.drill            # 2,000 records/s, 15 s outages (~6-8 min with the verifier)
    .venv/bin/python -m bench.drill --quick    # 1,000 records/s, 5 s outages (~3 min, most of it Spark)
"""

from __future__ import annotations

import sys
import time

from bench.common import fmt_load, load_average, repo_relative
from bench.harness import load_line
from bench.recording import parser, run_and_record
from bench.render import table
from bench.scenario import (
    PARTITIONS,
    Entry,
    Profile,
    Runner,
    Scenario,
    Step,
    defaults,
    new_entry,
    print_steps,
    staged,
    stop_leader,
    stop_service,
    stop_worker,
    verdict,
)
from devtools.harness import say

TAG = 7


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
    m, d = entry["machine"], entry["drill"]
    c, load, v, ack = d["comparison"], d["load"], d.get("verifier", {}), d["acknowledged"]
    quick = entry["mode"] == "quick"
    steps = {s["name"]: s for s in d.get("steps", [])}
    lines = [
        "## Failure drill",
        "",
        f"`make drill` (`python -m bench.drill{' --quick' if quick else ''}`){' — **quick mode**' if quick else ''} "
        f"on {m['cpu_model']}, {m['cores']} cores, {m['ram_bytes'] / 2**30:.0f} GiB RAM, Python {m['python']}, "
        f"{m['java']}, Kafka {m['kafka_brokers']}, {entry['date'][:10]}; {entry['elapsed_s'] / 60:.1f} min. Load "
        f"average at start {fmt_load(entry['load_at_start'])}, at end {fmt_load(entry['load_at_end'])}. "
        f"{entry['setup']['rate']:,} records/s on 16 partitions; each component left down "
        f"{entry['setup']['down_s']:.0f} s.",
        "",
        *table(["step", "down", "restart took", "every partition flowing after it was back", "longest gap",
                "partitions paused > 2 s", "duplicates"],
               [[s["name"], f"{s['down_s']:.1f} s", f"{s['restart_took_s']:.1f} s",
                 f"{s['flowing_after_ready_s']:.1f} s", f"{s['max_gap_s']:.1f} s", s["partitions_paused"],
                 f"{s.get('duplicates', 0):,}"] for s in steps.values()], "lrrrrrr"),
        "",
        f"Totals: **{load['acked']:,} records acknowledged by the source** ({load['sent']:,} produced, "
        f"{load['failed']:,} failed), {c['records']:,} in the source log, **{c['mirrored']:,} mirrored**, "
        f"**lost {c['lost']}** (acknowledged but missing on the destination: {ack['missing_on_destination']}), "
        f"duplicated {c['duplicated']:,}, reordered {c['reordered']}.",
        "",
    ]
    if v.get("skipped"):
        lines.append(f"Verifier: skipped ({v['skipped']}).")
    elif v.get("exit_status") is None:
        lines.append(f"Verifier: did not finish ({v.get('error')}).")
    else:
        line = repo_relative(v.get("verdict_line") or "no verdict line")
        lines.append(f"Verifier (`{repo_relative(v.get('command', 'python -m verifier'))}`): exit "
                     f"{v['exit_status']}, `{line}`.")
        if v.get("stderr_tail", "").strip() and v["exit_status"] == 2:
            lines.append(f"It could not run: `{v['stderr_tail'].strip().splitlines()[-1][:300]}`.")
    lines += ["", f"**Verdict: {entry['verdict']}.**"]
    if (w := steps.get("kill -9 worker")) and (dst := steps.get("kill -9 destination broker")):
        lines += ["", f"The dead worker's partitions moved after the session timeout with {w.get('duplicates', 0):,} "
                  "duplicates (bounded by the commit interval); after a broker restart every partition flowed "
                  f"{dst['flowing_after_ready_s']:.1f} s after it answered again (Methods: how to read this)."]
    return "\n".join(lines)


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

    def go() -> Entry:
        topic = f"drill-{stamp}"
        entry["drill"] = {"topic": topic}
        with staged("drill", args.broker_heap, stamp, scenario) as runner:
            say(f"drill: mirroring {topic} x {PARTITIONS} at {args.rate:,} records/s with 2 controllers and 2 "
                f"workers; {args.warm:.0f}s of steady load before the first step and after the last (logs in "
                f"{runner.workdir})")
            runner.run(topic)
            runner.outcome(entry["drill"], topic, 240, args.verify)
        return entry

    def summary(entry: Entry) -> int:
        entry["elapsed_s"] = round(time.monotonic() - wall, 1)
        entry["load_at_end"] = load_average()
        status, entry["verdict"] = verdict(entry["drill"])
        print_steps(entry["drill"].get("steps", []))
        print(f"drill verdict: {entry['verdict']}")
        return status

    return run_and_record(go, section="drill", summary=summary, no_write=args.no_write, failed_status=2)


if __name__ == "__main__":
    sys.exit(main())
