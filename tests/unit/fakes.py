"""Pure-Python stand-ins for the Kafka and ZooKeeper clients a worker drives (unit tests only).

They keep just enough state to observe what the worker did: what it produced
and when, what it committed, which ZooKeeper nodes it wrote, in which order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, KafkaError, KafkaException, TopicPartition
from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency

from ureplicator.common import provenance

TP = tuple[str, int]


@dataclass
class FakeMessage:
    """A fetched source record, or a produced one in a delivery report."""

    _topic: str
    _partition: int
    _offset: int
    _value: bytes | None
    _key: bytes | None = None
    _headers: list[tuple[str, bytes]] | None = None
    _timestamp: int = 1
    _error: KafkaError | None = None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)

    def error(self) -> KafkaError | None:
        return self._error


class FakeConsumer:
    """A source cluster with one log per partition, a consumer group, and ``assign()`` semantics.

    As librdkafka's: a never-committed partition's ``committed`` offset is ``OFFSET_INVALID``
    (-1001), ``position`` is ``OFFSET_INVALID`` after an assignment until ``consume`` returned a
    record of the partition, and unassigning a partition that is not assigned raises
    ``_INVALID_ARG`` (checked in ``tests/unit/test_fakes_librdkafka_consumer.py``). One
    difference: the fake resolves ``OFFSET_END`` in ``incremental_assign``; librdkafka does when
    it starts fetching, so a record appended in between may be skipped there.
    """

    def __init__(self, logs: dict[TP, list[bytes]]) -> None:
        self.logs = logs
        self.headers: dict[tuple[str, int, int], list[tuple[str, bytes]]] = {}  # (topic, partition, offset) ->
        self.positions: dict[TP, int] = {}
        self.group: dict[TP, int] = {}
        self.paused: set[TP] = set()
        self.log_start: dict[TP, int] = {}  # retention deleted the records below
        self.consume_calls: list[tuple[int, float]] = []  # (num_messages, timeout) of every consume
        self.fail_commits = 0  # the next N commits raise (a coordinator moving, say)
        self.events: list[tuple[str, Any]] = []  # in call order: what the worker asked for
        self.closed = False
        self._returned: set[TP] = set()  # partitions consume() returned a record of since their assignment

    def append(self, tp: TP, *values: bytes) -> None:
        self.logs.setdefault(tp, []).extend(values)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            start = tp.offset
            if start in (OFFSET_BEGINNING, -1001):
                start = 0
            elif start == OFFSET_END:
                start = len(self.logs.get((tp.topic, tp.partition), []))
            self.positions[(tp.topic, tp.partition)] = start
            self._returned.discard((tp.topic, tp.partition))
        self.events.append(("assign", sorted((tp.topic, tp.partition, tp.offset) for tp in partitions)))

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            # librdkafka refuses to unassign what is not assigned (_INVALID_ARG)
            if (tp.topic, tp.partition) not in self.positions:
                raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"{tp.topic} [{tp.partition}] not assigned"))
        for tp in partitions:
            self.positions.pop((tp.topic, tp.partition), None)
            self.paused.discard((tp.topic, tp.partition))
            self._returned.discard((tp.topic, tp.partition))
        self.events.append(("unassign", sorted((tp.topic, tp.partition) for tp in partitions)))

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        self.consume_calls.append((num_messages, timeout))
        out: list[FakeMessage] = []
        for tp in sorted(self.positions):
            if tp in self.paused:
                continue
            log = self.logs.get(tp, [])
            while self.positions[tp] < len(log) and len(out) < num_messages:
                offset = self.positions[tp]
                out.append(FakeMessage(tp[0], tp[1], offset, log[offset], _timestamp=1000 + offset,
                                       _headers=self.headers.get((tp[0], tp[1], offset))))
                self.positions[tp] = offset + 1
                self._returned.add(tp)
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The offset after the last record ``consume`` returned; ``OFFSET_INVALID`` before the first one."""
        return [TopicPartition(tp.topic, tp.partition, self.positions[(tp.topic, tp.partition)]
                               if (tp.topic, tp.partition) in self._returned else OFFSET_INVALID)
                for tp in partitions]

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        self.events.append(("committed", sorted((tp.topic, tp.partition) for tp in partitions)))
        return [TopicPartition(tp.topic, tp.partition, self.group.get((tp.topic, tp.partition), -1001))
                for tp in partitions]

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> list[TopicPartition]:
        if self.fail_commits:
            self.fail_commits -= 1
            self.events.append(("commit_failed", None))
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        for tp in offsets:
            self.group[(tp.topic, tp.partition)] = tp.offset
        self.events.append(("commit", sorted((tp.topic, tp.partition, tp.offset) for tp in offsets)))
        return [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in offsets]

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        return (self.log_start.get((tp.topic, tp.partition), 0), len(self.logs.get((tp.topic, tp.partition), [])))

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """Only OFFSET_BEGINNING is asked for (the log start): what the worker's expired-records report reads."""
        self.events.append(("offsets_for_times", sorted((tp.topic, tp.partition) for tp in partitions)))
        assert all(tp.offset == OFFSET_BEGINNING for tp in partitions)
        return [TopicPartition(tp.topic, tp.partition, self.log_start.get((tp.topic, tp.partition), 0))
                for tp in partitions]

    def close(self) -> None:
        self.closed = True


