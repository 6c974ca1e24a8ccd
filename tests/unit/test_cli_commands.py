"""The CLI's shape: global flags anywhere, --version, help on every flag, a command for every REST endpoint."""

from __future__ import annotations

import argparse
import re

import pytest

from ureplicator.cli import main as cli
from ureplicator.cli import rest
from ureplicator.controller.openapi import PATHS

# Endpoints that are for machines, not for a person at a terminal.
_NOT_COMMANDS = {"/healthz", "/openapi.json", "/metrics", "/ui", "/ui/verification"}  # the last two: pages
# uReplicator's alias of POST /topics (the topic in the path): `topics add` covers it.
_ALIASES = {("post", "/topics/{topic}")}


@pytest.fixture
def calls(monkeypatch):
    """Record the REST calls the CLI makes (the controller's answers are canned per path)."""
    seen: list[tuple[str, str, object, str | None]] = []

    def fake_request(url, method="GET", body=None, token=None, timeout_s=30.0, ca=None):
        path = url.split("://", 1)[1].split("/", 1)[1]
        seen.append((method, "/" + path, body, token))
        return 200, _canned("/" + path.split("?")[0])

    monkeypatch.setattr(rest, "request", fake_request)
    return seen


def _canned(path: str) -> dict:
    path = re.sub(r"^/routes/[^/]+", "", path)
    if path == "/topics":
        return {"topics": [], "topic": "t", "destination": "t", "partitions": 1, "state": "active"}
    if path.startswith("/topics/"):
        return {"topic": "t", "destination": "t", "partitions": 2, "state": "active", "removed": True,
                "assignment": [{"partition": 0, "worker": "w1", "applied_by": "w1",
                                "status": {"lag": -1, "error": None}},
                               {"partition": 1, "worker": None, "applied_by": None, "status": None}]}
    if path == "/offset":
        return {"group": "g", "offsets": [], "total_lag": 0}
    if path.startswith("/offset/"):
        return {"group": "g", "topic": "t", "partition": 0, "committed": None, "log_start": 0, "end": 0, "lag": 0}
    if path == "/noprogress":
        return {"threshold_s": 60, "stalled": [], "unowned": []}
    if path == "/validation":
        return {"ok": True, "mismatched_workers": 0, "withheld": [], "workers": []}
    if path == "/blacklist":
        return {"topics": [], "partitions": [], "workers": [], "blacklisted": True}
    if path in ("/admin/autobalancing_status", "/admin/enable_autobalancing", "/admin/disable_autobalancing"):
        return {"autobalancing": True}
    if path == "/admin/workloadinfo":
        return {"workers": {}}
    if path == "/admin/rate_limit":
        return {"records_per_s": 0, "bytes_per_s": 0}
    if path == "/verification":
        return {"run_id": "r", "status": "OK", "finished_at": "x"}
    if path == "/verification/history":
        return {"runs": []}
    if path == "/instances":
        return {"instances": [], "rebalance": "requested"}
    if path.startswith("/instances/"):
        return {"worker": "w", "blacklisted": False}
    if path == "/groups":
        return {"groups": []}
    if path == "/health":
        return {"status": "ok", "zookeeper": "connected", "leader": "c1"}
    if path == "/status":
        return {"healthy": True, "problems": [], "leader": "c1", "workers": [], "partitions": [],
                "withheld": [], "unowned": [], "stuck": [], "group_sync": None, "verification": None,
                "pipeline": "p", "generated_at": "now", "zookeeper": "connected"}
    return {}


_EVERY_COMMAND = [
    ["topics", "list"], ["topics", "show", "t"], ["topics", "add", "t"], ["topics", "expand", "t"],
    ["topics", "remove", "t"], ["topics", "pause", "t"], ["topics", "resume", "t"],
    ["workers", "list"], ["workers", "blacklist", "w"], ["workers", "whitelist", "w"], ["rebalance"],
    ["offsets"], ["offsets", "t", "0"], ["noprogress"], ["validation"],
    ["blacklist", "list"], ["blacklist", "add", "t"], ["blacklist", "remove", "t", "--partition", "1"],
    ["autobalancing", "status"], ["autobalancing", "enable"], ["autobalancing", "disable"], ["workload"],
    ["rate-limit", "show"], ["rate-limit", "set", "--records-per-s", "10"],
    ["verification", "show"], ["verification", "history"], ["health"], ["status"],
    ["groups", "list"], ["groups", "translate", "g"], ["groups", "sync", "g"],
]


def _template(path: str) -> str:
    """The OpenAPI path a concrete call matches (/topics/t/pause -> /topics/{topic}/{action})."""
    path = path.split("?")[0]
    for template in PATHS:
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path):
            return template
    return path


def test_every_rest_endpoint_has_a_cli_command(calls, capsys):
    for argv in _EVERY_COMMAND:
        try:
            cli.main(argv)
        except (KeyError, TypeError):
            pass  # a canned answer too thin to render: the call itself is what this test counts
    reached = {(method.lower(), _template(path)) for method, path, _, _ in calls}
    documented = {(m, p) for p, ops in PATHS.items() for m in ops if p not in _NOT_COMMANDS}
    assert documented - reached - _ALIASES == set()


@pytest.mark.parametrize("argv", [
    ["--json", "--url", "http://c:1", "--token", "s3cret-token", "topics", "list"],
    ["topics", "list", "--json", "--url", "http://c:1", "--token", "s3cret-token"],
    ["topics", "--json", "--url", "http://c:1", "list", "--token", "s3cret-token"],
    ["--url", "http://c:1", "topics", "--token", "s3cret-token", "list", "--json"],
])
def test_global_flags_work_in_any_position(calls, capsys, argv):
    assert cli.main(argv) == 0
    method, path, _, token = calls[-1]
    assert (method, path, token) == ("GET", "/topics", "s3cret-token")
    assert capsys.readouterr().out.lstrip().startswith("{")  # --json took effect


@pytest.mark.parametrize(("argv", "path"), [
    (["--route", "east", "offsets"], "/routes/east/offset"),
    (["offsets", "--route", "east"], "/routes/east/offset"),
    (["--route", "east", "groups", "list"], "/routes/east/groups"),
    (["groups", "sync", "g1", "--route", "east", "--json"], "/routes/east/groups/g1/sync"),
    (["--route", "east", "verification", "history"], "/routes/east/verification/history?limit=20"),
    (["--route", "east", "blacklist", "list"], "/routes/east/blacklist"),
    (["--route", "east", "workload"], "/routes/east/admin/workloadinfo"),
])
def test_route_prefixes_route_paths_but_not_deployment_paths(calls, argv, path):
    cli.main(argv)
    assert calls[-1][1] == path
    cli.main(["status", "--route", "east"])
    assert calls[-1][1] == "/status"


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert re.match(r"^ureplicator \d+\.\d+", capsys.readouterr().out)


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from _parsers(child)


def test_every_flag_and_argument_has_help_text():
    missing = [
        f"{p.prog}: {'/'.join(a.option_strings) or a.dest}"
        for p in _parsers(cli._parser())
        for a in p._actions
        if not a.help and not isinstance(a, argparse._SubParsersAction)
    ]
    assert missing == []


def test_topics_show_never_prints_a_lag_of_minus_one(calls, capsys):
    assert cli.main(["topics", "show", "t"]) == 0
    out = capsys.readouterr().out
    assert "-1" not in out.split()
    rows = [line.split() for line in out.splitlines()[2:]]
    assert rows[0][:3] == ["0", "w1", "unknown"]
    assert rows[1][:3] == ["1", "-", "unknown"]
