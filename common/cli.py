"""The ``ureplicator`` command: one entry point, one subcommand per process or admin task."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common import logs
from common.errors import UReplicatorError


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
    parser = argparse.ArgumentParser(prog="ureplicator", description=__doc__)
    parser.add_argument("--log-level", default=os.environ.get("UREPLICATOR_LOG_LEVEL", "info"),
                        choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True)

    for name, helptext in (("controller", "run a controller replica (REST API + leader election)"),
                           ("worker", "run a mirroring worker")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--config", "-c", help="YAML config file (UREPLICATOR_* variables override it)")
        p.set_defaults(func=_run_process)

    stack = sub.add_parser("stack", help="local ZooKeeper + source/destination Kafka for tests and the demo")
    stack.add_argument("action", choices=["up", "down", "status"])
    stack.add_argument("--dir", type=Path, default=None, help="state directory (default: <cache>/stack)")
    stack.set_defaults(func=_stack)

    topics = sub.add_parser("topics", help="manage mirrored topics through the controller's REST API")
    _rest_options(topics)
    tsub = topics.add_subparsers(dest="action", required=True)
    add = tsub.add_parser("add", help="start mirroring a topic")
    add.add_argument("topic")
    add.add_argument("--partitions", type=int, default=None, help="expected partition count (checked)")
    for action in ("remove", "show"):
        tsub.add_parser(action).add_argument("topic")
    tsub.add_parser("list")
    topics.set_defaults(func=_topics)

    demo = sub.add_parser("demo", help="run the end-to-end demo on a local stack")
    demo.add_argument("--records", type=int, default=100_000)
    demo.add_argument("--partitions", type=int, default=8)
    demo.add_argument("--timeout", type=float, default=300.0)
    demo.set_defaults(func=_demo)
    return parser


def _run_process(args: argparse.Namespace) -> int:
    from common import config as config_module

    cfg = config_module.load(args.config)
    if args.command == "controller":
        from controller.main import run
    else:
        from worker.main import run
    return run(cfg)


def _stack(args: argparse.Namespace) -> int:
    from common import stack

    directory = args.dir or stack.CACHE_DIR / "stack"
    try:
        if args.action == "up":
            print(json.dumps(stack.up(directory), indent=2))
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
    parser.add_argument("--token", default=os.environ.get("UREPLICATOR_ADMIN_TOKEN"),
                        help="admin bearer token (env UREPLICATOR_ADMIN_TOKEN)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON response")


def request(url: str, method: str = "GET", body: Any = None, token: str | None = None,
            timeout_s: float = 30.0) -> tuple[int, Any]:
    """Call the REST API; returns (status, parsed JSON). Raises UReplicatorError when unreachable."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        payload = exc.read()
        try:
            return exc.code, json.loads(payload or b"null")
        except ValueError:
            return exc.code, {"error": {"code": exc.code, "message": payload.decode(errors="replace")}}
    except (urllib.error.URLError, OSError) as exc:
        raise UReplicatorError(f"cannot reach the controller at {url}: {getattr(exc, 'reason', exc)}") from None


def _topics(args: argparse.Namespace) -> int:
    base = args.url.rstrip("/")
    if args.action == "list":
        status, body = request(f"{base}/topics", token=args.token)
    elif args.action == "show":
        status, body = request(f"{base}/topics/{args.topic}", token=args.token)
    elif args.action == "add":
        payload: dict[str, Any] = {"topic": args.topic}
        if args.partitions is not None:
            payload["numPartitions"] = args.partitions
        status, body = request(f"{base}/topics", "POST", payload, args.token)
    else:
        status, body = request(f"{base}/topics/{args.topic}", "DELETE", token=args.token)
    if status >= 400:
        message = (body or {}).get("error", {}).get("message", body)
        print(f"ureplicator topics {args.action}: {status}: {message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(body, indent=2))
    elif args.action == "list":
        rows = [(t["topic"], t["destination"], str(t["partitions"]), t["state"]) for t in body["topics"]]
        _table(["TOPIC", "DESTINATION", "PARTITIONS", "STATE"], rows)
    elif args.action == "show":
        print(f"{body['topic']} -> {body['destination']} ({body['partitions']} partitions, {body['state']})")
        rows = [
            (str(p["partition"]), p["worker"] or "-", str((p["status"] or {}).get("lag", "-")),
             (p["status"] or {}).get("error") or "")
            for p in body["assignment"]
        ]
        _table(["PARTITION", "WORKER", "LAG", "ERROR"], rows)
    else:
        print(json.dumps(body))
    return 0


def _table(header: list[str], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    for row in [tuple(header), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _demo(args: argparse.Namespace) -> int:
    from common import demo

    return demo.run(records=args.records, partitions=args.partitions, timeout_s=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
