"""The topology check: accepted route sets never deliver a record twice; refused ones name the path."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ureplicator.common import topology
from ureplicator.common.topology import TopologyError

CLUSTERS = {name: frozenset({f"{name}:9092"}) for name in ("a", "b", "c", "d")}


@dataclass(frozen=True)
class R:
    source: str
    destination: str
    forward: str = "origin"
    topic_naming: str = "identity"
    shared: bool = False
    topic_mapping: dict[str, str] = field(default_factory=dict)
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", f"{self.source}-{self.destination}")


def mesh(names: str, forward: str) -> list[R]:
    return [R(s, d, forward) for s in names for d in names if s != d]


def refusal(routes: list[R], clusters: dict[str, frozenset[str]] = CLUSTERS) -> str:
    with pytest.raises(TopologyError) as err:
        topology.check(routes, clusters)
    return err.value.message


def test_three_cluster_identity_mesh_is_accepted_with_origin():
    topology.check(mesh("abc", "origin"), CLUSTERS)


def test_three_cluster_identity_mesh_is_refused_with_transit_naming_the_path():
    message = refusal(mesh("abc", "transit"))
    assert "a record produced on a" in message
    assert "twice" in message or "loops" in message
    assert "-[" in message  # the path is shown route by route


def test_the_issues_triangle_reaches_c_twice():
    # A->B, B->C (transit), A->C: a record of A reaches C directly and through B.
    message = refusal([R("a", "b"), R("b", "c", "transit"), R("a", "c")])
    assert message.startswith("a record produced on a would reach c twice")
    assert "a/t -[a-c]-> c/t" in message and "a/t -[a-b]-> b/t -[b-c]-> c/t" in message


def test_fan_in_with_prefix_naming_is_accepted():
    topology.check([R("a", "c", topic_naming="prefix"), R("b", "c", topic_naming="prefix")], CLUSTERS)


def test_fan_in_onto_identity_names_is_refused_unless_shared():
    message = refusal([R("a", "c"), R("b", "c")])
    assert "'a-c' (a -> c) and 'b-c' (b -> c)" in message and "shared: true" in message
    topology.check([R("a", "c", shared=True), R("b", "c", shared=True)], CLUSTERS)


def test_chain_needs_transit_and_hub_and_spoke_is_accepted():
    topology.check([R("a", "b"), R("b", "c", "transit")], CLUSTERS)
    hub = [R(s, "a") for s in "bcd"] + [R("a", s, "transit") for s in "bcd"]
    topology.check(hub, CLUSTERS)


def test_a_cycle_of_transit_routes_loops():
    message = refusal([R("a", "b", "transit"), R("b", "c", "transit"), R("c", "d", "transit"), R("d", "b", "transit")])
    assert "loops" in message and "b/t" in message


def test_a_route_onto_its_own_source_topic_is_refused():
    same = {"a": frozenset({"h:1"}), "b": frozenset({"h:1"})}
    message = refusal([R("a", "b")], same)
    assert "writes onto its own source topic" in message
    assert "writes onto its own source topic" in refusal(
        [R("a", "b", topic_naming="mapping", topic_mapping={"x": "x"})], same)
    topology.check([R("a", "b", topic_naming="prefix")], same)


@pytest.mark.parametrize(
    ("routes", "needle"),
    [
        ([R("a", "x")], "unknown cluster alias 'x' (clusters: a, b, c, d)"),
        ([R("a", "b"), R("a", "b", id="again")], "a -> b is already route 'a-b'"),
        ([R("a", "b"), R("b", "a", id="a-b")], "route id 'a-b' is already taken"),
        ([R("a", "b", id="no.dots")], "route id 'no.dots'"),
        ([R("a", "a")], "goes from 'a' to itself"),
        ([R("a", "b", forward="sometimes")], "forward must be 'origin' or 'transit'"),
    ],
)
def test_bad_routes_are_named(routes, needle):
    assert needle in refusal(routes)


# --- properties --------------------------------------------------------------------------------

ALIASES = ("a", "b", "c", "d")
route_sets = st.lists(
    st.tuples(st.sampled_from(ALIASES), st.sampled_from(ALIASES), st.sampled_from(topology.FORWARD_POLICIES),
              st.sampled_from(("identity", "prefix"))),
    max_size=8,
).map(lambda rows: list({(s, d): R(s, d, f, n, shared=True) for s, d, f, n in rows if s != d}.values()))


@settings(max_examples=400, deadline=None)
@given(route_sets)
def test_accepted_topologies_never_deliver_a_record_twice(routes):
    try:
        topology.check(routes, CLUSTERS)
    except TopologyError:
        return
    for origin in ALIASES:
        arrivals = topology.simulate(routes, origin)
        assert all(count == 1 for count in arrivals.values()), (origin, arrivals)


@settings(max_examples=400, deadline=None)
@given(route_sets)
def test_refused_topologies_really_deliver_a_record_twice(routes):
    # The check is exact, not merely cautious: each refusal is a duplicate the workers would make.
    try:
        topology.check(routes, CLUSTERS)
    except TopologyError:
        worst = max(max(topology.simulate(routes, origin).values()) for origin in ALIASES)
        assert worst > 1


@settings(max_examples=200, deadline=None)
@given(route_sets)
def test_origin_everywhere_is_always_accepted(routes):
    topology.check([R(r.source, r.destination, "origin", r.topic_naming, shared=True) for r in routes], CLUSTERS)
