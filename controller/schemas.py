"""The admin REST API's bodies as pydantic models: requests are validated with them, the OpenAPI schemas generated.

Requests (``TopicRequest``, ``TopicExpand``, ``TopicOptions``, ``BlacklistRequest``, ``RateLimitRequest``,
``GroupSyncRequest``) are parsed by :func:`parse`, which raises :class:`BodyError` with the message the API has always
given (400). Responses are described by the other models; the ZooKeeper documents an endpoint
returns as they are (``TopicRecord``, ``PartitionStatus``, ``RateLimit``) are the
``common.zkschema`` dataclasses themselves. ``controller.openapi`` turns all of them into
``components/schemas``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    StrictBool,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from ureplicator.common.zkschema import PartitionStatus, RateLimit, TopicRecord, valid_topic_name

_M = TypeVar("_M", bound=BaseModel)

# --- request bodies ------------------------------------------------------------------------


class BodyError(ValueError):
    """A request body that does not validate; the message is the API's 400 message."""


def _bad(message: str) -> PydanticCustomError:
    return PydanticCustomError("bad_body", message)


def topic_name_problem(value: Any, what: str = "topic") -> str | None:
    """Why ``value`` is not a Kafka topic name (the API's 400 message), or None when it is one."""
    if valid_topic_name(value):
        return None
    return f"{what} must be a Kafka topic name (1-249 of [a-zA-Z0-9._-]), got {value!r}"


def _topic_name(value: Any, what: str) -> str:
    problem = topic_name_problem(value, what)
    if problem:
        raise _bad(problem)
    return str(value)


def _digits(value: Any) -> Any:
    """uReplicator's scripts send numbers as numbers or numeric strings."""
    return int(value.strip()) if isinstance(value, str) and value.strip().isdigit() else value


def _count(value: Any, what: str, low: int, high: int | None) -> int:
    number = _digits(value)
    if isinstance(number, bool) or not isinstance(number, int) or number < low or (high and number > high):
        kind = "a positive integer" if low > 0 else "a non-negative integer"
        raise _bad(f"{what} must be {kind}, got {value!r}")
    return number


_DIGITS = {"type": "string", "pattern": "^[0-9]+$"}
TopicName = Annotated[str, BeforeValidator(lambda v: _topic_name(v, "topic"))]
DestinationName = Annotated[str, BeforeValidator(lambda v: _topic_name(v, "destination"))]
PartitionCount = Annotated[int, BeforeValidator(lambda v: _count(v, "numPartitions", 1, 1_000_000)),
                           WithJsonSchema({"oneOf": [{"type": "integer", "minimum": 1, "maximum": 1_000_000},
                                                     _DIGITS]})]


def _non_negative(what: str) -> Any:
    return Annotated[int, BeforeValidator(lambda v: _count(v, what, 0, None)),
                     WithJsonSchema({"oneOf": [{"type": "integer", "minimum": 0}, _DIGITS]})]


def _op(value: Any) -> Any:
    if value not in ("blacklist", "whitelist"):
        raise _bad("op must be 'blacklist' or 'whitelist'")
    return value


def _required(model: type[BaseModel], names: tuple[str, ...]) -> None:
    """A key validated even when missing (so its message says "got None") is still required in the schema."""
    model.model_config["json_schema_extra"] = {"required": list(names)}


class TopicRequest(BaseModel):
    """``POST /topics`` (start mirroring): ``{"topic": "t", "numPartitions": 8, "destination": "t2"}``."""

    model_config = ConfigDict(extra="ignore")  # uReplicator's scripts send more keys

    topic: TopicName = Field(default=None, validate_default=True)
    destination: DestinationName | None = None
    numPartitions: PartitionCount | None = None  # noqa: N815 - uReplicator's name


class TopicExpand(BaseModel):
    """``PUT /topics`` (expand to the source's partition count): ``{"topic": "t", "numPartitions": 16}``."""

    model_config = ConfigDict(extra="ignore")

    topic: TopicName = Field(default=None, validate_default=True)
    numPartitions: PartitionCount | None = None  # noqa: N815


class TopicOptions(BaseModel):
    """``POST /topics/{topic}`` (optional body): the destination topic's name, partitions to expect."""

    model_config = ConfigDict(extra="ignore")

    destination: DestinationName | None = None
    numPartitions: PartitionCount | None = None  # noqa: N815


class BlacklistRequest(BaseModel):
    """``POST /blacklist``: ``{"op": "blacklist" | "whitelist", "topic": t, "partition": p?}`` (or as the query)."""

    model_config = ConfigDict(extra="ignore")

    op: Annotated[Literal["blacklist", "whitelist"], BeforeValidator(_op)] = Field(default=None, validate_default=True)
    topic: TopicName = Field(default=None, validate_default=True)
    partition: _non_negative("partition") | None = None  # type: ignore[valid-type]


