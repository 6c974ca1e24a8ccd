"""Connect the three clients a worker drives: source consumer, destination producer, ZooKeeper."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ureplicator.common import autherrors, kafka, zk
from ureplicator.common.config import Config

# The names librdkafka gives its coordinator connections (logical brokers), which start the
# text of their connection errors: "TxnCoordinator: 127.0.0.1:9092: Connect to ... failed".
_COORDINATORS = ("TxnCoordinator", "GroupCoordinator")


class FatalErrors:
    """Where librdkafka's error callback leaves what the mirror loop must act on: a fatal producer
    error, and (exactly-once mode) a lost connection to the destination's coordinators.

    With an ``error_cb`` set, ``poll()``/``flush()`` do not raise fatal errors; the loop
    reads :attr:`failed` on its next turn and replaces the producer.

    :attr:`coordinator_lost`: every destination broker was down, or a coordinator's
    connection failed. After that, librdkafka's ``send_offsets_to_transaction`` on that
    producer waits for the group coordinator for ever (librdkafka #5456/#5511; reproduced
    against a real broker: after one destination restart the old producer's call hung past
    15 s while a fresh producer's ``init_transactions`` took 0.6 s and its call 0.02 s), so
    the loop renews the producer at the next commit instead (``Destination.renew``).
    """

    def __init__(self) -> None:
        self.failed: str | None = None
        self.coordinator_lost: str | None = None
        self.auth = autherrors.ErrorWatch()  # a refused credential: /ready says so (issue 27)

    def __call__(self, err: Any) -> None:
        self.auth(err)
        if err.fatal():
            self.failed = err.str()
        code = err.code()
        if code == KafkaError._ALL_BROKERS_DOWN or (
                code == KafkaError._TRANSPORT and str(err.str()).startswith(_COORDINATORS)):
            self.coordinator_lost = err.str()


def kafka_cause(exc: BaseException) -> KafkaException | None:
    """The KafkaException behind ``exc`` (itself, or what it was raised from), or None.

    confluent-kafka (2.16) raises a fatal error from its error callback by setting the
    exception and going on serving: a delivery report served after it in the same
    ``flush``/``poll`` calls our Python callback with that exception still set, and the
    call ends in ``SystemError: ... returned a result with an exception set``, raised from
    the fatal ``KafkaException``. Seen in the exactly-once soak (a fenced producer's
    ``flush``: the worker process died); the fatal error is the news, not the SystemError.
    """
    seen: BaseException | None = exc
    for _ in range(8):  # a short chain; never loop on a cycle
        if seen is None:
            return None
        if isinstance(seen, KafkaException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _unwrapped(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, a SystemError raised from a KafkaException raised as that KafkaException.

    The transaction calls may serve delivery reports too (:func:`kafka_cause`); their
    callers classify KafkaErrors and know nothing of a SystemError.
    """
    try:
        return call(*args)
    except SystemError as exc:
        cause = kafka_cause(exc)
        if cause is None:
            raise
        raise cause from exc


class GuardedProducer:
    """The destination producer, with fatal errors out of ``poll``/``flush``/``purge`` kept as state.

    confluent-kafka raises a fatal error from whichever call serves the error event,
    error_cb or not (sometimes as a ``SystemError`` raised from it: :func:`kafka_cause`);
    the hot path's ``produce`` is the client's own bound method (no wrapper cost) and
    raises it as ``_FATAL``, which the loop handles itself.
    """

    def __init__(self, producer: Any, errors: FatalErrors, client_id: str = "") -> None:
        self._producer = producer
        self.client = producer  # the confluent_kafka.Producer itself: the C loop drives it (worker.native)
        # Its client.id: the C loop drives the handle only if librdkafka names it "<client_id>#producer-N"
        self.client_id = client_id
        self._errors = errors
        self.produce = producer.produce
        self.list_topics = producer.list_topics

    def _fatal(self, exc: KafkaException | SystemError) -> None:
        """Keep a fatal error as state (the loop replaces the producer); anything else is raised."""
        cause = kafka_cause(exc)
        err = cause.args[0] if cause is not None and cause.args else None
        if not isinstance(err, KafkaError) or not (err.fatal() or err.code() == KafkaError._FATAL):
            raise exc
        # A report interrupted by the SystemError is not lost: after a fatal error every
        # partition goes back to its acknowledged (exactly-once: committed) position.
        self._errors.failed = err.str()

    def poll(self, timeout: float = 0) -> int:
        try:
            return int(self._producer.poll(timeout))
        except (KafkaException, SystemError) as exc:
            self._fatal(exc)
            return 0

    def flush(self, timeout: float = -1) -> int:
        try:
            return int(self._producer.flush(timeout))
        except (KafkaException, SystemError) as exc:
            self._fatal(exc)
            return len(self._producer)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        try:
            self._producer.purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)
        except (KafkaException, SystemError) as exc:
            self._fatal(exc)

    def close(self) -> None:
        self._producer.close()

    # Exactly-once mode (worker/transactions.py): these raise; the caller classifies the error.
    def init_transactions(self, timeout: float) -> None:
        _unwrapped(self._producer.init_transactions, timeout)

    def begin_transaction(self) -> None:
        _unwrapped(self._producer.begin_transaction)

    def send_offsets_to_transaction(self, offsets: list[Any], group_metadata: Any, timeout: float) -> None:
        _unwrapped(self._producer.send_offsets_to_transaction, offsets, group_metadata, timeout)

    def commit_transaction(self, timeout: float) -> None:
        _unwrapped(self._producer.commit_transaction, timeout)

    def abort_transaction(self, timeout: float) -> None:
        _unwrapped(self._producer.abort_transaction, timeout)

    def __len__(self) -> int:
        return len(self._producer)


