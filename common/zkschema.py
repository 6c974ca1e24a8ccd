"""ZooKeeper layout of a pipeline: node paths and the JSON documents stored at them.

Pure: no ZooKeeper client here, so the controller, the worker and the tests
agree on one encoding. Layout (root ``<zookeeper.root>/<pipeline>``)::

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

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

# Kafka's own rule for topic names (kafka.common.internals.Topic).
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_WORKER_RE = re.compile(r"^[a-zA-Z0-9._:-]{1,200}$")

TopicPartition = tuple[str, int]


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


@dataclass(frozen=True)
class TopicRecord:
    """A mirrored topic as desired by the operator."""

    topic: str
    destination: str
    partitions: int
    state: str = "active"  # active | paused
    added_at: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _dump(asdict(self))

    @classmethod
    def decode(cls, data: bytes) -> TopicRecord:
        doc = _load(data, "topic record")
        try:
            record = cls(
                topic=str(doc["topic"]),
                destination=str(doc["destination"]),
                partitions=int(doc["partitions"]),
                state=str(doc.get("state", "active")),
                added_at=str(doc.get("added_at", "")),
                options=dict(doc.get("options") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"topic record lacks or mistypes {exc}") from None
        if record.state not in ("active", "paused"):
            raise SchemaError(f"topic record has unknown state {record.state!r}")
        return record


@dataclass(frozen=True)
class RouteRecord:
    """A route in the registry: its definition (``common.config.RouteConfig.definition``) and run state."""

    definition: dict[str, Any]
    state: str = "active"  # active | paused
    declared_in: str = "api"  # config | api: where it was declared first
    created_at: str = ""

    @property
    def id(self) -> str:
        return str(self.definition.get("id", ""))

    def encode(self) -> bytes:
        return _dump(asdict(self))

    @classmethod
    def decode(cls, data: bytes) -> RouteRecord:
        doc = _load(data, "route record")
        try:
            record = cls(
                definition=dict(doc["definition"]),
                state=str(doc.get("state", "active")),
                declared_in=str(doc.get("declared_in", "api")),
                created_at=str(doc.get("created_at", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"route record lacks or mistypes {exc}") from None
        if record.state not in ("active", "paused"):
            raise SchemaError(f"route record has unknown state {record.state!r}")
        return record


@dataclass(frozen=True)
class PoolBinding:
    """The route a shared-pool worker serves (None: none yet), written by the leader once it is drained."""

    route: str | None = None
    bound_at: str = ""

    def encode(self) -> bytes:
        return _dump(asdict(self))

    @classmethod
    def decode(cls, data: bytes) -> PoolBinding:
        doc = _load(data, "pool binding")
        route = doc.get("route")
        if route is not None and not isinstance(route, str):
            raise SchemaError("pool binding route must be a string or null")
        return cls(route=route, bound_at=str(doc.get("bound_at", "")))


# The data of a ``blacklist/workers/<id>`` entry the pool wrote to drain a worker it moves
# (an operator's entries have none, and the pool never removes those).
POOL_DRAIN = b"pool"


@dataclass(frozen=True)
class Assignment:
    """What the leader asks one worker to own, stamped with a generation."""

    generation: int
    partitions: frozenset[TopicPartition] = frozenset()

    def encode(self) -> bytes:
        return _dump({"generation": self.generation, "partitions": group_by_topic(self.partitions)})

    @classmethod
    def decode(cls, data: bytes) -> Assignment:
        doc = _load(data, "assignment")
        try:
            return cls(int(doc["generation"]), ungroup(doc.get("partitions") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"assignment lacks or mistypes {exc}") from None


@dataclass(frozen=True)
class WorkerInfo:
    """Registration of a live worker (ephemeral)."""

    host: str
    pid: int
    version: str
    started_at: str
    metrics_port: int = 0

    def encode(self) -> bytes:
        return _dump(asdict(self))

    @classmethod
    def decode(cls, data: bytes) -> WorkerInfo:
        doc = _load(data, "worker registration")
        try:
            return cls(
                host=str(doc["host"]),
                pid=int(doc["pid"]),
                version=str(doc["version"]),
                started_at=str(doc["started_at"]),
                metrics_port=int(doc.get("metrics_port", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"worker registration lacks or mistypes {exc}") from None


@dataclass(frozen=True)
class PartitionStatus:
    """One owned partition as the worker sees it."""

    committed: int = -1  # next source offset to mirror, as last committed
    records_per_s: float = 0.0
    bytes_per_s: float = 0.0
    lag: int = -1
    error: str | None = None
    last_progress_at: float = 0.0  # epoch seconds when the position last moved (or lag was 0)


@dataclass(frozen=True)
class RateLimit:
    """Per-worker throughput ceiling; 0 means unlimited."""

    records_per_s: int = 0
    bytes_per_s: int = 0

    def encode(self) -> bytes:
        return _dump(asdict(self))

    @classmethod
    def decode(cls, data: bytes) -> RateLimit:
        doc = _load(data, "rate limit")
        try:
            limit = cls(int(doc.get("records_per_s", 0)), int(doc.get("bytes_per_s", 0)))
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"rate limit mistypes {exc}") from None
        if limit.records_per_s < 0 or limit.bytes_per_s < 0:
            raise SchemaError("rate limit values must not be negative")
        return limit


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
        per: dict[str, dict[str, Any]] = {}
        for (topic, partition), st in sorted(self.partitions.items()):
            per.setdefault(topic, {})[str(partition)] = asdict(st)
        return _dump({"generation": self.generation, "updated_at": self.updated_at, "partitions": per})

    @classmethod
    def decode(cls, data: bytes) -> WorkerStatus:
        doc = _load(data, "worker status")
        try:
            parts: dict[TopicPartition, PartitionStatus] = {}
            for topic, by_partition in (doc.get("partitions") or {}).items():
                for partition, st in by_partition.items():
                    parts[(topic, int(partition))] = PartitionStatus(**st)
            return cls(int(doc["generation"]), parts, str(doc.get("updated_at", "")))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SchemaError(f"worker status lacks or mistypes {exc}") from None


def group_by_topic(partitions: frozenset[TopicPartition] | set[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return grouped


def ungroup(grouped: dict[str, list[int]]) -> frozenset[TopicPartition]:
    return frozenset((str(topic), int(p)) for topic, ps in grouped.items() for p in ps)


def _dump(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _load(data: bytes | None, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError):
        raise SchemaError(f"{what} is not JSON") from None
    if not isinstance(doc, dict):
        raise SchemaError(f"{what} is not a JSON object")
    return doc
