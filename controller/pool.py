"""The shared worker pool's allocator: which route each pool worker should serve. Pure, no I/O.

Every round the leader calls :func:`allocate` with the pool's workers, the route each is
bound to now, and each route's :class:`Demand` (its ``workers: {min, max}``, its partition
count, and the rate and lag its workers' status nodes carry). It returns the binding it
wants; the leader then moves a worker only after the route's hand-off gate drained it
(:mod:`controller.routeset`). The rules, in order:

1. A free worker (bound to nothing, or to a route that is gone) is bound at once: to a route
   below its ``min`` first, else to the route with the most work per worker that can use one
   more (below ``max`` and below its partition count). Binding a free worker moves nothing, so
   it is not capped. With nowhere useful to go it stays free. A route with no worker reports
   no rate or lag, so one with partitions counts as the neediest.
2. A route over its cap (``max`` lowered, partitions gone) gives back its extra workers.
3. A route below its ``min`` takes a worker from a route above its own ``min``.
4. Otherwise a worker moves from route D to route R only when R's work per worker is more
   than ``1 + hysteresis`` times D's *after* D lost it. So the move can never be undone by
   the same rule with the same demand (after it, R's load per worker is below D's, not above
   ``1 + hysteresis`` times it), and with steady demand the pool settles: it never flaps.

Rules 2-4 together move at most ``max_moves`` bound workers per round. Work is records/s:
the routes' rate plus the lag that would be drained in ``catch_up_s``.

>>> allocate(["w1", "w2", "w3"], {"w1": "a", "w2": "a", "w3": None},
...          {"a": Demand(partitions=4, records_per_s=10), "b": Demand(partitions=4, records_per_s=900)})
{'w1': 'a', 'w2': 'a', 'w3': 'b'}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Demand:
    """What one route asks of the pool."""

    min: int = 1
    max: int = 0  # 0: no upper bound
    partitions: int = 0
    records_per_s: float = 0.0
    lag: int = 0  # records behind, summed over the route's partitions

    def work(self, catch_up_s: float) -> float:
        return max(self.records_per_s, 0.0) + max(self.lag, 0) / catch_up_s

    @property
    def cap(self) -> int:
        """The most workers this route can use: ``max``, and no more than one per partition (but its ``min``)."""
        useful = max(self.partitions, self.min)
        return min(self.max, useful) if self.max else useful


def allocate(
    workers: Sequence[str],
    current: Mapping[str, str | None],
    demand: Mapping[str, Demand],
    max_moves: int = 1,
    hysteresis: float = 0.5,
    catch_up_s: float = 60.0,
) -> dict[str, str | None]:
    """The wanted route of every worker in ``workers`` (None: free); see the module docstring."""
    bound: dict[str, str | None] = {w: (current.get(w) if current.get(w) in demand else None) for w in workers}
    members: dict[str, list[str]] = {r: sorted(w for w in workers if bound[w] == r) for r in demand}
    work = {r: d.work(catch_up_s) for r, d in demand.items()}

    def per_worker(route: str, count: int) -> float:
        if count <= 0:  # with no worker a route reports no rate or lag: anything to mirror makes it neediest
            d = demand[route]
            return math.inf if work[route] > 0 or d.min > 0 or d.partitions > 0 else 0.0
        return work[route] / count

    def receiver() -> str | None:
        """The route that most needs one more worker: below min first, then most work per worker."""
        open_ = [r for r in demand if len(members[r]) < demand[r].cap]
        short = [r for r in open_ if len(members[r]) < demand[r].min]
        if short:
            return min(short, key=lambda r: (len(members[r]) - demand[r].min, r))
        busy = [r for r in open_ if work[r] > 0 or not members[r]]
        if not busy:
            return None
        return max(busy, key=lambda r: (per_worker(r, len(members[r])), -len(members[r]), _desc(r)))

    def give(worker: str, route: str | None) -> None:
        old = bound[worker]
        if old is not None:
            members[old].remove(worker)
        bound[worker] = route
        if route is not None:
            members[route].append(worker)
            members[route].sort()

    # 1. free workers, uncapped
    for worker in sorted(w for w in workers if bound[w] is None):
        route = receiver()
        if route is None:
            break
        give(worker, route)

    moves = 0
    # 2. routes over their cap give their extra workers back (to a receiver, or free)
    for route in sorted(demand):
        while len(members[route]) > demand[route].cap and moves < max_moves:
            worker = members[route][-1]
            give(worker, None)
            give(worker, receiver())
            moves += 1

    while moves < max_moves:
        # 3. minimums: from the donor that loses least
        short = [r for r in demand if len(members[r]) < min(demand[r].min, demand[r].cap)]
        donors = [r for r in demand if len(members[r]) > demand[r].min]
        if short and donors:
            target = min(short, key=lambda r: (len(members[r]) - demand[r].min, r))
            donor = min(donors, key=lambda r: (per_worker(r, len(members[r]) - 1), r))
            give(members[donor][-1], target)
            moves += 1
            continue
        # 4. load, with hysteresis
        target = receiver()
        donors = [r for r in donors if r != target]
        if target is None or not donors:
            break
        donor = min(donors, key=lambda r: (per_worker(r, len(members[r]) - 1), r))
        if per_worker(target, len(members[target])) <= (1 + hysteresis) * per_worker(donor, len(members[donor]) - 1):
            break
        give(members[donor][-1], target)
        moves += 1
    return bound


def _desc(route: str) -> tuple[int, ...]:
    """A deterministic tie-break for ``max`` that prefers lower ids (characters negated)."""
    return tuple(-ord(c) for c in route)
