"""The topology check: refuse any set of routes under which a record could arrive twice or loop.

Pure: no I/O. The config loader (start-up) and the REST API (``POST /routes``,
``PATCH /routes/<id>``) call :func:`check` with the same inputs and give the
same message, which names the route or the path at fault (docs/routes.md).

The model is the worker's per-record rule (``forward``):

- a record first produced on cluster O carries O as its origin on every copy;
- a route S→D copies a record found on S when ``forward`` is ``origin`` and the
  record's origin is S, or ``forward`` is ``transit`` and its origin is not D.

Which topics a route mirrors is decided later (REST, auto-whitelisting), so the
check assumes any topic may be mirrored by every route: a record produced on O
then reaches every cluster along every path the rules allow. The set is refused
when some cluster can be reached by two different paths (a duplicate) or a path
comes back to a cluster it passed (a loop). Everything else is accepted, so with
``origin`` everywhere any mesh is safe (a record makes exactly one hop).

Two more refusals that are about names, not paths:

- a route whose two clusters are one (same bootstrap servers) and whose naming
  leaves a topic's name unchanged would write onto its own source topic;
- two routes into one cluster that both keep source names (``identity``, or a
  ``mapping``, which falls back to identity) would write one topic from two
  clusters; that is allowed when the routes say so (``shared: true``) or when the
  destination also routes back to both sources (active-active: every cluster
  holds one topic of that name by design).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

ROUTE_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
FORWARD_POLICIES = ("origin", "transit")
TOPIC_NAMINGS = ("identity", "prefix", "mapping")
SAMPLE_TOPIC = "t"  # the topic name paths are shown with: any topic travels the same way


class RouteLike(Protocol):
    id: str
    source: str
    destination: str
    topic_naming: str
    topic_mapping: Mapping[str, str]
    forward: str
    shared: bool


class TopologyError(ValueError):
    """A set of routes refused; ``key`` names the config key, ``message`` the problem (and the path)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


@dataclass(frozen=True)
class Hop:
    cluster: str
    topic: str
    route: str | None = None  # the route that wrote this copy (None: produced there)

    def __str__(self) -> str:
        return f"{self.cluster}/{self.topic}"


def render(path: Sequence[Hop]) -> str:
    """``a/t -> b/t -> c/t`` with the routes between, as the error messages show a path."""
    text = str(path[0])
    for hop in path[1:]:
        text += f" -[{hop.route}]-> {hop}"
    return text


def destination_topic(route: RouteLike, topic: str) -> str:
    """The name ``route`` gives ``topic`` on its destination (the controller's naming rule)."""
    if route.topic_naming == "prefix":
        return f"{route.source}.{topic}"
    if route.topic_naming == "mapping":
        return route.topic_mapping.get(topic, topic)
    return topic


def copies(route: RouteLike, origin: str) -> bool:
    """Whether ``route`` copies a record whose origin is ``origin`` (found on the route's source)."""
    if route.forward == "origin":
        return origin == route.source
    return origin != route.destination


def check(routes: Sequence[RouteLike], clusters: Mapping[str, frozenset[str]]) -> None:
    """Raise :class:`TopologyError` for the first problem of ``routes`` over ``clusters`` (alias -> servers)."""
    _check_each(routes, clusters)
    for origin in sorted({r.source for r in routes} | {r.destination for r in routes}):
        _check_deliveries(routes, origin)
    _check_shared_names(routes)


def _check_each(routes: Sequence[RouteLike], clusters: Mapping[str, frozenset[str]]) -> None:
    ids: dict[str, int] = {}
    pairs: dict[tuple[str, str], str] = {}
    known = ", ".join(sorted(clusters)) or "none"
    for i, route in enumerate(routes):
        key = f"routes[{i}]"
        if not isinstance(route.id, str) or not ROUTE_ID_RE.match(route.id):
            raise TopologyError(f"{key}.id", f"route id {route.id!r}: use 1-64 letters, digits, '_' or '-'")
        if route.id in ids:
            raise TopologyError(f"{key}.id", f"route id {route.id!r} is already taken")
        ids[route.id] = i
        for side in ("source", "destination"):
            alias = getattr(route, side)
            if alias not in clusters:
                raise TopologyError(f"{key}.{side}", f"route {route.id!r}: unknown cluster alias {alias!r} "
                                                     f"(clusters: {known})")
        if route.source == route.destination:
            raise TopologyError(f"{key}.destination", f"route {route.id!r} goes from {route.source!r} to itself")
        pair = (route.source, route.destination)
        if pair in pairs:
            raise TopologyError(f"{key}.destination", f"route {route.id!r}: {route.source} -> {route.destination} "
                                                      f"is already route {pairs[pair]!r} (one route per pair)")
        pairs[pair] = route.id
        if route.forward not in FORWARD_POLICIES:
            raise TopologyError(f"{key}.forward", f"route {route.id!r}: forward must be 'origin' or 'transit', "
                                                  f"got {route.forward!r}")
        if route.topic_naming not in TOPIC_NAMINGS:
            raise TopologyError(f"{key}.topic_naming", f"route {route.id!r}: topic_naming must be 'identity', "
                                                       f"'prefix' or 'mapping', got {route.topic_naming!r}")
        if clusters[route.source] and clusters[route.source] == clusters[route.destination]:
            _check_not_onto_itself(key, route)


