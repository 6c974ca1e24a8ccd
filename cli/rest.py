"""The CLI commands that call the controller's REST API: one command per endpoint.

Each command is a parser (``add_parsers``) and a handler that calls :func:`call` and prints a
table, or the JSON answer with ``--json``. ``--route ID`` sends the call to ``/routes/ID/...``.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from typing import Any

from ureplicator.common.errors import UReplicatorError
from ureplicator.controller.client import request

# Paths that belong to the deployment, not to a route: never prefixed with /routes/<id>.
_UNROUTED = ("/health", "/healthz", "/status", "/clusters", "/routes", "/openapi.json", "/metrics")


def call(args: argparse.Namespace, method: str, path: str, body: Any = None, routed: bool = True) -> Any:
    """One REST call; raises UReplicatorError with the API's message on a status >= 400."""
    if routed and args.route and not path.startswith(_UNROUTED):
        path = f"/routes/{urllib.parse.quote(args.route, safe='')}{path}"
    status, payload = request(f"{args.url.rstrip('/')}{path}", method, body, args.token, ca=args.ca)
    if status >= 400:
        message = (payload or {}).get("error", {}).get("message", payload) if isinstance(payload, dict) else payload
        raise UReplicatorError(f"{_command(args)}: {status}: {message}")
    return payload


def _command(args: argparse.Namespace) -> str:
    return " ".join(x for x in (args.command, getattr(args, "action", None)) if x)


