"""Load and validate the one frozen configuration of a controller or worker process.

A config file is YAML; every key can be overridden by an environment variable
named ``UREPLICATOR_`` + the dotted key upper-cased with dots as underscores
(``worker.commit_interval_s`` -> ``UREPLICATOR_WORKER_COMMIT_INTERVAL_S``).
Client properties are maps: ``UREPLICATOR_SOURCE_PROPERTIES_SASL_PASSWORD``
sets ``source.properties["sasl.password"]`` (underscores become dots), and
``UREPLICATOR_CLUSTERS_<ALIAS>_PROPERTIES_SASL_PASSWORD`` the same in
``clusters.<alias>.properties`` (the alias upper-cased, ``-`` as ``_``).

A deployment declares its ``clusters`` and ``routes`` (docs/routes.md); a config
without ``routes`` is one implicit route from ``source`` to ``destination`` with
today's ZooKeeper paths and consumer group. :func:`route_view` gives the
single-route ``Config`` one worker serves.

Each section is one frozen dataclass below, and its annotations are the one description of
its keys: pydantic validates a section against them (strict types, unknown keys refused) and
:func:`_problem` words the first failure as this module always has; the environment overlay
(:func:`_apply_env`) derives its variable names from the same fields.

Any problem raises :class:`common.errors.ConfigError` naming the key, so the
process can stop with one message and exit status 2. ``docs/configuration.md``
documents each key.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from ureplicator.common import topology
from ureplicator.common.errors import ConfigError

ENV_PREFIX = "UREPLICATOR_"

# Property names whose values are secrets: never logged, never echoed by the API.
_SECRET_MARKERS = ("password", "secret", "token", "key.pem", "keystore", "sasl.jaas", "oauthbearer.config")
# Keys that hold a secret although their name does not say so.
_SECRET_KEYS = frozenset({"auth"})
REDACTED = "***"

_PIPELINE_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_ALIAS_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

# Client properties a cluster's ``properties`` may not set (issue 44): each would override what a
# guarantee rests on, for every client of that cluster. Name -> (the one value allowed, if any; why
# and what to set instead). The producer's and consumers' pinned invariants are in common.kafka.
_REFUSED_PROPERTIES: dict[str, tuple[str | None, str]] = {
    "transactional.id": (None, "one id shared by the worker's producers (and the controller's fence) would "
                               "fence them against each other; exactly-once mode names one per route and worker: "
                               "set worker.exactly_once, and worker.transactional_id_prefix for its prefix"),
    "auto.offset.reset": (None, "it would override where a partition with no committed offset starts: "
                                "set worker.auto_offset_reset instead"),
    "isolation.level": ("read_committed", "read_uncommitted would mirror records of aborted or still open source "
                                          "transactions, and read exactly-once offsets before they commit; the "
                                          "worker reads read_committed, so remove it"),
}


# --- the value types of the sections below: pydantic validates a section against its dataclass's
# annotations (``_build``), and ``_problem`` words a failure as the message this module has always
# given. Strict: YAML already typed the value, so "5" is not a number and 1 is not true.

def _optional_text(value: Any) -> Any:
    """A string, or a number written without quotes (an id or token that looks numeric), or nothing."""
    if value is None or (isinstance(value, str | int) and not isinstance(value, bool)):
        return None if value is None else str(value)
    raise PydanticCustomError("optional_text", "expected a string")


def _properties(value: Any) -> Any:
    """Client properties: a mapping of names to scalars, kept as librdkafka's strings (true -> "true")."""
    if not isinstance(value, Mapping):
        raise PydanticCustomError("mapping_type", "expected a mapping")
    props: dict[str, str] = {}
    for k, v in value.items():
        if isinstance(v, dict | list) or v is None:
            raise PydanticCustomError("scalar_value", "expected a scalar value", {"name": str(k), "value": v})
        props[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    return props


def _number(value: Any) -> Any:
    """An integer or a float (kept as float), never a bool or a quoted number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    raise PydanticCustomError("number_type", "expected a number")


Text = Annotated[StrictStr, Field(min_length=1)]
OptionalText = Annotated[str | None, BeforeValidator(_optional_text)]
Flag = StrictBool
Integer = StrictInt
Number = Annotated[float, BeforeValidator(_number)]
Properties = Annotated[Mapping[str, str], BeforeValidator(_properties)]
_SECTION = ConfigDict(extra="forbid")



@dataclass(frozen=True)
class ZooKeeperConfig:
    __pydantic_config__ = _SECTION
    connect: Text
    root: Text = "/ureplicator"
    session_timeout_s: Number = 10.0
    # "user:password": digest authentication, and digest ACLs on the pipeline's nodes (docs/security.md).
    auth: OptionalText = None
    # --- TLS to ZooKeeper's secureClientPort (docs/security.md). tls_ca: PEM bundle to trust;
    # tls_certfile/tls_keyfile: a client certificate, when ZooKeeper asks for one (mutual TLS).
    tls: Flag = False
    tls_ca: OptionalText = None
    tls_certfile: OptionalText = None
    tls_keyfile: OptionalText = None


@dataclass(frozen=True)
class ClusterConfig:
    __pydantic_config__ = _SECTION
    alias: Text
    bootstrap_servers: Text
    properties: Properties = field(default_factory=dict)

    def client_config(self) -> dict[str, str]:
        """librdkafka settings for a client of this cluster (user properties win)."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.properties}


@dataclass(frozen=True)
class GroupSyncConfig:
    """``controller.group_sync``: copy translated consumer-group offsets to the destination (docs/failover.md)."""

    __pydantic_config__ = _SECTION
    enabled: Flag = False
    interval_s: Number = 60.0
    include: OptionalText = None
    exclude: OptionalText = None
    timeout_s: Number = 10.0  # a translation or sync round's wait for each cluster call


@dataclass(frozen=True)
class ControllerConfig:
    __pydantic_config__ = _SECTION
    rest_host: Text = "0.0.0.0"
    rest_port: Integer = 9000
    request_timeout_s: Number = 30.0  # the REST server closes connections idle or stalled this long
    admin_token: OptionalText = None
    # Serve mutating REST calls without a token on a non-loopback address (see check_rest_exposure).
    allow_anonymous: Flag = False
    reconcile_interval_s: Number = 5.0
    topic_naming: Text = "identity"  # identity | prefix | mapping
    topic_mapping: Properties = field(default_factory=dict)
    topic_sync_interval_s: Number = 30.0
    auto_whitelist_include: OptionalText = None
    auto_whitelist_exclude: OptionalText = None
    max_partitions_per_worker: Integer = 0
    rebalance_interval_s: Number = 300.0
    worker_restart_grace_s: Number = 0.0
    lag_threshold_records: Integer = 100_000
    lag_rounds: Integer = 3
    noprogress_threshold_s: Number = 60.0
    verification_dir: OptionalText = None
    group_sync: GroupSyncConfig = field(default_factory=GroupSyncConfig)
    # --- TLS for the REST API (docs/security.md): PEM certificate chain and private key. With both
    # set the API answers HTTPS only, and a bearer token sent over plain HTTP is refused.
    rest_tls_certfile: OptionalText = None
    rest_tls_keyfile: OptionalText = None
    # --- freshness (controller/heartbeat.py): the leader writes a record to heartbeat_topic on the
    # source every heartbeat_interval_s (0 = off); workers mirror it like any record, and the age of
    # the newest one on the destination is the pipeline's freshness. Above rpo_s it needs a person.
    heartbeat_interval_s: Number = 5.0
    heartbeat_topic: OptionalText = None  # default ureplicator-heartbeats-<pipeline>: one per pipeline
    rpo_s: Number = 300.0
    # --- destination topics the controller creates: replication factor and min.insync.replicas;
    # 0 = the source topic's, either way capped by the destination's broker count.
    destination_replication_factor: Integer = 0
    destination_min_insync_replicas: Integer = 0
    # --- the shared worker pool (controller/pool.py): bound workers moved to another route per round
    # at most, and how much more work per worker the receiving route must have (0.5: 1.5x the donor's).
    pool_max_moves: Integer = 1
    pool_hysteresis: Number = 0.5
    # --- rollouts (issue 48): at most this many partitions are on their way from one live worker to
    # another at once (0 = no cap); the rest wait for later rounds, so a rollout is no hand-off storm.
    max_moves_per_round: Integer = 100
    # Workers joining a route where nobody holds partitions (or several at once, or at a term's start)
    # wait until none joined for this long, at most 5x it: a rollout's first worker is not written all.
    initial_assignment_delay_s: Number = 3.0


@dataclass(frozen=True)
class WorkerConfig:
    __pydantic_config__ = _SECTION
    id: Text = ""
    # The route this worker serves (``routes[].id``); empty: the deployment's only route.
    route: Text = ""
    # Join the deployment's shared pool instead: serve the route the leader binds it to (docs/routes.md).
    pool: Flag = False
    metrics_host: Text = "0.0.0.0"
    metrics_port: Integer = 0
    health_stall_s: Number = 120.0  # /healthz fails when the loop has not turned for this long
    commit_interval_s: Number = 5.0
    # A committed position that did not move is committed again this often: the broker expires
    # a group's offsets offsets.retention.minutes (7 days by default) after their last commit.
    offset_recommit_s: Number = 86400.0
    auto_offset_reset: Text = "earliest"
    max_in_flight_bytes: Integer = 64 * 1024 * 1024
    batch_size: Integer = 1000
    # How long one consume call waits to fill a batch: librdkafka returns early only when the
    # batch is full, so at low rates this wait is added to every record's latency.
    fetch_wait_ms: Integer = 50
    # --- how long the worker waits, one setting per wait (worker/mirror.py, worker/handoff.py) ---
    # SIGTERM: stop fetching, wait this long for the destination's acks and the final commit.
    stop_timeout_s: Number = 30.0
    # A released partition's records still unacknowledged after this long are purged (the
    # producer is replaced, the other partitions rewound), so none lands behind the next owner's.
    release_ack_timeout_s: Number = 30.0
    # A released partition's commit is retried this long; then the release goes on (duplicates).
    release_commit_timeout_s: Number = 30.0
    # A producer that holds records yet acknowledged none this long is purged and replaced.
    producer_stall_s: Number = 30.0
    # A source partition whose end offset grew while the consumer's position stayed put this long
    # gets a new source consumer (worker/fetchwatch.py, librdkafka #5153); 0: no watch. 10 s, not 30:
    # a replacement costs a reconnect and nothing else, and every such stall in the soaks of
    # 2026-11-28/29 (source restarts, destination restarts, freezes) lasted the whole 30 s.
    fetch_stall_s: Number = 10.0
    # Deprecated: one value for all four above (what it meant before they were split). When
    # set (> 0) it sets all four; docs/configuration.md.
    shutdown_timeout_s: Number = 0.0
    max_records_per_s: Integer = 0
    max_bytes_per_s: Integer = 0
    # The C copy loop (worker/_native.c): auto uses it when it is built and matches the installed
    # confluent-kafka, on refuses to start without it, off keeps the Python loop.
    native_loop: Text = "auto"
    # --- exactly-once mode (issue 26; docs/architecture.md, "Exactly-once mode") ---
    # Pipeline-wide: the controller records it in ZooKeeper and a worker whose setting differs
    # refuses to start. Records and the source positions they complete commit in one transaction.
    exactly_once: Flag = False
    # How often the open transaction commits (earlier when worker.max_in_flight_bytes were sent in it).
    transaction_interval_ms: Integer = 1000
    # transactional.id = prefix + worker id; empty: "<consumer group>." (unique per route).
    transactional_id_prefix: Text = ""
    # --- end of exactly-once mode ---

    def __post_init__(self) -> None:
        if self.shutdown_timeout_s > 0:  # the deprecated key sets the four waits it used to mean
            for name in ("stop_timeout_s", "release_ack_timeout_s", "release_commit_timeout_s", "producer_stall_s"):
                object.__setattr__(self, name, self.shutdown_timeout_s)


# The route a config without ``routes`` stands for; a declared route with this id keeps its state
# where that one keeps it (the pipeline's root and group), which is how a deployment migrates.
IMPLICIT_ROUTE = "default"


@dataclass(frozen=True)
class RouteWorkers:
    """``routes[].workers``: bounds on the workers a route gets (``max`` 0: no upper bound)."""

    __pydantic_config__ = _SECTION
    min: Integer = 1
    max: Integer = 0


@dataclass(frozen=True)
class RouteConfig:
    """One route: a source and a destination cluster (aliases), the naming and the forwarding policy."""

    __pydantic_config__ = _SECTION
    id: Text
    source: Text
    destination: Text
    topic_naming: Text = "identity"  # identity | prefix | mapping
    topic_mapping: Properties = field(default_factory=dict)
    forward: Text = "origin"  # origin | transit (docs/routes.md)
    workers: RouteWorkers = field(default_factory=RouteWorkers)
    # Several routes may write one identity-named topic only when they all say so.
    shared: Flag = False

    def definition(self) -> dict[str, Any]:
        """The JSON document of this route (ZooKeeper ``routes/<id>``, REST ``GET /routes/<id>``)."""
        return _asdict(self)


@dataclass(frozen=True)
class Config:
    """Everything one process needs; the controller ignores ``worker`` and vice versa.

    ``source``, ``destination``, ``forward``, the controller's topic naming, ``root`` and
    ``consumer_group`` are those of one route (``route_id``): a loaded file is the view of its
    worker's route, or of its first (for today's files: the implicit route); :func:`route_view`
    gives the view of another. ``clusters`` and ``routes`` stay the whole deployment's.
    """

    pipeline: str
    zookeeper: ZooKeeperConfig
    source: ClusterConfig
    destination: ClusterConfig
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    # The route's forwarding policy (docs/routes.md), which the worker applies per record:
    # "origin" copies only records first produced on the source cluster; "transit" also relays
    # records mirrored into the source from elsewhere, except those from the destination itself
    # (today's single-pipeline behaviour, hence the default of the implicit route).
    forward: str = "transit"
    clusters: Mapping[str, ClusterConfig] = field(default_factory=dict)
    routes: tuple[RouteConfig, ...] = ()
    # Set by route_view: the route whose paths and group ``root`` and ``consumer_group`` name.
    route_id: str = ""

    @property
    def pipeline_root(self) -> str:
        """The ZooKeeper path of the deployment: election, the route registry, the implicit route's state."""
        return f"{self.zookeeper.root.rstrip('/')}/{self.pipeline}"

    @property
    def root(self) -> str:
        """The ZooKeeper path that holds this route's state (the pipeline's own for the implicit route)."""
        return route_root(self.pipeline_root, self.route_id)

    @property
    def consumer_group(self) -> str:
        return route_group(self.pipeline, self.route_id)

    @property
    def declared_routes(self) -> bool:
        """Whether the config declares ``routes`` (False: the one implicit route)."""
        return not (len(self.routes) == 1 and self.routes[0].id == IMPLICIT_ROUTE)

    def redacted(self) -> dict[str, Any]:
        """A dict of this config safe to log: secrets replaced by ``***``."""
        return _redact(_asdict(self))


def route_root(pipeline_root: str, route_id: str) -> str:
    """Where a route keeps its topics, workers, assignments and status."""
    if not route_id or route_id == IMPLICIT_ROUTE:
        return pipeline_root
    return f"{pipeline_root}/routes/{route_id}"


def route_group(pipeline: str, route_id: str) -> str:
    """The consumer group a route commits its source offsets in (ids have no '.', so names never clash)."""
    if not route_id or route_id == IMPLICIT_ROUTE:
        return f"ureplicator.{pipeline}"
    return f"ureplicator.{pipeline}.{route_id}"


def route_view(config: Config, route_id: str | None = None, route: RouteConfig | None = None) -> Config:
    """The single-route ``Config`` that serves ``route_id``: its clusters, naming, forwarding, paths and group.

    ``route_id`` empty: the deployment's only route (a ConfigError when there are several).
    ``route`` is a definition read elsewhere (ZooKeeper) for a route the file does not declare;
    its clusters must still be declared in the file (their secrets never go to ZooKeeper).
    """
    if route is None:
        route = find_route(config, route_id or "")
    for side in ("source", "destination"):
        alias = getattr(route, side)
        if alias not in config.clusters:
            raise ConfigError(f"clusters.{alias}", f"route {route.id!r} needs cluster {alias!r}, which this config "
                                                   f"does not declare (clusters: {', '.join(sorted(config.clusters))})")
    return replace(
        config,
        source=config.clusters[route.source],
        destination=config.clusters[route.destination],
        forward=route.forward,
        route_id=route.id,
        controller=replace(config.controller, topic_naming=route.topic_naming, topic_mapping=route.topic_mapping),
    )


def find_route(config: Config, route_id: str) -> RouteConfig:
    """The declared route ``route_id``; empty: the only route. ConfigError (key ``worker.route``) otherwise."""
    ids = ", ".join(r.id for r in config.routes)
    if not route_id:
        if len(config.routes) != 1:
            raise ConfigError("worker.route", f"this deployment has {len(config.routes)} routes ({ids}): "
                                              "name the one to serve, or join the shared pool with worker.pool: true")
        return config.routes[0]
    for route in config.routes:
        if route.id == route_id:
            return route
    raise ConfigError("worker.route", f"unknown route {route_id!r} (routes: {ids})")


def is_secret(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SECRET_KEYS or any(marker in lowered for marker in _SECRET_MARKERS)


def secret_values(config: Config) -> list[str]:
    """Every secret value in ``config`` (admin token, ZooKeeper credential, client passwords), for log masking."""
    found: list[str] = []

    def walk(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k)
        elif key and is_secret(key) and isinstance(value, str) and value:
            found.append(value)

    walk(_asdict(config))
    if config.zookeeper.auth:
        found.append(config.zookeeper.auth.partition(":")[2])  # the password alone may be echoed by a library
    return [v for v in found if v]


def _redact(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _redact(v, k) for k, v in value.items()}
    if key and is_secret(key) and value is not None:
        return REDACTED
    return value


def _asdict(obj: Any) -> Any:
    if is_dataclass(obj):
        return {f.name: _asdict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, Mapping):
        return {k: _asdict(v) for k, v in obj.items()}
    if isinstance(obj, tuple | list):
        return [_asdict(v) for v in obj]
    return obj


# --- loading -------------------------------------------------------------------------------

# Sub-sections inside a section (``controller.group_sync.*``), by field name.
_NESTED: dict[str, type] = {"group_sync": GroupSyncConfig, "workers": RouteWorkers}

_SECTIONS: dict[str, type] = {
    "zookeeper": ZooKeeperConfig,
    "source": ClusterConfig,
    "destination": ClusterConfig,
    "controller": ControllerConfig,
    "worker": WorkerConfig,
}


def load(path: str | Path | None, env: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (YAML, optional when the environment sets everything) plus env overrides."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    if path is not None:
        raw = _read_yaml(Path(path))
    _apply_env(raw, env)
    return from_dict(raw)


def from_dict(raw: Mapping[str, Any]) -> Config:
    """Validate a parsed config document into a :class:`Config`."""
    if not isinstance(raw, Mapping):
        raise ConfigError("<root>", "the config must be a mapping of keys to values")
    known = {"pipeline", "clusters", "routes", "forward", *_SECTIONS}
    for key in raw:
        if key not in known:
            raise ConfigError(str(key), f"unknown key (known: {', '.join(sorted(known))})")
    if raw.get("pipeline") is None:
        raise ConfigError("pipeline", "missing required key")
    pipeline = _text("pipeline", raw["pipeline"])
    if not _PIPELINE_RE.match(pipeline):
        raise ConfigError("pipeline", "use 1-100 characters of letters, digits, '.', '_' or '-'")
    declared = raw.get("routes") is not None
    if declared:
        for key, why in (("source", "declare the clusters under clusters and the pair as a route "
                                    f"(id {IMPLICIT_ROUTE!r} keeps this pipeline's ZooKeeper paths and group)"),
                         ("destination", "declare it under clusters"),
                         ("forward", "set forward on each route")):
            if raw.get(key) is not None:
                raise ConfigError(key, f"not used when routes are declared: {why}")
        for key in ("topic_naming", "topic_mapping"):
            if isinstance(raw.get("controller"), Mapping) and key in raw["controller"]:
                raise ConfigError(f"controller.{key}", "not used when routes are declared: set it on each route")
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        value = raw.get(name)
        if declared and name in ("source", "destination"):
            continue
        if value is None:
            if name in ("zookeeper", "source", "destination"):
                raise ConfigError(name, "missing required section")
            value = {}
        if not isinstance(value, Mapping):
            raise ConfigError(name, f"expected a mapping, got {_describe(value)}")
        sections[name] = _build(cls, name, value)
    clusters = _clusters(raw.get("clusters"))
    forward = "transit"
    if declared:
        routes = _routes(raw["routes"])
        for i, route in enumerate(routes):
            for side in ("source", "destination"):
                if getattr(route, side) not in clusters:
                    raise ConfigError(f"routes[{i}].{side}", f"route {route.id!r}: unknown cluster alias "
                                      f"{getattr(route, side)!r} (clusters: {', '.join(sorted(clusters)) or 'none'})")
        # The first route fills the single-route fields, so code that reads them sees one consistent route.
        first = routes[0]
        sections["source"], sections["destination"] = clusters[first.source], clusters[first.destination]
        sections["controller"] = replace(sections["controller"], topic_naming=first.topic_naming,
                                         topic_mapping=first.topic_mapping)
        forward = first.forward
    else:
        if raw.get("forward") is not None:
            forward = _text("forward", raw["forward"])
        if sections["source"].alias == sections["destination"].alias:
            raise ConfigError("destination.alias", "must differ from source.alias (provenance uses it)")
        for name in ("source", "destination"):
            cluster = sections[name]
            other = clusters.get(cluster.alias)
            if other is not None and other.bootstrap_servers != cluster.bootstrap_servers:
                raise ConfigError(f"clusters.{cluster.alias}", f"is also {name}.alias, with other bootstrap_servers")
            clusters[cluster.alias] = cluster
        routes = ()
    config = Config(pipeline=pipeline, **sections, forward=forward, clusters=clusters, routes=routes)
    if not declared:
        config = replace(config, routes=(_implicit(config),))
    _check(config)
    _check_routes(config)
    _check_one_to_one(config, declared)
    # Loaded as a view of one route, so root, group, clusters and forwarding always agree: the
    # worker's route when the file declares it, else the first (a config without routes: the
    # implicit route, whose paths and group are today's). route_view / zk.route_config pick another.
    own = next((r for r in config.routes if r.id == config.worker.route), config.routes[0])
    return route_view(config, route=own)


def _implicit(config: Config) -> RouteConfig:
    """The one route of a config without ``routes``: today's pipeline."""
    return RouteConfig(
        id=IMPLICIT_ROUTE, source=config.source.alias, destination=config.destination.alias,
        topic_naming=config.controller.topic_naming, topic_mapping=config.controller.topic_mapping,
        forward=config.forward,
    )


def _clusters(value: Any) -> dict[str, ClusterConfig]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError("clusters", f"expected a mapping of alias to cluster, got {_describe(value)}")
    clusters: dict[str, ClusterConfig] = {}
    for alias, body in value.items():
        key = f"clusters.{alias}"
        if not isinstance(alias, str) or not _ALIAS_RE.match(alias):
            raise ConfigError(key, "an alias is 1-64 letters, digits, '_' or '-'")
        if not isinstance(body, Mapping):
            raise ConfigError(key, f"expected a mapping with bootstrap_servers, got {_describe(body)}")
        if "alias" in body:
            raise ConfigError(f"{key}.alias", "the alias is the key of clusters")
        clusters[alias] = _build(ClusterConfig, key, {**body, "alias": alias})
    return clusters


def _routes(value: Any) -> tuple[RouteConfig, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError("routes", f"expected a non-empty list of routes, got {_describe(value)}")
    routes = []
    for i, body in enumerate(value):
        if not isinstance(body, Mapping):
            raise ConfigError(f"routes[{i}]", f"expected a mapping, got {_describe(body)}")
        routes.append(parse_route(body, f"routes[{i}]"))
    return tuple(routes)


def parse_route(body: Mapping[str, Any], key: str = "route") -> RouteConfig:
    """A route definition from YAML, REST or ZooKeeper; ConfigError names the key at fault."""
    route = _build(RouteConfig, key, body)
    if not topology.ROUTE_ID_RE.match(route.id):
        raise ConfigError(f"{key}.id", f"route id {route.id!r}: use 1-64 letters, digits, '_' or '-'")
    if route.forward not in topology.FORWARD_POLICIES:
        raise ConfigError(f"{key}.forward", f"must be 'origin' or 'transit', got {route.forward!r}")
    if route.topic_naming not in topology.TOPIC_NAMINGS:
        raise ConfigError(f"{key}.topic_naming",
                          f"must be 'identity', 'prefix' or 'mapping', got {route.topic_naming!r}")
    for src, dst in route.topic_mapping.items():
        if not _TOPIC_RE.match(src) or not _TOPIC_RE.match(dst):
            raise ConfigError(f"{key}.topic_mapping.{src}", "source and destination must be Kafka topic names")
    if route.workers.min < 0 or route.workers.max < 0:
        raise ConfigError(f"{key}.workers", "min and max must not be negative (max 0: no upper bound)")
    if route.workers.max and route.workers.min > route.workers.max:
        raise ConfigError(f"{key}.workers", f"min {route.workers.min} is above max {route.workers.max}")
    return route


def check_topology(clusters: Mapping[str, ClusterConfig], routes: tuple[RouteConfig, ...] | list[RouteConfig]) -> None:
    """The topology check over ``routes``: ConfigError naming the problem (the REST API gives the same message)."""
    try:
        topology.check(routes, {alias: _servers(c.bootstrap_servers) for alias, c in clusters.items()})
    except topology.TopologyError as exc:
        raise ConfigError(exc.key, exc.message) from None


def _check_routes(config: Config) -> None:
    # worker.route may name a route added through the API (in ZooKeeper, not in this file):
    # common.zk.route_config resolves it when the worker starts; here only its form is checked.
    if config.worker.route and not topology.ROUTE_ID_RE.match(config.worker.route):
        raise ConfigError("worker.route", f"route id {config.worker.route!r}: use 1-64 letters, digits, '_' or '-'")
    if config.worker.route and config.worker.pool:
        raise ConfigError("worker.pool", "a worker either serves worker.route or joins the shared pool, not both")
    if config.controller.pool_max_moves < 1:
        raise ConfigError("controller.pool_max_moves", "must be at least 1")
    if config.controller.pool_hysteresis < 0:
        raise ConfigError("controller.pool_hysteresis", "must not be negative")
    check_topology(config.clusters, config.routes)


def _check_one_to_one(config: Config, declared: bool) -> None:
    """Exactly-once mode: no topic mapping may send two source topics onto one destination topic.

    The positions a transaction commits are keyed by destination topic and partition
    (worker/copyloop.py), so two source topics there would overwrite each other's: records
    lost or sent twice. (The REST API refuses the same with an explicit destination.)
    """
    if not config.worker.exactly_once:
        return
    for i, route in enumerate(config.routes):
        seen: dict[str, str] = {}
        for src, dst in sorted(route.topic_mapping.items()):
            if dst in seen:
                key = f"routes[{i}].topic_mapping" if declared else "controller.topic_mapping"
                raise ConfigError(key, f"maps {seen[dst]!r} and {src!r} onto one destination topic {dst!r}: "
                                       "exactly-once mode keys its committed positions by destination topic, so "
                                       "each destination topic takes one source topic")
            seen[dst] = src


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("<file>", f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("<file>", f"{path} is not valid YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError("<root>", f"{path} must hold a mapping, got {_describe(doc)}")
    return doc


def _apply_env(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    """Overlay ``UREPLICATOR_*`` variables onto the parsed document, typed like YAML scalars."""
    fixed: dict[str, tuple[str, ...]] = {"PIPELINE": ("pipeline",)}
    for section, cls in _SECTIONS.items():
        for f in fields(cls):
            if f.name in _NESTED:
                for g in fields(_NESTED[f.name]):
                    fixed[f"{section}_{f.name}_{g.name}".upper()] = (section, f.name, g.name)
            elif f.name != "properties":
                fixed[f"{section}_{f.name}".upper()] = (section, f.name)
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        suffix = name[len(ENV_PREFIX):]
        if suffix in fixed:
            path = fixed[suffix]
            parsed = value if path[-1] in ("id", "route", "alias", "admin_token", "auth") else _scalar(value)
        elif suffix.startswith("CLUSTERS_"):
            found = _cluster_env(suffix[len("CLUSTERS_"):], raw.get("clusters"))
            if found is None:
                continue
            path, parsed = found, value
        else:
            match = re.match(r"^(SOURCE|DESTINATION)_PROPERTIES_(.+)$", suffix)
            if not match:
                continue  # other tools share the prefix (UREPLICATOR_CACHE); not config keys
            prop = match.group(2).lower().replace("_", ".")
            path, parsed = (match.group(1).lower(), "properties", prop), value
        node = raw
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[path[-1]] = parsed


def _cluster_env(rest: str, declared: Any) -> tuple[str, ...] | None:
    """``<ALIAS>_BOOTSTRAP_SERVERS`` or ``<ALIAS>_PROPERTIES_<NAME>`` -> the key path in ``clusters``.

    Aliases declared in the file are matched as written (upper-cased, '-' as '_'), longest first,
    so an alias may hold '_'; an alias only the environment names is lower-cased and has no '_'.
    """
    aliases = sorted(declared, key=len, reverse=True) if isinstance(declared, Mapping) else []
    candidates = [(alias, rest[len(alias) + 1:]) for alias in aliases
                  if rest.startswith(str(alias).upper().replace("-", "_") + "_")]
    if not candidates:
        head, sep, tail = rest.partition("_")
        if not sep:
            return None
        candidates = [(head.lower(), tail)]
    for alias, tail in candidates:
        if tail == "BOOTSTRAP_SERVERS":
            return ("clusters", str(alias), "bootstrap_servers")
        if tail.startswith("PROPERTIES_") and len(tail) > len("PROPERTIES_"):
            return ("clusters", str(alias), "properties", tail[len("PROPERTIES_"):].lower().replace("_", "."))
    return None


def _scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _build(cls: type, section: str, values: Mapping[str, Any]) -> Any:
    """``values`` as the dataclass ``cls`` (validated by pydantic); ConfigError names the first key at fault."""
    try:
        return _adapter(cls).validate_python(dict(values))
    except ValidationError as exc:
        raise _problem(cls, section, exc.errors(include_url=False)[0]) from None


@functools.cache
def _adapter(cls: type) -> TypeAdapter[Any]:
    return TypeAdapter(cls)


# pydantic's error types -> the first words of this module's messages (then "got <value>").
_EXPECTED = {
    "bool_type": "expected true or false", "string_type": "expected a non-empty string",
    "string_too_short": "expected a non-empty string", "int_type": "expected an integer",
    "optional_text": "expected a string", "number_type": "expected a number",
    "mapping_type": "expected a mapping", "dataclass_type": "expected a mapping",
}


def _problem(cls: type, section: str, error: Any) -> ConfigError:
    loc = [str(part) for part in error["loc"]]
    key = ".".join([section, *loc])
    kind = error["type"]
    if kind == "unexpected_keyword_argument":
        owner = cls
        for part in loc[:-1]:  # a nested section's own fields (controller.group_sync.*)
            owner = _NESTED[part]
        return ConfigError(key, f"unknown key (known in {key.rsplit('.', 1)[0]}: "
                                f"{', '.join(f.name for f in fields(owner))})")
    if kind in ("missing_argument", "missing"):
        return ConfigError(key, "missing required key")
    if kind == "scalar_value":
        name = error["ctx"]["name"]
        return ConfigError(f"{key}.{name}", f"expected a scalar value, got {_describe(error['ctx']['value'], name)}")
    if kind in _EXPECTED:
        return ConfigError(key, f"{_EXPECTED[kind]}, got {_describe(error['input'], key)}")
    return ConfigError(key, error["msg"])  # a rule without its own wording (not reached by today's fields)


def _text(key: str, value: Any) -> str:
    """A top-level string (``pipeline``, ``forward``)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"expected a non-empty string, got {_describe(value, key)}")
    return value


def _describe(value: Any, key: str = "") -> str:
    if value is None:
        return "nothing"
    if is_secret(key.rsplit(".", 1)[-1]):
        return type(value).__name__  # an error message must not echo a secret
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}"


def _check(config: Config) -> None:
    """Cross-field and range checks that a type alone cannot express."""
    keyed = {"source": config.source, "destination": config.destination} if not config.declared_routes else {}
    keyed.update({f"clusters.{alias}": c for alias, c in config.clusters.items() if c not in keyed.values()})
    for name, cluster in keyed.items():
        if not _ALIAS_RE.match(cluster.alias):
            raise ConfigError(f"{name}.alias", "use 1-64 letters, digits, '_' or '-'")
        if "bootstrap.servers" in cluster.properties:
            raise ConfigError(f"{name}.properties.bootstrap.servers", f"set {name}.bootstrap_servers instead")
        for prop, (allowed, why) in _REFUSED_PROPERTIES.items():
            value = cluster.properties.get(prop)
            if value is not None and (allowed is None or value.strip().lower() != allowed):
                raise ConfigError(f"{name}.properties.{prop}", f"refused: {why}")
    if config.forward not in topology.FORWARD_POLICIES:
        raise ConfigError("forward", f"must be 'origin' or 'transit', got {config.forward!r}")
    if config.source.alias == config.destination.alias:
        raise ConfigError("destination.alias", "must differ from source.alias (provenance uses it)")
    if not config.zookeeper.root.startswith("/"):
        raise ConfigError("zookeeper.root", "must be an absolute path starting with '/'")
    if config.zookeeper.session_timeout_s <= 0:
        raise ConfigError("zookeeper.session_timeout_s", "must be positive")
    if config.zookeeper.auth is not None:
        user, sep, password = config.zookeeper.auth.partition(":")
        if not sep or not user or not password:
            raise ConfigError("zookeeper.auth", "expected 'user:password' (digest authentication)")
    # --- TLS options come in pairs (ZooKeeper client TLS, REST API TLS)
    zkc = config.zookeeper
    if (zkc.tls_certfile is None) != (zkc.tls_keyfile is None):
        raise ConfigError("zookeeper.tls_keyfile", "set zookeeper.tls_certfile and zookeeper.tls_keyfile together")
    if (zkc.tls_ca or zkc.tls_certfile) and not zkc.tls:
        raise ConfigError("zookeeper.tls", "tls_ca/tls_certfile are set but zookeeper.tls is false")
    if (config.controller.rest_tls_certfile is None) != (config.controller.rest_tls_keyfile is None):
        raise ConfigError("controller.rest_tls_keyfile",
                          "set controller.rest_tls_certfile and controller.rest_tls_keyfile together")
    if config.controller.heartbeat_interval_s < 0:
        raise ConfigError("controller.heartbeat_interval_s", "must not be negative (0 = no heartbeat)")
    for key in ("destination_replication_factor", "destination_min_insync_replicas"):
        if getattr(config.controller, key) < 0:
            raise ConfigError(f"controller.{key}", "must not be negative (0 = the source topic's)")
    if config.controller.rpo_s <= 0:
        raise ConfigError("controller.rpo_s", "must be positive")
    if config.controller.heartbeat_topic is not None and not _TOPIC_RE.match(config.controller.heartbeat_topic):
        raise ConfigError("controller.heartbeat_topic", "must be a Kafka topic name")
    _port("controller.rest_port", config.controller.rest_port, allow_zero=True)
    _port("worker.metrics_port", config.worker.metrics_port, allow_zero=True)
    for key, value in (
        ("controller.reconcile_interval_s", config.controller.reconcile_interval_s),
        ("controller.request_timeout_s", config.controller.request_timeout_s),
        ("controller.group_sync.timeout_s", config.controller.group_sync.timeout_s),
        ("worker.commit_interval_s", config.worker.commit_interval_s),
        ("worker.offset_recommit_s", config.worker.offset_recommit_s),
        ("worker.stop_timeout_s", config.worker.stop_timeout_s),
        ("worker.release_ack_timeout_s", config.worker.release_ack_timeout_s),
        ("worker.release_commit_timeout_s", config.worker.release_commit_timeout_s),
        ("worker.producer_stall_s", config.worker.producer_stall_s),
        ("worker.health_stall_s", config.worker.health_stall_s),
    ):
        if value <= 0:
            raise ConfigError(key, f"must be positive, got {value}")
    if config.worker.fetch_stall_s < 0:
        raise ConfigError("worker.fetch_stall_s", f"must not be negative (0 = no fetch watch), got "
                          f"{config.worker.fetch_stall_s}")
    if config.worker.shutdown_timeout_s < 0:
        raise ConfigError("worker.shutdown_timeout_s", f"must not be negative, got {config.worker.shutdown_timeout_s}")
    if config.worker.max_in_flight_bytes < 1024:
        raise ConfigError("worker.max_in_flight_bytes", "must be at least 1024")
    for key in ("max_records_per_s", "max_bytes_per_s"):
        if getattr(config.worker, key) < 0:
            raise ConfigError(f"worker.{key}", "must not be negative (0 = unlimited)")
    if config.worker.batch_size < 1:
        raise ConfigError("worker.batch_size", "must be at least 1")
    if not 0 <= config.worker.fetch_wait_ms <= 10_000:
        raise ConfigError("worker.fetch_wait_ms", f"must be between 0 and 10000, got {config.worker.fetch_wait_ms}")
    if config.worker.native_loop not in ("auto", "on", "off"):
        raise ConfigError("worker.native_loop", f"must be 'auto', 'on' or 'off', got {config.worker.native_loop!r}")
    if not 10 <= config.worker.transaction_interval_ms <= 600_000:
        raise ConfigError("worker.transaction_interval_ms",
                          f"must be between 10 and 600000, got {config.worker.transaction_interval_ms}")
    if config.worker.auto_offset_reset not in ("earliest", "latest"):
        raise ConfigError("worker.auto_offset_reset", "must be 'earliest' or 'latest'")
    ctl = config.controller
    if ctl.topic_naming not in ("identity", "prefix", "mapping"):
        raise ConfigError("controller.topic_naming", "must be 'identity', 'prefix' or 'mapping'")
    for pattern_key, pattern in (
        ("auto_whitelist_include", ctl.auto_whitelist_include),
        ("auto_whitelist_exclude", ctl.auto_whitelist_exclude),
        ("group_sync.include", ctl.group_sync.include),
        ("group_sync.exclude", ctl.group_sync.exclude),
    ):
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"controller.{pattern_key}", f"not a valid regular expression: {exc}") from None
    for src, dst in ctl.topic_mapping.items():
        if not _TOPIC_RE.match(src) or not _TOPIC_RE.match(dst):
            raise ConfigError(f"controller.topic_mapping.{src}", "source and destination must be Kafka topic names")
    same_cluster = _servers(config.source.bootstrap_servers) == _servers(config.destination.bootstrap_servers)
    if same_cluster:
        if ctl.topic_naming == "identity":
            raise ConfigError(
                "controller.topic_naming",
                "source and destination are the same cluster: identity naming would mirror every topic onto itself",
            )
        for src, dst in ctl.topic_mapping.items():
            if src == dst:
                raise ConfigError(f"controller.topic_mapping.{src}", "maps a topic onto itself on the same cluster")
    if ctl.group_sync.interval_s <= 0:
        raise ConfigError("controller.group_sync.interval_s", "must be positive")
    for key in ("topic_sync_interval_s", "lag_rounds", "noprogress_threshold_s", "rebalance_interval_s"):
        if getattr(ctl, key) <= 0:
            raise ConfigError(f"controller.{key}", "must be positive")
    for key in ("max_partitions_per_worker", "worker_restart_grace_s", "lag_threshold_records",
                "max_moves_per_round", "initial_assignment_delay_s"):
        if getattr(ctl, key) < 0:
            raise ConfigError(f"controller.{key}", "must not be negative")
    if config.controller.admin_token is not None and len(config.controller.admin_token) < 8:
        raise ConfigError("controller.admin_token", "must be at least 8 characters")


def is_loopback(host: str) -> bool:
    """``host`` can only be reached from this machine (localhost or a loopback address)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def check_rest_exposure(config: Config) -> None:
    """Refuse a REST API that anyone on the network could change: non-loopback, no token, not allowed.

    Called by the controller at start, not by ``from_dict``: workers and the verifier read the
    same file and never serve the API.
    """
    ctl = config.controller
    if ctl.admin_token is not None or ctl.allow_anonymous or is_loopback(ctl.rest_host):
        return
    raise ConfigError(
        "controller.admin_token",
        f"the REST API would listen on {ctl.rest_host}:{ctl.rest_port}, reachable from the network, and anyone "
        "reaching it could add, remove or pause topics. Set controller.admin_token (8+ characters; "
        "env UREPLICATOR_CONTROLLER_ADMIN_TOKEN) so changes need 'Authorization: Bearer <token>', or "
        "controller.rest_host: 127.0.0.1 to serve this machine only, or controller.allow_anonymous: true "
        "if something else (a NetworkPolicy, a proxy) guards the port",
    )


def _servers(bootstrap: str) -> frozenset[str]:
    return frozenset(s.strip().lower().replace("localhost", "127.0.0.1") for s in bootstrap.split(",") if s.strip())


def _port(key: str, value: int, allow_zero: bool) -> None:
    low = 0 if allow_zero else 1
    if not low <= value <= 65535:
        raise ConfigError(key, f"must be a TCP port between {low} and 65535, got {value}")


def default_worker_id() -> str:
    """Host name and process id: unique per process, readable in status and logs."""
    return f"{socket.gethostname()}-{os.getpid()}"


def worker_id(config: Config) -> str:
    return config.worker.id or default_worker_id()
