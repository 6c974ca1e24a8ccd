"""Issue 45: every endpoint the controller serves has a CLI command, found by walking the Flask app's URL map.

test_cli_commands.py checks the OpenAPI ``PATHS``, which left out the routes API (``GET /clusters``,
``GET|PATCH /routes/<id>`` had no command). Here the source of truth is what the app serves: a new
endpoint without a command fails this test until a command (and its argv below) is added.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.test_cli_commands import _canned
from ureplicator.cli import main as cli
from ureplicator.cli import rest
from ureplicator.controller import admin_api

# Served, but not for a person at a terminal: each has a reason, and nothing else belongs here.
_NO_COMMAND = {
    "/healthz",  # the liveness probe (Kubernetes); `ureplicator health` is the person's check
    "/metrics",  # Prometheus scrapes it
    "/ui",  # the HTML status page, for a browser; `ureplicator status` is its terminal form
    "/ui/verification",  # the HTML verification report, for a browser; `ureplicator verification show`
    "/static/<path:filename>",  # the pages' static assets
    # (/ready is a worker's readiness probe; the controller does not serve it)
}
# uReplicator's alias of POST /topics with the topic in the path: `topics add` sends the same request
# to POST /topics, whose command this test requires.
_ALIASES = {("POST", "/topics/<topic>"): ("POST", "/topics")}
# Values of a path variable the handler accepts (any other is a 404).
_VARIABLES = {
    ("GET", "op"): admin_api._ADMIN_GET,
    ("POST", "op"): admin_api._ADMIN_POST,
    ("POST", "action"): ("pause", "resume"),  # controller/topics_api.py pause_or_resume
}

# One argv per command; `--route r1` is added to each in a second pass for the route-scoped copies.
_COMMANDS = [
    ["topics", "list"], ["topics", "show", "t"], ["topics", "add", "t"], ["topics", "expand", "t"],
    ["topics", "remove", "t"], ["topics", "pause", "t"], ["topics", "resume", "t"],
    ["workers", "list"], ["workers", "blacklist", "w"], ["workers", "whitelist", "w"], ["rebalance"],
    ["offsets"], ["offsets", "t", "0"], ["noprogress"], ["validation"],
    ["blacklist", "list"], ["blacklist", "add", "t"], ["blacklist", "remove", "t"],
    ["autobalancing", "status"], ["autobalancing", "enable"], ["autobalancing", "disable"], ["workload"],
    ["rate-limit", "show"], ["rate-limit", "set", "--records-per-s", "10", "--bytes-per-s", "5"],
    ["verification", "show"], ["verification", "history"], ["health"], ["status"], ["openapi"],
    ["groups", "list"], ["groups", "translate", "g"], ["groups", "sync", "g"],
    ["clusters"], ["routes", "list"], ["routes", "show", "r1"], ["routes", "add", "r2", "a", "b"],
    ["routes", "change", "r1", "--forward", "transit"], ["routes", "remove", "r1"],
    ["routes", "pause", "r1"], ["routes", "resume", "r1"],
]


def _served() -> set[tuple[str, str]]:
    """(method, concrete path pattern) of every endpoint the controller's app serves."""
    from ureplicator.controller import groups_api
    from ureplicator.controller.api import Controller, create_app
    from ureplicator.controller.verification_api import make_blueprint

    stub = Controller(config=None, zk=None, leadership=None, source_admin=None, destination_admin=None,  # type: ignore[arg-type]
                      route_blueprints=[make_blueprint(None), groups_api.make_blueprint(None)])  # type: ignore[arg-type]
    served = set()
    for rule in create_app(stub).url_map.iter_rules():
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            served.add((method, rule.rule))
    return served


def _expanded(method: str, rule: str) -> list[str]:
    """A rule with its enumerated variables filled in (/admin/<op> -> /admin/workloadinfo, ...)."""
    rules = [rule]
    for name, values in ((n, v) for (m, n), v in _VARIABLES.items() if m == method):
        rules = [r.replace(f"<{name}>", value) for r in rules for value in values] if any(
            f"<{name}>" in r for r in rules) else rules
    return rules


def _matches(rule: str, path: str) -> bool:
    pattern = re.sub(r"<path:[^>]+>", ".+", rule)
    pattern = re.sub(r"<[^>]+>", "[^/]+", pattern)
    return re.fullmatch(pattern, path.split("?")[0]) is not None