class FakeCommitClient:
    """The worker's commit client: a consumer of the same group as ``consumer``, never assigned."""

    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer
        self.closed = False

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> list[TopicPartition]:
        assert not self.closed, "commit on a closed commit client"
        return self.consumer.commit(offsets, asynchronous)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        assert not self.closed, "committed() on a closed commit client"
        return self.consumer.committed(partitions, timeout)

    def poll(self, timeout: float = 0) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def source_offset(msg: FakeMessage) -> int | None:
    """The source offset a produced record names in its ``urep`` header."""
    for name, value in msg.headers() or []:
        if name == provenance.HEADER:
            return provenance.decode(value).source_offset
    return None


class FakeProducer:
    """A destination with an in-order local queue, records on the wire, and written logs.

    ``produce`` queues; :meth:`send` puts queued records on the wire (``purge`` can no longer
    drop them); ``poll`` delivers every record on the wire and, unless ``hold`` is set, the
    queued ones too, calling the callback of each record that has one, like librdkafka does.
    A refused record behaves like librdkafka's gapless idempotent producer: it fails with the
    broker's error, the producer turns fatal, whatever it still holds is purged and every
    later ``produce`` raises ``_FATAL``. Purging records on the wire turns it fatal too (their
    sequence numbers would leave a gap). A record over ``max_message_bytes`` is refused by
    ``produce`` itself (``MSG_SIZE_TOO_LARGE``, not fatal). :meth:`fresh` is a new producer on
    the same destination. ``tests/unit/test_fakes_librdkafka.py`` checks all of this against
    librdkafka's mock cluster.
    """

    def __init__(self, partitions: int = 4, written: dict[TP, list[bytes]] | None = None,
                 refuse: dict[TP, int] | None = None, records: dict[TP, list[FakeMessage]] | None = None) -> None:
        self.queue: list[tuple[FakeMessage, Callable[..., None] | None]] = []
        self.wire: list[tuple[FakeMessage, Callable[..., None] | None]] = []
        self.written: dict[TP, list[bytes]] = {} if written is None else written
        self.records: dict[TP, list[FakeMessage]] = {} if records is None else records  # written, with headers
        self.partitions = partitions
        self.hold = False  # the destination is down: nothing is acknowledged
        self.capacity: int | None = None  # local queue size; above it produce raises BufferError
        self.max_message_bytes: int | None = None  # message.max.bytes; a larger record is refused by produce
        self.on_poll: Callable[[], None] | None = None
        # destination partition -> source offset (from the urep header) of a record it refuses
        self.refuse: dict[TP, int] = {} if refuse is None else refuse
        self.fatal = False
        self.purges = 0
        self.produced_total = 0
        self.callbacks = 0  # records produced with a delivery callback
        self.replacements: list[FakeProducer] = []
        self.purge_keeps_wire = False  # requests on the wire whose purge reports never come
        self.closed = False

    def fresh(self) -> FakeProducer:
        """A new producer instance writing to the same destination (the worker replaces a purged or fatal one)."""
        new = FakeProducer(self.partitions, self.written, self.refuse, self.records)
        self.replacements.append(new)
        return new

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1,
                callback: Callable[..., None] | None = None, on_delivery: Callable[..., None] | None = None,
                timestamp: int = 0, headers: list[tuple[str, bytes]] | None = None) -> None:
        if self.fatal:
            raise KafkaException(KafkaError(KafkaError._FATAL, "gapless guarantee: producer failed", fatal=True))
        if self.max_message_bytes is not None and len(value or b"") + len(key or b"") > self.max_message_bytes:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Unable to produce message"))
        if self.capacity is not None and len(self) >= self.capacity:
            raise BufferError("Local: Queue full")
        callback = callback or on_delivery
        self.callbacks += callback is not None
        self.queue.append((FakeMessage(topic, partition, -1, value, key, headers, timestamp), callback))
        self.produced_total += 1

    def send(self) -> None:
        self.wire.extend(self.queue)
        self.queue.clear()

    def _deliver(self, batch: list[tuple[FakeMessage, Callable[..., None] | None]]) -> int:
        for index, (msg, callback) in enumerate(batch):
            tp = (msg.topic(), msg.partition())
            log = self.written.setdefault(tp, [])
            if tp in self.refuse and source_offset(msg) == self.refuse[tp]:
                if callback is not None:
                    callback(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), msg)
                self.fatal = True  # enable.gapless.guarantee: the producer fails, nothing is skipped
                rest, self.queue, self.wire = batch[index + 1:] + self.queue + self.wire, [], []
                for later, later_callback in rest:
                    if later_callback is not None:
                        later_callback(KafkaError(KafkaError._PURGE_QUEUE), later)
                return index
            msg._offset = len(log)
            log.append(msg.value() or b"")
            self.records.setdefault(tp, []).append(msg)
            if callback is not None:
                callback(None, msg)
        return len(batch)

    def deliver_wire(self) -> int:
        batch, self.wire = self.wire, []
        return self._deliver(batch)

    def poll(self, timeout: float = 0) -> int:
        if self.on_poll is not None:
            self.on_poll()
        if self.hold:
            return 0
        self.send()
        return self.deliver_wire()

    def flush(self, timeout: float = 0) -> int:
        self.poll(0)
        return len(self.queue) + len(self.wire)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.purges += 1
        if in_queue:
            purged, self.queue = self.queue, []
            for msg, callback in purged:
                if callback is not None:
                    callback(KafkaError(KafkaError._PURGE_QUEUE), msg)
        if in_flight and not self.purge_keeps_wire:
            purged, self.wire = self.wire, []
            self.fatal = self.fatal or bool(purged)  # enable.gapless.guarantee: a purged sequence is a gap
            for msg, callback in purged:
                if callback is not None:
                    callback(KafkaError(KafkaError._PURGE_INFLIGHT), msg)

    def __len__(self) -> int:
        return len(self.queue) + len(self.wire)

    def close(self) -> None:
        self.closed = True

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        meta = SimpleNamespace(error=None, partitions={p: None for p in range(self.partitions)})
        return SimpleNamespace(topics={topic: meta})


