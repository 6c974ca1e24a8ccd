"""Failure drill: mirror under load while a worker, the leader controller and both brokers are killed and restarted.

    .venv/bin/python -m bench.drill            # 2,000 records/s, 15 s outages (~6-8 min with the verifier)
    .venv/bin/python -m bench.drill --quick    # 1,000 records/s, 5 s outages (~3 min, most of it Spark)

Own local stack (``.cache/bench-drill/stack``, always stopped again), two
controllers, two workers, one 16-partition topic. A producer process writes
continuously (idempotent, acks=all, ``message.timeout.ms`` 10 min so it rides
out the source broker's restart) and keeps the key of every record the source
*acknowledged*. In order, each after the mirror flows again:

1. kill -9 worker w1, restart it;
2. kill -9 the leading controller, wait for the standby to lead, restart it;
3. kill -9 the destination broker (``stack.kill_service``), restart it (same data dir);
4. kill -9 the source broker, restart it.

Then the load stops, the drill waits until the committed offsets reach the end
of every partition, stops the pipeline and runs the verifier
(``python -m ureplicator.verifier --config <pipeline yaml> --output <dir> --master local[2]``).
It prints the verifier's verdict and its own exact totals: records the source
acknowledged, records in the source log, mirrored (distinct source offsets on
the destination, from the ``urep`` header), lost (must be 0), duplicated,
reordered — plus, per outage, how long the destination received nothing.

Exit status: 0 nothing lost and the verifier says OK/WARN; 1 records lost or
the verifier says FAIL; 2 the drill or the verifier could not run.
Results: ``bench/results/drill-<date>.json`` (appended) and the drill section
of ``docs/benchmarks.md``.
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
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.common import REPO, load_average, machine_info, repo_relative
from bench.harness import (
    KEY,
    TAG_SHIFT,
    Arrivals,
    BenchError,
    Flow,
    Load,
    LoadResult,
    LogRead,
    Pipeline,
    compare,
    install_signal_handlers,
    load_line,
    longest_gap,
    read_log,
)
from bench.recording import run_and_record
from devtools import stack
from devtools.harness import Processes, bench_dir, create_topic, end_offsets, own_stack, say, stalled_ends, wait_for

START = "<!-- drill:start -->"
END = "<!-- drill:end -->"
PARTITIONS = 16
TAG = 7


def transactions_tool(bootstrap: str, args: list[str], timeout_s: float = 60) -> str:
    """The output of Kafka's ``kafka-transactions.sh`` (TransactionsCommand, from the pinned jars)."""
    from devtools import jvm

    cmd = [jvm.java_executable(), "-cp", jvm.classpath("kafka"), "org.apache.kafka.tools.TransactionsCommand",
           "--bootstrap-server", bootstrap, *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired, jvm.JvmError) as exc:
        return f"(could not run: {exc})"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("log4j:")]
    return "\n".join(lines).strip() or f"(no output, exit {done.returncode})"


