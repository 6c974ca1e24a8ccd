"""ZooKeeper layout of a pipeline: node paths and the JSON documents stored at them.

Pure: no ZooKeeper client here, so the controller, the worker and the tests
agree on one encoding. Each document is one dataclass below; pydantic reads its
annotations to validate, decode and encode it (``TypeAdapter``: no second
hand-written copy of the shape), and the dataclasses stay plain to build and compare.
Layout (root ``<zookeeper.root>/<pipeline>``)::

    election/                   leader election (kazoo Election)
    topics/<topic>              TopicRecord
    blacklist/topics/<topic>    topics auto-whitelisting must not (re)add
    blacklist/workers/<id>      workers that get no partitions (drained gracefully)
    blacklist/partitions/<t>:<p> partitions that are not mirrored
    admin/autobalancing         "true" | "false": weight/lag rebalancing of partitions that need not move
    admin/rate_limit            RateLimit for every worker, changeable at runtime
    workers/<worker-id>         EPHEMERAL WorkerInfo
    assignments/<worker-id>     Assignment written by the leader
    status/<worker-id>          EPHEMERAL WorkerStatus written by the worker
    routes/<id>                 RouteRecord (the deployment's route registry, at the pipeline root);
                                a declared route's own state (the nodes above) lives under it,
                                the implicit route's ("default") at the pipeline root itself
    pool/workers/<worker-id>    EPHEMERAL WorkerInfo of a shared-pool worker (at the pipeline root)
    pool/bindings/<worker-id>   PoolBinding written by the leader: the route that worker serves
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

# Kafka's own rule for topic names (kafka.common.internals.Topic).
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_WORKER_RE = re.compile(r"^[a-zA-Z0-9._:-]{1,200}$")

TopicPartition = tuple[str, int]
_T = TypeVar("_T")


class SchemaError(ValueError):
    """A document in ZooKeeper (or a request) does not have the expected shape."""


def valid_topic_name(name: object) -> bool:
    return isinstance(name, str) and bool(_TOPIC_RE.match(name)) and name not in (".", "..")


def valid_worker_id(name: object) -> bool:
    return isinstance(name, str) and bool(_WORKER_RE.match(name))


@dataclass(frozen=True)
class Paths:
    """Absolute node paths under one pipeline root."""

    root: str

    @property
    def election(self) -> str:
        return f"{self.root}/election"

    @property
    def topics(self) -> str:
        return f"{self.root}/topics"

    @property
    def workers(self) -> str:
        return f"{self.root}/workers"

    @property
    def assignments(self) -> str:
        return f"{self.root}/assignments"

    @property
    def status(self) -> str:
        return f"{self.root}/status"

    @property
    def blacklist_topics(self) -> str:
        return f"{self.root}/blacklist/topics"

    @property
    def blacklist_workers(self) -> str:
        return f"{self.root}/blacklist/workers"

    @property
    def blacklist_partitions(self) -> str:
        return f"{self.root}/blacklist/partitions"

    @property
    def admin(self) -> str:
        return f"{self.root}/admin"

    @property
    def autobalancing(self) -> str:
        return f"{self.admin}/autobalancing"

    @property
    def rate_limit(self) -> str:
        return f"{self.admin}/rate_limit"

    @property
    def rebalance_request(self) -> str:
        return f"{self.admin}/rebalance"

    @property
    def routes(self) -> str:
        """The route registry (meaningful under the pipeline root)."""
        return f"{self.root}/routes"

    def route(self, route_id: str) -> str:
        return f"{self.routes}/{route_id}"

    @property
    def pool_workers(self) -> str:
        """The shared pool's members (meaningful under the pipeline root)."""
        return f"{self.root}/pool/workers"

    def pool_worker(self, worker_id: str) -> str:
        return f"{self.pool_workers}/{worker_id}"

    @property
    def pool_bindings(self) -> str:
        return f"{self.root}/pool/bindings"

    def pool_binding(self, worker_id: str) -> str:
        return f"{self.pool_bindings}/{worker_id}"

    def blacklisted_worker(self, worker_id: str) -> str:
        return f"{self.blacklist_workers}/{worker_id}"

    def blacklisted_partition(self, topic: str, partition: int) -> str:
        return f"{self.blacklist_partitions}/{topic}:{partition}"

    def topic(self, name: str) -> str:
        return f"{self.topics}/{name}"

    def worker(self, worker_id: str) -> str:
        return f"{self.workers}/{worker_id}"

    def assignment(self, worker_id: str) -> str:
        return f"{self.assignments}/{worker_id}"

    def worker_status(self, worker_id: str) -> str:
        return f"{self.status}/{worker_id}"

    def blacklisted_topic(self, name: str) -> str:
        return f"{self.blacklist_topics}/{name}"

    def all_parents(self) -> list[str]:
        return [
            self.topics, self.workers, self.assignments, self.status, self.admin,
            self.blacklist_topics, self.blacklist_workers, self.blacklist_partitions,
        ]


State = Literal["active", "paused"]
NonNegative = Annotated[int, Field(ge=0)]


@dataclass(frozen=True)
class TopicRecord:
    """A mirrored topic as desired by the operator."""

    topic: str
    destination: str
    partitions: int
    state: State = "active"
    added_at: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _TOPIC.dump_json(self)

    @classmethod
    def decode(cls, data: bytes) -> TopicRecord:
        return _decode(_TOPIC, data, "topic record")


@dataclass(frozen=True)
class RouteRecord:
    """A route in the registry: its definition (``common.config.RouteConfig.definition``) and run state."""

    definition: dict[str, Any]
    state: State = "active"
    declared_in: str = "api"  # config | api: where it was declared first
    created_at: str = ""

    @property
    def id(self) -> str:
        return str(self.definition.get("id", ""))

    def encode(self) -> bytes:
        return _ROUTE.dump_json(self)

    @classmethod
    def decode(cls, data: bytes) -> RouteRecord:
        return _decode(_ROUTE, data, "route record")