class _Async:
    def __init__(self, value: Any, exception: BaseException | None = None) -> None:
        self._value = value
        self.exception = exception

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        callback(self)

    def successful(self) -> bool:
        return self.exception is None

    def get(self) -> Any:
        return self._value


class _Pending:
    """An asynchronous write ZooKeeper has not answered yet: its callbacks run once it does."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[Any], None]] = []

    def rawlink(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.append(callback)


@dataclass
class FakeZooKeeper:
    """Nodes in a dict, data watches, connection listeners; every write is recorded in order."""

    nodes: dict[str, bytes] = field(default_factory=dict)
    state: str = KazooState.CONNECTED
    writes: list[tuple[str, str, bytes | None]] = field(default_factory=list)
    listeners: list[Callable[[str], None]] = field(default_factory=list)
    watches: dict[str, list[Callable[..., bool]]] = field(default_factory=dict)
    answering: bool = True  # False: lease renewals go unanswered (a frozen ensemble)
    broken: bool = False  # True: every read raises ConnectionLoss (ZooKeeper unreachable)
    deferred: list[tuple[str, bytes, _Pending]] | None = None  # a list: set_async waits here until answer_deferred()
    session: int = 1  # the session id; expire() starts a new one
    granted_session_s: float | None = None  # the session timeout the server granted (common.zkclient.Client)

    @property
    def client_id(self) -> tuple[int, bytes]:
        return (self.session, b"")

    def add_listener(self, listener: Callable[[str], None]) -> None:
        self.listeners.append(listener)

    def connection(self, state: str) -> None:
        self.state = state
        for listener in self.listeners:
            listener(state)

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False, makepath: bool = False) -> str:
        self._check()
        if path in self.nodes:
            raise NodeExistsError()
        self.nodes[path] = value
        self.writes.append(("create", path, value))
        self._fire(path)
        return path

    def set(self, path: str, value: bytes) -> None:
        if path not in self.nodes:
            raise NoNodeError()
        self.nodes[path] = value
        self.writes.append(("set", path, value))
        self._fire(path)

    def put(self, path: str, value: bytes) -> None:
        """Someone else (the leader) writes a node."""
        self.nodes[path] = value
        self._fire(path)

    def delete(self, path: str) -> None:
        if path not in self.nodes:
            raise NoNodeError()
        del self.nodes[path]
        self.writes.append(("delete", path, None))
        self._fire(path)

    def get(self, path: str) -> tuple[bytes, Any]:
        self._check()
        if path not in self.nodes:
            raise NoNodeError()
        return self.nodes[path], None

    def get_children(self, path: str) -> list[str]:
        self._check()
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)})

    def ensure_path(self, path: str) -> None:
        self._check()
        self.nodes.setdefault(path, b"")

    def exists(self, path: str) -> bool:
        self._check()
        return path in self.nodes

    def transaction(self) -> FakeTransaction:
        return FakeTransaction(self)

    def _check(self) -> None:
        if self.broken:
            raise ConnectionLoss()

    def answer_deferred(self) -> None:
        """ZooKeeper answers the asynchronous writes it held back, in order."""
        held, self.deferred = self.deferred or [], None
        for path, value, pending in held:
            try:
                self.set(path, value)
                answer = _Async(None)
            except NoNodeError as exc:  # in the session that is current now, as kazoo resends it
                answer = _Async(None, exc)
            for callback in pending.callbacks:
                callback(answer)

    def set_async(self, path: str, value: bytes) -> _Async | _Pending:
        if self.deferred is not None:
            pending = _Pending()
            self.deferred.append((path, value, pending))
            return pending
        try:
            self.set(path, value)
        except NoNodeError as exc:
            return _Async(None, exc)
        return _Async(None)

    def create_async(self, path: str, value: bytes = b"", ephemeral: bool = False) -> _Async:
        try:
            return _Async(self.create(path, value, ephemeral=ephemeral))
        except NodeExistsError as exc:
            return _Async(None, exc)

    def exists_async(self, path: str) -> _Async:
        if not self.answering:
            return SimpleNamespace(rawlink=lambda callback: None)  # type: ignore[return-value]
        return _Async(object() if path in self.nodes else None)

    def DataWatch(self, path: str, func: Callable[..., bool]) -> None:  # noqa: N802 - kazoo's name
        self.watches.setdefault(path, []).append(func)
        func(self.nodes.get(path), None)

    def _fire(self, path: str) -> None:
        for func in list(self.watches.get(path, [])):
            if func(self.nodes.get(path), None) is False:
                self.watches[path].remove(func)

    def expire(self) -> None:
        """The session expires: ephemeral nodes vanish (all of a worker's nodes are ephemeral here)."""
        for path in [p for p in self.nodes if "/workers/" in p or "/status/" in p]:
            del self.nodes[path]
        self.session += 1
        self.connection(KazooState.LOST)

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Future:
    def __init__(self, error: KafkaError | None = None) -> None:
        self._error = error

    def result(self, timeout: float | None = None) -> None:
        if self._error is not None:
            raise KafkaException(self._error)


class FakeAdmin:
    """A cluster's AdminClient: topics with partition counts; ``down`` makes every call fail."""

    def __init__(self, topics: dict[str, int] | None = None) -> None:
        self.topics = dict(topics or {})
        self.down = False
        self.refuse_create: KafkaError | None = None

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        names = [topic] if topic else list(self.topics)
        found = {
            n: SimpleNamespace(error=None, partitions={p: SimpleNamespace(replicas=[1]) for p in range(self.topics[n])})
            for n in names if n in self.topics
        }
        return SimpleNamespace(topics=found, brokers={1: None})  # one broker, replica of every partition

    def describe_configs(self, resources: list[Any]) -> dict[Any, _Future]:
        return {r: _Future(KafkaError(KafkaError._TRANSPORT)) for r in resources}  # configs are best effort

    def create_topics(self, new_topics: list[Any], operation_timeout: float = 0) -> dict[str, _Future]:
        futures = {}
        for topic in new_topics:
            if self.refuse_create is None:
                self.topics[topic.topic] = topic.num_partitions
            futures[topic.topic] = _Future(self.refuse_create)
        return futures


@dataclass
class FakeTransaction:
    """kazoo's transaction: all operations or none; a failed commit reports like ZooKeeper's multi.

    The failed operation's result is its exception, the ones before it ``RolledBackError``,
    the ones after it ``RuntimeInconsistency``.
    """

    zk: FakeZooKeeper
    operations: list[tuple[str, str, bytes]] = field(default_factory=list)

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False) -> None:
        self.operations.append(("create", path, value))

    def delete(self, path: str) -> None:
        self.operations.append(("delete", path, b""))

    def set_data(self, path: str, value: bytes) -> None:
        self.operations.append(("set", path, value))

    def commit(self) -> list[Any]:
        self.zk._check()
        nodes, writes = dict(self.zk.nodes), len(self.zk.writes)
        for index, (op, path, value) in enumerate(self.operations):
            try:
                if op == "create":
                    self.zk.create(path, value)
                elif op == "delete":
                    self.zk.delete(path)
                else:
                    self.zk.set(path, value)
            except (NodeExistsError, NoNodeError) as exc:
                self.zk.nodes, self.zk.writes[writes:] = nodes, []
                rest = len(self.operations) - index - 1
                return [RolledBackError()] * index + [exc] + [RuntimeInconsistency()] * rest
        return [True] * len(self.operations)