COMMIT_CLIENT_SESSION_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class WorkerClients:
    """What :class:`worker.mirror.MirrorWorker` talks to; unit tests pass pure-Python fakes."""

    consumer: Any  # confluent_kafka.Consumer, used with assign() only
    producer: Any  # confluent_kafka.Producer; delivery reports come per run or per record (worker.acks)
    zk: Any  # kazoo.client.KazooClient
    make_producer: Callable[[], Any]  # a fresh producer, to replace one that failed fatally
    make_commit_client: Callable[[], Any]  # a consumer of the group, never assigned: commits and committed()
    producer_errors: FatalErrors = field(default_factory=FatalErrors)  # the producers' error_cb
    # Exactly-once mode: a consumer of the pipeline's group on the *destination* (read_committed), whose
    # committed() is where an acquisition starts; None in at-least-once mode.
    make_offsets_client: Callable[[], Any] | None = None
    # A fresh source consumer with the same settings, to replace one that stopped fetching (worker/fetchwatch.py);
    # None: no fetch watch (its remedy is a new consumer).
    make_consumer: Callable[[], Any] | None = None
    # The source's end offsets of some partitions at the fetching consumer's isolation level
    # (worker/endoffsets.py); None: no fetch watch.
    end_offsets: Callable[[list[tuple[str, int]], float], dict[tuple[str, int], int]] | None = None
    # The same question through a client of its own, for acquisitions that start at the end
    # (``auto_offset_reset: latest``, nothing committed): the start becomes a number (worker/handoff.py).
    latest_offsets: Callable[[list[tuple[str, int]], float], dict[tuple[str, int], int]] | None = None
    commit_thread: bool = True  # False: commit calls run in the caller's thread (unit tests)
    handoff_thread: bool = True  # False: an acquisition's reads run in the loop's thread (unit tests)
    watch_thread: bool = True  # False: the fetch watch reads end offsets in the loop's thread (unit tests)


@dataclass(frozen=True)
class Pins:
    """The client settings the worker applies after the user's (``common.kafka.pin``), per client."""

    producer: dict[str, Any]
    consumer: dict[str, Any]


def pins(config: Config) -> Pins:
    """The invariant settings of the worker's clients; a conflicting user property is a ConfigError naming it."""
    return Pins(
        producer=kafka.pin("destination.properties", config.destination.properties, kafka.PRODUCER_INVARIANTS),
        consumer=kafka.pin("source.properties", config.source.properties,
                           kafka.consumer_invariants(config.consumer_group)),
    )


def transactional_id(config: Config, worker_id: str) -> str:
    """Exactly-once mode: the worker's transactional id on its route (``config`` is a route view).

    A restart with the same id on the same route fences its predecessor; another route's
    worker with the same id never does (:func:`common.kafka.transactional_id`).
    """
    return kafka.transactional_id(config.worker.transactional_id_prefix, config.consumer_group, worker_id,
                                  config.route_id)


