"""The ``ureplicator`` command: one entry point, one subcommand per process or admin task.

This package sits above every other: it wires the controller, the worker, the verifier and
(from a source checkout) the development tools into one argparse tree. A new subcommand is a
``sub.add_parser(...)`` in ``_parser`` with a ``func`` default; import its implementation
inside that function so ``ureplicator --help`` stays fast and optional parts stay optional.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from common import logs
from common.errors import UReplicatorError
from controller.client import request


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logs.setup(level=args.log_level)
    try:
        return int(args.func(args) or 0)
    except UReplicatorError as exc:
        print(f"ureplicator: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ureplicator", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--log-level", default=os.environ.get("UREPLICATOR_LOG_LEVEL", "info"),
                        choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True)

    for name, helptext in (("controller", "run a controller replica (REST API + leader election)"),
                           ("worker", "run a mirroring worker")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--config", "-c", help="YAML config file (UREPLICATOR_* variables override it)")
        p.set_defaults(func=_run_process)

    stack = sub.add_parser("stack", help="(source checkout) local ZooKeeper + source/destination Kafka")
    stack.add_argument("action", choices=["up", "down", "status"])
    stack.add_argument("--dir", type=Path, default=None, help="state directory (default: <cache>/stack)")
    stack.add_argument("--secure", action="store_true",
                       help="with up: also a SASL_SSL listener per broker (SCRAM-SHA-512, a local CA); see stack.json")
    stack.set_defaults(func=_stack)

    topics = sub.add_parser("topics", help="manage mirrored topics through the controller's REST API")
    _rest_options(topics)
    tsub = topics.add_subparsers(dest="action", required=True)
    add = tsub.add_parser("add", help="start mirroring a topic")
    add.add_argument("topic")
    add.add_argument("--partitions", type=int, default=None, help="expected partition count (checked)")
    add.add_argument("--destination", default=None, help="destination topic name (default: naming rule)")
    expand = tsub.add_parser("expand", help="grow a mirrored topic after its source grew")
    expand.add_argument("topic")
    expand.add_argument("--partitions", type=int, default=None)
    for action, text in (("remove", "stop mirroring (the destination keeps its data)"),
                         ("show", "partitions, owners, lag and errors"),
                         ("pause", "stop mirroring for now; offsets are committed"),
                         ("resume", "resume a paused topic")):
        tsub.add_parser(action, help=text).add_argument("topic")
    tsub.add_parser("list", help="mirrored topics")
    topics.set_defaults(func=_topics)

    workers = sub.add_parser("workers", help="list, blacklist (drain) or whitelist workers")
    _rest_options(workers)
    wsub = workers.add_subparsers(dest="action", required=True)
    wsub.add_parser("list", help="workers with assignment and rates")
    for action, text in (("blacklist", "drain a worker: its partitions are handed off gracefully"),
                         ("whitelist", "let a blacklisted worker take partitions again")):
        wsub.add_parser(action, help=text).add_argument("worker")
    workers.set_defaults(func=_workers)

    rebalance = sub.add_parser("rebalance", help="ask the leader to rebalance now")
    _rest_options(rebalance)
    rebalance.set_defaults(func=_rebalance)

    from cli import routes as routes_cli  # routes (issue 24): `ureplicator routes ...`, in cli/routes.py

    routes_cli.register(sub)

    from failover import cli as failover_cli

    failover_cli.add_parser(sub, _rest_options, _call, _table)

    from verifier import cli as verifier_cli

    verify = sub.add_parser("verify", help="prove with Spark that the destination holds every source record once")
    verifier_cli.add_arguments(verify)
    verify.set_defaults(func=verifier_cli.run)

    demo = sub.add_parser("demo", help="(source checkout) run the end-to-end demo on a local stack")
    demo.add_argument("--records", type=int, default=100_000)
    demo.add_argument("--partitions", type=int, default=8)
    demo.add_argument("--timeout", type=float, default=300.0)
    demo.set_defaults(func=_demo)
    return parser


def _run_process(args: argparse.Namespace) -> int:
    from common import config as config_module

    cfg = config_module.load(args.config)
    logs.register_secrets(config_module.secret_values(cfg))
    if args.command == "controller":
        from controller.main import run
    else:
        from worker.main import run
    return run(cfg)


def _require_devtools(command: str) -> None:
    """Stop with an operator's error when devtools/ (source checkout only, not in the wheel) is missing."""
    try:
        import devtools  # noqa: F401
    except ImportError:
        raise UReplicatorError(
            f"`ureplicator {command}` is a development tool: run it from a source checkout after `make install` "
            "(it is not part of the installed package)"
        ) from None