@dataclass(frozen=True)
class PoolBinding:
    """The route a shared-pool worker serves (None: none yet), written by the leader once it is drained."""

    route: str | None = None
    bound_at: str = ""

    def encode(self) -> bytes:
        return _BINDING.dump_json(self)

    @classmethod
    def decode(cls, data: bytes) -> PoolBinding:
        return _decode(_BINDING, data, "pool binding")


# The data of a ``blacklist/workers/<id>`` entry the pool wrote to drain a worker it moves
# (an operator's entries have none, and the pool never removes those).
POOL_DRAIN = b"pool"


@dataclass(frozen=True)
class _AssignmentDoc:
    """The JSON of an :class:`Assignment`: partitions grouped by topic."""

    generation: int
    partitions: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Assignment:
    """What the leader asks one worker to own, stamped with a generation."""

    generation: int
    partitions: frozenset[TopicPartition] = frozenset()

    def encode(self) -> bytes:
        return _ASSIGNMENT.dump_json(_AssignmentDoc(self.generation, group_by_topic(self.partitions)))

    @classmethod
    def decode(cls, data: bytes) -> Assignment:
        doc = _decode(_ASSIGNMENT, data, "assignment")
        return cls(doc.generation, ungroup(doc.partitions))


@dataclass(frozen=True)
class WorkerInfo:
    """Registration of a live worker (ephemeral)."""

    host: str
    pid: int
    version: str
    started_at: str
    metrics_port: int = 0
    # The copy loop it runs: "native" (worker/_native.c) or "python", and why not the C loop
    # ("" from a worker older than these fields, or a pool worker not yet bound to a route).
    loop: str = ""
    loop_reason: str = ""

    def encode(self) -> bytes:
        return _WORKER.dump_json(self)

    @classmethod
    def decode(cls, data: bytes) -> WorkerInfo:
        return _decode(_WORKER, data, "worker registration")


@dataclass(frozen=True)
class PartitionStatus:
    """One owned partition as the worker sees it."""

    __pydantic_config__ = ConfigDict(ser_json_inf_nan="constants")  # as json.dumps wrote them (a rate may be inf)
    committed: int = -1  # next source offset to mirror, as last committed
    records_per_s: float = 0.0
    bytes_per_s: float = 0.0
    lag: int = -1
    error: str | None = None
    last_progress_at: float = 0.0  # epoch seconds when the position last moved (or lag was 0)


@dataclass(frozen=True)
class RateLimit:
    """Per-worker throughput ceiling; 0 means unlimited."""

    records_per_s: NonNegative = 0
    bytes_per_s: NonNegative = 0

    def encode(self) -> bytes:
        return _RATE.dump_json(self)

    @classmethod
    def decode(cls, data: bytes) -> RateLimit:
        return _decode(_RATE, data, "rate limit")


@dataclass(frozen=True)
class _StatusDoc:
    """The JSON of a :class:`WorkerStatus`: partitions by topic, then by partition number."""

    generation: int
    updated_at: str = ""
    partitions: dict[str, dict[int, PartitionStatus]] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerStatus:
    """What a worker has applied: the generation and the partitions it currently owns."""

    generation: int
    partitions: dict[TopicPartition, PartitionStatus] = field(default_factory=dict)
    updated_at: str = ""

    @property
    def owned(self) -> frozenset[TopicPartition]:
        return frozenset(self.partitions)

    def encode(self) -> bytes:
        per: dict[str, dict[int, PartitionStatus]] = {}
        for (topic, partition), st in sorted(self.partitions.items()):
            per.setdefault(topic, {})[partition] = st
        return _STATUS.dump_json(_StatusDoc(self.generation, self.updated_at, per))

    @classmethod
    def decode(cls, data: bytes) -> WorkerStatus:
        doc = _decode(_STATUS, data, "worker status")
        parts = {(topic, p): st for topic, by_partition in doc.partitions.items() for p, st in by_partition.items()}
        return cls(doc.generation, parts, doc.updated_at)


def group_by_topic(partitions: frozenset[TopicPartition] | set[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return grouped


def ungroup(grouped: dict[str, list[int]]) -> frozenset[TopicPartition]:
    return frozenset((str(topic), int(p)) for topic, ps in grouped.items() for p in ps)


_TOPIC = TypeAdapter(TopicRecord)
_ROUTE = TypeAdapter(RouteRecord)
_BINDING = TypeAdapter(PoolBinding)
_ASSIGNMENT = TypeAdapter(_AssignmentDoc)
_WORKER = TypeAdapter(WorkerInfo)
_RATE = TypeAdapter(RateLimit)
_STATUS = TypeAdapter(_StatusDoc)


def _decode(adapter: TypeAdapter[_T], data: bytes | None, what: str) -> _T:
    """``data`` as the document ``adapter`` describes; SchemaError names the first problem."""
    try:
        return adapter.validate_json(data or b"")
    except ValidationError as exc:
        raise SchemaError(f"{what} {_problem(exc)}") from None


def _problem(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    kind = error["type"]
    if kind in ("json_invalid", "json_type"):
        return "is not JSON"
    if not where and kind.endswith("_type"):
        return "is not a JSON object"
    if kind == "literal_error":
        return f"has unknown {where} {error['input']!r}"
    if kind == "greater_than_equal":
        return f"{where} must not be negative"
    if kind == "missing":
        return f"lacks {where!r}"
    return f"mistypes {where!r}: {error['msg']}"