class FakeTransactions:
    """A producer's transactional calls, recorded in ``calls``; a ``fail_*`` error makes its call raise.

    Mixed into the fake producers of the transaction and destination tests; ``offsets_answer``
    (set: ``send_offsets_to_transaction`` returns only once it is) models librdkafka's hang on a
    group coordinator.
    """

    calls: list[str]
    offsets: list[TopicPartition]
    fail_commit: KafkaError | None = None
    fail_abort: KafkaError | None = None
    fail_offsets: KafkaError | None = None
    offsets_answer: threading.Event | None = None
    txn_open = False  # librdkafka's transaction state, as begin_transaction sees it
    abortable_error: KafkaError | None = None  # set: the open transaction failed and can only be aborted

    def init_transactions(self, timeout: float) -> None:
        self.calls.append("init")

    def produce(self, *args: Any, **kwargs: Any) -> None:
        """As librdkafka: no record is taken while the open transaction can only be aborted."""
        if self.abortable_error is not None:
            raise KafkaException(KafkaError(KafkaError._STATE, "Unable to produce message: Erroneous state"))
        produce = getattr(super(), "produce", None)  # the fake producer mixed in after this class, if any
        if produce is not None:
            produce(*args, **kwargs)

    def begin_transaction(self) -> None:
        """As librdkafka: a state error before ``init_transactions`` or while one is open; the
        transaction's own error once it is abortable."""
        if "init" not in self.calls:
            raise KafkaException(KafkaError(KafkaError._STATE, "Operation not valid in state Init"))
        if self.abortable_error is not None:
            raise KafkaException(self.abortable_error)
        if self.txn_open:
            raise KafkaException(KafkaError(KafkaError._STATE, "Operation not valid in state InTransaction"))
        self.calls.append("begin")
        self.txn_open = True

    offsets_timeout: float | None = None  # the timeout the last send_offsets_to_transaction was given

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], metadata: Any, timeout: float) -> None:
        self.calls.append("offsets")
        self.offsets = offsets
        self.offsets_timeout = timeout
        if self.offsets_answer is not None:
            self.offsets_answer.wait()
        if self.fail_offsets is not None:
            raise KafkaException(self.fail_offsets)

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append("commit")
        if self.fail_commit is not None:
            raise KafkaException(self.fail_commit)
        self.txn_open = False

    abort_timeout: float | None = None  # the timeout the last abort_transaction was given

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")
        self.abort_timeout = timeout
        if self.fail_abort is not None:
            raise KafkaException(self.fail_abort)
        self.txn_open = False
        self.abortable_error = None


class FakeTxnProducer(FakeTransactions, FakeProducer):
    """A FakeProducer with librdkafka's transactional calls; ``fail_commit`` makes commit_transaction raise.
    Its replacements (:meth:`fresh`) are transactional too and write to the same destination."""

    def __init__(self, fail_commit: KafkaError | None = None, written: dict[TP, list[bytes]] | None = None,
                 records: dict[TP, list[FakeMessage]] | None = None) -> None:
        super().__init__(written=written, records=records)
        self.fail_commit = fail_commit
        self.calls: list[str] = []
        self.offsets: list[TopicPartition] = []

    def fresh(self) -> FakeTxnProducer:
        new = FakeTxnProducer(written=self.written, records=self.records)
        self.replacements.append(new)
        return new
