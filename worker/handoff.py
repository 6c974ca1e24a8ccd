"""Apply assignment changes to the Kafka clients: release, acquire, rewind and stop partitions.

The old owner's half of a hand-off is :meth:`Handoff.release`: stop fetching,
wait for the destination's reports, commit ``acknowledged position`` (retried;
a failure is surfaced), forget. The new owner's half is :meth:`Handoff.acquire`:
start a fresh :class:`~worker.acks.PartitionAcks` at the group's committed
offset. :meth:`Handoff.apply` orders them and publishes the release in
``status/`` *before* the acquisitions, which may be slow (metadata, committed
offsets), so the leader can hand the released partitions on at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

from common import zk
from common.config import Config
from common.zkschema import Assignment, Paths
from worker.acks import TP, AckLedger, PartitionAcks
from worker.commits import Committer
from worker.metrics import WorkerMetrics
from worker.status import StatusReporter

# source partition -> (destination topic, its acquisition, source topic, partition)
Route = tuple[str, PartitionAcks, str, int]


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
    ) -> None:
        self._config = config
        self._paths = Paths(config.root)
        self._consumer = consumer
        self._producer = producer
        self._zk = zk_client
        self._ledger = ledger
        self._committer = committer
        self._status = status
        self._metrics = metrics
        self._log = log
        self.routes: dict[TP, Route] = {}  # read by the hot loop: partitions it may produce
        self.generation = 0
        # Called after this class purged the producer; the worker swaps in a fresh producer.
        self.after_purge: Callable[[str], None] = lambda why: None
        ledger.on_failure = self.stop_partition

    def use_producer(self, producer: Any) -> None:
        """Send through ``producer`` from now on (the worker replaced a purged or failed one)."""
        self._producer = producer

    @property
    def owned(self) -> dict[TP, PartitionAcks]:
        return self._ledger.partitions

    # --- applying an assignment ------------------------------------------------------------------

    def apply(self, desired: Assignment) -> bool:
        """Bring the owned partitions to ``desired``; False when it already matched."""
        owned = self._ledger.partitions
        if desired.generation == self.generation and desired.partitions == frozenset(owned):
            return False
        removed = [tp for tp in owned if tp not in desired.partitions]
        added = sorted(desired.partitions - set(owned))
        log = self._log.bind(generation=desired.generation)
        if removed:
            self.release(removed)
            log.info("partitions_released", partitions=fmt(removed))
            if added:
                # Still the previous generation: the leader keeps counting the partitions we are
                # about to acquire as ours (never two live owners), yet sees the release now.
                self._status.write(self.generation)
        if added:
            started = self.acquire(added)
            log.info("partitions_acquired", partitions=fmt(started))
        self.generation = desired.generation
        self._metrics.generation.set(self.generation)
        self._metrics.partitions.set(len(owned))
        self._status.write(self.generation)
        return True

    def release(self, partitions: list[TP], commit: bool = True) -> None:
        """Hand-off, old owner's half: stop fetching, wait for reports, commit, forget."""
        self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in partitions])
        for tp in partitions:
            self.routes.pop(tp, None)  # fetched-but-unsent records of these partitions are dropped
        deadline = time.monotonic() + self._config.worker.shutdown_timeout_s
        while self._ledger.outstanding(partitions):
            if time.monotonic() > deadline:
                # The records still held would reach the destination behind the next owner's
                # (reordered). librdkafka purges all partitions at once: the others are rewound.
                self._log.warning("release_timed_out", partitions=fmt(partitions),
                                  outstanding=self._ledger.outstanding(partitions), purged=True)
                self._producer.purge(in_queue=True, in_flight=True, blocking=False)
                self._producer.poll(0)
                self.after_purge("release_timed_out")
                break
            self._producer.poll(0.05)
        if commit:
            self._committer.commit_for_release(partitions, self._config.worker.shutdown_timeout_s)
        for tp in partitions:
            self._ledger.release(tp)
            self._status.forget(tp)

    def drop_all(self) -> list[TP]:
        """Session lost: forget every partition without committing (someone else may own them)."""
        dropped = list(self._ledger.partitions)
        if dropped:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in dropped])
        self.routes.clear()
        self._ledger.release_all()
        for tp in dropped:
            self._status.forget(tp)
        self.generation = 0
        return dropped

    def rewind(self, partitions: list[TP]) -> list[TP]:
        """Restart partitions from their acknowledged position (records were purged or abandoned).

        Done as a release and an acquisition: wait for the reports still due, commit the
        acknowledged position, and start a new acquisition there. Only called while this
        worker's session and assignment hold, so the commit is ours to make.
        """
        owned = [tp for tp in partitions
                 if (acks := self._ledger.partitions.get(tp)) is not None and acks.error is None]
        if not owned:
            return []
        self.release(owned)
        started = self.acquire(owned)
        self._metrics.rewinds.inc(len(owned))
        self._log.info("partitions_rewound", partitions=fmt(owned))
        return started

    def acquire(self, partitions: list[TP]) -> list[TP]:
        """Hand-off, new owner's half: start each partition at the group's committed offset."""
        routes: dict[str, str] = {}
        initial: dict[str, int] = {}
        for topic in {t for t, _ in partitions}:
            record = zk.read_topic(self._zk, self._paths, topic)
            if record is not None:
                routes[topic] = record.destination
                initial[topic] = int(record.options.get("initial_partitions", record.partitions))
        wanted = [TopicPartition(t, p) for t, p in partitions if t in routes]
        if not wanted:
            return []
        committed = self._committer.committed(wanted, timeout_s=30.0)
        self._report_expired(committed)
        reset = OFFSET_BEGINNING if self._config.worker.auto_offset_reset == "earliest" else OFFSET_END
        assign = []
        for tp in committed:
            # Partitions added after the topic was registered hold only new data: mirror them
            # from their first record whatever auto_offset_reset says, so growth loses nothing.
            fallback = OFFSET_BEGINNING if tp.partition >= initial[tp.topic] else reset
            start = tp.offset if tp.offset >= 0 else fallback
            destination = routes[tp.topic]
            # A fresh acquisition: no error, report or purge of an earlier one applies to it.
            acks = self._ledger.acquire((tp.topic, tp.partition), destination, tp.offset if tp.offset >= 0 else -1)
            self.routes[(tp.topic, tp.partition)] = (destination, acks, tp.topic, tp.partition)
            assign.append(TopicPartition(tp.topic, tp.partition, start))
        for topic, destination in routes.items():
            # A destination grown moments ago: make the producer's metadata know every partition.
            highest = max((p for t, p in partitions if t == topic), default=-1)
            if highest >= 0:
                self.await_partition(destination, highest, timeout_s=10.0)
        self._consumer.incremental_assign(assign)
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
        self._status.soon()

    def await_partition(self, destination: str, partition: int, timeout_s: float = 30.0) -> bool:
        """Refresh the producer's metadata until ``destination`` has ``partition`` (it was just grown)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                found = self._producer.list_topics(topic=destination, timeout=5).topics.get(destination)
            except KafkaException:
                found = None
            if found is not None and found.error is None and partition in found.partitions:
                return True
            self._producer.poll(0.5)
        return False

    def _report_expired(self, committed: list[TopicPartition]) -> None:
        for tp in committed:
            if tp.offset < 0:
                continue
            try:
                low, _ = self._consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
            except KafkaException:
                continue
            if tp.offset < low:
                # Retention deleted records before they were mirrored: say so loudly, the
                # consumer can only continue from the log start.
                self._metrics.expired.labels(tp.topic).inc(low - tp.offset)
                self._log.error("records_expired_before_mirroring", topic=tp.topic, partition=tp.partition,
                                committed=tp.offset, log_start=low, records=low - tp.offset)


def fmt(partitions: list[TP]) -> list[str]:
    return [f"{t}:{p}" for t, p in sorted(partitions)]
