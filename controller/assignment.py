"""Compute which worker owns which source partition: a pure, sticky, balanced assignment.

Two pure functions the leader calls on every reconcile:

* :func:`assign` decides the desired owner of every active partition. It is
  sticky (a partition keeps its owner unless that owner is gone or holds more
  than its fair share), balanced (every worker holds ``floor(P/W)`` or
  ``ceil(P/W)`` partitions) and spreads the partitions of one topic across
  workers. Adding a worker moves about ``P/W`` partitions; removing one moves
  only its own; adding a topic moves none of the existing ones.
* :func:`gate_handoff` turns the desired assignment into the one that may be
  written now: a partition that a *live* worker still reports in its status
  is withheld from its new owner until the old owner has released it (stopped
  fetching, waited for the destination's acks and committed). That is the
  planned hand-off that loses and duplicates nothing.

Example::

    >>> desired = assign({}, ["w1", "w2"], [("t", 0), ("t", 1)])
    >>> sorted(desired["w1"]) + sorted(desired["w2"])
    [('t', 0), ('t', 1)]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

TopicPartition = tuple[str, int]
Plan = dict[str, frozenset[TopicPartition]]


def assign(
    current: Mapping[str, Iterable[TopicPartition]],
    workers: Sequence[str],
    partitions: Iterable[TopicPartition],
) -> Plan:
    """Desired owner of each partition among ``workers`` (every worker gets a key)."""
    live = sorted(set(workers))
    wanted = set(partitions)
    if not live:
        return {}
    # 1. Stickiness: keep what each live worker already owns, once (first owner wins).
    kept: dict[str, set[TopicPartition]] = {w: set() for w in live}
    taken: set[TopicPartition] = set()
    for worker in live:
        for tp in sorted(current.get(worker, ())):
            if tp in wanted and tp not in taken:
                kept[worker].add(tp)
                taken.add(tp)
    # 2. Targets: the workers already holding most get the ceil(P/W) slots, so fewer move.
    base, extra = divmod(len(wanted), len(live))
    by_load = sorted(live, key=lambda w: (-len(kept[w]), w))
    target = {w: base + (1 if i < extra else 0) for i, w in enumerate(by_load)}
    # 3. Shed above target, dropping partitions of the topic most concentrated on the worker.
    pool = sorted(wanted - taken)
    for worker in live:
        while len(kept[worker]) > target[worker]:
            per_topic = Counter(t for t, _ in kept[worker])
            victim = max(kept[worker], key=lambda tp: (per_topic[tp[0]], tp))
            kept[worker].remove(victim)
            pool.append(victim)
    # 4. Place the pool: under-target worker with the fewest partitions of that topic.
    topic_count = {w: Counter(t for t, _ in kept[w]) for w in live}
    for tp in sorted(pool):
        open_workers = [w for w in live if len(kept[w]) < target[w]]
        chosen = min(open_workers, key=lambda w: (topic_count[w][tp[0]], len(kept[w]), w))
        kept[chosen].add(tp)
        topic_count[chosen][tp[0]] += 1
    return {w: frozenset(kept[w]) for w in live}


def gate_handoff(desired: Mapping[str, frozenset[TopicPartition]], applied: Mapping[str, Iterable[TopicPartition]]) -> Plan:
    """What may be written now: withhold partitions another live worker still owns.

    ``applied`` maps every worker with a live status node to the partitions it
    reports owning. A crashed worker has no status node, so its partitions are
    handed over at once (they restart from the last committed offset).
    """
    owner_now: dict[TopicPartition, set[str]] = {}
    for worker, owned in applied.items():
        for tp in owned:
            owner_now.setdefault(tp, set()).add(worker)
    return {
        worker: frozenset(tp for tp in tps if not (owner_now.get(tp, set()) - {worker}))
        for worker, tps in desired.items()
    }


def moves(before: Mapping[str, Iterable[TopicPartition]], after: Mapping[str, Iterable[TopicPartition]]) -> int:
    """How many partitions changed owner (a partition newly assigned or dropped counts once)."""
    owner_before = {tp: w for w, tps in before.items() for tp in tps}
    owner_after = {tp: w for w, tps in after.items() for tp in tps}
    return sum(1 for tp in owner_before.keys() & owner_after.keys() if owner_before[tp] != owner_after[tp])
