"""`python -m devtools.stack up|down|status`: the local stack's own command line (`ureplicator stack`: cli/main.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from devtools import stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.stack", description=stack.__doc__)
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="stack folder (default: $UREPLICATOR_CACHE/stack, else .cache/stack)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds to wait")
    parser.add_argument("--secure", action="store_true", help="add SASL_SSL (SCRAM-SHA-512) listeners")
    parser.add_argument("--clusters", type=int, default=2, help="single-broker clusters c1..cN (default 2)")
    args = parser.parse_args(argv)
    root = args.dir if args.dir is not None else stack.default_dir()
    try:
        if args.command == "up":
            addresses = stack.up(root, timeout_s=args.timeout or 90, secure=args.secure, clusters=args.clusters)
            print(json.dumps(addresses, indent=2))
        elif args.command == "down":
            stopped = stack.down(root, timeout_s=args.timeout or 30)
            stack._say(f"stopped {', '.join(stopped)}" if stopped else f"nothing running in {root}")
        else:
            print(json.dumps(stack.status(root), indent=2))
    except stack.StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