def connect(config: Config, worker_id: str) -> WorkerClients:
    """Open the real clients; the settings are checked first, then ZooKeeper, so a bad one fails fast."""
    pinned = pins(config)
    client = zk.connect(config)
    client_id = f"ureplicator-{config.pipeline}-{worker_id}"

    def make_consumer() -> Any:
        # Never reset a position by itself: librdkafka's reset jumped silently over records deleted
        # before they were mirrored (uncounted), past records still there ("latest"), or back to the
        # start after a truncation. Every start is explicit (worker/handoff.py: a committed offset, or
        # worker.auto_offset_reset's end as a number or logical offset), and a position the source
        # no longer holds arrives as an _AUTO_OFFSET_RESET error that Handoff.out_of_range resolves.
        return kafka.consumer(config.source, config.consumer_group, client_id, pinned=pinned.consumer,
                              **{"auto.offset.reset": "error"})

    consumer = make_consumer()
    errors = FatalErrors()
    exactly_once = config.worker.exactly_once
    transactional = {"transactional.id": transactional_id(config, worker_id)} if exactly_once else {}

    def make_producer() -> Any:
        return GuardedProducer(kafka.producer(config.destination, client_id, pinned=pinned.producer, error_cb=errors,
                                              **transactional),
                               errors, config.destination.properties.get("client.id", client_id))

    def make_offsets_client() -> Any:
        # Stable offsets only: committed() waits out a transaction that still holds the group's offsets.
        return kafka.consumer(config.destination, config.consumer_group, f"{client_id}-offsets",
                              pinned={"group.id": config.consumer_group, "enable.auto.commit": False},
                              **{"isolation.level": "read_committed"})

    def make_commit_client() -> Any:
        # session.timeout.ms bounds how long librdkafka defers a commit that finds no coordinator
        # (45 s by default); this client never joins the group, so nothing else reads it.
        return kafka.consumer(config.source, config.consumer_group, f"{client_id}-commits", pinned=pinned.consumer,
                              **{"session.timeout.ms": COMMIT_CLIENT_SESSION_TIMEOUT_MS})

    return WorkerClients(consumer=consumer, producer=make_producer(), zk=client, make_producer=make_producer,
                         make_commit_client=make_commit_client, producer_errors=errors,
                         make_offsets_client=make_offsets_client if exactly_once else None,
                         make_consumer=make_consumer,
                         end_offsets=end_offsets_query(config) if config.worker.fetch_stall_s > 0 else None,
                         latest_offsets=end_offsets_query(config))


def end_offsets_query(config: Config) -> Callable[[list[tuple[str, int]], float], dict[tuple[str, int], int]]:
    """One batched ``ListOffsets`` for the source's end offsets, at the fetching consumer's isolation level.

    librdkafka's consumers read ``read_committed`` unless ``source.properties`` says
    otherwise; there the end is the last stable offset, which an open source transaction
    holds back (its records are not fetchable yet, so they are no sign of a stall). The
    admin client is opened on the first question and opened anew after a failed one, so
    a client left with stale metadata (a broker restart) does not keep failing.
    """
    uncommitted = str(config.source.properties.get("isolation.level", "read_committed")) == "read_uncommitted"
    level = IsolationLevel.READ_UNCOMMITTED if uncommitted else IsolationLevel.READ_COMMITTED
    admin: list[Any] = []

    def query(partitions: list[tuple[str, int]], timeout_s: float) -> dict[tuple[str, int], int]:
        if not admin:
            admin.append(kafka.admin(config.source))
        asked = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}
        try:
            futures = admin[0].list_offsets(asked, isolation_level=level, request_timeout=timeout_s)
            found = {}
            for tp, future in futures.items():
                try:
                    found[(tp.topic, tp.partition)] = future.result(timeout=timeout_s + 5).offset
                except (KafkaException, TimeoutError):
                    pass  # this partition's leader did not answer: not known now
        except KafkaException:
            admin.clear()
            raise
        if partitions and not found:
            admin.clear()
        return found

    return query


def check_producer_properties(properties: dict[str, Any]) -> None:
    """Refuse destination properties that would void the no-loss accounting (clear error, no start)."""
    kafka.pin("destination.properties", properties, kafka.PRODUCER_INVARIANTS)
