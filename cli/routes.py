"""``ureplicator routes list|show|add|change|remove|pause|resume`` and ``ureplicator clusters``: a deployment's
routes and clusters through the controller's REST API (``controller/routes_api.py``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ureplicator.cli import rest
from ureplicator.common.errors import UReplicatorError


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``routes`` subcommand to the ``ureplicator`` parser, and ``--clusters N`` to ``stack``."""
    _extend_stack(subparsers)
    clusters = subparsers.add_parser("clusters", help="the clusters routes can name: alias and bootstrap servers "
                                                      "(GET /clusters)")
    clusters.set_defaults(func=run_clusters)
    routes = subparsers.add_parser("routes", help="list, show, add, change, remove, pause or resume routes "
                                                  "(docs/routes.md)")
    # --url, --token, --ca and --json are the global options (cli/main.py), accepted in any position.
    rsub = routes.add_subparsers(dest="action", required=True)
    rsub.add_parser("list", help="routes with their state")
    rsub.add_parser("show", help="one route: its definition and state (GET /routes/ID)").add_argument(
        "id", help="route id")
    add = rsub.add_parser("add", help="add a route (checked: aliases, one route per pair, no loop)")
    add.add_argument("id", help="route id (immutable: it names the offsets group)")
    add.add_argument("source", help="source cluster alias")
    add.add_argument("destination", help="destination cluster alias")
    add.add_argument("--topic-naming", choices=["identity", "prefix", "mapping"], default="identity",
                     help="destination topic names: identity, <source alias>.<topic> (prefix) or a mapping")
    add.add_argument("--forward", choices=["origin", "transit"], default="origin",
                     help="origin: only records first produced on the source; transit: relay the others too")
    add.add_argument("--shared", action="store_true", help="this route may write topics other routes write too")
    _mapping_and_workers(add)
    # PATCH sends only what is named here: a flag left out keeps the route's value.
    change = rsub.add_parser("change", help="change a route added through the API (PATCH /routes/ID); "
                                            "only the options given change")
    change.add_argument("id", help="route id (id, source and destination cannot change)")
    change.add_argument("--topic-naming", choices=["identity", "prefix", "mapping"], default=None,
                        help="destination topic names: identity, <source alias>.<topic> (prefix) or a mapping")
    change.add_argument("--forward", choices=["origin", "transit"], default=None,
                        help="origin: only records first produced on the source; transit: relay the others too")
    change.add_argument("--shared", action=argparse.BooleanOptionalAction, default=None,
                        help="whether this route may write topics other routes write too")
    _mapping_and_workers(change, replaces=True)
    for action, text in (("remove", "delete a route added through the API (no live workers)"),
                         ("pause", "pause a route: its partitions are released, offsets committed"),
                         ("resume", "resume a paused route")):
        rsub.add_parser(action, help=text).add_argument("id", help="route id")
    routes.set_defaults(func=run)
    return routes


def _mapping_and_workers(parser: argparse.ArgumentParser, replaces: bool = False) -> None:
    whole = " (replaces the whole mapping)" if replaces else ""
    parser.add_argument("--topic-mapping", metavar="SOURCE=DESTINATION", action="append", type=_pair, default=None,
                        help=f"with --topic-naming mapping: a source topic and its destination topic; repeat for "
                             f"each topic{whole}")
    parser.add_argument("--workers", metavar="MIN[:MAX]", type=_workers, default=None,
                        help="bounds on the route's workers (MAX 0 or left out: no upper bound)")


def _pair(text: str) -> tuple[str, str]:
    source, sep, destination = text.partition("=")
    if not sep or not source or not destination:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SOURCE=DESTINATION")
    return source, destination


def _workers(text: str) -> dict[str, int]:
    low, _, high = text.partition(":")
    try:
        return {"min": int(low), "max": int(high or 0)}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected MIN or MIN:MAX (whole numbers)") from None


def _optional(args: argparse.Namespace) -> dict[str, Any]:
    """The route keys the user named (topic_mapping as a map, workers as {min, max})."""
    body: dict[str, Any] = {}
    for key in ("topic_naming", "forward", "shared", "workers"):
        if getattr(args, key, None) is not None:
            body[key] = getattr(args, key)
    if args.topic_mapping is not None:
        body["topic_mapping"] = dict(args.topic_mapping)
    return body


def run_clusters(args: argparse.Namespace) -> int:
    body = rest.call(args, "GET", "/clusters", routed=False)
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        rest.table(["ALIAS", "BOOTSTRAP SERVERS"], [(c["alias"], c["bootstrap_servers"]) for c in body["clusters"]])
    return 0


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
    elif args.action == "show":
        body = rest.call(args, "GET", f"/routes/{args.id}", routed=False)
    elif args.action == "add":
        body = rest.call(args, "POST", "/routes", routed=False, body={
            "id": args.id, "source": args.source, "destination": args.destination, **_optional(args)})
    elif args.action == "change":
        changes = _optional(args)
        if not changes:
            raise UReplicatorError("routes change: name at least one of --topic-naming, --topic-mapping, "
                                   "--forward, --workers, --shared/--no-shared")
        body = rest.call(args, "PATCH", f"/routes/{args.id}", routed=False, body=changes)
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
    elif args.action in ("show", "add", "change"):
        workers = body.get("workers") or {}
        bound = f"{workers.get('min', 1)}..{workers.get('max') or 'any'}"
        print(f"{body['id']}: {body['source']} -> {body['destination']}, {body['state']}")
        rest.table(["NAMING", "FORWARD", "SHARED", "WORKERS", "LIVE", "TOPICS"],
                   [(body["topic_naming"], body["forward"], "yes" if body.get("shared") else "no", bound,
                     str(body.get("live_workers", "-")), str(body.get("topics", "-")))])
        for source, destination in sorted((body.get("topic_mapping") or {}).items()):
            print(f"  {source} -> {destination}")
    else:
        print(f"{body['id']}: {body['source']} -> {body['destination']}, {body['state']}")
    return 0