class Drill:
    def __init__(self, services: dict[str, str], root: Path, pipeline: Pipeline, arrivals: Arrivals, topic: str,
                 args: argparse.Namespace) -> None:
        self.services = services
        self.root = root
        self.pipeline = pipeline
        self.arrivals = arrivals
        self.topic = topic
        self.args = args
        self.steps: list[dict[str, Any]] = []

    def flowing_since(self, since: float) -> bool:
        return all(self.arrivals.last_arrival((self.topic, p)) > since for p in range(PARTITIONS))

    def wait_flowing(self, since: float, timeout_s: float, what: str) -> float:
        wait_for(lambda: self.flowing_since(since), timeout_s, what, 0.2)
        return time.time()

    def diagnose(self, name: str) -> None:
        """A step that never recovered: the stalled partitions' ends, and every process's thread stacks."""
        recent = time.time() - 10
        stalled = [p for p in range(PARTITIONS) if self.arrivals.last_arrival((self.topic, p)) <= recent]
        seen = [len(self.arrivals.logs[(self.topic, p)].idents) for p in stalled]
        say(f"  {name}: partitions without an arrival for 10 s: {stalled}; their "
            f"{stalled_ends(self.services, self.topic, stalled)}; records the reader saw there {seen}")
        for proc in [*self.pipeline.workers.values(), *self.pipeline.controllers.values()]:
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGUSR1)  # faulthandler: thread stacks into the process's log
        # A last stable offset held back by a transaction nobody finishes (exactly-once mode):
        # Kafka's own tool names it, with its producer id and start offset.
        for args in (["list"], ["find-hanging", "--broker-id", "1"]):
            say(f"  kafka-transactions {' '.join(args)}:\n{transactions_tool(self.services['destination'], args)}")
        time.sleep(1)

    def step(self, name: str, kill: Callable[[], Any], restart: Callable[[], Any],
             recovered: Callable[[], bool] | None = None) -> None:
        """Kill, stay down ``--down`` seconds, restart, wait until every partition flows again."""
        say(f"drill: {name} [load {load_line()}]")
        record: dict[str, Any] = {"name": name, "load_before": load_average()}
        t0 = time.time()
        record["killed"] = kill()
        time.sleep(self.args.down)
        t_restart = time.time()
        restart()
        t_ready = time.time()  # the restarted component answers (broker ready, process registered)
        if recovered is not None:
            wait_for(recovered, 120, f"{name}: recovered", 0.3)
        try:
            flowing = self.wait_flowing(t_ready, 180, f"{name}: every partition flowing again")
        except BenchError:
            self.diagnose(name)
            raise
        time.sleep(self.args.settle)
        t1 = time.time()
        gaps = [longest_gap(self.arrivals.logs[(self.topic, p)].arrivals, t0, t1, 0.5) for p in range(PARTITIONS)]
        record.update({
            "down_s": round(t_restart - t0, 2),
            "restart_took_s": round(t_ready - t_restart, 2),
            "flowing_after_ready_s": round(flowing - t_ready, 2),
            "flowing_after_restart_s": round(flowing - t_restart, 2),
            "flowing_after_kill_s": round(flowing - t0, 2),
            "max_gap_s": round(max(g for g, _ in gaps), 2),
            "partitions_paused": sum(1 for g, _ in gaps if g > 2.0),
            "t0": t0,
            "t1": t1,
            "load_after": load_average(),
        })
        say(f"  down {record['down_s']:.1f}s; restart took {record['restart_took_s']:.1f}s; every partition "
            f"flowing {record['flowing_after_ready_s']:.1f}s after it was back; longest destination gap "
            f"{record['max_gap_s']:.1f}s "
            f"({record['partitions_paused']} partition(s) paused > 2 s)")
        self.steps.append(record)


def _leader_or_fail(pipeline: Pipeline) -> str:
    leader = pipeline.leader()
    if leader is None:
        raise BenchError("no controller says it leads")
    return leader


