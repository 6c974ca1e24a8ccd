"""The fetch watch's decisions (worker/fetchwatch.py) and its end-offset reader, with an injected clock."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_INVALID, TopicPartition
from structlog.testing import capture_logs

from tests.unit.fakes import FakeCommitClient, FakeConsumer, FakeProducer, FakeZooKeeper
from ureplicator.common import config as config_module
from ureplicator.common.zkschema import Assignment, Paths, TopicRecord
from ureplicator.worker import fetchwatch
from ureplicator.worker.clients import WorkerClients
from ureplicator.worker.endoffsets import EndOffsets
from ureplicator.worker.fetchwatch import REPLACE, FetchWatch, Watched
from ureplicator.worker.mirror import MirrorWorker

TP = ("orders", 0)
ACQ = object()  # one acquisition of TP


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run(watch: FetchWatch, clock: Clock, seconds: int, position: int, end: int | None,
        paused: bool = False, hold: bool = False, acquisition: object = ACQ,
        held_s: float = 0.0) -> list[fetchwatch.Stall]:
    """``seconds`` one-second looks at TP, the end read just before each look; every decision made.

    ``hold``: the loop held back fetching throughout each second; ``held_s``: that long in each.
    """
    decided = []
    for _ in range(seconds):
        clock.now += 1.0
        if hold:
            watch.hold()
        if held_s:
            watch.hold(held_s)
        ends = {} if end is None else {TP: (end, clock.now - 0.1)}
        decided += watch.observe(clock.now, {TP: Watched(acquisition, position, paused)}, ends)
    return decided


def test_a_partition_whose_source_grew_while_its_position_stood_still_is_stalled():
    # Given a partition whose consumer fetched up to 500, the source's end being 500
    clock, watch = Clock(), FetchWatch(stall_s=10)
    assert run(watch, clock, 3, position=500, end=500) == []
    # When the source grows to 620 and the position does not move
    early = run(watch, clock, 9, position=500, end=620)
    late = run(watch, clock, 2, position=500, end=620)
    # Then nothing is decided before fetch_stall_s, and then its consumer is replaced
    assert early == []
    assert [(s.tp, s.position, s.end, s.action) for s in late] == [(TP, 500, 620, REPLACE)]
    assert late[0].stalled_s >= 10


def test_the_remedy_repeats_each_stall_period_while_the_stall_lasts():
    clock, watch = Clock(), FetchWatch(stall_s=5)
    run(watch, clock, 2, position=10, end=10)
    decided = run(watch, clock, 30, position=10, end=50)
    # Then: the consumer is replaced once the stall is a period old, and again each period while it lasts
    assert [s.action for s in decided] == [REPLACE] * 5
    # And once the position moves the watch starts again: a full period before the next remedy
    run(watch, clock, 2, position=50, end=50)
    assert run(watch, clock, 4, position=50, end=80) == []
    assert [s.action for s in run(watch, clock, 6, position=50, end=80)] == [REPLACE]


def test_an_exactly_once_partition_at_its_end_is_not_stalled_by_its_markers():
    # Given a read_committed consumer at the end of a transactional topic: the last stable offset
    # stays ahead of the position (a commit marker, aborted records)
    clock, watch = Clock(), FetchWatch(stall_s=5)
    # When that gap lasts, without growing, far longer than fetch_stall_s
    decided = run(watch, clock, 60, position=1000, end=1003)
    # Then it is never a stall
    assert decided == []


def test_nothing_is_decided_while_the_end_offset_is_unknown_or_old():
    clock, watch = Clock(), FetchWatch(stall_s=5)
    run(watch, clock, 2, position=10, end=10)
    run(watch, clock, 1, position=10, end=40)  # the source grew once, then its cluster went away
    # When no end is read any more (the source cluster is down)
    assert run(watch, clock, 30, position=10, end=None) == []
    # And an end read long ago does not speak for now either
    stale = watch.observe(clock.now + 1, {TP: Watched(ACQ, 10)}, {TP: (40, clock.now - 30)})
    assert stale == []


def test_an_end_read_before_the_position_moved_is_not_taken_for_growth():
    clock, watch = Clock(), FetchWatch(stall_s=5)
    run(watch, clock, 1, position=10, end=10)
    clock.now += 1
    watch.observe(clock.now, {TP: Watched(ACQ, 90)}, {TP: (10, clock.now - 5)})  # moved; the read is older
    # Then later reads of the same end decide nothing: 90 is the end
    assert run(watch, clock, 20, position=90, end=90) == []


def test_a_partition_the_worker_pauses_itself_is_never_stalled():
    # Given a partition held back by the worker (stopped, released, rewinding): its end grows
    clock, watch = Clock(), FetchWatch(stall_s=5)
    run(watch, clock, 2, position=10, end=10)
    assert run(watch, clock, 30, position=10, end=500, paused=True) == []
    # And once it is not paused any more its clock starts from then, not from the growth
    assert run(watch, clock, 4, position=10, end=600) == []
    assert [s.action for s in run(watch, clock, 4, position=10, end=600)] == [REPLACE]


def test_backpressure_stops_every_clock():
    # Given the loop holding back fetching (in-flight cap, rate limit, fence, full producer queue)
    clock, watch = Clock(), FetchWatch(stall_s=5)
    run(watch, clock, 2, position=10, end=10)
    assert run(watch, clock, 30, position=10, end=900, hold=True) == []
    # When the hold ends, the stall is timed from then
    assert run(watch, clock, 4, position=10, end=1000) == []
    decided = run(watch, clock, 4, position=10, end=1000)
    assert [s.action for s in decided] == [REPLACE]


def test_a_stall_is_timed_by_the_seconds_the_loop_did_not_hold():
    # Given a partition whose source grows while its position stands still, in a loop that holds
    # back fetching for 50 ms of every second (an exactly-once commit waiting for its reports)
    clock, watch = Clock(), FetchWatch(stall_s=10)
    run(watch, clock, 2, position=10, end=10)
    early = run(watch, clock, 10, position=10, end=900, held_s=0.05)
    # Then the 50 ms are not counted, but the rest is: the remedy comes after about 10.5 s
    late = run(watch, clock, 2, position=10, end=900, held_s=0.05)
    assert early == []
    assert [s.action for s in late] == [REPLACE]
    assert 10 <= late[0].stalled_s < 11


def test_held_seconds_between_looks_push_the_remedy_back_by_as_much():
    # Given the same stall, with the whole loop held 3 s out of every 4 s
    clock, watch = Clock(), FetchWatch(stall_s=10)
    run(watch, clock, 2, position=10, end=10)
    decided: list[fetchwatch.Stall] = []
    looks = 0
    while not decided and looks < 100:
        decided = run(watch, clock, 1, position=10, end=900, hold=looks % 4 != 3)
        looks += 1
    # Then the remedy comes once ten un-held seconds have passed (forty seconds), not never
    assert [s.action for s in decided] == [REPLACE]
    assert 36 <= looks <= 44


def test_a_new_acquisition_starts_the_watch_again():
    clock, watch = Clock(), FetchWatch(stall_s=5)
    run(watch, clock, 2, position=10, end=10)
    run(watch, clock, 4, position=10, end=50)
    # When the partition is rewound (a new acquisition at the same position)
    assert run(watch, clock, 4, position=10, end=50, acquisition=object()) == []


def test_watched_marks_what_the_worker_holds_back():
    acquisitions = {("t", p): object() for p in range(5)}
    seen = fetchwatch.watched(acquisitions, {("t", 0): 7}, stopped=[("t", 1)], releasing=[("t", 2)],
                              rewinding=[("t", 3)], routed=[("t", 0), ("t", 1), ("t", 2), ("t", 3)])
    assert {tp: w.paused for tp, w in seen.items()} == {
        ("t", 0): False, ("t", 1): True, ("t", 2): True, ("t", 3): True, ("t", 4): True}
    assert seen[("t", 0)].position == 7 and seen[("t", 4)].position == -1


def test_a_zero_stall_period_builds_no_watch():
    with pytest.raises(ValueError):
        FetchWatch(0)


class _Log:
    def __init__(self) -> None:
        self.events: list[str] = []

    def warning(self, event: str, **_: object) -> None:
        self.events.append(event)

    def info(self, event: str, **_: object) -> None:
        self.events.append(event)


def test_end_offsets_keep_the_last_answer_and_say_when_the_source_is_away():
    clock, log = Clock(), _Log()
    answers: list[dict | Exception] = [{TP: 40, ("orders", 1): 7}, ConnectionError("source down"), {TP: 55}]

    def query(partitions, timeout_s):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    ends = EndOffsets(query, interval_s=1.0, log=log, clock=clock)
    ends._wanted = frozenset({TP, ("orders", 1)})  # as want() sets it, without the thread
    ends.ask_once()
    assert ends.snapshot() == {TP: (40, 100.0), ("orders", 1): (7, 100.0)}
    clock.now = 103.0
    ends.ask_once()  # the source is away: the answers keep their age, the watch sees them grow old
    assert ends.snapshot()[TP] == (40, 100.0) and log.events == ["end_offsets_unknown"]
    clock.now = 106.0
    ends.ask_once()
    assert ends.snapshot() == {TP: (55, 106.0), ("orders", 1): (7, 100.0)}
    assert log.events == ["end_offsets_unknown", "end_offsets_known_again"]


# --- the worker's remedies, on fake clients -----------------------------------------------------


class SilentConsumer(FakeConsumer):
    """A source consumer that can stop fetching some partitions without a word (librdkafka #5153).

    Like librdkafka, its position is unknown after an assignment until a record of the
    partition is consumed.
    """

    def __init__(self, logs: dict) -> None:
        super().__init__(logs)
        self.silent: set[tuple[str, int]] = set()
        self.consumed: set[tuple[str, int]] = set()
        self.closed_event = threading.Event()  # the worker closes a retired consumer on a thread of its own

    def close(self) -> None:
        super().close()
        self.closed_event.set()

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        super().incremental_assign(partitions)
        self.consumed -= {(tp.topic, tp.partition) for tp in partitions}

    def consume(self, num_messages: int, timeout: float) -> list:
        hidden = {tp: self.positions.pop(tp) for tp in self.silent if tp in self.positions}
        try:
            out = super().consume(num_messages, timeout)
        finally:
            self.positions.update(hidden)
        self.consumed.update((m.topic(), m.partition()) for m in out)
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition,
                               self.positions[(tp.topic, tp.partition)]
                               if (tp.topic, tp.partition) in self.consumed else OFFSET_INVALID)
                for tp in partitions]


def records(n: int, partition: int, start: int = 0) -> list[bytes]:
    return [f"p{partition}-{i}".encode() for i in range(start, start + n)]


def silent_worker(held_s: float = 0.0) -> tuple[MirrorWorker, Callable[[float], None], dict, list, FakeProducer]:
    """A worker mirroring t:0 and t:1 with a 3 s fetch watch, on fake clients that can go silent.

    Returns the worker, ``turns(seconds)`` (quarter-second turns on its clock; each first held
    back fetching for ``held_s``, as an exactly-once commit waiting for its reports does), the
    source logs, the consumers it had so far and the producer.
    """
    cfg = config_module.from_dict({
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1", "session_timeout_s": 600},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
        "worker": {"id": "w1", "commit_interval_s": 0.5, "fetch_stall_s": 3},
    })
    paths = Paths(cfg.root)
    zk = FakeZooKeeper()
    zk.nodes[paths.topic("t")] = TopicRecord("t", "t", 2).encode()
    logs = {("t", 0): records(10, 0), ("t", 1): records(10, 1)}
    first = SilentConsumer(logs)
    consumers = [first]

    def new_consumer() -> SilentConsumer:
        consumers.append(SilentConsumer(logs))  # the same source cluster
        return consumers[-1]

    producer = FakeProducer()
    clients = WorkerClients(
        consumer=first, producer=producer, zk=zk, make_producer=producer.fresh,
        make_commit_client=lambda: FakeCommitClient(first), commit_thread=False, handoff_thread=False,
        make_consumer=new_consumer, watch_thread=False,
        end_offsets=lambda tps, timeout_s: {tp: len(logs[tp]) for tp in tps},
    )
    clock = Clock()
    worker = MirrorWorker(cfg, "w1", clients=clients, clock=clock)
    worker.register()
    zk.put(paths.assignment("w1"), Assignment(1, frozenset({("t", 0), ("t", 1)})).encode())

    def turns(seconds: float) -> None:
        for _ in range(int(seconds / 0.25)):
            clock.now += 0.25 - held_s
            if held_s:
                worker.loop.hold()
                clock.now += held_s
            worker.turn()

    return worker, turns, logs, consumers, producer


def test_the_worker_replaces_the_consumer_of_a_silent_partition_and_loses_nothing():
    # Given a worker mirroring t:0 and t:1 with a 3 s fetch watch
    worker, turns, logs, consumers, producer = silent_worker()
    first = consumers[0]
    turns(2)
    assert producer.written == {("t", 0): records(10, 0), ("t", 1): records(10, 1)}
    with capture_logs() as logged:
        # When t:0 stops fetching without a word while both partitions grow
        first.silent.add(("t", 0))
        for p in (0, 1):
            logs[("t", p)].extend(records(5, p, start=10))
        turns(2.5)
        # Then nothing is decided before fetch_stall_s (t:1 flows on)
        assert producer.written[("t", 1)] == records(15, 1) and len(producer.written[("t", 0)]) == 10
        assert [e for e in logged if e["event"] == "fetch_stalled"] == []
        # And then a new consumer takes every partition at its next offset
        turns(1.5)
    stalled = [(e["partition"], e["position"], e["end_offset"], e["action"]) for e in logged
               if e["event"] == "fetch_stalled"]
    assert stalled == [(0, 10, 15, "replace_consumer")]
    assert ("unassign", [("t", 0)]) not in first.events  # no re-assignment on the stuck consumer
    assert len(consumers) == 2 and consumers[1].events[0] == ("assign", [("t", 0, 10), ("t", 1, 15)])
    assert worker.consumer is consumers[1] and worker.handoff._consumer is consumers[1]
    assert worker.status._consumer is consumers[1]
    # And t:0 is mirrored on from where it stopped: nothing skipped, nothing twice
    turns(1)
    assert producer.written == {("t", 0): records(15, 0), ("t", 1): records(15, 1)}
    assert first.closed_event.wait(10)  # the old consumer is closed, beside the loop
    registry = worker.metrics.registry
    assert [registry.get_sample_value("ureplicator_worker_fetch_stalls_total",
                                      {"route": "default", "action": action})
            for action in ("replace_consumer",)] == [1.0]


def test_a_loop_that_holds_briefly_every_turn_still_replaces_a_silent_consumer():
    # Given the same worker, whose loop holds back fetching for 50 ms before every turn (as an
    # exactly-once loop does while its commit waits for delivery reports)
    worker, turns, logs, consumers, producer = silent_worker(held_s=0.05)
    turns(2)
    assert producer.written == {("t", 0): records(10, 0), ("t", 1): records(10, 1)}
    with capture_logs() as logged:
        # When t:0 stops fetching without a word while both partitions grow
        consumers[0].silent.add(("t", 0))
        for p in (0, 1):
            logs[("t", p)].extend(records(5, p, start=10))
        turns(6)
    # Then the holds do not hide the stall: its consumer is replaced, and t:0 goes on from 10
    stalled = [(e["partition"], e["position"], e["action"]) for e in logged if e["event"] == "fetch_stalled"]
    assert stalled == [(0, 10, "replace_consumer")]
    turns(1)
    assert producer.written == {("t", 0): records(15, 0), ("t", 1): records(15, 1)}
