"""``ureplicator check --config FILE``: the preflight, printed for a person (or ``--json``).

Exit status: 0 when every check passed (warnings allowed), 1 when one failed, 2 when the
config itself is invalid (the same status as a process refusing it at start).
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from ureplicator.common import config as config_module
from ureplicator.common import logs
from ureplicator.common.errors import ConfigError


def run(args: argparse.Namespace) -> int:
    from ureplicator.controller import preflight

    try:
        cfg = config_module.load(args.config)
        _worker_refusals(cfg)
    except ConfigError as exc:
        if args.json:
            print(json.dumps({"ok": False, "findings": [{"target": "config", "level": "fail", "message": str(exc)}]},
                             indent=2))
        else:
            print(f"FAIL  config       {exc}")
        return exc.exit_status
    logs.register_secrets(config_module.secret_values(cfg))
    # librdkafka logs every refused login on every retry; the findings say it once.
    logging.getLogger("librdkafka").setLevel(logging.CRITICAL)
    findings = [preflight.Finding("config", "ok", f"{args.config or 'environment'}: pipeline {cfg.pipeline}, "
                                  f"{cfg.source.alias} -> {cfg.destination.alias}")]
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
