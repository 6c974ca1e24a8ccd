"""Compute which worker owns which source partition: a pure, sticky, balanced assignment.

The pure functions the leader calls on every reconcile:

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
* :func:`writable` is what the leader writes: :func:`gate_handoff` over
  :func:`in_hand`, with at most one unconfirmed generation per worker (a
  worker's assignment is not rewritten until its status reports applying it).

Example::

    >>> desired = assign({}, ["w1", "w2"], [("t", 0), ("t", 1)])
    >>> sorted(desired["w1"]) + sorted(desired["w2"])
    [('t', 0), ('t', 1)]
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

TopicPartition = tuple[str, int]
Plan = dict[str, frozenset[TopicPartition]]


def assign(
    current: Mapping[str, Iterable[TopicPartition]],
    workers: Sequence[str],
    partitions: Iterable[TopicPartition],
    *,
    weights: Mapping[TopicPartition, float] | None = None,
    lagging: Iterable[TopicPartition] = (),
    max_per_worker: int = 0,
    rebalance: bool = True,
    max_moves: int | None = None,
) -> Plan:
    """Desired owner of each partition among ``workers`` (every worker gets a key).

    ``weights`` (measured bytes/s) decide which partitions go where within the
    count balance; ``lagging`` partitions (lag growing past a threshold) are
    spread first, at most ``ceil(L/W)`` per worker; ``max_per_worker`` caps a
    worker's count (0 = no cap; partitions beyond capacity stay unassigned).
    ``rebalance=False`` (auto-balancing off) keeps sticky partitions where they
    are even when weights or lag say they should move. ``max_moves`` caps how many partitions
    leave a live owner in ``current`` for another worker (None = no cap): the others stay where
    they are, a little out of balance, until a later call. A partition nobody live owns (new, or
    a departed worker's) is placed, not moved, and is never held back by it.
    """
    live = sorted(set(workers))
    wanted = set(partitions)
    if not live:
        return {}
    weight = weights or {}
    hot = set(lagging) & wanted if rebalance else set()
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
    if max_per_worker > 0:
        target = {w: min(t, max_per_worker) for w, t in target.items()}
    pool = sorted(wanted - taken)
    # 3. Lagging partitions first: no worker keeps more than its share of them.
    hot_cap = -(-len(hot) // len(live))
    for worker in live:
        mine = sorted(kept[worker] & hot)
        for tp in mine[hot_cap:]:
            kept[worker].remove(tp)
            pool.append(tp)
    # 4. Shed above target, dropping partitions of the topic most concentrated on the worker.
    for worker in live:
        excess = len(kept[worker]) - target[worker]
        if excess > 0:
            pool.extend(_shed(kept[worker], excess, hot))
    # 5. Place the pool, lagging first: the open worker with the fewest lagging partitions,
    #    then the fewest of that topic, then the least measured load, then the fewest partitions.
    topic_count = {w: Counter(t for t, _ in kept[w]) for w in live}
    if not hot and not weight:
        _place_by_count(sorted(pool), kept, target, topic_count)
        _cap_moves(current, live, wanted, kept, max_moves)
        return {w: frozenset(kept[w]) for w in live}
    hot_count = {w: len(kept[w] & hot) for w in live}
    load = {w: sum(weight.get(tp, 0.0) for tp in kept[w]) for w in live}
    for tp in sorted(pool, key=lambda tp: (tp not in hot, -weight.get(tp, 0.0), tp)):
        open_workers = [w for w in live if len(kept[w]) < target[w]]
        if not open_workers:
            break  # max_per_worker leaves it unassigned
        is_hot = tp in hot
        chosen = min(
            open_workers,
            key=lambda w: (hot_count[w] if is_hot else 0, topic_count[w][tp[0]], load[w], len(kept[w]), w),
        )
        kept[chosen].add(tp)
        topic_count[chosen][tp[0]] += 1
        hot_count[chosen] += is_hot
        load[chosen] += weight.get(tp, 0.0)
    # 6. Weights: swap partitions between the heaviest and lightest worker while that lowers
    #    the heavier side (counts stay balanced; bounded so a reconcile stays cheap).
    if rebalance and weight and len(live) > 1:
        _swap_for_weight(kept, load, weight, hot, rounds=4 * len(live))
    _cap_moves(current, live, wanted, kept, max_moves)
    return {w: frozenset(kept[w]) for w in live}


def _cap_moves(
    current: Mapping[str, Iterable[TopicPartition]],
    live: list[str],
    wanted: set[TopicPartition],
    kept: dict[str, set[TopicPartition]],
    max_moves: int | None,
) -> None:
    """Give moves beyond ``max_moves`` back to their owners in ``current``, in place.

    Every move is a hand-off (a release, a commit, an acquisition): a rollout of many workers at
    once must not start them all in one round. The moves kept go round-robin to the receivers
    that hold fewest, so each newcomer gets work in the first round rather than one all of it.
    """
    if max_moves is None:
        return
    before: dict[TopicPartition, str] = {}
    for worker in live:  # the same first-owner-wins rule as stickiness
        for tp in sorted(current.get(worker, ())):
            if tp in wanted:
                before.setdefault(tp, worker)
    after = {tp: w for w, tps in kept.items() for tp in tps}
    incoming: dict[str, list[TopicPartition]] = {}
    for tp, old in sorted(before.items()):
        new = after.get(tp)
        if new is not None and new != old:
            incoming.setdefault(new, []).append(tp)
    total = sum(len(tps) for tps in incoming.values())
    if total <= max_moves:
        return
    receivers = sorted(incoming, key=lambda w: (len(kept[w]) - len(incoming[w]), w))
    allowed: set[TopicPartition] = set()
    while len(allowed) < max_moves:
        for worker in receivers:
            if incoming[worker] and len(allowed) < max_moves:
                allowed.add(incoming[worker].pop(0))
    for worker, tps in incoming.items():
        for tp in tps:  # not allowed this time: back to its owner
            kept[worker].discard(tp)
            kept[before[tp]].add(tp)


def _shed(owned: set[TopicPartition], count: int, hot: set[TopicPartition]) -> list[TopicPartition]:
    """Take ``count`` partitions off a worker: never a lagging one while others remain, and from the
    topic most concentrated on it first (so its topics end up spread). O(count log topics)."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in sorted(owned):
        if tp not in hot:
            by_topic.setdefault(tp[0], []).append(tp)
    heap = [(-len(tps), topic) for topic, tps in by_topic.items()]
    heapq.heapify(heap)
    shed: list[TopicPartition] = []
    while len(shed) < count and heap:
        size, topic = heapq.heappop(heap)
        shed.append(by_topic[topic].pop())  # the highest partition number of that topic
        if size + 1 < 0:
            heapq.heappush(heap, (size + 1, topic))
    shed.extend(sorted(owned & hot, reverse=True)[: count - len(shed)])
    owned.difference_update(shed)
    return shed


def _place_by_count(
    pool: list[TopicPartition],
    kept: dict[str, set[TopicPartition]],
    target: dict[str, int],
    topic_count: dict[str, Counter[str]],
) -> None:
    """Count-only placement, one heap per topic: O(topics * W + P log W) instead of O(P * W).

    Same choice as the general loop: fewest partitions of the topic, then fewest partitions.
    """
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in pool:
        by_topic.setdefault(tp[0], []).append(tp)
    for topic, tps in by_topic.items():
        heap = [(topic_count[w][topic], len(kept[w]), w) for w in kept if len(kept[w]) < target[w]]
        heapq.heapify(heap)
        for tp in tps:
            if not heap:
                return  # max_per_worker leaves the rest unassigned
            _, count, worker = heapq.heappop(heap)
            kept[worker].add(tp)
            topic_count[worker][topic] += 1
            if count + 1 < target[worker]:
                heapq.heappush(heap, (topic_count[worker][topic], count + 1, worker))


# Measured rates jitter, and moving a partition costs a hand-off: swap only when the
# heaviest worker carries 25% more than the mean, and only for a gain of 10% of the mean.
_SWAP_TRIGGER = 1.25
_SWAP_GAIN = 0.1


def _swap_for_weight(
    kept: dict[str, set[TopicPartition]],
    load: dict[str, float],
    weight: Mapping[TopicPartition, float],
    hot: set[TopicPartition],
    rounds: int,
) -> None:
    mean = sum(load.values()) / len(load)
    if mean <= 0:
        return
    for _ in range(rounds):
        heavy = max(load, key=lambda w: (load[w], w))
        light = min(load, key=lambda w: (load[w], w))
        if load[heavy] < _SWAP_TRIGGER * mean:
            return
        gap = load[heavy] - load[light]
        best: tuple[float, TopicPartition, TopicPartition] | None = None
        for a in kept[heavy]:
            for b in kept[light]:
                delta = weight.get(a, 0.0) - weight.get(b, 0.0)
                if 0 < delta < gap and (a in hot) == (b in hot):
                    new_max = max(load[heavy] - delta, load[light] + delta)
                    if best is None or new_max < best[0]:
                        best = (new_max, a, b)
        if best is None or load[heavy] - best[0] < _SWAP_GAIN * mean:
            return
        _, a, b = best
        delta = weight.get(a, 0.0) - weight.get(b, 0.0)
        kept[heavy].remove(a)
        kept[light].add(a)
        kept[light].remove(b)
        kept[heavy].add(b)
        load[heavy] -= delta
        load[light] += delta


def gate_handoff(
    desired: Mapping[str, frozenset[TopicPartition]], applied: Mapping[str, Iterable[TopicPartition]]
) -> Plan:
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


def in_hand(
    statuses: Mapping[str, tuple[int, Iterable[TopicPartition]]],
    written: Mapping[str, tuple[int, Iterable[TopicPartition]]],
) -> dict[str, frozenset[TopicPartition]]:
    """What each live worker owns now *or may own any moment*: for :func:`gate_handoff`.

    ``statuses`` maps a live worker to (applied generation, owned partitions); ``written``
    to (generation, partitions) of its assignment node. A worker whose status lags its
    written assignment may still apply it, so the written partitions count as its own
    until it reports that generation — otherwise a partition moved twice in quick
    succession could be mirrored by two workers at once. Only the *newest* written
    assignment is known here, so this is exact only while a worker has at most one
    unconfirmed generation: :func:`writable` keeps it that way.
    """
    held: dict[str, frozenset[TopicPartition]] = {}
    for worker, (generation, owned) in statuses.items():
        mine = frozenset(owned)
        target = written.get(worker)
        if target is not None and generation < target[0]:
            mine |= frozenset(target[1])
        held[worker] = mine
    return held


def writable(
    desired: Mapping[str, frozenset[TopicPartition]],
    statuses: Mapping[str, tuple[int, Iterable[TopicPartition]]],
    written: Mapping[str, tuple[int, Iterable[TopicPartition]]],
) -> Plan:
    """What the leader may write now: the gated plan, one unconfirmed generation per worker.

    ``statuses`` and ``written`` are as for :func:`in_hand`. A worker applies the newest
    assignment it has *read*, and applying takes a while (acquiring means committed
    offsets and metadata) during which its status still shows the generation before.
    :func:`in_hand` can count only the newest written assignment as what a lagging
    worker may still take; were the leader to write it another generation meanwhile, the
    partitions of the one it is still applying would count as nobody's and could be
    handed to another worker that then mirrors them alongside it. So a live worker whose
    status lags its written generation keeps that assignment, unchanged, until it reports
    having applied it; what it was meant to lose or gain waits for that one round trip.
    """
    plan = gate_handoff(desired, in_hand(statuses, written))
    for worker, (generation, _) in statuses.items():
        target = written.get(worker)
        if target is not None and generation < target[0]:
            plan[worker] = frozenset(target[1])
    return plan


def moves(before: Mapping[str, Iterable[TopicPartition]], after: Mapping[str, Iterable[TopicPartition]]) -> int:
    """How many partitions changed owner (a partition newly assigned or dropped counts once)."""
    owner_before = {tp: w for w, tps in before.items() for tp in tps}
    owner_after = {tp: w for w, tps in after.items() for tp in tps}
    return sum(1 for tp in owner_before.keys() & owner_after.keys() if owner_before[tp] != owner_after[tp])


class Settle:
    """Whether workers joining now should wait for more joins before they get partitions (issue 48 §2).

    Pure bookkeeping over the live workers each round sees; the leader passes its clock's ``now``.
    A settle starts when workers join (a) a route where no other live worker holds anything — the
    first assignment, which would otherwise go whole to whichever worker registered first — or (b)
    at the start of a leadership term, or (c) several at once. While it lasts, the live workers that
    hold nothing are held back; each further join restarts the ``delay_s`` wait, but never past
    ``max_s`` after the settle began, so a rollout that trickles in cannot postpone assignment for
    ever. Workers that already hold partitions are never held, so departures and crashes are handled
    as usual meanwhile. Kafka's ``group.initial.rebalance.delay.ms`` is the same idea.
    """

    def __init__(self, delay_s: float, max_s: float | None = None) -> None:
        self.delay_s = delay_s
        self.max_s = 5 * delay_s if max_s is None else max_s
        self._known: frozenset[str] | None = None  # live workers of the previous round; None: a new term
        self._since: float | None = None  # when the settle under way began
        self._until = 0.0

    @property
    def since(self) -> float | None:
        return self._since

    def hold(self, live: Iterable[str], holding: Iterable[str], now: float) -> frozenset[str]:
        """The workers to keep without partitions this round (empty when not settling)."""
        live_now = frozenset(live)
        holders = frozenset(holding) & live_now
        term_start = self._known is None
        joined = live_now - (holders if self._known is None else self._known)
        self._known = live_now
        if self.delay_s <= 0:
            return frozenset()
        if self._since is None:
            if joined and (term_start or len(joined) > 1 or not holders - joined):
                self._since = now
                self._until = now + self.delay_s
        elif joined:
            self._until = max(self._until, min(now + self.delay_s, self._since + self.max_s))
        if self._since is None or now >= self._until:
            self._since = None
            return frozenset()
        return live_now - holders

    def remaining(self, now: float) -> float | None:
        """Seconds until the settle under way ends (None: none under way), so the leader wakes then."""
        return None if self._since is None else max(0.0, self._until - now)
