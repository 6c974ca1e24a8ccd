"""The shared pool's allocator: minimums first, sized by work, capped moves, and it never flaps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ureplicator.controller.pool import Demand, allocate

ROUTES = ["a", "b", "c", "d"]


def counts(binding: dict[str, str | None]) -> dict[str | None, int]:
    found: dict[str | None, int] = {}
    for route in binding.values():
        found[route] = found.get(route, 0) + 1
    return found


def test_a_free_worker_goes_to_the_route_with_the_most_work_per_worker():
    demand = {"a": Demand(partitions=8, records_per_s=100), "b": Demand(partitions=8, records_per_s=1000)}
    assert allocate(["w1", "w2", "w3"], {"w1": "a", "w2": "b"}, demand)["w3"] == "b"


def test_every_route_gets_its_minimum_before_any_route_gets_more():
    demand = {"a": Demand(min=2, partitions=8, records_per_s=1e6), "b": Demand(min=1, partitions=8)}
    assert counts(allocate(["w1", "w2", "w3"], {}, demand)) == {"a": 2, "b": 1}


def test_a_route_below_its_minimum_takes_a_worker_from_a_route_above_its_own():
    demand = {"a": Demand(min=1, partitions=8, records_per_s=1e6), "b": Demand(min=1, partitions=8)}
    after = allocate(["w1", "w2"], {"w1": "a", "w2": "a"}, demand)
    assert counts(after) == {"a": 1, "b": 1}


def test_with_too_few_workers_a_route_waits_and_nobody_is_taken_from_a_route_at_its_minimum():
    demand = {"a": Demand(min=1, partitions=8), "b": Demand(min=1, partitions=8)}
    assert allocate(["w1"], {"w1": "b"}, demand) == {"w1": "b"}


def test_a_small_imbalance_moves_nothing_a_large_one_moves_one_worker_per_round():
    current = {"w1": "a", "w2": "a", "w3": "b"}
    workers = sorted(current)
    near = {"a": Demand(partitions=8, records_per_s=200), "b": Demand(partitions=8, records_per_s=130)}
    assert allocate(workers, current, near) == current  # b: 130/worker, a would be 200/worker: within 1.5x
    far = {"a": Demand(partitions=8, records_per_s=100), "b": Demand(partitions=8, records_per_s=1000)}
    assert counts(allocate(workers, current, far)) == {"a": 1, "b": 2}


def test_no_more_workers_than_partitions_or_max():
    demand = {"a": Demand(partitions=2, records_per_s=1e6), "b": Demand(max=1, partitions=8, records_per_s=1e6)}
    assert counts(allocate(["w1", "w2", "w3", "w4"], {}, demand)) == {"a": 2, "b": 1, None: 1}


def test_a_paused_route_gives_its_pool_workers_back_one_move_per_round():
    paused = Demand(min=0, partitions=0)  # what the leader asks for a paused route
    current = {"w1": "a", "w2": "a"}
    after = allocate(["w1", "w2"], current, {"a": paused, "b": Demand(max=1, partitions=4, records_per_s=5)})
    assert after == {"w1": "a", "w2": "b"}
    assert allocate(["w1", "w2"], after, {"a": paused, "b": Demand(max=1, partitions=4)}) == {"w1": None, "w2": "b"}


def test_a_worker_of_a_deleted_route_is_free_again():
    assert allocate(["w1"], {"w1": "gone"}, {"a": Demand(partitions=1)}) == {"w1": "a"}


demands = st.dictionaries(
    st.sampled_from(ROUTES),
    st.builds(Demand, min=st.integers(0, 3), max=st.integers(0, 4), partitions=st.integers(0, 6),
              records_per_s=st.floats(0, 1e4), lag=st.integers(0, 10**6)),
    min_size=1,
).filter(lambda d: all(not x.max or x.min <= x.max for x in d.values()))
pools = st.lists(st.sampled_from([f"w{i}" for i in range(10)]), unique=True, max_size=10)


@st.composite
def situations(draw):
    demand = draw(demands)
    workers = draw(pools)
    current = {w: draw(st.sampled_from([None, "gone", *demand])) for w in workers}
    return workers, current, demand, draw(st.integers(1, 3))


@settings(max_examples=400, deadline=None)
@given(situations())
def test_allocation_properties(situation):
    workers, current, demand, max_moves = situation
    after = allocate(workers, current, demand, max_moves=max_moves)
    # Every worker gets a live route or none
    assert set(after) == set(workers) and all(r is None or r in demand for r in after.values())
    # At most max_moves bound workers change route (binding a free one moves nothing)
    moved = [w for w in workers if current[w] in demand and after[w] != current[w]]
    assert len(moved) <= max_moves
    # No route gets more than it can use, unless it had them already
    for route, d in demand.items():
        before = sum(1 for w in workers if current[w] == route)
        assert sum(1 for w in workers if after[w] == route) <= max(d.cap, before)
    # A worker stays free only when no route can use one more: each is at its cap, or has a
    # worker and no work
    if any(r is None for r in after.values()):
        for route, d in demand.items():
            held = counts(after).get(route, 0)
            assert held >= d.cap or (held >= max(d.min, 1) and d.work(60.0) == 0), (route, after)


@settings(max_examples=300, deadline=None)
@given(situations())
def test_with_steady_demand_the_pool_settles_and_never_undoes_a_move(situation):
    workers, current, demand, max_moves = situation
    binding = dict(current)
    seen = [binding]
    for _ in range(4 * len(workers) * len(demand) + 4):
        nxt = allocate(workers, binding, demand, max_moves=max_moves)
        if nxt == binding:
            break
        assert nxt not in seen, "the pool came back to an earlier binding: it flaps"
        seen.append(nxt)
        binding = nxt
    else:
        raise AssertionError(f"no fixpoint after {len(seen)} rounds")
    # Settled: every route has its minimum when there are enough workers for all minimums
    if len(workers) >= sum(min(d.min, d.cap) for d in demand.values()):
        for route, d in demand.items():
            assert counts(binding).get(route, 0) >= min(d.min, d.cap), (route, binding)


def test_a_worker_joins_the_pool_or_pins_a_route_never_both():
    from ureplicator.common import config
    from ureplicator.common.errors import ConfigError

    doc = {
        "pipeline": "mesh",
        "zookeeper": {"connect": "zk:2181"},
        "clusters": {n: {"bootstrap_servers": f"{n}:9092"} for n in ("east", "west")},
        "routes": [{"id": "ew", "source": "east", "destination": "west"},
                   {"id": "we", "source": "west", "destination": "east"}],
    }
    assert config.from_dict({**doc, "worker": {"pool": True}}).worker.pool
    with pytest.raises(ConfigError, match="worker.pool: a worker either serves worker.route or joins the shared pool"):
        config.from_dict({**doc, "worker": {"pool": True, "route": "ew"}})
    with pytest.raises(ConfigError, match="controller.pool_max_moves"):
        config.from_dict({**doc, "controller": {"pool_max_moves": 0}})


def test_pool_bindings_round_trip_and_refuse_a_route_that_is_not_a_string():
    from ureplicator.common.zkschema import PoolBinding, SchemaError

    assert PoolBinding.decode(PoolBinding("ew", "t").encode()) == PoolBinding("ew", "t")
    assert PoolBinding.decode(PoolBinding(None).encode()).route is None
    with pytest.raises(SchemaError):
        PoolBinding.decode(b'{"route": 3}')
