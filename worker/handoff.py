"""Apply assignment changes to the Kafka clients beside the loop: release, acquire, rewind and stop partitions.

An assignment change is a :class:`Change` that the mirror loop moves on a step at
every turn (:meth:`Handoff.advance`), never waiting for a cluster, so the partitions
that do not move keep flowing while a coordinator or a metadata request hangs:

* **release** (the old owner's half): stop fetching at once; once the destination
  acknowledged what was sent (or after ``worker.release_ack_timeout_s``, with a purge),
  commit the acknowledged position on the commit thread (retried for
  ``worker.release_commit_timeout_s``; a failure is surfaced), then forget the
  partitions and publish the release in ``status/`` under the *previous* generation,
  so the leader can hand them on at once and still counts the ones being acquired
  as this worker's.
* **acquire** (the new owner's half): what needs the clusters (the topic records in
  ZooKeeper, the group's committed offsets, the destination's metadata) is read on a
  thread of its own (:class:`Beside`); the loop then starts a fresh
  :class:`~worker.acks.PartitionAcks` per partition and assigns them. The
  expired-records report is one offsets request after the assignment, beside the loop too.

A partition whose destination partition the producer does not know yet (``produce()``
refused a record with ``_UNKNOWN_PARTITION``: the destination topic was grown moments ago,
or not yet) is paused and awaited beside the loop too (:meth:`Handoff.await_beside`): the
loop rewinds it once the producer's metadata has the partition, or stops it after 30 s.

A position the source no longer holds (the fetching consumer never resets by itself:
``auto.offset.reset=error``, so librdkafka delivers ``_AUTO_OFFSET_RESET`` for it) is
resolved beside the loop too (:meth:`Handoff.out_of_range`): the partition's log start and
end are read, and the partition continues from the log start when records were deleted
before they were mirrored (counted, logged, in its status), or from the log's new end when
the log was truncated below it (logged, in its status; never the whole log again).

When both halves are done the change's generation is the worker's and its status says
so. One change at a time: the leader writes a worker no newer generation before its
status confirmed the last one (docs/architecture.md), so nothing queues up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

from ureplicator.common import logs, zk
from ureplicator.common.config import Config
from ureplicator.common.zkschema import Assignment, Paths, TopicRecord
from ureplicator.worker.acks import TP, AckLedger, PartitionAcks
from ureplicator.worker.commits import Committer, ReleaseCommit
from ureplicator.worker.metrics import WorkerMetrics
from ureplicator.worker.status import StatusReporter

# source partition -> (destination topic, its acquisition, source topic, partition)
Route = tuple[str, PartitionAcks, str, int]

_RETRY_PREPARE_S = 1.0  # an acquisition whose reads failed asks again after this long
_COMMITTED_TIMEOUT_S = 30.0
AWAIT_PARTITION_S = 30.0  # how long a destination partition the producer does not know is awaited


class Job:
    """The outcome of one call run by :class:`Beside`."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Beside:
    """Run calls that wait for a cluster on one thread of their own, in order (unit tests: inline)."""

    def __init__(self, background: bool = True, log: Any = None, name: str = "handoff-beside") -> None:
        self._background = background
        self._log = log
        self._name = name
        self._jobs: list[tuple[Callable[[], Any], Job]] = []
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, call: Callable[[], Any]) -> Job:
        job = Job()
        if not self._background:
            self._run(call, job)
            return job
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()
            self._jobs.append((call, job))
            self._ready.notify()
        return job

    @property
    def background(self) -> bool:
        return self._background

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._jobs.clear()
            self._ready.notify()

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._jobs and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                call, job = self._jobs.pop(0)
            self._run(call, job)

    def _run(self, call: Callable[[], Any], job: Job) -> None:
        try:
            job.result = call()
        except Exception as exc:  # noqa: BLE001 - the loop decides; this thread must live on
            job.error = exc
        finally:
            job.done.set()


@dataclass
class Prepared:
    """What an acquisition read from the clusters: destinations, registered counts, committed offsets."""

    destinations: dict[str, str]  # source topic -> destination topic
    initial: dict[str, int]  # source topic -> partitions when it was registered
    committed: list[TopicPartition]
    # Exactly-once mode: source topic -> why it is not mirrored (another source topic shares its destination)
    refused: dict[str, str] = field(default_factory=dict)


@dataclass
class PartitionWait:
    """A partition paused while the producer's metadata learns its destination partition (beside the loop)."""

    acks: PartitionAcks  # the acquisition that was refused; a later one makes the wait moot
    offset: int  # the refused record: where the partition stops if the partition never appears
    reason: str  # librdkafka's refusal
    since: float  # the loop's clock
    job: Job
    given_up: threading.Event = field(default_factory=threading.Event)  # the wait is not wanted any more