class RateLimitRequest(BaseModel):
    """``POST /admin/rate_limit``: the per-worker ceiling (``common.zkschema.RateLimit``), 0 = unlimited."""

    model_config = ConfigDict(extra="forbid")

    records_per_s: _non_negative("records_per_s") = 0  # type: ignore[valid-type]
    bytes_per_s: _non_negative("bytes_per_s") = 0  # type: ignore[valid-type]

    def limit(self) -> RateLimit:
        return RateLimit(self.records_per_s, self.bytes_per_s)


for _model, _names in ((TopicRequest, ("topic",)), (TopicExpand, ("topic",)), (BlacklistRequest, ("op", "topic"))):
    _required(_model, _names)
    _model.model_rebuild(force=True)


def parse(model: type[_M], body: dict[str, Any]) -> _M:
    """``body`` as ``model``; BodyError with the first problem (all unknown keys, when the model forbids them)."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
        if unknown:
            raise BodyError(f"unknown {_WHAT.get(model.__name__, 'body')} keys: {', '.join(unknown)}") from None
        raise BodyError(errors[0]["msg"]) from None


_WHAT = {"RateLimitRequest": "rate limit"}


# --- responses -----------------------------------------------------------------------------


class _Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(_Response):
    code: int
    message: str


class Error(_Response):
    """Every 4xx and 5xx answer."""

    error: ErrorDetail


DestinationTopic = Literal["created", "grown", "exists"]


@dataclass(frozen=True, kw_only=True)
class TopicAdded(TopicRecord):
    """The registered topic, and what happened to its destination topic."""

    destination_topic: DestinationTopic


class TopicList(_Response):
    topics: list[TopicRecord]


class PartitionOwner(_Response):
    partition: int
    worker: str | None
    applied_by: str | None
    status: PartitionStatus | None


@dataclass(frozen=True, kw_only=True)
class TopicDetail(TopicRecord):
    """A topic with each partition's assigned owner and the worker that reports it."""

    assignment: list[PartitionOwner]


class Removed(_Response):
    topic: str
    removed: bool


class Health(_Response):
    status: Literal["ok", "unavailable", "credentials refused"]
    zookeeper: str
    leader: str | None
    is_leader: bool
    generation: int
    auth_failures: dict[str, str]


class Liveness(_Response):
    status: str
    election_thread: bool


class Instance(_Response):
    worker: str
    live: bool
    blacklisted: bool
    assigned: int
    applied: int
    generation: int | None
    bytes_per_s: float
    records_per_s: float


class Instances(_Response):
    instances: list[Instance]


class RebalanceRequested(_Response):
    rebalance: Literal["requested"]


class WorkerBlacklist(_Response):
    worker: str
    blacklisted: bool


class WorkerValidation(_Response):
    worker: str
    desired_generation: int | None
    applied_generation: int | None
    missing: list[str]
    extra: list[str]
    ok: bool


class Validation(_Response):
    ok: bool
    mismatched_workers: int
    withheld: list[str] | None
    workers: list[WorkerValidation]


class OffsetRow(_Response):
    topic: str
    partition: int
    committed: int | None
    log_start: int
    end: int
    lag: int


class Offsets(_Response):
    group: str
    offsets: list[OffsetRow]
    total_lag: int


class Offset(OffsetRow):
    group: str


class Stalled(_Response):
    topic: str
    partition: int
    worker: str
    lag: int
    error: str | None
    stalled_for_s: float | None


class TopicPartitionRef(_Response):
    topic: str
    partition: int


class NoProgress(_Response):
    threshold_s: float
    stalled: list[Stalled]
    unowned: list[TopicPartitionRef]


class Blacklist(_Response):
    topics: list[str]
    partitions: list[TopicPartitionRef]
    workers: list[str]


class BlacklistChange(_Response):
    topic: str
    partition: int | None
    blacklisted: bool


class Autobalancing(_Response):
    autobalancing: bool


class WorkerLoad(_Response):
    bytes_per_s: float
    records_per_s: float
    partitions: int
    lag: int


class Workload(_Response):
    workers: dict[str, WorkerLoad]


class AdminResult(RootModel[Autobalancing | RateLimit | Workload]):
    """``/admin/{op}``: auto-balancing, the rate limit or the workload, by operation."""


class ClusterRef(_Response):
    alias: str
    bootstrap_servers: str


class ClusterList(_Response):
    clusters: list[ClusterRef]


# --- consumer-group failover (controller/groups_api.py, docs/failover.md) ---

NonNegativeInt = Annotated[int, Field(ge=0)]


class GroupRow(_Response):
    group: str
    state: str
    mirrored_partitions: NonNegativeInt


class GroupList(_Response):
    groups: list[GroupRow]