def _check_not_onto_itself(key: str, route: RouteLike) -> None:
    """The route's two aliases are one cluster: no topic may keep its name."""
    if route.topic_naming == "identity":
        kept = "every topic"
    elif route.topic_naming == "mapping":
        kept = ", ".join(sorted(t for t, d in route.topic_mapping.items() if t == d))
    else:
        return
    if kept:
        raise TopologyError(
            f"{key}.topic_naming",
            f"route {route.id!r} writes onto its own source topic: {route.source} and {route.destination} are one "
            f"cluster and {route.topic_naming} naming keeps the name of {kept}; use prefix naming",
        )


def _check_shared_names(routes: Sequence[RouteLike]) -> None:
    by_destination: dict[str, list[RouteLike]] = {}
    for route in routes:
        if route.topic_naming != "prefix":
            by_destination.setdefault(route.destination, []).append(route)
    for keeping in by_destination.values():
        keeping.sort(key=lambda r: r.source)
    pairs = {(r.source, r.destination) for r in routes}
    for destination, keeping in sorted(by_destination.items()):
        if len(keeping) < 2:
            continue
        active_active = all((destination, r.source) in pairs for r in keeping)
        if active_active or all(r.shared for r in keeping):
            continue
        names = " and ".join(f"{r.id!r} ({r.source} -> {destination})" for r in keeping)
        raise TopologyError(
            "routes",
            f"routes {names} both write {destination}'s topics under their source names ({keeping[0].topic_naming} "
            f"naming): records of {', '.join(r.source for r in keeping)} would mix in one topic. Use prefix naming, "
            "or set shared: true on these routes if one topic is meant to gather them",
        )


def _check_deliveries(routes: Sequence[RouteLike], origin: str) -> None:
    """Follow a record produced on ``origin`` along every route that copies it; each cluster once."""
    outgoing: dict[str, list[RouteLike]] = {}
    for route in sorted(routes, key=lambda r: r.id):
        outgoing.setdefault(route.source, []).append(route)
    start = (Hop(origin, SAMPLE_TOPIC),)
    reached: dict[str, tuple[Hop, ...]] = {origin: start}
    pending = [start]
    while pending:
        path = pending.pop()
        here = path[-1]
        for route in outgoing.get(here.cluster, []):
            if not copies(route, origin):
                continue
            arrived = (*path, Hop(route.destination, destination_topic(route, here.topic), route.id))
            if route.destination in (hop.cluster for hop in path):
                raise TopologyError("routes", f"a record produced on {origin} loops: {render(arrived)} "
                                              f"(route {route.id!r} forwards {route.forward})")
            if route.destination in reached:
                raise TopologyError(
                    "routes",
                    f"a record produced on {origin} would reach {route.destination} twice: "
                    f"{render(reached[route.destination])} and {render(arrived)}; "
                    "use forward: origin on one of these routes or remove one",
                )
            reached[route.destination] = arrived
            pending.append(arrived)


def simulate(routes: Sequence[RouteLike], origin: str, limit: int = 64) -> dict[str, int]:
    """Copy one record produced on ``origin`` the way workers would; arrivals per cluster.

    Independent of :func:`check` (no paths, no early stop): the property tests compare the two.
    Stops after ``limit`` copies, so a loop shows as a count above one, not as a hang.
    """
    arrivals = {origin: 1}
    queue = [(origin, SAMPLE_TOPIC)]
    made = 0
    while queue and made < limit:
        cluster, topic = queue.pop(0)
        for route in routes:
            if route.source == cluster and copies(route, origin):
                arrivals[route.destination] = arrivals.get(route.destination, 0) + 1
                queue.append((route.destination, destination_topic(route, topic)))
                made += 1
    return arrivals