@dataclass
class OutOfRange:
    """A partition whose position the source no longer holds, its log bounds being read beside the loop."""

    acks: PartitionAcks  # the acquisition that hit it; a later one makes this moot
    offset: int  # the position librdkafka could not fetch
    reason: str  # librdkafka's error
    job: Job | None  # the log bounds (low, high); None: asked again at retry_at
    retry_at: float = 0.0


@dataclass
class Change:
    """One assignment change under way."""

    desired: Assignment
    releasing: list[TP]
    acquiring: list[TP]
    release_deadline: float
    commit: ReleaseCommit | None = None
    released: bool = False
    prepare: Job | None = None
    retry_at: float = 0.0
    acquired: list[TP] = field(default_factory=list)
    acquire_done: bool = False


class Handoff:
    """The worker's partitions and the transitions between owning and not owning them."""

    def __init__(
        self,
        config: Config,
        consumer: Any,
        producer: Any,
        zk_client: Any,
        ledger: AckLedger,
        committer: Committer,
        status: StatusReporter,
        metrics: WorkerMetrics,
        log: Any,
        beside: Beside | None = None,
        make_offsets_client: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        latest_offsets: Callable[[list[TP], float], dict[TP, int]] | None = None,
    ) -> None:
        self._config = config
        # Where an acquisition that starts at the end starts, as a number (see _resolve_ends)
        self._latest_offsets = latest_offsets
        self._clock = clock  # the loop's: the release deadline and the acquisition retry
        # Exactly-once mode: where acquisitions read their start (the destination's group, stable offsets)
        self._make_offsets_client = make_offsets_client
        self._offsets_client: Any = None
        self._paths = Paths(config.root)
        self._consumer = consumer
        self._producer = producer
        self._zk = zk_client
        self._ledger = ledger
        self._committer = committer
        self._status = status
        self._metrics = metrics
        self._log = log
        self._beside = beside or Beside(log=log)
        # Destination partitions being awaited: a thread of their own, so an acquisition's reads
        # never queue behind a wait of up to AWAIT_PARTITION_S.
        self._waits = Beside(background=self._beside.background, log=log, name="partition-wait")
        self.waiting: dict[TP, PartitionWait] = {}  # read by the loop (pauses) and the fetch watch
        # Partitions paused for a wait and not resumed since: librdkafka keeps a pause through an
        # unassign and a new assignment, so whichever assigns such a partition next resumes it.
        self._held: set[TP] = set()
        self.await_partition_s = AWAIT_PARTITION_S
        # Whether a partition whose destination partition appeared may restart now (exactly-once:
        # not while the committed positions are being read back after a commit in doubt).
        self.may_resume: Callable[[], bool] = lambda: True
        self.routes: dict[TP, Route] = {}  # read by the hot loop: partitions it may produce
        self.generation = 0
        self.change: Change | None = None
        self._starts: dict[TP, int] = {}  # where each acquisition started fetching (a rewind's fallback)
        # Called after this class purged the producer; the worker swaps in a fresh producer.
        self.after_purge: Callable[[str], None] = lambda why: None
        # Exactly-once mode: True once no open transaction holds the releasing partitions' records
        # (committed or aborted); until then the release waits, so the status drops nothing uncommitted.
        self.before_release: Callable[[], bool] = lambda: True
        ledger.on_failure = self.stop_partition
        # Positions the source no longer holds, being resolved (out_of_range); read by the loop
        self.out_of_range_at: dict[TP, OutOfRange] = {}
        # Per partition, the log start up to which deleted records were counted as expired:
        # the acquisition's report and an out-of-range position may both see one gap (once).
        self._expired_through: dict[TP, int] = {}
        self._expired_lock = threading.Lock()
        # worker.offset_recommit_s: the committer has no config of its own
        committer.recommit_s = config.worker.offset_recommit_s

    def use_producer(self, producer: Any) -> None:
        """Send through ``producer`` from now on (the worker replaced a purged or failed one)."""
        self._producer = producer

    def use_consumer(self, consumer: Any) -> None:
        """Fetch through ``consumer`` from now on (the fetch watch replaced one that stopped fetching)."""
        self._consumer = consumer

    def start_of(self, tp: TP) -> int | None:
        """Where the current acquisition of ``tp`` started fetching (maybe a logical offset), if known."""
        return self._starts.get(tp)

    @property
    def owned(self) -> dict[TP, PartitionAcks]:
        return self._ledger.partitions

    @property
    def releasing(self) -> frozenset[TP]:
        """Partitions unassigned by the change under way whose release is not finished."""
        change = self.change
        return frozenset(change.releasing) if change is not None and not change.released else frozenset()

    # --- applying an assignment ------------------------------------------------------------------

    def apply(self, desired: Assignment) -> bool:
        """Start bringing the owned partitions to ``desired``; False when it matched or a change is under way."""
        if self.change is not None:
            return False
        owned = self._ledger.partitions
        if desired.generation == self.generation and desired.partitions == frozenset(owned):
            return False
        removed = sorted(tp for tp in owned if tp not in desired.partitions)
        added = sorted(desired.partitions - set(owned))
        change = Change(desired, removed, added,
                        release_deadline=self._clock() + self._config.worker.release_ack_timeout_s)
        if removed:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in removed])
            for tp in removed:
                self.routes.pop(tp, None)  # fetched-but-unsent records of these partitions are dropped
        else:
            change.released = True
        if added:
            change.prepare = self._beside.submit(lambda: self._prepare(added))
        else:
            change.acquire_done = True
        self.change = change
        self.advance()
        return True

    def advance(self) -> bool:
        """Move the change under way and the partitions' waits on, never waiting; True when the change just finished."""
        if self.waiting:
            self._end_waits()
        if self.out_of_range_at:
            self._resolve_out_of_range()
        change = self.change
        if change is None:
            return False
        if not change.released:
            self._release_step(change)
        if not change.acquire_done:
            self._acquire_step(change)
        if not (change.released and change.acquire_done):
            return False
        self.change = None
        self.generation = change.desired.generation
        self._metrics.generation.set(self.generation)
        self._metrics.partitions.set(len(self._ledger.partitions))
        self._status.publish(self.generation)
        return True

    def _release_step(self, change: Change) -> None:
        log = self._log.bind(generation=change.desired.generation)
        partitions = change.releasing
        if change.commit is None:
            outstanding = self._ledger.outstanding(partitions)
            if outstanding and self._clock() < change.release_deadline:
                return  # the loop keeps polling for reports meanwhile
            if outstanding:
                self._purge_unacknowledged(partitions, outstanding)
            if not self.before_release():
                return  # the transaction's commit is retried on the next turn
            change.commit = self._committer.begin_release(partitions,
                                                          self._config.worker.release_commit_timeout_s)
        if not change.commit.done:
            return
        change.commit.finish()
        for tp in partitions:
            self._drop_wait(tp)
            self._ledger.release(tp)
            self._starts.pop(tp, None)
            self._status.forget(tp)
        change.released = True
        log.info("partitions_released", partitions=fmt(partitions))
        if not change.acquire_done:
            # Still the previous generation: the leader keeps counting the partitions we are
            # about to acquire as ours (never two live owners), yet sees the release now.
            self._status.publish(self.generation)

    def _acquire_step(self, change: Change) -> None:
        job = change.prepare
        if job is None:
            if self._clock() >= change.retry_at:
                change.prepare = self._beside.submit(lambda: self._prepare(change.acquiring))
            return
        if not job.done.is_set():
            return
        if job.error is not None or job.result is None:
            self._log.warning("acquisition_retry", partitions=fmt(change.acquiring),
                              error=str(job.error) if job.error is not None else "no result")
            change.prepare = None
            change.retry_at = self._clock() + _RETRY_PREPARE_S
            return
        change.acquired = self._start(job.result)
        change.acquire_done = True
        self._log.bind(generation=change.desired.generation).info("partitions_acquired",
                                                                   partitions=fmt(change.acquired))

    def close(self) -> None:
        """Close the exactly-once offsets client, if one was opened, and the partition waits' thread (stopping)."""
        self._give_up_waits()
        self._waits.close()
        client, self._offsets_client = self._offsets_client, None
        if client is not None:
            client.close()

    def abandon(self) -> None:
        """Forget the change under way (session lost, stopping): what it read is dropped."""
        self.change = None

    # --- the halves, and rewinds ------------------------------------------------------------------

    def _purge_unacknowledged(self, partitions: list[TP], outstanding: int) -> None:
        """Records of ``partitions`` still unacknowledged after the wait: purge them.

        Sent later, they would reach the destination behind the next owner's (reordered).
        librdkafka purges all partitions at once; the worker replaces the producer and
        rewinds the others.
        """
        self._log.warning("release_timed_out", partitions=fmt(partitions), outstanding=outstanding, purged=True)
        self._producer.purge(in_queue=True, in_flight=True, blocking=False)
        self._producer.poll(0)
        self.after_purge("release_timed_out")

    def _await_reports(self, partitions: list[TP]) -> None:
        """A rewind's wait for the reports still due (none after a producer replacement), bounded like a release's."""
        deadline = time.monotonic() + self._config.worker.release_ack_timeout_s
        while outstanding := self._ledger.outstanding(partitions):
            if time.monotonic() > deadline:
                self._purge_unacknowledged(partitions, outstanding)
                break
            self._producer.poll(0.05)

    def drop_all(self) -> list[TP]:
        """Session lost: forget every partition without committing (someone else may own them)."""
        assigned = self.assigned()
        self.change = None
        dropped = list(self._ledger.partitions)
        if assigned:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in assigned])
        self.routes.clear()
        self._starts.clear()
        self._give_up_waits()  # their partitions stay paused in _held: whichever assigns them next resumes them
        self._ledger.release_all()
        for tp in dropped:
            self._status.forget(tp)
        self.generation = 0
        return dropped

    def assigned(self) -> list[TP]:
        """The partitions the fetching consumer holds (owned, minus the ones being released)."""
        releasing = self.releasing
        return [tp for tp in self._ledger.partitions if tp not in releasing]

    def rewind(self, partitions: list[TP]) -> list[TP]:
        """Restart partitions from their acknowledged position (records were purged or abandoned).

        The reports still due are awaited (after a producer replacement there are none),
        then each partition starts a new acquisition at its acknowledged position — no
        commit and no committed-offset read on the way, so a coordinator that hangs
        cannot stall it; the periodic commit catches up. Only called while this worker's
        session and assignment hold.
        """
        releasing = self.releasing
        for tp in partitions:
            if tp in self.waiting:
                # Its wait's end rewinds it (from the position as it is then): restarted now, it
                # would only be refused again. Left in needs_rewind, it would come back every turn.
                self._ledger.needs_rewind.discard(tp)
        owned = [tp for tp in partitions
                 if tp not in releasing and tp not in self.waiting
                 and (acks := self._ledger.partitions.get(tp)) is not None and acks.error is None]
        if not owned:
            return []
        self._await_reports(owned)
        self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in owned])
        assign = []
        for tp in owned:
            old = self._ledger.partitions.get(tp)
            if old is None:
                continue  # released meanwhile (a purge above replaced the producer)
            start = old.position if old.position >= 0 else self._starts.get(tp, OFFSET_BEGINNING)
            acks = self._ledger.acquire(tp, old.destination, old.position)
            acks.committed = old.committed
            acks.txn_position = old.txn_position
            self._starts[tp] = start
            self.routes[tp] = (old.destination, acks, tp[0], tp[1])
            assign.append(TopicPartition(tp[0], tp[1], start))
        self._consumer.incremental_assign(assign)
        self._resume_held(assign)
        self._metrics.rewinds.inc(len(assign))
        self._log.info("partitions_rewound", partitions=fmt(owned))
        return [(tp.topic, tp.partition) for tp in assign]

    def _prepare(self, partitions: list[TP]) -> Prepared:
        """Beside the loop: the topics' destinations, the group's committed offsets, the destination's metadata."""
        destinations: dict[str, str] = {}
        initial: dict[str, int] = {}
        wanted_topics = sorted({t for t, _ in partitions})
        eos = self._make_offsets_client is not None
        # Exactly-once mode reads every record: whether another topic shares a destination (below).
        records = zk.read_topics(self._zk, self._paths) if eos else {
            topic: record for topic in wanted_topics if (record := zk.read_topic(self._zk, self._paths, topic))}
        for topic in wanted_topics:
            record = records.get(topic)
            if record is not None:
                destinations[topic] = record.destination
                initial[topic] = int(record.options.get("initial_partitions", record.partitions))
        refused = _shared_destinations(records, destinations) if eos else {}
        wanted = [TopicPartition(t, p) for t, p in partitions if t in destinations]
        committed = self._committer.committed(wanted, timeout_s=_COMMITTED_TIMEOUT_S) if wanted else []
        if wanted and self._make_offsets_client is not None:
            committed = self._transactional_starts(committed, destinations)
        if self._latest_offsets is not None and self._config.worker.auto_offset_reset == "latest":
            committed = self._resolve_ends(committed, initial)
        for topic, destination in destinations.items():
            # A destination grown moments ago: make the producer's metadata know every partition.
            highest = max((p for t, p in partitions if t == topic), default=-1)
            if highest >= 0:
                self.await_partition(destination, highest, timeout_s=10.0, serve_reports=False)
        return Prepared(destinations, initial, committed, refused)

    def _resolve_ends(self, committed: list[TopicPartition], initial: dict[str, int]) -> list[TopicPartition]:
        """Beside the loop: the end offset, as a number, of the partitions that start at the end.

        A partition with nothing committed starts at the end (``auto_offset_reset: latest``).
        Left logical (``OFFSET_END``), the end would be resolved again by whichever consumer
        assigns it next: a rewind, or a new consumer after a fetch stall, before the first
        record was read would skip every record written since the acquisition. A number is
        where this acquisition starts, whichever consumer reads it. If the source does not
        answer, the start stays logical, as before.
        """
        ends = [(tp.topic, tp.partition) for tp in committed
                if tp.offset < 0 and tp.partition < initial.get(tp.topic, 0)]
        if not ends:
            return committed
        assert self._latest_offsets is not None
        try:
            found = self._latest_offsets(ends, 10.0)
        except KafkaException as exc:
            found = {}
            self._log.warning("start_end_unresolved", partitions=fmt(ends), error=str(exc.args[0]))
        resolved = [TopicPartition(tp.topic, tp.partition, found[(tp.topic, tp.partition)])
                    if tp.offset < 0 and found.get((tp.topic, tp.partition), -1) >= 0 else tp for tp in committed]
        if found:
            self._log.info("start_at_end", partitions={f"{t}:{p}": o for (t, p), o in sorted(found.items())})
        return resolved

    def _transactional_starts(self, source: list[TopicPartition], destinations: dict[str, str]) -> list[TopicPartition]:
        """Exactly-once mode: each partition starts at the later of the destination's and the source's group.

        Positions commit in the destination's group in the same transaction as the records, and
        each committed transaction's are copied to the source group afterwards (best effort),
        so while the pipeline runs exactly-once the source group is never ahead. It is ahead
        when the pipeline ran at-least-once since (which commits there only): exactly-once ->
        at-least-once -> exactly-once would otherwise send that whole period again from the
        stale destination position. A partition the destination's group has nothing for (the
        pipeline ran at-least-once until now) starts at the source group's offset too; its first
        transaction writes the destination's.
        """
        starts, fallbacks = self._destination_positions(source, destinations)
        missing = set(fallbacks)
        chosen = []
        from_source: dict[str, list[int | None]] = {}
        for there, here in zip(starts, source, strict=True):
            none_there = (here.topic, here.partition) in missing
            if none_there or here.offset > there.offset:
                chosen.append(here)
                from_source[f"{here.topic}:{here.partition}"] = [None if none_there else there.offset, here.offset]
            else:
                chosen.append(there)
        if from_source:
            # Per partition [the destination's position (None: none), the source group's offset]
            self._log.info("transactional_start_from_source_group", partitions=from_source)
        return chosen

    def _destination_positions(self, source: list[TopicPartition], destinations: dict[str, str],
                               ) -> tuple[list[TopicPartition], list[TP]]:
        """Beside the loop: ``source`` with each offset the destination's group committed, where it has one.

        Returns the positions and the partitions the group has nothing for (their offset in
        ``source`` is kept). The offsets client reads ``read_committed``, so librdkafka asks for
        stable offsets: a transaction still completing is waited for, never read half-done.
        """
        if self._offsets_client is None:
            assert self._make_offsets_client is not None
            self._offsets_client = self._make_offsets_client()
        asked = [TopicPartition(destinations[tp.topic], tp.partition) for tp in source]
        found = self._offsets_client.committed(asked, timeout=_COMMITTED_TIMEOUT_S)
        positions = []
        fallbacks = []
        for tp, there in zip(source, found, strict=True):
            if there.error is not None:
                raise KafkaException(there.error)
            if there.offset >= 0:
                positions.append(TopicPartition(tp.topic, tp.partition, there.offset))
            else:
                positions.append(tp)
                fallbacks.append((tp.topic, tp.partition))
        return positions, fallbacks

    def read_positions(self, positions: dict[TP, tuple[str, int]]) -> Job:
        """Exactly-once: each partition's position as the destination's group has it committed, read beside the loop.

        ``positions`` maps a source partition to its destination topic and the position kept
        when the group has none. The job's result maps each partition to its position. Used
        after a producer was replaced while its commit was in doubt (``CopyLoop.positions_known``).
        """
        source = [TopicPartition(t, p, position) for (t, p), (_, position) in sorted(positions.items())]
        destinations = {t: destination for (t, _), (destination, _) in positions.items()}

        def read() -> dict[TP, int]:
            found, _ = self._destination_positions(source, destinations)
            return {(tp.topic, tp.partition): tp.offset for tp in found}

        return self._beside.submit(read)

    def _start(self, prepared: Prepared) -> list[TP]:
        """On the loop: a fresh acquisition per partition at the committed offset, assigned at once."""
        reset = OFFSET_BEGINNING if self._config.worker.auto_offset_reset == "earliest" else OFFSET_END
        assign = []
        stopped: list[tuple[PartitionAcks, int, str]] = []
        for tp in prepared.committed:
            # Partitions added after the topic was registered hold only new data: mirror them
            # from their first record whatever auto_offset_reset says, so growth loses nothing.
            fallback = OFFSET_BEGINNING if tp.partition >= prepared.initial[tp.topic] else reset
            start = tp.offset if tp.offset >= 0 else fallback
            destination = prepared.destinations[tp.topic]
            # A fresh acquisition: no error, report, purge or wait of an earlier one applies to it.
            key = (tp.topic, tp.partition)
            self._drop_wait(key)
            acks = self._ledger.acquire(key, destination, tp.offset if tp.offset >= 0 else -1)
            if tp.topic in prepared.refused:
                stopped.append((acks, start, prepared.refused[tp.topic]))
            self.routes[key] = (destination, acks, tp.topic, tp.partition)
            self._starts[key] = start
            assign.append(TopicPartition(tp.topic, tp.partition, start))
        if assign:
            self._consumer.incremental_assign(assign)
            self._resume_held(assign)
            for acks, start, reason in stopped:
                # Owned (the leader counts it) and assigned like the others, but stopped at once,
                # with the reason in its status: nothing of it is sent.
                self.stop_partition(acks, start, reason)
            committed = [tp for tp in prepared.committed if tp.offset >= 0]
            if committed:
                self._beside.submit(lambda: self._report_expired(committed))
        return [(tp.topic, tp.partition) for tp in assign]

    # --- one partition ----------------------------------------------------------------------------

    def stop_partition(self, acks: PartitionAcks, offset: int, reason: str) -> None:
        """Stop one partition at ``offset``: never skip a record silently; the others go on."""
        if acks.retired or acks.error is not None:
            return  # an earlier acquisition, or already stopped at an earlier record
        tp = acks.tp
        acks.error = f"offset {offset}: {reason}"
        if self.routes.get(tp, (None, None))[1] is acks:
            del self.routes[tp]  # later records of this partition are not produced
        self._metrics.produce_errors.labels(tp[0]).inc()
        self._log.error("partition_stopped", topic=tp[0], partition=tp[1], offset=offset, error=reason)
        try:
            self._consumer.pause([TopicPartition(tp[0], tp[1])])
        except KafkaException:
            pass
        # librdkafka keeps a pause through an unassign: whichever assigns this partition next (a
        # new acquisition after the operator's fix and a rebalance) must resume it, or it would sit
        # paused with no error to show for it.
        self._held.add(tp)
        self._status.soon()

    def out_of_range(self, acks: PartitionAcks, offset: int, reason: str) -> None:
        """On the loop: the source does not hold ``offset``, the partition's fetch position (librdkafka stopped it).

        The fetching consumer never resets a position by itself (``auto.offset.reset=error``):
        librdkafka's reset moved it silently, past records still there (``latest``) or over
        records deleted before they were mirrored without counting them (``earliest``), and
        after a truncation mirrored the whole partition again. Its log bounds are read beside
        the loop; :meth:`_resolve_out_of_range` decides where it continues.
        """
        tp = acks.tp
        pending = self.out_of_range_at.get(tp)
        if acks.retired or acks.error is not None or (pending is not None and pending.acks is acks):
            return  # an earlier acquisition, stopped, or already being resolved
        self._log.warning("source_offset_out_of_range", topic=tp[0], partition=tp[1], offset=offset, error=reason)
        self.out_of_range_at[tp] = OutOfRange(acks, offset, reason, self._bounds_beside(tp))

    def _bounds_beside(self, tp: TP) -> Job:
        consumer = self._consumer
        return self._beside.submit(
            lambda: consumer.get_watermark_offsets(TopicPartition(tp[0], tp[1]), timeout=10, cached=False))

    def _resolve_out_of_range(self) -> None:
        """On the loop: continue each out-of-range partition whose log bounds are known (see :meth:`out_of_range`).

        * below the log start (retention, delete-records): the records in between were
          deleted before they were mirrored; counted in ``records_expired_total``, logged with
          the range and noted in the partition's status; it continues from the log start.
        * beyond the log end (an unclean leader election truncated the log): the records from
          the new end up to the position were mirrored but are gone from the source, and the
          offsets from the new end on will hold *new* records. It continues from the new end:
          stopping would hold every new record back until an operator acts, and the old
          position would skip the new records written below it; the whole log again (what
          ``earliest`` did) duplicates everything. Logged (``source_log_truncated``, with the
          range) and noted in its status.
        * within the bounds (the leader moved meanwhile): it continues where it was.
        """
        for tp, pending in list(self.out_of_range_at.items()):
            acks = pending.acks
            if self._ledger.partitions.get(tp) is not acks or acks.error is not None or tp in self.releasing:
                del self.out_of_range_at[tp]  # released, re-acquired or stopped: the next fetch decides anew
                continue
            job = pending.job
            if job is None:
                if self._clock() >= pending.retry_at:
                    pending.job = self._bounds_beside(tp)
                continue
            if not job.done.is_set():
                continue
            if job.error is not None or job.result is None:
                self._log.warning("log_bounds_unknown", topic=tp[0], partition=tp[1],
                                  error=logs.error_text(job.error) if job.error is not None else "no result")
                pending.job = None
                pending.retry_at = self._clock() + _RETRY_PREPARE_S
                continue
            del self.out_of_range_at[tp]
            low, high = job.result
            position = pending.offset
            if position < low:
                self._count_expired(tp, position, low, fetch_position=position)
                start = low
            elif position > high:
                start = high
                self._log.error("source_log_truncated", topic=tp[0], partition=tp[1], position=position,
                                log_end=high, records=position - high, continues_at=high,
                                consequence="the records [log_end, position) were mirrored but the source lost "
                                            "them; the records written there from now on are mirrored too")
                self._status.note(tp, f"the source log was truncated to {high} below position {position} "
                                      f"(records [{high}, {position}) were mirrored, then lost by the source); "
                                      f"mirroring continues from {high}")
            else:
                start = position
                self._log.info("source_offset_in_range_again", topic=tp[0], partition=tp[1], offset=position,
                               log_start=low, log_end=high)
            self._continue_at(acks, position, start)

    def _continue_at(self, acks: PartitionAcks, position: int, start: int) -> None:
        """Fetch ``acks``' partition from ``start`` on, in the same acquisition; what is gone counts as done."""
        tp = acks.tp
        if start != position:
            if acks.in_flight:
                # Reports still due: the records up to ``start`` count as done once they are in.
                acks.skipped(start - 1)
            else:
                acks.position = start  # committed next: a restart does not find the same gap again
        self._consumer.incremental_unassign([TopicPartition(tp[0], tp[1])])
        self._consumer.incremental_assign([TopicPartition(tp[0], tp[1], start)])
        self._starts[tp] = start
        self._status.soon()
        self._log.info("partition_continued", topic=tp[0], partition=tp[1], position=position, start=start)

    def await_beside(self, acks: PartitionAcks, offset: int, reason: str) -> None:
        """On the loop: ``produce()`` refused the record at ``offset``, its destination partition unknown to it.

        The destination topic was grown moments ago (or is still to be): the producer's
        metadata learns it within its refresh interval, or never if nobody grows it. Waiting
        on the loop held every other partition of the worker (up to 30 s until 2026-12). Here
        the partition stops producing (its later records of the batch are dropped, as after
        a stop), is paused, and its destination partition is awaited on a thread of its own;
        :meth:`advance` then rewinds it to its acknowledged position, or stops it at ``offset``
        after :attr:`await_partition_s`. The caller left no record of it unreported in front of
        ``offset`` that a rewind could not send again (exactly-once: no open run).
        """
        tp = acks.tp
        if self.routes.get(tp, (None, None))[1] is acks:
            del self.routes[tp]
        try:
            self._consumer.pause([TopicPartition(tp[0], tp[1])])
            self._held.add(tp)
        except KafkaException:
            pass  # not assigned any more (released meanwhile): nothing to hold back
        self._drop_wait(tp)
        destination, partition, timeout_s = acks.destination, acks.partition, self.await_partition_s
        given_up = threading.Event()
        job = self._waits.submit(lambda: self.await_partition(destination, partition, timeout_s,
                                                              serve_reports=False, given_up=given_up))
        self.waiting[tp] = PartitionWait(acks, offset, reason, self._clock(), job, given_up)
        self._log.warning("destination_partition_awaited", topic=tp[0], partition=tp[1], offset=offset,
                          destination=destination, timeout_s=timeout_s, error=reason)

    def _end_waits(self) -> None:
        """On the loop: rewind the partitions whose destination partition appeared; stop those whose wait timed out."""
        found = []
        for tp, wait in list(self.waiting.items()):
            acks = wait.acks
            if self._ledger.partitions.get(tp) is not acks or acks.error is not None:
                self._drop_wait(tp)  # released, dropped or stopped meanwhile: nothing to restart
            elif not wait.job.done.is_set() or tp in self.releasing:
                continue  # a release commits the acknowledged position and forgets the wait
            elif wait.job.result is True:
                if self.may_resume():
                    del self.waiting[tp]
                    found.append(tp)
                    self._log.info("destination_partition_found", topic=tp[0], partition=tp[1],
                                   destination=acks.destination, waited_s=round(self._clock() - wait.since, 1))
            else:
                del self.waiting[tp]
                error = logs.error_text(wait.job.error) if wait.job.error is not None else "not in its metadata"
                self.stop_partition(acks, wait.offset,
                                    f"{wait.reason}: destination topic {acks.destination!r} has no partition "
                                    f"{acks.partition} after {self.await_partition_s:g}s of metadata refreshes "
                                    f"({error}); grow the destination topic to the source's partition count")
        if found:
            # From the acknowledged position: every record in front of it is in the destination,
            # none after it was sent (the partition produced nothing since the refusal). Exactly-once:
            # the open transaction holds exactly the records in front of it, so no abort is needed.
            self.rewind(found)

    def _drop_wait(self, tp: TP) -> None:
        """Forget ``tp``'s wait, if any (its thread gives up at its next look); ``tp`` stays held until assigned."""
        wait = self.waiting.pop(tp, None)
        if wait is not None:
            wait.given_up.set()

    def _give_up_waits(self) -> None:
        for tp in list(self.waiting):
            self._drop_wait(tp)

    def _resume_held(self, assigned: list[TopicPartition]) -> None:
        """Resume the partitions just assigned that a wait paused: the pause outlives an unassign."""
        held = [tp for tp in assigned if (tp.topic, tp.partition) in self._held]
        if not held:
            return
        self._consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in held])
        self._held.difference_update((tp.topic, tp.partition) for tp in held)

    def await_partition(self, destination: str, partition: int, timeout_s: float = 30.0,
                        serve_reports: bool = True, given_up: threading.Event | None = None) -> bool:
        """Refresh the producer's metadata until ``destination`` has ``partition`` (it was just grown).

        Beside the loop (``serve_reports=False``) it only asks: delivery reports are the loop's.
        ``given_up``, once set, ends the wait (False): nobody waits for its answer any more.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not (given_up is not None and given_up.is_set()):
            try:
                found = self._producer.list_topics(topic=destination, timeout=5).topics.get(destination)
            except (KafkaException, RuntimeError):
                found = None  # RuntimeError: a replaced producer, closed meanwhile
            if found is not None and found.error is None and partition in found.partitions:
                return True
            if serve_reports:
                self._producer.poll(0.5)
            elif given_up is not None:
                given_up.wait(0.5)
            else:
                time.sleep(0.5)
        return False

    def _report_expired(self, committed: list[TopicPartition]) -> None:
        """Beside the loop, after the assignment: one offsets request for the log starts, compared with the commits."""
        asked = [TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in committed]
        try:
            starts = {(tp.topic, tp.partition): tp.offset
                      for tp in self._consumer.offsets_for_times(asked, timeout=10)
                      if tp.error is None and tp.offset >= 0}
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: a replaced consumer, closed meanwhile
            self._log.warning("log_start_unknown", partitions=len(asked), error=str(exc.args[0]))
            return
        for tp in committed:
            low = starts.get((tp.topic, tp.partition))
            if low is not None and tp.offset < low:
                # Retention deleted records before they were mirrored: say so loudly; the
                # fetch then finds its position out of range, and the partition continues
                # from the log start (out_of_range, which counts nothing twice).
                self._count_expired((tp.topic, tp.partition), tp.offset, low, committed=tp.offset)

    def _count_expired(self, tp: TP, position: int, low: int, **context: Any) -> int:
        """Count and log the records [position, low) deleted before they were mirrored, those not counted yet."""
        with self._expired_lock:
            first = max(position, self._expired_through.get(tp, position))
            if low <= first:
                return 0
            self._expired_through[tp] = low
        self._metrics.expired.labels(tp[0]).inc(low - first)
        self._log.error("records_expired_before_mirroring", topic=tp[0], partition=tp[1], log_start=low,
                        records=low - first, first_expired=first, **context)
        self._status.note(tp, f"records [{first}, {low}) were deleted from the source before they were "
                              f"mirrored; mirroring continues from the log start {low}")
        return low - first


def _shared_destinations(records: dict[str, TopicRecord], destinations: dict[str, str]) -> dict[str, str]:
    """Exactly-once mode: each topic of ``destinations`` whose destination topic another registered topic shares.

    Mapped so while the pipeline ran at-least-once (the controller refuses it in exactly-once
    mode): the positions committed with a transaction are keyed by destination topic and
    partition, so the topics would overwrite each other's positions, losing or repeating
    records. Returns source topic -> the error its partitions stop with.
    """
    refused = {}
    for topic, destination in destinations.items():
        sharing = sorted(t for t, record in records.items() if record.destination == destination)
        if len(sharing) > 1:
            refused[topic] = (f"exactly-once: destination topic {destination!r} receives topics {', '.join(sharing)}; "
                              "its committed positions are keyed by destination topic, so they would overwrite "
                              "each other's: give each source topic a destination topic of its own")
    return refused


def fmt(partitions: list[TP]) -> list[str]:
    return [f"{t}:{p}" for t, p in sorted(partitions)]