class GroupPartition(_Response):
    topic: str
    partition: NonNegativeInt
    destination_topic: str
    source_committed: NonNegativeInt
    destination_offset: NonNegativeInt
    destination_end: NonNegativeInt
    mirrored_through: NonNegativeInt
    source_end: int | None
    state: Literal["behind", "at", "ahead"]
    ahead_by: NonNegativeInt
    destination_lag: NonNegativeInt
    unmirrored: tuple[NonNegativeInt, NonNegativeInt] | None
    unmirrored_records: NonNegativeInt


class TranslationSummary(_Response):
    partitions: NonNegativeInt
    behind: NonNegativeInt
    at: NonNegativeInt
    ahead: NonNegativeInt
    ahead_by: NonNegativeInt
    unmirrored_records: NonNegativeInt


class GroupTranslation(_Response):
    group: str
    partitions: list[GroupPartition]
    summary: TranslationSummary


class GroupCommit(_Response):
    topic: str
    partition: NonNegativeInt
    offset: NonNegativeInt


class GroupKept(_Response):
    topic: str
    partition: NonNegativeInt
    reason: str


class GroupSync(_Response):
    group: str
    refused: str | None
    committed: list[GroupCommit]
    kept: list[GroupKept]
    ahead: list[GroupPartition]


class GroupSyncRequest(_Response):
    """``POST /groups/{group}/sync``: ``{"force": true}`` allows moving a destination group backwards."""

    force: StrictBool = False  # "true" or 1 is refused, not taken for true


# --- routes (controller/routes_api.py, docs/routes.md) ---

TopicNaming = Literal["identity", "prefix", "mapping"]
Forward = Literal["origin", "transit"]


class RouteWorkers(_Response):
    min: NonNegativeInt = 1
    max: NonNegativeInt = 0


class RouteChange(_Response):
    """``PATCH /routes/{route}``: id and clusters are immutable."""

    topic_naming: TopicNaming = "identity"
    topic_mapping: dict[str, str] = {}
    forward: Forward = "origin"
    workers: RouteWorkers = RouteWorkers()
    shared: bool = False


class RouteRequest(RouteChange):
    """``POST /routes``: a route (``common.config.RouteConfig``)."""

    id: str
    source: str
    destination: str


class RouteFields(_Response):
    id: str
    source: str
    destination: str
    topic_naming: TopicNaming
    topic_mapping: dict[str, str]
    forward: Forward
    workers: RouteWorkers
    shared: bool


class Route(RouteFields):
    """A route with its run state."""

    state: Literal["running", "paused", "waiting_for_workers"]
    live_workers: NonNegativeInt
    topics: NonNegativeInt
    declared_in: Literal["config", "api"]
    zookeeper_root: str
    consumer_group: str
    created_at: str


class RouteList(_Response):
    routes: list[Route]


class RouteDeleted(_Response):
    route: str
    deleted: bool


class VerificationRuns(_Response):
    runs: list[dict[str, Any]]


# --- the operator's view (controller/status_api.py) ---


class RouteStatus(_Response):
    """One route's own section of ``GET /status`` (controller/status_api.evaluate_routes)."""

    healthy: bool
    problems: list[str]
    warnings: list[str] = []
    withheld: list[str] | None = None
    unowned: list[str] = []
    stuck: list[str] = []
    group_sync: dict[str, Any] | None = None
    verification: dict[str, Any] | None = None


def _inline(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema without its title, for a document that must hold no reference."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


class Status(_Response):
    """``GET /status``: one self-contained schema (the tests validate against it alone)."""

    pipeline: str
    generated_at: str
    healthy: bool
    problems: list[str]
    # Healthy but worth a look (a worker on the Python copy loop): not counted in ``healthy``.
    warnings: list[str]
    zookeeper: str
    leader: str | None
    workers: list[dict[str, Any]]
    partitions: list[dict[str, Any]]
    withheld: list[str] | None
    unowned: list[str]
    stuck: list[str]
    freshness: dict[str, Any] | None
    group_sync: dict[str, Any] | None
    verification: dict[str, Any] | None
    verification_configured: bool
    auth_failures: dict[str, str]
    # Every route's own section, by route id; inlined, so the operator's view stays one schema.
    routes: dict[str, Annotated[dict[str, Any], WithJsonSchema(_inline(RouteStatus))]]


# Everything the document names under components/schemas, in the order it lists them.
RESPONSES: tuple[Any, ...] = (
    Error, TopicRecord, TopicAdded, TopicList, TopicDetail, Removed, Health, Liveness, Instances,
    RebalanceRequested, WorkerBlacklist, Validation, OffsetRow, Offsets, Offset, NoProgress, Blacklist,
    BlacklistChange, Autobalancing, RateLimit, Workload, AdminResult, GroupList, GroupTranslation, GroupSync,
    ClusterList, Route, RouteList, RouteDeleted, VerificationRuns, Status,
)
REQUESTS: tuple[Any, ...] = (TopicRequest, TopicExpand, TopicOptions, BlacklistRequest, RateLimitRequest,
                             GroupSyncRequest, RouteRequest, RouteChange)