def _stack(args: argparse.Namespace) -> int:
    _require_devtools("stack")
    from devtools import stack

    directory = args.dir or stack.default_dir()
    try:
        if args.action == "up":
            print(json.dumps(stack.up(directory, secure=args.secure), indent=2))
        elif args.action == "down":
            stopped = stack.down(directory)
            print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
        else:
            for name, info in stack.status(directory).items():
                state = "running" if info.get("running") else "stopped"
                print(f"{name:<12} {info.get('address', '-'):<22} pid {info.get('pid', '-')!s:<8} {state}")
    except stack.StackError as exc:
        print(f"ureplicator stack: {exc}", file=sys.stderr)
        return 1
    return 0


# --- REST client -------------------------------------------------------------------------------


def _rest_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("UREPLICATOR_URL", "http://localhost:9000"),
                        help="controller REST URL (env UREPLICATOR_URL)")
    parser.add_argument("--token",
                        default=os.environ.get("UREPLICATOR_ADMIN_TOKEN")
                        or os.environ.get("UREPLICATOR_CONTROLLER_ADMIN_TOKEN"),
                        help="admin bearer token (env UREPLICATOR_ADMIN_TOKEN or UREPLICATOR_CONTROLLER_ADMIN_TOKEN)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON response")


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    status, payload = request(f"{args.url.rstrip('/')}{path}", method, body, args.token)
    if status >= 400:
        message = (payload or {}).get("error", {}).get("message", payload) if isinstance(payload, dict) else payload
        raise UReplicatorError(f"{args.command} {args.action if 'action' in args else ''}: {status}: {message}")
    return payload


def _topics(args: argparse.Namespace) -> int:
    action = args.action
    if action == "list":
        body = _call(args, "GET", "/topics")
    elif action == "show":
        body = _call(args, "GET", f"/topics/{args.topic}")
    elif action == "add":
        payload: dict[str, Any] = {"topic": args.topic}
        if args.partitions is not None:
            payload["numPartitions"] = args.partitions
        if args.destination:
            payload["destination"] = args.destination
        body = _call(args, "POST", "/topics", payload)
    elif action == "expand":
        payload = {"topic": args.topic}
        if args.partitions is not None:
            payload["numPartitions"] = args.partitions
        body = _call(args, "PUT", "/topics", payload)
    elif action in ("pause", "resume"):
        body = _call(args, "POST", f"/topics/{args.topic}/{action}")
    else:
        body = _call(args, "DELETE", f"/topics/{args.topic}")
    if args.json:
        print(json.dumps(body, indent=2))
    elif action == "list":
        rows = [(t["topic"], t["destination"], str(t["partitions"]), t["state"]) for t in body["topics"]]
        _table(["TOPIC", "DESTINATION", "PARTITIONS", "STATE"], rows)
    elif action == "show":
        print(f"{body['topic']} -> {body['destination']} ({body['partitions']} partitions, {body['state']})")
        rows = [
            (str(p["partition"]), p["worker"] or "-", str((p["status"] or {}).get("lag", "-")),
             (p["status"] or {}).get("error") or "")
            for p in body["assignment"]
        ]
        _table(["PARTITION", "WORKER", "LAG", "ERROR"], rows)
    elif action == "remove":
        print(f"{args.topic}: no longer mirrored")
    else:
        print(f"{body['topic']} -> {body['destination']}: {body['partitions']} partitions, {body['state']}")
    return 0


def _workers(args: argparse.Namespace) -> int:
    if args.action == "list":
        body = _call(args, "GET", "/instances")
        if args.json:
            print(json.dumps(body, indent=2))
            return 0
        rows = [
            (w["worker"], "yes" if w["live"] else "no", "yes" if w["blacklisted"] else "no", str(w["assigned"]),
             str(w["applied"]), f"{w['records_per_s']:.0f}", f"{w['bytes_per_s'] / 1e6:.2f}")
            for w in body["instances"]
        ]
        _table(["WORKER", "LIVE", "BLACKLISTED", "ASSIGNED", "APPLIED", "RECORDS/S", "MB/S"], rows)
        return 0
    method = "DELETE" if args.action == "blacklist" else "POST"
    body = _call(args, method, f"/instances/{args.worker}")
    print(json.dumps(body) if args.json else f"{args.worker}: {args.action}ed")
    return 0


def _rebalance(args: argparse.Namespace) -> int:
    body = _call(args, "POST", "/instances")
    print(json.dumps(body) if args.json else "rebalance requested")
    return 0


def _table(header: list[str], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    for row in [tuple(header), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _demo(args: argparse.Namespace) -> int:
    _require_devtools("demo")
    from devtools import demo

    return demo.run(records=args.records, partitions=args.partitions, timeout_s=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
