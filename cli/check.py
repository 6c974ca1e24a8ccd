"""``ureplicator check --config FILE``: the preflight, printed for a person (or ``--json``).

Exit status: 0 when every check passed (warnings allowed), 1 when one failed, 2 when the
config itself is invalid (the same status as a process refusing it at start).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

from ureplicator.common import config as config_module
from ureplicator.common import logs
from ureplicator.common.errors import ConfigError


def run(args: argparse.Namespace) -> int:
    # kazoo's and librdkafka's own log lines (JSON when not on a terminal) would land between the
    # table's lines; each failure they report is a finding below. --log-level debug keeps them.
    with contextlib.nullcontext() if getattr(args, "log_level", "info") == "debug" else _quiet_libraries():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ureplicator.controller import preflight

    try:
        cfg = config_module.load(args.config)
        _worker_refusals(cfg)
        if getattr(args, "role", "any") != "worker":
            # What the controller refuses at start (controller/main.py), before it connects anywhere.
            config_module.check_rest_exposure(cfg)
    except ConfigError as exc:
        if args.json:
            print(json.dumps({"ok": False, "findings": [{"target": "config", "level": "fail", "message": str(exc)}]},
                             indent=2))
        else:
            print(f"FAIL  config       {exc}")
        return exc.exit_status
    logs.register_secrets(config_module.secret_values(cfg))
    routes = ", ".join(f"{r.source} -> {r.destination}" for r in cfg.routes) or (
        f"{cfg.source.alias} -> {cfg.destination.alias}")
    findings = [preflight.Finding("config", "ok", f"{args.config or 'environment'}: pipeline {cfg.pipeline}, "
                                  f"{routes}")]
    findings.append(_copy_loop(cfg))
    findings += preflight.run(cfg, timeout_s=args.timeout)
    ok = not preflight.failed(findings)
    if args.json:
        print(json.dumps({"ok": ok, "findings": [f.as_dict() for f in findings]}, indent=2))
    else:
        width = max(len(f.target) for f in findings)
        for f in findings:
            print(f"{f.level.upper():<5} {f.target:<{width}}  {f.message}")
        print("ready to run" if ok else "not ready: fix the FAIL lines above")
    return 0 if ok else 1


# The client libraries' loggers: librdkafka logs every refused login on every retry, kazoo every
# reconnection attempt; the findings say each once.
_LIBRARIES = ("kazoo", "librdkafka", "confluent_kafka")


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """Silence the client libraries' loggers (and their children, some with their own level) until exit."""
    names = set(_LIBRARIES) | {name for name in logging.root.manager.loggerDict
                               if name.split(".")[0] in _LIBRARIES}
    saved = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def _worker_refusals(cfg: config_module.Config) -> None:
    """The settings a worker refuses at start beyond the config's own checks, for any route it may serve.

    Its clients' pinned properties (worker.clients.pins: ``acks``, ``enable.idempotence``, ...)
    are checked only when a worker opens them; a check that passed them would be a check the
    worker then fails, with the same ConfigError.
    """
    from ureplicator.worker import clients

    for route in cfg.routes:
        clients.pins(config_module.route_view(cfg, route=route))


def _copy_loop(cfg: config_module.Config) -> Any:
    """Which copy loop a worker started from this install would run, and why (its self-test, run here)."""
    from ureplicator.controller.preflight import Finding
    from ureplicator.worker import mirror, native

    mode = cfg.worker.native_loop
    try:
        module, reason = mirror._load_native(mode)
    except ConfigError as exc:  # native_loop: on, and the C loop cannot run: the worker refuses to start
        return Finding("worker", "fail", f"copy loop: none, the worker refuses to start: {exc}")
    if module is None:
        return Finding("worker", "warn", f"copy loop: Python (slower; ureplicator_worker_native_loop 0): {reason}")
    return Finding("worker", "ok", f"copy loop: C (worker/_native.c), {reason} {native.installed_version()}")