def run_drill(services: dict[str, str], root: Path, workdir: Path, stamp: str,
              args: argparse.Namespace) -> dict[str, Any]:
    processes = Processes(workdir)
    pipeline = Pipeline(services, processes, f"drill{stamp[-7:-1]}")
    arrivals = Arrivals(services["destination"], ident="urep")
    topic = f"drill-{stamp}"
    load: Load | None = None
    out: dict[str, Any] = {"topic": topic}
    try:
        pipeline.start_controller("c1")
        pipeline.start_controller("c2")
        pipeline.start_worker("w1")
        pipeline.start_worker("w2")
        create_topic(services["source"], topic, PARTITIONS)
        arrivals.start()
        pipeline.add_topic(topic, PARTITIONS)
        arrivals.add(topic, PARTITIONS)
        load = Load(services["source"], [Flow(topic, PARTITIONS, args.rate)], tag=TAG, track_acked=True).start()
        wait_for(lambda: pipeline.settled({topic: PARTITIONS}) and set(pipeline.owners(topic).values()) == {"w1", "w2"},
                 90, "initial assignment")
        drill = Drill(services, root, pipeline, arrivals, topic, args)
        drill.wait_flowing(time.time(), 60, "initial flow")
        say(f"drill: mirroring {topic} x {PARTITIONS} at {args.rate:,} records/s with 2 controllers and 2 workers; "
            f"{args.warm:.0f}s of steady load first (logs in {workdir})")
        time.sleep(args.warm)

        drill.step("kill -9 worker", lambda: pipeline.workers["w1"].kill() or "w1",
                   lambda: pipeline.start_worker("w1", timeout_s=90),
                   lambda: "w1" in set(pipeline.owners(topic).values()) and pipeline.settled({topic: PARTITIONS}))

        killed: dict[str, str] = {}

        def kill_leader() -> str:
            killed["label"] = _leader_or_fail(pipeline)
            pipeline.controllers[killed["label"]].kill()
            return killed["label"]

        def restart_leader() -> None:
            wait_for(lambda: pipeline.leader() is not None, 60, "the standby to lead", 0.3)
            pipeline.start_controller(killed["label"])

        drill.step("kill -9 leader controller", kill_leader, restart_leader,
                   lambda: pipeline.leader() is not None and pipeline.settled({topic: PARTITIONS}))
        drill.step("kill -9 destination broker",
                   lambda: stack.kill_service(root, "destination") or "destination",
                   lambda: stack.start_service(root, "destination", timeout_s=120))
        drill.step("kill -9 source broker",
                   lambda: stack.kill_service(root, "source") or "source",
                   lambda: stack.start_service(root, "source", timeout_s=120))

        say(f"drill: {args.tail:.0f}s more load, then stop producing")
        time.sleep(args.tail)
        result = load.stop()
        out["load"] = {"sent": result.sent, "acked": result.acked, "failed": result.failed,
                       "first_error": result.first_error}
        say(f"drill: producer stopped: {result.sent:,} sent, {result.acked:,} acknowledged by the source, "
            f"{result.failed:,} failed")
        caught = time.monotonic()
        try:
            _wait_caught_up(pipeline, services, topic, 240)
            out["catch_up_s"] = round(time.monotonic() - caught, 1)
        except BenchError as exc:
            out["catch_up_error"] = str(exc)
            say(f"  {exc}; comparing what is there")
        time.sleep(1)
        out["steps"] = drill.steps
        out["bad_headers"] = arrivals.bad_headers
        say("drill: stopping the pipeline (workers commit), then comparing source and destination")
        arrivals.stop()
        pipeline.stop_all()
        source = read_log(services["source"], topic, PARTITIONS)
        destination = read_log(services["destination"], topic, PARTITIONS)
        cmp = compare(source, destination, by="urep")
        out["comparison"] = cmp.to_json()
        out["acknowledged"] = _acked_check(result, topic, source, destination)
        _dups_per_step(drill.steps, arrivals, topic)
        say(f"  source log {cmp.records:,} records; destination {cmp.destination_records:,}; mirrored "
            f"{cmp.mirrored:,}; lost {cmp.lost}; duplicated {cmp.duplicated}; reordered {cmp.reordered}; "
            f"acknowledged but missing from the destination: {out['acknowledged']['missing_on_destination']}")
        if args.verify:
            out["verifier"] = run_verifier(pipeline.config_path, workdir / "verification", args.verify_timeout)
        else:
            out["verifier"] = {"skipped": "--no-verify"}
    finally:
        if load is not None:
            load.kill()
        arrivals.stop()
        pipeline.stop_all()
        processes.stop_all()
    return out


def _wait_caught_up(pipeline: Pipeline, services: dict[str, str], topic: str, timeout_s: float) -> None:
    def done() -> bool:
        status, body = pipeline.api("GET", "/offset")
        if status != 200 or body.get("total_lag") != 0:
            return False
        src = end_offsets(services["source"], topic, PARTITIONS)
        dst = end_offsets(services["destination"], topic, PARTITIONS)
        return src is not None and dst is not None and all(dst[p] >= src[p] for p in src)

    wait_for(done, timeout_s, "committed offsets at the end of every partition", 1.0)


