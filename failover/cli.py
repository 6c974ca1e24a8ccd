"""``ureplicator groups list | translate GROUP | sync GROUP [--force]``: failover through the controller's REST API."""

from __future__ import annotations

import argparse
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

Call = Callable[..., Any]  # (args, method, path, body=None) -> parsed JSON; raises UReplicatorError on >= 400
Table = Callable[[list[str], list[tuple[str, ...]]], None]


def add_parser(sub: Any, rest_options: Callable[[argparse.ArgumentParser], None], call: Call, table: Table) -> None:
    groups = sub.add_parser("groups", help="consumer-group failover: translate offsets to the destination, sync")
    rest_options(groups)
    gsub = groups.add_subparsers(dest="action", required=True)
    gsub.add_parser("list", help="source groups with committed offsets on mirrored topics")
    gsub.add_parser("translate", help="per partition: source commit, destination offset, behind/at/ahead, "
                                      "records a disaster would cost").add_argument("group", help="consumer group id")
    sync = gsub.add_parser("sync", help="commit the translated offsets for GROUP on the destination now")
    sync.add_argument("group", help="consumer group id")
    sync.add_argument("--force", action="store_true", help="also move destination offsets backwards")
    groups.set_defaults(func=lambda args: _groups(args, call, table))


def _groups(args: argparse.Namespace, call: Call, table: Table) -> int:
    group = urllib.parse.quote(getattr(args, "group", ""), safe="")
    if args.action == "list":
        body = call(args, "GET", "/groups")
    elif args.action == "translate":
        body = call(args, "GET", f"/groups/{group}/translation")
    else:
        body = call(args, "POST", f"/groups/{group}/sync", {"force": args.force})
    if args.json:
        print(json.dumps(body, indent=2))
    elif args.action == "list":
        table(["GROUP", "STATE", "MIRRORED PARTITIONS"],
              [(g["group"], g["state"], str(g["mirrored_partitions"])) for g in body["groups"]])
    elif args.action == "translate":
        _print_translation(body, table)
    else:
        for row in body["committed"]:
            print(f"{row['topic']}:{row['partition']}: committed {row['offset']}")
        for row in body["kept"]:
            print(f"{row['topic']}:{row['partition']}: kept ({row['reason']})")
        for row in body["ahead"]:
            print(f"{row['destination_topic']}:{row['partition']}: ahead of mirroring by {row['ahead_by']} "
                  "(synced to the destination end; sync again once mirroring caught up)")
    return 0


def _print_translation(body: dict[str, Any], table: Table) -> None:
    rows = body["partitions"]
    table(["TOPIC", "PARTITION", "DESTINATION", "SOURCE COMMITTED", "DESTINATION OFFSET", "STATE", "AHEAD BY",
           "UNMIRRORED"],
          [(r["topic"], str(r["partition"]), r["destination_topic"], str(r["source_committed"]),
            str(r["destination_offset"]), r["state"], str(r["ahead_by"]), str(r["unmirrored_records"]))
           for r in rows])
    at_risk = [r for r in rows if r["unmirrored"]]
    if not at_risk:
        print(f"\n{body['group']}: every record after its commits is on the destination; "
              "a failover now loses nothing")
        return
    print(f"\nIf the source cluster were lost now, {body['group']} would never read "
          f"{body['summary']['unmirrored_records']} record(s), not yet mirrored:")
    for r in at_risk:
        first, last = r["unmirrored"]
        print(f"  {r['topic']}:{r['partition']} source offsets {first}-{last} ({r['unmirrored_records']} records)")
