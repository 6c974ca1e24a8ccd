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
from importlib import metadata
from pathlib import Path
from typing import Any

from ureplicator.common import logs
from ureplicator.common.errors import UReplicatorError


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _global_defaults(args)
    logs.setup(level=args.log_level)
    try:
        return int(args.func(args) or 0)
    except UReplicatorError as exc:
        print(f"ureplicator: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        return 130


def version() -> str:
    try:
        return metadata.version("ureplicator-py")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ureplicator", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name, helptext in (("controller", "run a controller replica (REST API + leader election)"),
                           ("worker", "run a mirroring worker")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--config", "-c", help="YAML config file (UREPLICATOR_* variables override it)")
        p.set_defaults(func=_run_process)

    check = sub.add_parser("check", help="preflight: validate the config, connect to ZooKeeper and both "
                                         "clusters with its credentials, check the ACLs; non-zero when not")
    check.add_argument("--config", "-c", help="YAML config file (UREPLICATOR_* variables override it)")
    check.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for each service (default 15)")
    check.add_argument("--role", choices=["any", "controller", "worker"], default="any",
                       help="the process this host runs: worker skips the controller's REST API check (a worker "
                            "serves no API, so needs no admin token); default any: every check")
    check.set_defaults(func=_check)

    stack = sub.add_parser("stack", help="(source checkout) local ZooKeeper + source/destination Kafka")
    stack.add_argument("action", choices=["up", "down", "status"], help="start, stop or list the local services")
    stack.add_argument("--dir", type=Path, default=None, help="state directory (default: <cache>/stack)")
    stack.add_argument("--secure", action="store_true",
                       help="with up: also a SASL_SSL listener per broker (SCRAM-SHA-512, a local CA); see stack.json")
    stack.set_defaults(func=_stack)

    from ureplicator.cli import rest

    rest.add_parsers(sub)

    from ureplicator.cli import routes as routes_cli  # `ureplicator routes ...` and `stack up --clusters N`

    routes_cli.register(sub)

    from ureplicator.failover import cli as failover_cli

    failover_cli.add_parser(sub, lambda _parser: None, rest.call, rest.table)

    from ureplicator.verifier import cli as verifier_cli

    verify = sub.add_parser("verify", help="prove with Spark that the destination holds every source record once")
    verifier_cli.add_arguments(verify)
    verify.set_defaults(func=verifier_cli.run)

    demo = sub.add_parser("demo", help="(source checkout) run the end-to-end demo on a local stack")
    demo.add_argument("--records", type=int, default=100_000, help="records to mirror (default 100,000)")
    demo.add_argument("--partitions", type=int, default=8, help="partitions of the demo topic (default 8)")
    demo.add_argument("--timeout", type=float, default=300.0, help="seconds before the demo gives up (default 300)")
    demo.set_defaults(func=_demo)
    _add_global_options(parser)
    return parser


# --- global options: accepted before or after any sub-command -----------------------------------

# (flags, default from the environment, help). Added to every parser of the tree with
# default=SUPPRESS, so a flag given at any level is kept and a missing one is filled in once
# by _global_defaults (a sub-parser's default would otherwise overwrite an earlier flag).
_GLOBAL: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--url",), {"help": "controller REST URL (env UREPLICATOR_URL; default http://localhost:9000)"}),
    (("--token",), {"help": "admin bearer token (env UREPLICATOR_ADMIN_TOKEN or UREPLICATOR_CONTROLLER_ADMIN_TOKEN)"}),
    (("--route",), {"metavar": "ID", "help": "send REST calls to route ID (/routes/ID/...; env UREPLICATOR_ROUTE)"}),
    (("--json",), {"action": "store_true", "help": "print the JSON answer instead of a table"}),
    (("--ca",), {"metavar": "FILE", "help": "CA bundle to trust for an https:// URL (env UREPLICATOR_CA)"}),
    (("--log-level",), {"choices": ["debug", "info", "warning", "error"],
                        "help": "log level (env UREPLICATOR_LOG_LEVEL; default info)"}),
]


def _global_defaults(args: argparse.Namespace) -> None:
    env = os.environ
    defaults = {
        "url": env.get("UREPLICATOR_URL", "http://localhost:9000"),
        "token": env.get("UREPLICATOR_ADMIN_TOKEN") or env.get("UREPLICATOR_CONTROLLER_ADMIN_TOKEN"),
        "route": env.get("UREPLICATOR_ROUTE"),
        "json": False,
        "ca": env.get("UREPLICATOR_CA"),
        "log_level": env.get("UREPLICATOR_LOG_LEVEL", "info"),
    }
    for name, value in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def _add_global_options(parser: argparse.ArgumentParser) -> None:
    taken = {s for action in parser._actions for s in action.option_strings}
    for flags, options in _GLOBAL:
        if not taken.intersection(flags):
            parser.add_argument(*flags, default=argparse.SUPPRESS, **options)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                _add_global_options(child)


def _run_process(args: argparse.Namespace) -> int:
    from ureplicator.common import config as config_module

    cfg = config_module.load(args.config)
    logs.register_secrets(config_module.secret_values(cfg))
    if args.command == "controller":
        from ureplicator.controller.main import run
    else:
        from ureplicator.worker.main import run
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


# The REST helpers moved to cli/rest.py; these names stay for modules written against them.
def _rest_options(parser: argparse.ArgumentParser) -> None:
    """Nothing to add: --url, --token, --json, --route and --ca are global options now."""


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    from ureplicator.cli import rest

    return rest.call(args, method, path, body)


def _table(header: list[str], rows: list[tuple[str, ...]]) -> None:
    from ureplicator.cli import rest

    rest.table(header, rows)


def _check(args: argparse.Namespace) -> int:
    from ureplicator.cli import check

    return check.run(args)


def _demo(args: argparse.Namespace) -> int:
    _require_devtools("demo")
    from devtools import demo

    return demo.run(records=args.records, partitions=args.partitions, timeout_s=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
