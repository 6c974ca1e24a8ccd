"""``ureplicator routes list|add|remove|pause|resume``: a deployment's routes through the controller's REST API."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from common.errors import UReplicatorError
from controller.client import request


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``routes`` subcommand to the ``ureplicator`` parser, and ``--clusters N`` to ``stack``."""
    _extend_stack(subparsers)
    routes = subparsers.add_parser("routes", help="list, add, remove, pause or resume routes (docs/routes.md)")
    routes.add_argument("--url", default=os.environ.get("UREPLICATOR_URL", "http://localhost:9000"),
                        help="controller REST URL (env UREPLICATOR_URL)")
    routes.add_argument("--token", default=os.environ.get("UREPLICATOR_ADMIN_TOKEN")
                        or os.environ.get("UREPLICATOR_CONTROLLER_ADMIN_TOKEN"),
                        help="admin bearer token (env UREPLICATOR_ADMIN_TOKEN or UREPLICATOR_CONTROLLER_ADMIN_TOKEN)")
    routes.add_argument("--json", action="store_true", help="print the raw JSON response")
    rsub = routes.add_subparsers(dest="action", required=True)
    rsub.add_parser("list", help="routes with their state")
    add = rsub.add_parser("add", help="add a route (checked: aliases, one route per pair, no loop)")
    add.add_argument("id", help="route id (immutable: it names the offsets group)")
    add.add_argument("source", help="source cluster alias")
    add.add_argument("destination", help="destination cluster alias")
    add.add_argument("--topic-naming", choices=["identity", "prefix", "mapping"], default="identity")
    add.add_argument("--forward", choices=["origin", "transit"], default="origin")
    add.add_argument("--shared", action="store_true", help="this route may write topics other routes write too")
    for action, text in (("remove", "delete a route added through the API (no live workers)"),
                         ("pause", "pause a route: its partitions are released, offsets committed"),
                         ("resume", "resume a paused route")):
        rsub.add_parser(action, help=text).add_argument("id")
    routes.set_defaults(func=run)
    return routes


def _extend_stack(subparsers: Any) -> None:
    """``ureplicator stack up --clusters N``: N single-broker clusters c1..cN (stack.json's ``clusters``)."""
    stack = subparsers.choices.get("stack")
    if stack is None:
        return
    stack.add_argument("--clusters", type=int, default=2,
                       help="with up: start N single-broker clusters c1..cN (c1 and c2 are source and destination)")
    two_clusters = stack.get_default("func")

    def run_stack(args: argparse.Namespace) -> int:
        if args.action != "up" or args.clusters == 2:
            return int(two_clusters(args) or 0)
        from devtools import stack as devstack  # a source checkout: `stack` needs devtools anyway

        try:
            print(json.dumps(devstack.up(args.dir or devstack.default_dir(), secure=args.secure,
                                         clusters=args.clusters), indent=2))
        except devstack.StackError as exc:
            print(f"ureplicator stack: {exc}", file=sys.stderr)
            return 1
        return 0

    stack.set_defaults(func=run_stack)


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        body = _call(args, "GET", "/routes")
    elif args.action == "add":
        body = _call(args, "POST", "/routes", {
            "id": args.id, "source": args.source, "destination": args.destination,
            "topic_naming": args.topic_naming, "forward": args.forward, "shared": args.shared,
        })
    elif args.action == "remove":
        body = _call(args, "DELETE", f"/routes/{args.id}")
    else:
        body = _call(args, "POST", f"/routes/{args.id}/{args.action}")
    if args.json:
        print(json.dumps(body, indent=2))
    elif args.action == "list":
        rows = [(r["id"], f"{r['source']} -> {r['destination']}", r["topic_naming"], r["forward"], r["state"],
                 str(r["live_workers"]), str(r["topics"])) for r in body["routes"]]
        _table(["ROUTE", "CLUSTERS", "NAMING", "FORWARD", "STATE", "WORKERS", "TOPICS"], rows)
    elif args.action == "remove":
        print(f"{args.id}: deleted")
    else:
        print(f"{body['id']}: {body['source']} -> {body['destination']}, {body['state']}")
    return 0


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    status, payload = request(f"{args.url.rstrip('/')}{path}", method, body, args.token)
    if status >= 400:
        message = payload.get("error", {}).get("message", payload) if isinstance(payload, dict) else payload
        raise UReplicatorError(f"routes {args.action}: {status}: {message}")
    return payload


def _table(header: list[str], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    for row in [tuple(header), *rows]:
        sys.stdout.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")