def _acked_check(result: LoadResult, topic: str, source: dict[int, LogRead],
                 destination: dict[int, LogRead]) -> dict[str, Any]:
    """Every record the source acknowledged must be in the source log and on the destination."""
    missing_source = missing_destination = acked = 0
    samples: list[str] = []
    for (t, p), seqs in (result.acked_keys or {}).items():
        if t != topic:
            continue
        in_source = set(source[p].keys)
        on_destination = set(destination[p].keys)
        for seq in seqs:
            acked += 1
            ident = (TAG << TAG_SHIFT) | seq
            if ident not in in_source:
                missing_source += 1
            if ident not in on_destination:
                missing_destination += 1
                if len(samples) < 10:
                    samples.append(f"{p}:{seq}")
    return {"acked": acked, "missing_from_source_log": missing_source,
            "missing_on_destination": missing_destination, "samples": samples, "key_format": KEY.format}


def _dups_per_step(steps: list[dict[str, Any]], arrivals: Arrivals, topic: str) -> None:
    times: list[float] = []
    for (t, _), log in arrivals.logs.items():
        if t != topic:
            continue
        seen: set[int] = set()
        for ident, arrival in zip(log.idents, log.arrivals, strict=True):
            if ident in seen:
                times.append(arrival)
            else:
                seen.add(ident)
    for i, step in enumerate(steps):
        stop = steps[i + 1]["t0"] if i + 1 < len(steps) else float("inf")
        step["duplicates"] = sum(1 for t in times if step["t0"] <= t < stop)


def run_verifier(config: Path, output: Path, timeout_s: float) -> dict[str, Any]:
    """``python -m ureplicator.verifier``; its verdict line, exit status and the JSON report's totals."""
    output.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "ureplicator.verifier", "--config", str(config), "--output", str(output),
           "--master", "local[2]"]
    say(f"drill: running the verifier: {' '.join(cmd[1:])}")
    started = time.monotonic()
    log = output / "verifier.log"
    try:
        with open(log, "wb") as err:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, cwd=str(REPO), timeout=timeout_s,
                                  check=False)
    except subprocess.TimeoutExpired:
        return {"exit_status": None, "error": f"timed out after {timeout_s:.0f}s", "log": str(log)}
    stdout = proc.stdout.decode(errors="replace").strip()
    record: dict[str, Any] = {
        "exit_status": proc.returncode,
        "verdict_line": stdout.splitlines()[-1].replace(f"{REPO}/", "") if stdout else "",
        "elapsed_s": round(time.monotonic() - started, 1),
        "log": str(log.relative_to(REPO)) if log.is_relative_to(REPO) else str(log),
        "command": " ".join(["python", *cmd[1:]]).replace(f"{REPO}/", ""),
    }
    match = re.search(r"report (\S+)", stdout)
    report = Path(match.group(1)) if match else None
    if report is not None and not report.is_absolute():
        report = REPO / report
    if report is not None and report.exists() and report.suffix == ".json":
        try:
            doc = json.loads(report.read_text())
            record["status"] = doc.get("status")
            record["totals"] = doc.get("totals")
            record["report"] = str(report)
        except ValueError as exc:
            record["report_error"] = str(exc)
    if proc.returncode == 2 or not stdout:
        record["stderr_tail"] = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    say(f"  verifier exit {proc.returncode} after {record['elapsed_s']:.0f}s: "
        f"{record['verdict_line'] or '(no verdict)'}")
    return record


# ----------------------------------------------------------------------------- report


def verdict(out: dict[str, Any]) -> tuple[int, str]:
    lost = out["comparison"]["lost"] + out["acknowledged"]["missing_on_destination"]
    verifier = out.get("verifier", {})
    if lost:
        return 1, f"FAIL: {lost} records lost"
    status = verifier.get("exit_status")
    if verifier.get("skipped"):
        return 0, "OK (verifier skipped)"
    if status == 1:
        return 1, "FAIL: the verifier found a problem"
    if status != 0:
        return 2, f"verifier could not run (exit {status})"
    return 0, "OK"