def table(header: list[str], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    for row in [tuple(header), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def lag_text(lag: Any) -> str:
    """A lag for people: librdkafka's -1 (no position or end offset known yet) is 'unknown'."""
    return "unknown" if lag is None or (isinstance(lag, int) and lag < 0) else str(lag)


def _print_json(body: Any) -> None:
    print(json.dumps(body, indent=2))


# --- parsers -------------------------------------------------------------------------------------


def add_parsers(sub: Any) -> None:
    topics = sub.add_parser("topics", help="manage mirrored topics (/topics)")
    tsub = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = tsub.add_parser("add", help="start mirroring a topic")
    add.add_argument("topic", help="source topic name")
    add.add_argument("--partitions", type=int, default=None, help="expected partition count (checked)")
    add.add_argument("--destination", default=None, help="destination topic name (default: naming rule)")
    expand = tsub.add_parser("expand", help="grow a mirrored topic after its source grew")
    expand.add_argument("topic", help="source topic name")
    expand.add_argument("--partitions", type=int, default=None, help="the source's new partition count (checked)")
    for action, text in (("remove", "stop mirroring (the destination keeps its data)"),
                         ("show", "partitions, owners, lag and errors"),
                         ("pause", "stop mirroring for now; offsets are committed"),
                         ("resume", "resume a paused topic")):
        tsub.add_parser(action, help=text).add_argument("topic", help="source topic name")
    tsub.add_parser("list", help="mirrored topics")
    topics.set_defaults(func=_topics)

    workers = sub.add_parser("workers", help="list, blacklist (drain) or whitelist workers (/instances)")
    wsub = workers.add_subparsers(dest="action", required=True, metavar="ACTION")
    wsub.add_parser("list", help="workers with assignment and rates")
    for action, text in (("blacklist", "drain a worker: its partitions are handed off gracefully"),
                         ("whitelist", "let a blacklisted worker take partitions again")):
        wsub.add_parser(action, help=text).add_argument("worker", help="worker id")
    workers.set_defaults(func=_workers)

    rebalance = sub.add_parser("rebalance", help="ask the leader to rebalance now (POST /instances)")
    rebalance.set_defaults(func=_rebalance)

    offsets = sub.add_parser("offsets", help="committed offset, end offset and lag per partition (/offset)")
    offsets.add_argument("topic", nargs="?", help="one topic (default: every mirrored topic)")
    offsets.add_argument("partition", nargs="?", type=int, help="one partition of TOPIC")
    offsets.set_defaults(func=_offsets)

    noprogress = sub.add_parser("noprogress", help="partitions that stopped progressing or have no owner "
                                                   "(/noprogress); exits 1 when there are any")
    noprogress.set_defaults(func=_noprogress)

    validation = sub.add_parser("validation", help="desired vs applied assignment per worker (/validation); "
                                                   "exits 1 on a mismatch")
    validation.set_defaults(func=_validation)

    blacklist = sub.add_parser("blacklist", help="topics and partitions that are not mirrored (/blacklist)")
    bsub = blacklist.add_subparsers(dest="action", required=True, metavar="ACTION")
    bsub.add_parser("list", help="blacklisted topics, partitions and workers")
    for action, text in (("add", "blacklist a topic (auto-whitelisting skips it) or one partition"),
                         ("remove", "whitelist a topic or partition again")):
        p = bsub.add_parser(action, help=text)
        p.add_argument("topic", help="source topic name")
        p.add_argument("--partition", type=int, default=None, help="only this partition")
    blacklist.set_defaults(func=_blacklist)

    balancing = sub.add_parser("autobalancing", help="rebalancing by rate and lag (/admin/*_autobalancing)")
    balancing.add_argument("action", choices=["status", "enable", "disable"], help="show, turn on or turn off")
    balancing.set_defaults(func=_autobalancing)

    workload = sub.add_parser("workload", help="per-worker rates, partitions and lag (/admin/workloadinfo)")
    workload.set_defaults(func=_workload)

    rate = sub.add_parser("rate-limit", help="every worker's throughput ceiling (/admin/rate_limit)")
    rsub = rate.add_subparsers(dest="action", required=True, metavar="ACTION")
    rsub.add_parser("show", help="the current limit (0 = unlimited)")
    setter = rsub.add_parser("set", help="change the limit at runtime (0 = unlimited); a limit not named "
                                         "keeps its current value")
    # default None, not 0: POST /admin/rate_limit replaces the whole limit, so a 0 sent for a
    # flag the user left out would silently lift that limit (_rate_limit merges instead).
    setter.add_argument("--records-per-s", type=int, default=None, help="records per second per worker")
    setter.add_argument("--bytes-per-s", type=int, default=None, help="bytes per second per worker")
    rate.set_defaults(func=_rate_limit)

    verification = sub.add_parser("verification", help="the verifier's newest verdict and run history "
                                                       "(/verification); exits 1 when the newest run failed")
    vsub = verification.add_subparsers(dest="action", required=True, metavar="ACTION")
    vsub.add_parser("show", help="the newest run's summary")
    history = vsub.add_parser("history", help="recent runs, newest first")
    history.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")
    verification.set_defaults(func=_verification)

    openapi = sub.add_parser("openapi", help="the controller's OpenAPI document (GET /openapi.json), as JSON")
    openapi.set_defaults(func=_openapi)

    health = sub.add_parser("health", help="ZooKeeper connected and a leader known (/health); exits 1 when not")
    health.set_defaults(func=_health)

    status = sub.add_parser("status", help="one answer to 'is it healthy?': leader, workers, every partition's "
                                           "owner and lag, verification (/status); exits 1 when a person is needed")
    status.add_argument("--all", action="store_true", help="list every partition, not only those that need a look")
    status.set_defaults(func=_status)


# --- handlers ------------------------------------------------------------------------------------


def _topics(args: argparse.Namespace) -> int:
    action = args.action
    if action == "list":
        body = call(args, "GET", "/topics")
    elif action == "show":
        body = call(args, "GET", f"/topics/{args.topic}")
    elif action == "add":
        payload: dict[str, Any] = {"topic": args.topic}
        if args.partitions is not None:
            payload["numPartitions"] = args.partitions
        if args.destination:
            payload["destination"] = args.destination
        body = call(args, "POST", "/topics", payload)
    elif action == "expand":
        payload = {"topic": args.topic}
        if args.partitions is not None:
            payload["numPartitions"] = args.partitions
        body = call(args, "PUT", "/topics", payload)
    elif action in ("pause", "resume"):
        body = call(args, "POST", f"/topics/{args.topic}/{action}")
    else:
        body = call(args, "DELETE", f"/topics/{args.topic}")
    if args.json:
        _print_json(body)
    elif action == "list":
        rows = [(t["topic"], t["destination"], str(t["partitions"]), t["state"]) for t in body["topics"]]
        table(["TOPIC", "DESTINATION", "PARTITIONS", "STATE"], rows)
    elif action == "show":
        print(f"{body['topic']} -> {body['destination']} ({body['partitions']} partitions, {body['state']})")
        rows = []
        for p in body["assignment"]:
            status = p["status"] or {}
            lag = lag_text(status.get("lag")) if p["status"] else "unknown"
            rows.append((str(p["partition"]), p["worker"] or "-", lag, status.get("error") or ""))
        table(["PARTITION", "WORKER", "LAG", "ERROR"], rows)
    elif action == "remove":
        print(f"{args.topic}: no longer mirrored")
    else:
        print(f"{body['topic']} -> {body['destination']}: {body['partitions']} partitions, {body['state']}")
    return 0


def _workers(args: argparse.Namespace) -> int:
    if args.action == "list":
        body = call(args, "GET", "/instances")
        if args.json:
            _print_json(body)
            return 0
        rows = [
            (w["worker"], "yes" if w["live"] else "no", "yes" if w["blacklisted"] else "no", str(w["assigned"]),
             str(w["applied"]), f"{w['records_per_s']:.0f}", f"{w['bytes_per_s'] / 1e6:.2f}")
            for w in body["instances"]
        ]
        table(["WORKER", "LIVE", "BLACKLISTED", "ASSIGNED", "APPLIED", "RECORDS/S", "MB/S"], rows)
        return 0
    method = "DELETE" if args.action == "blacklist" else "POST"
    body = call(args, method, f"/instances/{args.worker}")
    print(json.dumps(body) if args.json else f"{args.worker}: {args.action}ed")
    return 0


def _rebalance(args: argparse.Namespace) -> int:
    body = call(args, "POST", "/instances")
    print(json.dumps(body) if args.json else "rebalance requested")
    return 0


def _offsets(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise UReplicatorError("offsets: give a TOPIC with a PARTITION")
    if args.topic is not None and args.partition is None:
        body = call(args, "GET", "/offset")
        body["offsets"] = [r for r in body["offsets"] if r["topic"] == args.topic]
        body["total_lag"] = sum(r["lag"] for r in body["offsets"])
    elif args.topic is not None:
        one = call(args, "GET", f"/offset/{args.topic}/{args.partition}")
        body = {"group": one["group"], "offsets": [one], "total_lag": one["lag"]}
    else:
        body = call(args, "GET", "/offset")
    if args.json:
        _print_json(body)
        return 0
    print(f"group {body['group']}, total lag {body['total_lag']}")
    table(["TOPIC", "PARTITION", "COMMITTED", "LOG START", "END", "LAG"],
          [(r["topic"], str(r["partition"]), "none" if r["committed"] is None else str(r["committed"]),
            str(r["log_start"]), str(r["end"]), lag_text(r["lag"])) for r in body["offsets"]])
    return 0


def _noprogress(args: argparse.Namespace) -> int:
    body = call(args, "GET", "/noprogress")
    if args.json:
        _print_json(body)
    else:
        rows = [(f"{s['topic']}:{s['partition']}", s["worker"], lag_text(s["lag"]),
                 "-" if s["stalled_for_s"] is None else f"{s['stalled_for_s']:.0f}s", s["error"] or "")
                for s in body["stalled"]]
        rows += [(f"{u['topic']}:{u['partition']}", "-", "unknown", "-", "no worker owns it") for u in body["unowned"]]
        if rows:
            table(["PARTITION", "WORKER", "LAG", "STALLED FOR", "PROBLEM"], rows)
        else:
            print(f"every partition is owned and progressing (threshold {body['threshold_s']:.0f}s)")
    return 1 if body["stalled"] or body["unowned"] else 0


def _validation(args: argparse.Namespace) -> int:
    body = call(args, "GET", "/validation")
    if args.json:
        _print_json(body)
    else:
        table(["WORKER", "DESIRED GEN", "APPLIED GEN", "MISSING", "EXTRA", "OK"],
              [(w["worker"], str(w["desired_generation"]), str(w["applied_generation"]),
                ",".join(w["missing"]) or "-", ",".join(w["extra"]) or "-", "yes" if w["ok"] else "NO")
               for w in body["workers"]])
        if body.get("withheld"):
            print(f"withheld in hand-off: {', '.join(body['withheld'])}")
    return 0 if body["ok"] else 1


def _blacklist(args: argparse.Namespace) -> int:
    if args.action == "list":
        body = call(args, "GET", "/blacklist")
        if args.json:
            _print_json(body)
        else:
            rows = [("topic", t) for t in body["topics"]]
            rows += [("partition", f"{p['topic']}:{p['partition']}") for p in body["partitions"]]
            rows += [("worker", w) for w in body["workers"]]
            table(["KIND", "NAME"], rows)
        return 0
    payload: dict[str, Any] = {"topic": args.topic, "op": "blacklist" if args.action == "add" else "whitelist"}
    if args.partition is not None:
        payload["partition"] = args.partition
    body = call(args, "POST", "/blacklist", payload)
    name = args.topic if args.partition is None else f"{args.topic}:{args.partition}"
    print(json.dumps(body) if args.json else f"{name}: {'blacklisted' if body['blacklisted'] else 'whitelisted'}")
    return 0


def _autobalancing(args: argparse.Namespace) -> int:
    if args.action == "status":
        body = call(args, "GET", "/admin/autobalancing_status")
    else:
        body = call(args, "POST", f"/admin/{args.action}_autobalancing")
    print(json.dumps(body) if args.json else f"autobalancing: {'on' if body['autobalancing'] else 'off'}")
    return 0


def _workload(args: argparse.Namespace) -> int:
    body = call(args, "GET", "/admin/workloadinfo")
    if args.json:
        _print_json(body)
        return 0
    table(["WORKER", "PARTITIONS", "RECORDS/S", "MB/S", "LAG"],
          [(w, str(v["partitions"]), f"{v['records_per_s']:.0f}", f"{v['bytes_per_s'] / 1e6:.2f}", str(v["lag"]))
           for w, v in body["workers"].items()])
    return 0


def _rate_limit(args: argparse.Namespace) -> int:
    if args.action == "show":
        body = call(args, "GET", "/admin/rate_limit")
    else:
        named = {k: v for k, v in (("records_per_s", args.records_per_s), ("bytes_per_s", args.bytes_per_s))
                 if v is not None}
        if not named:
            raise UReplicatorError("rate-limit set: name --records-per-s N, --bytes-per-s N or both (0 = unlimited)")
        # The endpoint replaces the whole limit (a missing field is 0 = unlimited): read the current
        # one first, so the limit the user did not name keeps its value.
        current = call(args, "GET", "/admin/rate_limit") if len(named) < 2 else {}
        body = call(args, "POST", "/admin/rate_limit",
                    {"records_per_s": current.get("records_per_s", 0), "bytes_per_s": current.get("bytes_per_s", 0),
                     **named})
    if args.json:
        _print_json(body)
    else:
        def show(value: int, unit: str) -> str:
            return "unlimited" if value == 0 else f"{value} {unit}"
        print(f"per worker: {show(body['records_per_s'], 'records/s')}, {show(body['bytes_per_s'], 'bytes/s')}")
    return 0


def _verification(args: argparse.Namespace) -> int:
    if args.action == "history":
        body = call(args, "GET", f"/verification/history?limit={args.limit}")
        if args.json:
            _print_json(body)
        else:
            table(["RUN", "FINISHED", "STATUS", "RECORDS", "ERROR"],
                  [(r["run_id"], str(r.get("finished_at") or "-"), r["status"],
                    str(r.get("verified_records", "-")), r.get("error") or "") for r in body["runs"]])
        return 0
    body = call(args, "GET", "/verification")
    if args.json:
        _print_json(body)
    else:
        print(f"run {body.get('run_id')}: {body.get('status')} (finished {body.get('finished_at')})")
    return 1 if body.get("status") in ("FAIL", "ERROR") else 0


def _openapi(args: argparse.Namespace) -> int:
    _print_json(call(args, "GET", "/openapi.json", routed=False))
    return 0


def _health(args: argparse.Namespace) -> int:
    status, body = request(f"{args.url.rstrip('/')}/health", "GET", None, args.token, ca=args.ca)
    if args.json:
        _print_json(body)
    else:
        print(f"{body.get('status')}: zookeeper {body.get('zookeeper')}, leader {body.get('leader') or 'none'}")
    return 0 if status == 200 else 1


def _status(args: argparse.Namespace) -> int:
    from ureplicator.cli import status

    return status.run(args)
