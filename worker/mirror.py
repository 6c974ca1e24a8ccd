"""Mirror the partitions ZooKeeper assigns to this worker, committing only acknowledged offsets.

One thread does all Kafka work (librdkafka clients are driven from one
loop); ZooKeeper callbacks only record the latest assignment or connection
state and wake the loop. Lifecycle, as in dramatiq's worker::

    registered -> applying(generation g) -> mirroring -> ... -> stopping -> deregistered

* Assignment change: partitions taken away are released first (stop fetching,
  wait for the destination's acks, commit, report the new generation in
  ``status/``), then new partitions start from the group's committed offset.
* SUSPENDED ZooKeeper connection: stop fetching and committing (fenced) until
  CONNECTED again. LOST session: forget every partition without committing
  (someone else may own them now), re-register and wait for a fresh assignment.
* Shutdown: stop fetching, wait for acks up to ``worker.shutdown_timeout_s``,
  commit, deregister.
"""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
from collections import deque
from datetime import datetime, timezone
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from kazoo.client import KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from common import kafka, logs, provenance, zk
from common.config import Config
from common.zkschema import Assignment, PartitionStatus, Paths, RateLimit, SchemaError, WorkerInfo, WorkerStatus
from worker.metrics import WorkerMetrics
from worker.offsets import OffsetTracker
from worker.ratelimit import RateLimiter

VERSION = "0.1.0"
TP = tuple[str, int]


