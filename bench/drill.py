"""Failure drill: mirror under load while a worker, the leader controller and both brokers are killed and restarted.

    .venv/bin/python -m bench.drill            # 2,000 records/s, 15 s outages (~6-8 min with the verifier)
    .venv/bin/python -m bench.drill --quick    # 1,000 records/s, 5 s outages (~3 min, most of it Spark)
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bench.common import fmt_load, load_average, repo_relative
from bench.harness import load_line
from bench.recording import parser, run_and_record
from bench.scenario import (
    PARTITIONS,
    Profile,
    Runner,
    defaults,
    new_entry,
    print_steps,
    run_verifier,
    stage,
    stop_leader,
    stop_service,
    stop_worker,
    verdict,
)
from devtools.harness import say

TAG = 7


def run_drill(runner: Runner, stamp: str, args: Any) -> dict[str, Any]:
    topic = f"drill-{stamp}"
    out: dict[str, Any] = {"topic": topic}
    pipeline, topics = runner.pipeline, runner.topics
    runner.down_s, runner.settle_s = args.down, args.settle
    runner.start(topic)
    say(f"drill: mirroring {topic} x {PARTITIONS} at {args.rate:,} records/s with 2 controllers and 2 workers; "
        f"{args.warm:.0f}s of steady load first (logs in {runner.workdir})")
    time.sleep(args.warm)
    for fault in [  # each component in turn, killed -9 and restarted
        stop_worker(runner, "w1", "kill -9 worker", recovered=lambda: "w1" in {
            w for t in topics for w in pipeline.owners(t).values()} and pipeline.settled(topics)),
        stop_leader(runner, "kill -9 leader controller",
                    recovered=lambda: pipeline.leader() is not None and pipeline.settled(topics)),
        stop_service(runner, "destination", "kill -9 destination broker", kill=True),
        stop_service(runner, "source", "kill -9 source broker", kill=True),
    ]:
        runner.step(fault)
    say(f"drill: {args.tail:.0f}s more load, then stop producing")
    time.sleep(args.tail)
    caught = time.monotonic()
    (result,), error = runner.finish(240)
    say(f"drill: producer stopped: {result.sent:,} sent, {result.acked:,} acknowledged by the source, "
        f"{result.failed:,} failed")
    if error is None:
        out["catch_up_s"] = round(time.monotonic() - caught, 1)
    else:
        out["catch_up_error"] = error
    runner.account(out, topic, result)
    out["verifier"] = (run_verifier(runner.pipeline.config_path, runner.workdir / "verification",
                                    args.verify_timeout) if args.verify else {"skipped": "--no-verify"})
    return out


def render(entry: dict[str, Any]) -> str:
    m, d = entry["machine"], entry["drill"]
    c, load, v, ack = d["comparison"], d["load"], d.get("verifier", {}), d["acknowledged"]
    quick = entry["mode"] == "quick"
    lines = [
        "## Failure drill",
        "",
        f"`make drill` (`python -m bench.drill{' --quick' if quick else ''}`){' — **quick mode**' if quick else ''} "
        f"on {m['cpu_model']}, {m['cores']} cores, {m['ram_bytes'] / 2**30:.0f} GiB RAM, Python {m['python']}, "
        f"{m['java']}, Kafka {m['kafka_brokers']}, {entry['date'][:10]}; {entry['elapsed_s'] / 60:.1f} min. Load "
        f"average at start {fmt_load(entry['load_at_start'])}, at end {fmt_load(entry['load_at_end'])}.",
        "",
        f"{entry['setup']['rate']:,} records/s on 16 partitions, two controllers, two workers (defaults: ZooKeeper "
        f"session 10 s, commit interval 5 s); each component killed -9, left down {entry['setup']['down_s']:.0f} s, "
        "restarted (brokers keep their data directories), and the next step starts once every partition flows "
        "again. *Gap* = longest time a partition received nothing at a destination consumer.",
        "",
        "| step | down | restart took | every partition flowing after it was back | longest gap | "
        "partitions paused > 2 s | duplicates |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *[f"| {s['name']} | {s['down_s']:.1f} s | {s['restart_took_s']:.1f} s | {s['flowing_after_ready_s']:.1f} s "
          f"| {s['max_gap_s']:.1f} s | {s['partitions_paused']} | {s.get('duplicates', 0):,} |"
          for s in d.get("steps", [])],
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
        command = repo_relative(v.get("command", "python -m verifier"))
        line = repo_relative(v.get("verdict_line") or "no verdict line")
        lines.append(f"Verifier (`{command}`): exit {v['exit_status']}, `{line}`.")
        if v.get("stderr_tail") and v["exit_status"] == 2:
            reason = v["stderr_tail"].strip().splitlines()[-1] if v["stderr_tail"].strip() else ""
            lines.append(f"It could not run: `{reason[:300]}`.")
    lines += ["", f"**Verdict: {entry['verdict']}.**", "", "**Analysis.**", ""]
    return "\n".join(lines + [f"- {line}" for line in analysis(d)])


def analysis(d: dict[str, Any]) -> list[str]:
    steps = {s["name"]: s for s in d.get("steps", [])}
    c, ack = d["comparison"], d["acknowledged"]
    out = [f"Nothing the source acknowledged was lost: all {ack['acked']:,} acknowledged records are on the "
           "destination, checked by key and by source offset." if c["lost"] == 0
           and ack["missing_on_destination"] == 0 else
           f"{c['lost']} records were LOST ({ack['missing_on_destination']} acknowledged ones) — a bug."]
    if worker := steps.get("kill -9 worker"):
        out.append(f"Worker crash: the survivor took the dead worker's partitions after the 10 s session timeout; "
                   f"{worker.get('duplicates', 0):,} duplicates (records mirrored after the last commit, bounded by "
                   "the 5 s commit interval). The restarted worker got its share back through planned hand-offs.")
    if leader := steps.get("kill -9 leader controller"):
        out.append(f"Leader crash: longest gap {leader['max_gap_s']:.1f} s — mirroring does not depend on a leader; "
                   "only reassignment waits for the standby (session timeout).")
    if dst := steps.get("kill -9 destination broker"):
        out.append(f"Destination crash: the workers' producers kept the records (`message.timeout.ms=0`: never "
                   "dropped; at this rate the 64 MB in-flight budget was not reached) and delivered them once the "
                   f"broker was back: every partition flowed {dst['flowing_after_ready_s']:.1f} s after the broker "
                   f"answered again (its own restart took {dst['restart_took_s']:.1f} s under this load), with "
                   f"{dst.get('duplicates', 0):,} duplicates (idempotent producer).")
    if src := steps.get("kill -9 source broker"):
        out.append(f"Source crash: the load producer buffered (idempotent, 10-minute delivery timeout) and the "
                   f"workers resumed from their positions {src['flowing_after_ready_s']:.1f} s after the broker was "
                   "back; committed offsets survived in the source's `__consumer_offsets`.")
    if src or dst:
        out.append("Most of the seconds between \"broker back\" and \"flowing\" are probably librdkafka's reconnect "
                   "back-off, which grows to `reconnect.backoff.max.ms` = 10 s by default while a broker is down; "
                   "the pipeline does not lower it.")
    return out + [f"Records reordered: {c['reordered']} (per-partition order of first arrivals)."]


def main(argv: list[str] | None = None) -> int:
    cli = parser("python -m bench.drill", __doc__, "512m")
    cli.add_argument("--quick", action="store_true", help="smoke run: 1,000 records/s, 5 s outages")
    cli.add_argument("--rate", type=int, default=None, help="records/s (default 2000; quick 1000)")
    cli.add_argument("--down", type=float, default=None, help="seconds each component stays down (15; quick 5)")
    cli.add_argument("--warm", type=float, default=None, help="seconds of steady load first (15; quick 5)")
    cli.add_argument("--settle", type=float, default=None, help="seconds observed after recovery (5; quick 2)")
    cli.add_argument("--tail", type=float, default=None, help="seconds of load after the last step (15; quick 5)")
    cli.add_argument("--no-verify", dest="verify", action="store_false", help="skip the PySpark verifier")
    cli.add_argument("--verify-timeout", type=float, default=900)
    args = cli.parse_args(argv)
    defaults(args, args.quick, rate=(2000, 1000), down=(15.0, 5.0), warm=(15.0, 5.0), settle=(5.0, 2.0),
             tail=(15.0, 5.0))
    entry, stamp = new_entry("drill", {
        "rate": args.rate, "partitions": PARTITIONS, "down_s": args.down, "warm_s": args.warm,
        "tail_s": args.tail, "controllers": 2, "workers": 2,
        "pipeline_config": "defaults (zookeeper.session_timeout_s=10, worker.commit_interval_s=5)",
        "load_producer": "idempotent, acks=all, message.timeout.ms=600000"}, mode="quick" if args.quick else "full")
    wall = time.monotonic()
    say(f"failure drill ({entry['mode']}) at {args.rate:,} records/s; load {load_line()}")

    def go() -> dict[str, Any]:
        with stage("drill", args.broker_heap, stamp) as (services, root, workdir), \
                Runner(services, root, workdir, f"drill{stamp[-7:-1]}",
                       Profile(args.rate, tag=TAG, track_acked=True)) as runner:
            entry["drill"] = run_drill(runner, stamp, args)
        return entry

    def summary(entry: dict[str, Any]) -> int:
        entry["elapsed_s"] = round(time.monotonic() - wall, 1)
        entry["load_at_end"] = load_average()
        status, entry["verdict"] = verdict(entry["drill"])
        d, v = entry["drill"], entry["drill"].get("verifier", {})
        print_steps(d.get("steps", []))
        print(f"verifier: {v.get('verdict_line') or v.get('skipped') or v.get('error') or 'no verdict'} "
              f"(exit {v.get('exit_status')})")
        print(f"drill verdict: {entry['verdict']}")
        return status

    return run_and_record(go, section="drill", summary=summary, no_write=args.no_write, failed_status=2)


if __name__ == "__main__":
    sys.exit(main())
