"""``ureplicator routes list|add|remove|pause|resume``: a deployment's routes through the controller's REST API."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ureplicator.cli import rest


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``routes`` subcommand to the ``ureplicator`` parser, and ``--clusters N`` to ``stack``."""
    _extend_stack(subparsers)
    routes = subparsers.add_parser("routes", help="list, add, remove, pause or resume routes (docs/routes.md)")
    # --url, --token, --ca and --json are the global options (cli/main.py), accepted in any position.
    rsub = routes.add_subparsers(dest="action", required=True)
    rsub.add_parser("list", help="routes with their state")
    add = rsub.add_parser("add", help="add a route (checked: aliases, one route per pair, no loop)")
    add.add_argument("id", help="route id (immutable: it names the offsets group)")
    add.add_argument("source", help="source cluster alias")
    add.add_argument("destination", help="destination cluster alias")
    add.add_argument("--topic-naming", choices=["identity", "prefix", "mapping"], default="identity",
                     help="destination topic names: identity, <source alias>.<topic> (prefix) or a mapping")
    add.add_argument("--forward", choices=["origin", "transit"], default="origin",
                     help="origin: only records first produced on the source; transit: relay the others too")
    add.add_argument("--shared", action="store_true", help="this route may write topics other routes write too")
    for action, text in (("remove", "delete a route added through the API (no live workers)"),
                         ("pause", "pause a route: its partitions are released, offsets committed"),
                         ("resume", "resume a paused route")):
        rsub.add_parser(action, help=text).add_argument("id", help="route id")
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
        body = rest.call(args, "GET", "/routes", routed=False)
    elif args.action == "add":
        body = rest.call(args, "POST", "/routes", routed=False, body={
            "id": args.id, "source": args.source, "destination": args.destination,
            "topic_naming": args.topic_naming, "forward": args.forward, "shared": args.shared,
        })
    elif args.action == "remove":
        body = rest.call(args, "DELETE", f"/routes/{args.id}", routed=False)
    else:
        body = rest.call(args, "POST", f"/routes/{args.id}/{args.action}", routed=False)
    if args.json:
        print(json.dumps(body, indent=2))
    elif args.action == "list":
        rows = [(r["id"], f"{r['source']} -> {r['destination']}", r["topic_naming"], r["forward"], r["state"],
                 str(r["live_workers"]), str(r["topics"])) for r in body["routes"]]
        rest.table(["ROUTE", "CLUSTERS", "NAMING", "FORWARD", "STATE", "WORKERS", "TOPICS"], rows)
    elif args.action == "remove":
        print(f"{args.id}: deleted")
    else:
        print(f"{body['id']}: {body['source']} -> {body['destination']}, {body['state']}")
    return 0