class MirrorWorker:
    """A stateless worker: everything it owns comes from ``assignments/<id>``."""

    def __init__(self, config: Config, worker_id: str, metrics: WorkerMetrics | None = None) -> None:
        self.config = config
        self.worker_id = worker_id
        self.paths = Paths(config.root)
        self.metrics = metrics or WorkerMetrics()
        self.log = logs.get("worker", pipeline=config.pipeline, worker=worker_id)
        self._source_alias = config.source.alias
        self._stamp = provenance.encoder(config.source.alias)  # urep value for records that start here
        self._destination_alias = config.destination.alias

        self._stop = threading.Event()
        self._wake = threading.Event()
        self._desired: Assignment | None = None
        self._desired_lock = threading.Lock()
        self._fenced = False
        self._session_lost = False
        # Lease: the last time ZooKeeper answered us. A process that was paused (GC, SIGSTOP,
        # a frozen VM) wakes with a stale lease and fences itself before kazoo even notices
        # its session expired, so it cannot write partitions given to someone else meanwhile.
        self._lease_at = time.monotonic()
        self._lease_asked = 0.0
        self.produced = 0  # records handed to the producer (tests watch it stop when fenced)

        self._owned: dict[TP, str] = {}  # source partition -> destination topic
        self._generation = 0
        self._errors: dict[TP, str] = {}
        self._tracker = OffsetTracker()
        # Per destination partition, the source records in send order: the idempotent
        # producer acknowledges a partition's records in that order.
        self._pending: dict[TP, deque[tuple[Any, int, int, int, str]]] = {}
        # source partition -> (destination topic, its PartitionOffsets, its pending queue)
        self._routes: dict[TP, tuple[str, Any, deque, str]] = {}
        self._acks = 0
        self._in_flight_bytes = 0
        self._last_commit = time.monotonic()
        self._last_status = time.monotonic()
        self._progress: dict[TP, tuple[int, float]] = {}  # position, epoch seconds it last moved
        self.limiter = RateLimiter(config.worker.max_records_per_s, config.worker.max_bytes_per_s)

        self.zk = zk.connect(config)
        self.zk.add_listener(self._on_connection)
        client_id = f"ureplicator-{config.pipeline}-{worker_id}"
        self.consumer = kafka.consumer(
            config.source, config.consumer_group, client_id, **{"auto.offset.reset": config.worker.auto_offset_reset}
        )
        self.producer = kafka.producer(config.destination, client_id, on_delivery=self._on_delivery)

    # --- ZooKeeper side (callbacks only set state) --------------------------------------------

    def _on_connection(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            self._fenced = True
        elif state == KazooState.LOST:
            self._fenced = True
            self._session_lost = True
        else:
            self._fenced = self._session_lost  # CONNECTED: resume unless the session is new
        self._wake.set()

    def _on_assignment(self, data: bytes | None, stat: object) -> bool:
        assignment: Assignment | None = None
        if data:
            try:
                assignment = Assignment.decode(data)
            except SchemaError as exc:
                self.log.error("assignment_unreadable", error=str(exc))
                return not self._stop.is_set()
        with self._desired_lock:
            self._desired = assignment or Assignment(self._generation, frozenset())
        self._wake.set()
        return not self._stop.is_set()

    def register(self, wait_s: float | None = None) -> None:
        """Announce this worker; a stale node of a previous session with our id is waited out."""
        info = WorkerInfo(
            host=socket.gethostname(),
            pid=os.getpid(),
            version=VERSION,
            started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            metrics_port=self.config.worker.metrics_port,
        )
        # An assignment left from an earlier life of this id may already be given away:
        # drop it and wait for one the leader writes for this registration.
        try:
            self.zk.delete(self.paths.assignment(self.worker_id))
        except NoNodeError:
            pass
        deadline = time.monotonic() + (wait_s if wait_s is not None else self.config.zookeeper.session_timeout_s + 5)
        while True:
            try:
                self.zk.create(self.paths.worker(self.worker_id), info.encode(), ephemeral=True)
                break
            except NodeExistsError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self._write_status()
        self.zk.DataWatch(self.paths.assignment(self.worker_id), self._on_assignment)
        self.zk.DataWatch(self.paths.rate_limit, self._on_rate_limit)
        self._lease_at = time.monotonic()
        self.log.info("worker_registered")

    def _on_rate_limit(self, data: bytes | None, stat: object) -> bool:
        limit = RateLimit(self.config.worker.max_records_per_s, self.config.worker.max_bytes_per_s)
        if data:
            try:
                limit = RateLimit.decode(data)
            except SchemaError as exc:
                self.log.error("rate_limit_unreadable", error=str(exc))
        # Plain attribute writes: the loop reads them on its next turn.
        self.limiter.update(limit.records_per_s, limit.bytes_per_s)
        self.log.info("rate_limit_applied", records_per_s=limit.records_per_s, bytes_per_s=limit.bytes_per_s)
        return not self._stop.is_set()

    # --- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        """Mirror until :meth:`stop` is called; then release everything cleanly."""
        if self.config.worker.metrics_port:
            self.metrics.serve(self.config.worker.metrics_port)
        # The mirror loop allocates a few short-lived objects per record; the default gen-0
        # threshold (700) made the cyclic GC ~6% of the loop's time in profiles. Long-lived
        # startup objects are frozen out of collection; cycles are still collected.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)
        self.register()
        budget = self.config.worker.max_in_flight_bytes
        batch = self.config.worker.batch_size
        interval = self.config.worker.commit_interval_s
        try:
            while not self._stop.is_set():
                if self._session_lost:
                    self._recover_session()
                    continue
                if self._wake.is_set():
                    self._wake.clear()
                    self._apply_desired()
                fenced = self._fenced or not self._lease_valid()
                if fenced or not self._owned or self._in_flight_bytes >= budget:
                    # Backpressure or fencing: no new fetches; keep serving delivery reports.
                    self.producer.poll(0.05)
                    if not self._owned and not fenced:
                        self._wake.wait(0.2)
                elif (wait := self.limiter.wait_s(time.monotonic())) > 0:
                    self.producer.poll(min(wait, 0.1))  # rate limit: hold off fetching
                else:
                    messages = self.consumer.consume(self.limiter.max_batch(batch), 0.05)
                    if messages:
                        self._mirror(messages)
                    self.producer.poll(0)
                now = time.monotonic()
                if not fenced and now - self._last_commit >= interval:
                    self._commit()
                    self._last_commit = now
                if now - self._last_status >= interval and not fenced:
                    self._write_status()
        finally:
            self._shutdown()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _lease_valid(self) -> bool:
        """Renew the ZooKeeper lease asynchronously; valid while younger than a third of the session."""
        now = time.monotonic()
        if now - self._lease_asked >= 1.0:
            self._lease_asked = now
            asked = now

            def renewed(result: Any) -> None:
                if result.successful() and result.get() is not None:
                    self._lease_at = max(self._lease_at, asked)

            try:
                self.zk.exists_async(self.paths.worker(self.worker_id)).rawlink(renewed)
            except KazooException:
                pass
        return now - self._lease_at < self.config.zookeeper.session_timeout_s / 3

    def _mirror(self, messages: list[Any]) -> None:
        """The hot path: per record only what correctness needs (header, produce, bookkeeping)."""
        produce = self.producer.produce
        routes = self._routes
        origin_alias = self._source_alias
        skip_origin = self._destination_alias
        header = provenance.HEADER
        encode = provenance.encode
        stamp = self._stamp
        no_timestamp = TIMESTAMP_NOT_AVAILABLE
        fetched_bytes = 0
        produced = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                self._on_consume_error(msg, err)
                continue
            partition = msg.partition()
            route = routes.get((msg.topic(), partition))
            if route is None:
                continue  # fetched before a release or after an error; resumed from the commit
            destination, state, queue, topic = route
            offset = msg.offset()
            headers = msg.headers()
            origin = origin_alias
            if headers:
                kept = []
                for name, value in headers:
                    if name == header:
                        origin = provenance.origin_of(value) or origin_alias
                    else:
                        kept.append((name, value))
                if origin == skip_origin:
                    state.skipped(offset)  # loop prevention: it came from where we write
                    self.metrics.skipped.labels(topic).inc()
                    continue
                headers = kept
                headers.append((header, stamp(offset, partition) if origin == origin_alias
                                else encode(offset, partition, origin)))
            else:
                headers = [(header, stamp(offset, partition))]
            key = msg.key()
            value = msg.value()
            size = (len(key) if key else 0) + (len(value) if value else 0)
            ts_type, ts = msg.timestamp()
            while True:
                try:
                    produce(destination, value=value, key=key, partition=partition, headers=headers,
                            timestamp=ts if ts_type != no_timestamp else 0)
                    break
                except BufferError:
                    self.producer.poll(0.05)  # local queue full: wait for acks, never drop
                except KafkaException as exc:
                    if exc.args[0].code() == KafkaError._UNKNOWN_PARTITION and self._await_partition(
                        destination, partition
                    ):
                        continue  # the destination just grew; the producer's metadata now knows it
                    self._fail_partition((topic, partition), offset, exc.args[0].str())
                    break
            if self._errors and (topic, partition) in self._errors:
                continue
            queue.append((state, offset, size, ts, topic))
            state.in_flight.append(offset)  # PartitionOffsets.sent, inlined: hot path
            fetched_bytes += size
            produced += 1
        self.produced += produced
        self._in_flight_bytes += fetched_bytes
        if not self.limiter.unlimited:
            self.limiter.spend(len(messages), fetched_bytes, time.monotonic())

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        queue = self._pending.get((msg.topic(), msg.partition()))
        if not queue:
            return  # a partition forgotten after a lost session; its records no longer count
        state, offset, size, ts, source_topic = queue.popleft()
        self._in_flight_bytes -= size
        if err is not None:
            self._fail_partition((source_topic, msg.partition()), offset, err.str())
            return
        in_flight = state.in_flight
        if in_flight and in_flight[0] == offset and not state.acked_early:
            in_flight.popleft()  # PartitionOffsets.acked fast path: acks arrive in send order
            state.position = offset + 1
        else:
            state.acked(offset)
        state.acked_records += 1
        state.acked_bytes += size
        self._acks += 1
        if ts > 0 and not self._acks & 63:
            # One in 64: a histogram observation costs more than the rest of this callback.
            self.metrics.latency.observe(max(0.0, time.time() - ts / 1000.0))

    def _on_consume_error(self, msg: Any, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        tp = (msg.topic(), msg.partition()) if msg.topic() else None
        if err.fatal() or (tp and not err.retriable() and err.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.OFFSET_OUT_OF_RANGE,
        )):
            if tp is not None and tp in self._owned:
                self._fail_partition(tp, msg.offset(), err.str())
                return
        self.log.warning("consume_error", topic=msg.topic(), partition=msg.partition(), error=err.str())

    def _fail_partition(self, tp: TP, offset: int, reason: str) -> None:
        """Stop one partition at ``offset``: never skip a record silently; others go on."""
        if tp in self._errors:
            return
        self._errors[tp] = f"offset {offset}: {reason}"
        self._routes.pop(tp, None)  # later records of this partition are not produced
        self.metrics.produce_errors.labels(tp[0]).inc()
        self.log.error("partition_stopped", topic=tp[0], partition=tp[1], offset=offset, error=reason)
        try:
            self.consumer.pause([TopicPartition(tp[0], tp[1])])
        except KafkaException:
            pass
        self._last_status = 0.0  # publish the error in status promptly

    # --- assignment ----------------------------------------------------------------------------

    def _apply_desired(self) -> None:
        with self._desired_lock:
            desired = self._desired
        if desired is None or self._fenced:
            return
        if desired.generation == self._generation and desired.partitions == frozenset(self._owned):
            return
        removed = [tp for tp in self._owned if tp not in desired.partitions]
        added = sorted(desired.partitions - set(self._owned))
        log = self.log.bind(generation=desired.generation)
        if removed:
            self._release(removed)
            log.info("partitions_released", partitions=_fmt(removed))
        if added:
            started = self._acquire(added)
            log.info("partitions_acquired", partitions=_fmt(started))
        self._generation = desired.generation
        self.metrics.generation.set(self._generation)
        self.metrics.partitions.set(len(self._owned))
        self._write_status()

    def _release(self, partitions: list[TP]) -> None:
        """Hand-off, old owner's half: stop fetching, wait for acks, commit, forget."""
        self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in partitions])
        deadline = time.monotonic() + self.config.worker.shutdown_timeout_s
        while any(self._tracker.in_flight(tp) for tp in partitions if tp not in self._errors):
            if time.monotonic() > deadline:
                self.log.warning("release_timed_out", partitions=_fmt(partitions))
                break
            self.producer.poll(0.05)
        self._commit(partitions)
        for tp in partitions:
            self._tracker.stop(tp)
            self._routes.pop(tp, None)
            self._owned.pop(tp, None)
            self._errors.pop(tp, None)
            self._progress.pop(tp, None)
            try:
                self.metrics.lag.remove(tp[0], str(tp[1]))
            except KeyError:
                pass  # never had a lag sample

    def _acquire(self, partitions: list[TP]) -> list[TP]:
        routes: dict[str, str] = {}
        initial: dict[str, int] = {}
        for topic in {t for t, _ in partitions}:
            record = zk.read_topic(self.zk, self.paths, topic)
            if record is not None:
                routes[topic] = record.destination
                initial[topic] = int(record.options.get("initial_partitions", record.partitions))
        wanted = [TopicPartition(t, p) for t, p in partitions if t in routes]
        if not wanted:
            return []
        committed = self._committed(wanted)
        for tp in committed:
            if tp.offset < 0:
                continue
            try:
                low, _ = self.consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
            except KafkaException:
                continue
            if tp.offset < low:
                # Retention deleted records before they were mirrored: say so loudly, the
                # consumer can only continue from the log start.
                self.metrics.expired.labels(tp.topic).inc(low - tp.offset)
                self.log.error("records_expired_before_mirroring", topic=tp.topic, partition=tp.partition,
                               committed=tp.offset, log_start=low, records=low - tp.offset)
        reset = OFFSET_BEGINNING if self.config.worker.auto_offset_reset == "earliest" else OFFSET_END
        assign = []
        for tp in committed:
            # Partitions added after the topic was registered hold only new data: mirror them
            # from their first record whatever auto_offset_reset says, so growth loses nothing.
            fallback = OFFSET_BEGINNING if tp.partition >= initial[tp.topic] else reset
            start = tp.offset if tp.offset >= 0 else fallback
            state = self._tracker.start((tp.topic, tp.partition), tp.offset if tp.offset >= 0 else -1)
            destination = routes[tp.topic]
            queue = self._pending.setdefault((destination, tp.partition), deque())
            self._routes[(tp.topic, tp.partition)] = (destination, state, queue, tp.topic)
            self._owned[(tp.topic, tp.partition)] = destination
            assign.append(TopicPartition(tp.topic, tp.partition, start))
        for topic, destination in routes.items():
            # A destination grown moments ago: make the producer's metadata know every partition.
            highest = max((p for t, p in partitions if t == topic), default=-1)
            if highest >= 0:
                self._await_partition(destination, highest, timeout_s=10.0)
        self.consumer.incremental_assign(assign)
        return [(tp.topic, tp.partition) for tp in assign]

    def _await_partition(self, destination: str, partition: int, timeout_s: float = 30.0) -> bool:
        """Refresh the producer's metadata until ``destination`` has ``partition`` (it was just grown)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                found = self.producer.list_topics(topic=destination, timeout=5).topics.get(destination)
            except KafkaException:
                found = None
            if found is not None and found.error is None and partition in found.partitions:
                return True
            self.producer.poll(0.5)
        return False

    def _committed(self, wanted: list[TopicPartition]) -> list[TopicPartition]:
        """The group's committed offsets; a coordinator still loading (fresh cluster) is retried."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.consumer.committed(wanted, timeout=10)
            except KafkaException as exc:
                error = exc.args[0]
                transient = error.retriable() or error.code() in (
                    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT,
                )
                if time.monotonic() > deadline or not transient:
                    raise
                self.log.warning("committed_offsets_retry", error=error.str())
                time.sleep(0.5)

    # --- offsets and status --------------------------------------------------------------------

    def _commit(self, only: list[TP] | None = None) -> None:
        positions = self._tracker.to_commit()
        if only is not None:
            positions = {tp: pos for tp, pos in positions.items() if tp in only}
        if not positions:
            return
        offsets = [TopicPartition(t, p, pos) for (t, p), pos in positions.items()]
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self.metrics.commits.labels("error").inc()
            self.log.warning("commit_failed", error=str(exc.args[0]))
            return
        done = {}
        for tp in result or []:
            if tp.error is None:
                done[(tp.topic, tp.partition)] = tp.offset
            else:
                self.log.warning("commit_failed", topic=tp.topic, partition=tp.partition, error=str(tp.error))
        self._tracker.mark_committed(done)
        self.metrics.commits.labels("ok").inc()

    def _write_status(self) -> None:
        now = time.monotonic()
        elapsed = max(now - self._last_status, 1e-3)
        self._last_status = now
        parts: dict[TP, PartitionStatus] = {}
        for tp in self._owned:
            state = self._tracker.get(tp)
            records, size = (state.acked_records, state.acked_bytes) if state is not None else (0, 0)
            if state is not None:
                state.acked_records = state.acked_bytes = 0
            lag = -1
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
                if state is not None and state.position >= 0 and high >= 0:
                    lag = max(0, high - state.position)
                    self.metrics.lag.labels(tp[0], str(tp[1])).set(lag)
            except KafkaException:
                pass
            position = state.position if state is not None else -1
            wall = time.time()
            last = self._progress.get(tp)
            if last is None or last[0] != position or lag == 0:
                self._progress[tp] = last = (position, wall)
            if records:
                self.metrics.records.labels(tp[0]).inc(records)
                self.metrics.bytes.labels(tp[0]).inc(size)
            parts[tp] = PartitionStatus(
                committed=state.committed if state else -1,
                records_per_s=round(records / elapsed, 1),
                bytes_per_s=round(size / elapsed, 1),
                lag=lag,
                error=self._errors.get(tp),
                last_progress_at=round(last[1], 3),
            )
        self.metrics.in_flight.set(self._in_flight_bytes)
        status = WorkerStatus(self._generation, parts, datetime.now(timezone.utc).isoformat(timespec="seconds"))
        try:
            self.zk.set(self.paths.worker_status(self.worker_id), status.encode())
        except NoNodeError:
            try:
                self.zk.create(self.paths.worker_status(self.worker_id), status.encode(), ephemeral=True)
            except (NodeExistsError, KazooException) as exc:
                self.log.warning("status_write_failed", error=str(exc))
        except KazooException as exc:
            self.log.warning("status_write_failed", error=str(exc))

    # --- session loss and shutdown -------------------------------------------------------------

    def _recover_session(self) -> None:
        """After a LOST session: forget all partitions uncommitted, then re-register."""
        if self._owned:
            self.log.warning("session_lost_partitions_dropped", partitions=_fmt(list(self._owned)))
            self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in self._owned])
            self._owned.clear()
            self._errors.clear()
            self._tracker = OffsetTracker()
            self._pending.clear()
            self._routes.clear()
            self._in_flight_bytes = 0
        self._generation = 0
        if self.zk.state != KazooState.CONNECTED:
            time.sleep(0.2)
            return
        try:
            self._session_lost = False
            self._fenced = False
            with self._desired_lock:
                self._desired = None
            self.register()
        except KazooException as exc:
            self._session_lost = True
            self.log.warning("reregister_failed", error=str(exc))

    def _shutdown(self) -> None:
        """Graceful stop: no more fetches, wait for acks, commit, deregister, close."""
        log = self.log.bind(partitions=len(self._owned))
        log.info("worker_stopping")
        try:
            if self._owned:
                self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in self._owned])
            remaining = self.producer.flush(self.config.worker.shutdown_timeout_s)
            if remaining:
                log.warning("shutdown_unacknowledged", records=remaining)
            if not self._fenced and not self._session_lost:
                self._commit()
        finally:
            for path in (self.paths.worker_status(self.worker_id), self.paths.worker(self.worker_id)):
                try:
                    self.zk.delete(path)
                except (NoNodeError, KazooException):
                    pass
            self.consumer.close()
            self.zk.stop()
            self.zk.close()
            log.info("worker_stopped")


def _fmt(partitions: list[TP]) -> list[str]:
    return [f"{t}:{p}" for t, p in sorted(partitions)]

