"""``ureplicator status``: the controller's ``GET /status`` as tables for a person, or JSON.

Exit status 0 when the pipeline needs nobody, 1 when the answer lists problems, so a cron
job or a readiness gate can run it as is.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ureplicator.cli.rest import call, table


def run(args: argparse.Namespace) -> int:
    body = call(args, "GET", "/status")
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        render(body, every_partition=args.all)
    return 0 if body["healthy"] else 1


def _num(value: Any, fmt: str = "{}") -> str:
    return "unknown" if value is None else fmt.format(value)


def render(body: dict[str, Any], every_partition: bool = False) -> None:
    verdict = "HEALTHY" if body["healthy"] else "NEEDS ATTENTION"
    print(f"pipeline {body['pipeline']}: {verdict}   leader {body['leader'] or 'none'}   "
          f"zookeeper {body['zookeeper']}")
    for problem in body["problems"]:
        print(f"  ! {problem}")
    for warning in body.get("warnings", ()):
        print(f"  ~ warning: {warning}")
    freshness = body.get("freshness")
    if freshness:
        age = "unknown (no heartbeat seen yet)" if freshness["age_s"] is None else f"{freshness['age_s']:.0f}s"
        print(f"freshness: {age} (RPO {freshness['rpo_s']:.0f}s){' LATE' if freshness['late'] else ''}")
    verification = body.get("verification")
    if verification:
        age = "" if verification.get("age_s") is None else f", {verification['age_s']:.0f}s ago"
        print(f"verification: {verification['status']} (run {verification['run_id']}{age})")
    elif body.get("verification_configured"):
        print("verification: no run yet")
    sync = body.get("group_sync")
    if sync:
        print(f"group sync: last {sync['last_sync_at'] or 'never'}"
              f"{_age(sync)}"
              f"{' STALE' if sync['stale'] else ''}")
    print()
    table(["WORKER", "HEALTH", "ASSIGNED", "APPLIED", "RECORDS/S", "LAG", "DETAIL"],
          [(w["worker"], w["health"], str(w["assigned"]), str(w["applied"]), f"{w['records_per_s']:.0f}",
            _num(w["lag"]), w["detail"]) for w in body["workers"]])
    print()
    rows = [p for p in body["partitions"] if every_partition or p["health"] != "ok"]
    if rows:
        table(["PARTITION", "OWNER", "HEALTH", "COMMITTED", "LAG", "LAG S", "RECORDS/S", "LAST ERROR / DETAIL"],
              [(f"{p['topic']}:{p['partition']}", p["owner"] or "-", p["health"], _num(p["committed"]),
                _num(p["lag_records"]), _num(p["lag_seconds"], "{:.1f}"), _num(p["records_per_s"], "{:.0f}"),
                p["last_error"] or p["detail"]) for p in rows])
    total = len(body["partitions"])
    ok = sum(1 for p in body["partitions"] if p["health"] == "ok")
    print(f"{ok} of {total} partition(s) ok" + ("" if every_partition or not total else " (--all lists every one)"))


def _age(entry: dict[str, Any]) -> str:
    return "" if entry.get("age_s") is None else f" ({entry['age_s']:.0f}s ago)"