def render(entry: dict[str, Any]) -> str:
    m = entry["machine"]
    d = entry["drill"]
    c = d["comparison"]
    load = d["load"]
    v = d.get("verifier", {})
    lines = [
        "## Failure drill",
        "",
        f"`make drill` (`python -m bench.drill{' --quick' if entry['mode'] == 'quick' else ''}`)"
        f"{' — **quick mode**' if entry['mode'] == 'quick' else ''} on {m['cpu_model']}, {m['cores']} cores, "
        f"{m['ram_bytes'] / 2**30:.0f} GiB RAM, Python {m['python']}, {m['java']}, Kafka {m['kafka_brokers']}, "
        f"{entry['date'][:10]}; {entry['elapsed_s'] / 60:.1f} min. Load average at start "
        f"{_fmt_load(entry['load_at_start'])}, at end {_fmt_load(entry['load_at_end'])}.",
        "",
        f"{entry['setup']['rate']:,} records/s on 16 partitions, two controllers, two workers (defaults: ZooKeeper "
        f"session 10 s, commit interval 5 s); each component killed -9, left down {entry['setup']['down_s']:.0f} s, "
        "restarted (brokers keep their data directories), and the next step starts once every partition flows "
        "again. *Gap* = longest time a partition received nothing at a destination consumer.",
        "",
        "| step | down | restart took | every partition flowing after it was back | longest gap | "
        "partitions paused > 2 s | duplicates |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in d.get("steps", []):
        lines.append(f"| {s['name']} | {s['down_s']:.1f} s | {s['restart_took_s']:.1f} s | "
                     f"{s['flowing_after_ready_s']:.1f} s | {s['max_gap_s']:.1f} s | "
                     f"{s['partitions_paused']} | {s.get('duplicates', 0):,} |")
    ack = d["acknowledged"]
    lines += [
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
    lines += [f"- {line}" for line in analysis(entry)]
    return "\n".join(lines)


def analysis(entry: dict[str, Any]) -> list[str]:
    d = entry["drill"]
    out = []
    steps = {s["name"]: s for s in d.get("steps", [])}
    c = d["comparison"]
    ack = d["acknowledged"]
    out.append(f"Nothing the source acknowledged was lost: all {ack['acked']:,} acknowledged records are on the "
               "destination, checked by key and by source offset." if c["lost"] == 0
               and ack["missing_on_destination"] == 0 else
               f"{c['lost']} records were LOST ({ack['missing_on_destination']} acknowledged ones) — a bug.")
    worker = steps.get("kill -9 worker")
    if worker:
        out.append(f"Worker crash: the survivor took the dead worker's partitions after the 10 s session timeout; "
                   f"{worker.get('duplicates', 0):,} duplicates (records mirrored after the last commit, bounded by "
                   "the 5 s commit interval). The restarted worker got its share back through planned hand-offs.")
    leader = steps.get("kill -9 leader controller")
    if leader:
        out.append(f"Leader crash: longest gap {leader['max_gap_s']:.1f} s — mirroring does not depend on a leader; "
                   "only reassignment waits for the standby (session timeout).")
    dst = steps.get("kill -9 destination broker")
    if dst:
        out.append(f"Destination crash: the workers' producers kept the records (`message.timeout.ms=0`: never "
                   "dropped; at this rate the 64 MB in-flight budget was not reached) and delivered them once the "
                   f"broker was back: every partition flowed {dst['flowing_after_ready_s']:.1f} s after the broker "
                   f"answered again (its own restart took {dst['restart_took_s']:.1f} s under this load), with "
                   f"{dst.get('duplicates', 0):,} duplicates (idempotent producer).")
    src = steps.get("kill -9 source broker")
    if src:
        out.append(f"Source crash: the load producer buffered (idempotent, 10-minute delivery timeout) and the "
                   f"workers resumed from their positions {src['flowing_after_ready_s']:.1f} s after the broker was "
                   "back; committed offsets survived in the source's `__consumer_offsets`.")
    if src or dst:
        out.append("Most of the seconds between \"broker back\" and \"flowing\" are probably librdkafka's reconnect "
                   "back-off, which grows to `reconnect.backoff.max.ms` = 10 s by default while a broker is down; "
                   "the pipeline does not lower it.")
    out.append(f"Records reordered: {c['reordered']} (per-partition order of first arrivals).")
    return out


def _fmt_load(values: Any) -> str:
    return "/".join(f"{v:.1f}" for v in values)


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drill", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1,000 records/s, 5 s outages")
    parser.add_argument("--rate", type=int, default=None, help="records/s (default 2000; quick 1000)")
    parser.add_argument("--down", type=float, default=None, help="seconds each component stays down (15; quick 5)")
    parser.add_argument("--warm", type=float, default=None, help="seconds of steady load first (15; quick 5)")
    parser.add_argument("--settle", type=float, default=None, help="seconds observed after recovery (5; quick 2)")
    parser.add_argument("--tail", type=float, default=None, help="seconds of load after the last step (15; quick 5)")
    parser.add_argument("--no-verify", dest="verify", action="store_false", help="skip the PySpark verifier")
    parser.add_argument("--verify-timeout", type=float, default=900)
    parser.add_argument("--broker-heap", default="512m")
    parser.add_argument("--no-write", action="store_true", help="print only; no JSON, no docs section")
    args = parser.parse_args(argv)
    args.rate = args.rate or (1000 if args.quick else 2000)
    args.down = args.down if args.down is not None else (5.0 if args.quick else 15.0)
    args.warm = args.warm if args.warm is not None else (5.0 if args.quick else 15.0)
    args.settle = args.settle if args.settle is not None else (2.0 if args.quick else 5.0)
    args.tail = args.tail if args.tail is not None else (5.0 if args.quick else 15.0)
    return args


def print_summary(entry: dict[str, Any], wall: float) -> int:
    """Time and judge the run, drop the steps' raw timestamps, print the summary; returns the exit status."""
    entry["elapsed_s"] = round(time.monotonic() - wall, 1)
    entry["load_at_end"] = load_average()
    status, text = verdict(entry["drill"])
    entry["verdict"] = text
    for s in entry["drill"].get("steps", []):
        s.pop("t0", None)
        s.pop("t1", None)
    d = entry["drill"]
    c = d["comparison"]
    v = d.get("verifier", {})
    for s in d.get("steps", []):
        print(f"{s['name']:<28} down {s['down_s']:5.1f}s  restart {s['restart_took_s']:5.1f}s  flowing "
              f"{s['flowing_after_ready_s']:5.1f}s after it was back  longest gap {s['max_gap_s']:5.1f}s  "
              f"paused {s['partitions_paused']:>2}  "
              f"dups {s.get('duplicates', 0):>6,}")
    print(f"verifier: {v.get('verdict_line') or v.get('skipped') or v.get('error') or 'no verdict'} "
          f"(exit {v.get('exit_status')})")
    print(f"produced (acknowledged by the source): {d['load']['acked']:,}   source log: {c['records']:,}   "
          f"mirrored: {c['mirrored']:,}   lost: {c['lost']}   duplicated: {c['duplicated']:,}   "
          f"reordered: {c['reordered']}")
    print(f"drill verdict: {text}")
    return status


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers()
    now = datetime.now(timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    entry: dict[str, Any] = {
        "benchmark": "drill",
        "date": now.isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "machine": machine_info(),
        "setup": {"rate": args.rate, "partitions": PARTITIONS, "down_s": args.down, "warm_s": args.warm,
                  "tail_s": args.tail, "controllers": 2, "workers": 2,
                  "pipeline_config": "defaults (zookeeper.session_timeout_s=10, worker.commit_interval_s=5)",
                  "load_producer": "idempotent, acks=all, message.timeout.ms=600000"},
        "load_at_start": load_average(),
    }
    wall = time.monotonic()
    say(f"failure drill ({entry['mode']}) at {args.rate:,} records/s; load {load_line()}")

    def go() -> dict[str, Any]:
        with own_stack("drill", heap=args.broker_heap) as (services, root):
            workdir = bench_dir("drill") / f"run-{stamp}"
            workdir.mkdir(parents=True, exist_ok=True)
            entry["drill"] = run_drill(services, root, workdir, stamp, args)
        return entry

    return run_and_record(go, prefix="drill", start=START, end=END, render=render,
                          summary=lambda e: print_summary(e, wall), no_write=args.no_write, failed_status=2)


if __name__ == "__main__":
    sys.exit(main())
