"""The verifier's route plumbing: which routes a run verifies, where their reports go, topic families."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ureplicator.common import config as config_module
from ureplicator.common.errors import ConfigError
from ureplicator.verifier import cli
from ureplicator.verifier.deployment import Edge, families
from ureplicator.verifier.run import route_rule


def _config(routes: list[dict] | None) -> config_module.Config:
    doc: dict = {"pipeline": "p", "zookeeper": {"connect": "127.0.0.1:1"}}
    if routes is None:
        doc |= {"source": {"alias": "src", "bootstrap_servers": "a:9092"},
                "destination": {"alias": "dst", "bootstrap_servers": "b:9092"}}
    else:
        doc |= {"clusters": {c: {"bootstrap_servers": f"{c}:9092"} for c in ("c1", "c2", "c3")}, "routes": routes}
    return config_module.from_dict(doc)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_implicit_route_keeps_todays_paths_and_a_declared_route_its_own_directory():
    # Given a config without routes: one implicit route, verified as before routes
    config = _config(None)
    (view,) = cli.routes_to_verify(_args(), config)
    assert view.route_id in ("", config_module.IMPLICIT_ROUTE)
    assert cli.route_output(Path("out"), view.route_id) == Path("out")
    assert route_rule(view).forward == "transit" and not route_rule(view).attribute
    # (a declared route "default", which takes over the implicit route's state, keeps its reports too)
    assert cli.route_output(Path("out"), config_module.IMPLICIT_ROUTE) == Path("out")
    # and a declared route reports under its id, with its own policy and destination attribution
    assert cli.route_output(Path("out"), "c1-c2") == Path("out/c1-c2")
    declared = _config([{"id": "c1-c2", "source": "c1", "destination": "c2"}])
    (view,) = cli.routes_to_verify(_args(), declared)
    rule = route_rule(view)
    assert (view.route_id, rule.source, rule.destination, rule.forward, rule.attribute) == (
        "c1-c2", "c1", "c2", "origin", True)


def test_several_routes_and_no_choice_is_refused_listing_them():
    config = _config([{"id": "a", "source": "c1", "destination": "c2"},
                      {"id": "b", "source": "c2", "destination": "c3", "forward": "transit"}])
    with pytest.raises(ConfigError, match=r"2 routes \(a, b\): name one with --route ID"):
        cli.routes_to_verify(_args(), config)
    (view,) = cli.routes_to_verify(_args("--route", "b"), config)
    assert (view.source.alias, view.destination.alias, view.forward) == ("c2", "c3", "transit")
    with pytest.raises(ConfigError, match="--checkpoint and --group name one route's"):
        cli.routes_to_verify(_args("--all-routes", "--checkpoint", "x.json"), config)


def test_route_and_all_routes_and_deployment_exclude_each_other():
    with pytest.raises(SystemExit):
        _args("--route", "a", "--all-routes")
    with pytest.raises(SystemExit):
        _args("--deployment", "--route", "a")


def _edge(source: str, topic: str, destination: str, dest_topic: str, forward: str = "origin") -> Edge:
    return Edge(source, topic, destination, dest_topic, f"{source}-{destination}", forward, "g")


def test_topic_families_follow_the_routes_naming():
    # Given an identity-named pair c1 <-> c2 for t, and prefix fan-in of u into c3
    edges = [_edge("c1", "t", "c2", "t"), _edge("c2", "t", "c1", "t"),
             _edge("c1", "u", "c3", "c1.u"), _edge("c2", "u", "c3", "c2.u")]
    found = families(reversed(edges))
    # Then t is one family over c1 and c2; each region's u and its prefixed copy another
    assert [f.nodes for f in found] == [[("c1", "t"), ("c2", "t")], [("c1", "u"), ("c3", "c1.u")],
                                        [("c2", "u"), ("c3", "c2.u")]]
    assert [len(f.edges) for f in found] == [2, 1, 1]


def test_an_edge_copies_what_its_worker_would():
    assert _edge("c1", "t", "c2", "t").copies("c1")
    assert not _edge("c1", "t", "c2", "t").copies("c3")
    transit = _edge("c1", "t", "c2", "t", "transit")
    assert transit.copies("c3") and not transit.copies("c2")