def _reached(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()

    def fake_request(url: str, method: str = "GET", body: Any = None, token: str | None = None,
                     timeout_s: float = 30.0, ca: str | None = None) -> tuple[int, Any]:
        path = "/" + url.split("://", 1)[1].split("/", 1)[1]
        seen.add((method, path))
        return 200, _canned(path.split("?")[0])

    monkeypatch.setattr(rest, "request", fake_request)
    for argv in _COMMANDS:
        for extra in ([], ["--route", "r1"]):
            try:
                cli.main([*argv, *extra])
            except (KeyError, TypeError, AttributeError):
                pass  # a canned answer too thin to print: the request itself is what counts here
    return seen


def test_every_served_endpoint_has_a_cli_command(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    reached = _reached(monkeypatch)
    capsys.readouterr()
    served = _served()
    assert ("PATCH", "/routes/<route_id>") in served and ("GET", "/clusters") in served  # the walk sees them
    missing = []
    for method, rule in sorted(served):
        if rule in _NO_COMMAND:
            continue
        scope, bare = ("/routes/<route_id>", rule[len("/routes/<route_id>"):]) if rule.startswith(
            "/routes/<route_id>/") else ("", rule)
        target_method, target = _ALIASES.get((method, bare), (method, bare))
        target = scope + target
        for concrete in _expanded(target_method, target):
            if not any(m == target_method and _matches(concrete, path) for m, path in reached):
                missing.append(f"{target_method} {concrete}")
    assert missing == [], "endpoints without a CLI command (add one, and its argv to _COMMANDS)"


def test_the_allow_list_names_only_served_paths() -> None:
    # A stale entry would hide a future endpoint of that name.
    rules = {rule for _, rule in _served()}
    assert _NO_COMMAND <= rules
    assert {rule for _, rule in _ALIASES} <= rules


# --- what the commands send -------------------------------------------------------------------


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any]]:
    """The REST calls made; GET /admin/rate_limit answers a limit with both parts set."""
    calls: list[tuple[str, str, Any]] = []

    def fake_request(url: str, method: str = "GET", body: Any = None, token: str | None = None,
                     timeout_s: float = 30.0, ca: str | None = None) -> tuple[int, Any]:
        path = "/" + url.split("://", 1)[1].split("/", 1)[1]
        calls.append((method, path, body))
        if path.endswith("/admin/rate_limit"):
            return 200, {"records_per_s": 100, "bytes_per_s": 5000, **(body or {})}
        return 200, {"id": "r1", "source": "a", "destination": "b", "topic_naming": "mapping", "forward": "origin",
                     "topic_mapping": {"o": "o2"}, "workers": {"min": 2, "max": 4}, "shared": False,
                     "state": "running", "live_workers": 2, "topics": 1, "clusters": []}

    monkeypatch.setattr(rest, "request", fake_request)
    return calls


def test_routes_add_sends_topic_mapping_and_workers_the_api_accepts(sent: list[Any], capsys: Any) -> None:
    from ureplicator.controller.schemas import RouteRequest

    assert cli.main(["routes", "add", "r1", "a", "b", "--topic-naming", "mapping", "--topic-mapping", "o=o2",
                     "--topic-mapping", "p=p2", "--workers", "2:4"]) == 0
    method, path, body = sent[-1]
    assert (method, path) == ("POST", "/routes")
    assert body["topic_mapping"] == {"o": "o2", "p": "p2"} and body["workers"] == {"min": 2, "max": 4}
    RouteRequest.model_validate(body)  # the body's shape is the endpoint's
    assert "o -> o2" in capsys.readouterr().out


def test_routes_change_sends_only_what_was_named(sent: list[Any], capsys: Any) -> None:
    from ureplicator.controller.schemas import RouteChange

    assert cli.main(["routes", "change", "r1", "--workers", "3", "--no-shared"]) == 0
    assert sent[-1] == ("PATCH", "/routes/r1", {"workers": {"min": 3, "max": 0}, "shared": False})
    RouteChange.model_validate(sent[-1][2])
    # nothing named: refused before any call, rather than a PATCH that changes nothing
    count = len(sent)
    assert cli.main(["routes", "change", "r1"]) != 0
    assert len(sent) == count and "name at least one" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["routes", "add", "r1", "a", "b", "--topic-mapping", "o"],
                                  ["routes", "add", "r1", "a", "b", "--workers", "two"]])
def test_malformed_route_options_are_refused_by_the_parser(sent: list[Any], argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(argv)
    assert sent == []


@pytest.mark.parametrize(("argv", "posted"), [
    # the bytes limit set earlier (5000) survives a change of the records limit, and vice versa
    (["--records-per-s", "10"], {"records_per_s": 10, "bytes_per_s": 5000}),
    (["--bytes-per-s", "0"], {"records_per_s": 100, "bytes_per_s": 0}),
    (["--records-per-s", "1", "--bytes-per-s", "2"], {"records_per_s": 1, "bytes_per_s": 2}),
])
def test_rate_limit_set_changes_only_the_limits_named(sent: list[Any], argv: list[str], posted: dict) -> None:
    assert cli.main(["rate-limit", "set", *argv]) == 0
    assert sent[-1] == ("POST", "/admin/rate_limit", posted)


def test_rate_limit_set_without_a_limit_is_refused(sent: list[Any], capsys: Any) -> None:
    assert cli.main(["rate-limit", "set"]) != 0
    assert sent == [] and "--records-per-s" in capsys.readouterr().err
