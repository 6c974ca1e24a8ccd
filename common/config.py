"""Load and validate the one frozen configuration of a controller or worker process.

A config file is YAML; every key can be overridden by an environment variable
named ``UREPLICATOR_`` + the dotted key upper-cased with dots as underscores
(``worker.commit_interval_s`` -> ``UREPLICATOR_WORKER_COMMIT_INTERVAL_S``).
Client properties are maps: ``UREPLICATOR_SOURCE_PROPERTIES_SASL_PASSWORD``
sets ``source.properties["sasl.password"]`` (underscores become dots).

Any problem raises :class:`common.errors.ConfigError` naming the key, so the
process can stop with one message and exit status 2. ``docs/configuration.md``
documents each key.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from common.errors import ConfigError

ENV_PREFIX = "UREPLICATOR_"

# Property names whose values are secrets: never logged, never echoed by the API.
_SECRET_MARKERS = ("password", "secret", "token", "key.pem", "keystore", "sasl.jaas", "oauthbearer.config")
# Keys that hold a secret although their name does not say so.
_SECRET_KEYS = frozenset({"auth"})
REDACTED = "***"

_PIPELINE_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_ALIAS_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


@dataclass(frozen=True)
class ZooKeeperConfig:
    connect: str
    root: str = "/ureplicator"
    session_timeout_s: float = 10.0
    # "user:password": digest authentication, and digest ACLs on the pipeline's nodes (docs/security.md).
    auth: str | None = None
    # --- TLS to ZooKeeper's secureClientPort (docs/security.md). tls_ca: PEM bundle to trust;
    # tls_certfile/tls_keyfile: a client certificate, when ZooKeeper asks for one (mutual TLS).
    tls: bool = False
    tls_ca: str | None = None
    tls_certfile: str | None = None
    tls_keyfile: str | None = None


@dataclass(frozen=True)
class ClusterConfig:
    alias: str
    bootstrap_servers: str
    properties: Mapping[str, str] = field(default_factory=dict)

    def client_config(self) -> dict[str, str]:
        """librdkafka settings for a client of this cluster (user properties win)."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.properties}


@dataclass(frozen=True)
class GroupSyncConfig:
    """``controller.group_sync``: copy translated consumer-group offsets to the destination (docs/failover.md)."""

    enabled: bool = False
    interval_s: float = 60.0
    include: str | None = None
    exclude: str | None = None


@dataclass(frozen=True)
class ControllerConfig:
    rest_host: str = "0.0.0.0"
    rest_port: int = 9000
    request_timeout_s: float = 30.0  # the REST server closes connections idle or stalled this long
    admin_token: str | None = None
    # Serve mutating REST calls without a token on a non-loopback address (see check_rest_exposure).
    allow_anonymous: bool = False
    reconcile_interval_s: float = 5.0
    topic_naming: str = "identity"  # identity | prefix | mapping
    topic_mapping: Mapping[str, str] = field(default_factory=dict)
    topic_sync_interval_s: float = 30.0
    auto_whitelist_include: str | None = None
    auto_whitelist_exclude: str | None = None
    max_partitions_per_worker: int = 0
    rebalance_interval_s: float = 300.0
    worker_restart_grace_s: float = 0.0
    lag_threshold_records: int = 100_000
    lag_rounds: int = 3
    noprogress_threshold_s: float = 60.0
    verification_dir: str | None = None
    group_sync: GroupSyncConfig = field(default_factory=GroupSyncConfig)
    # --- TLS for the REST API (docs/security.md): PEM certificate chain and private key. With both
    # set the API answers HTTPS only, and a bearer token sent over plain HTTP is refused.
    rest_tls_certfile: str | None = None
    rest_tls_keyfile: str | None = None
    # --- freshness (controller/heartbeat.py): the leader writes a record to heartbeat_topic on the
    # source every heartbeat_interval_s (0 = off); workers mirror it like any record, and the age of
    # the newest one on the destination is the pipeline's freshness. Above rpo_s it needs a person.
    heartbeat_interval_s: float = 5.0
    heartbeat_topic: str | None = None  # default ureplicator-heartbeats-<pipeline>: one per pipeline
    rpo_s: float = 300.0
    # --- destination topics the controller creates: replication factor and min.insync.replicas;
    # 0 = the source topic's, either way capped by the destination's broker count.
    destination_replication_factor: int = 0
    destination_min_insync_replicas: int = 0


@dataclass(frozen=True)
class WorkerConfig:
    id: str = ""
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 0
    health_stall_s: float = 120.0  # /healthz fails when the loop has not turned for this long
    commit_interval_s: float = 5.0
    auto_offset_reset: str = "earliest"
    max_in_flight_bytes: int = 64 * 1024 * 1024
    batch_size: int = 1000
    # How long one consume call waits to fill a batch: librdkafka returns early only when the
    # batch is full, so at low rates this wait is added to every record's latency.
    fetch_wait_ms: int = 50
    shutdown_timeout_s: float = 30.0
    max_records_per_s: int = 0
    max_bytes_per_s: int = 0
    # The C copy loop (worker/_native.c): auto uses it when it is built and matches the installed
    # confluent-kafka, on refuses to start without it, off keeps the Python loop.
    native_loop: str = "auto"


@dataclass(frozen=True)
class Config:
    """Everything one process needs; the controller ignores ``worker`` and vice versa."""

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

    @property
    def root(self) -> str:
        """The ZooKeeper path that holds this pipeline's state."""
        return f"{self.zookeeper.root.rstrip('/')}/{self.pipeline}"

    @property
    def consumer_group(self) -> str:
        return f"ureplicator.{self.pipeline}"

    def redacted(self) -> dict[str, Any]:
        """A dict of this config safe to log: secrets replaced by ``***``."""
        return _redact(_asdict(self))


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
    return obj


# --- loading -------------------------------------------------------------------------------

# Sub-sections inside a section (``controller.group_sync.*``), by field name and by annotation.
_NESTED: dict[str, type] = {"group_sync": GroupSyncConfig}
_NESTED_BY_TYPE: dict[str, type] = {cls.__name__: cls for cls in _NESTED.values()}

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
    known = {"pipeline", *_SECTIONS}
    for key in raw:
        if key not in known:
            raise ConfigError(str(key), f"unknown key (known: {', '.join(sorted(known))})")
    if raw.get("pipeline") is None:
        raise ConfigError("pipeline", "missing required key")
    pipeline = _coerce("pipeline", "str", raw["pipeline"])
    if not _PIPELINE_RE.match(pipeline):
        raise ConfigError("pipeline", "use 1-100 characters of letters, digits, '.', '_' or '-'")
    sections: dict[str, Any] = {}
    for name, cls in _SECTIONS.items():
        value = raw.get(name)
        if value is None:
            if name in ("zookeeper", "source", "destination"):
                raise ConfigError(name, "missing required section")
            value = {}
        if not isinstance(value, Mapping):
            raise ConfigError(name, f"expected a mapping, got {_describe(value)}")
        sections[name] = _build(cls, name, value)
    config = Config(pipeline=pipeline, **sections)
    _check(config)
    return config


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
            parsed = value if path[-1] in ("id", "alias", "admin_token", "auth") else _scalar(value)
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


def _scalar(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _build(cls: type, section: str, values: Mapping[str, Any]) -> Any:
    by_name = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        dotted = f"{section}.{key}"
        if key not in by_name:
            raise ConfigError(dotted, f"unknown key (known in {section}: {', '.join(by_name)})")
        kwargs[key] = _coerce(dotted, by_name[key].type, value)
    for name, f in by_name.items():
        if name not in kwargs and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(f"{section}.{name}", "missing required key")
    return cls(**kwargs)



def _coerce(key: str, annotation: Any, value: Any) -> Any:
    kind = str(annotation)
    if kind in _NESTED_BY_TYPE:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {_describe(value, key)}")
        return _build(_NESTED_BY_TYPE[kind], key, value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {_describe(value, key)}")
        return value
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise ConfigError(key, f"expected a non-empty string, got {_describe(value, key)}")
        return value
    if kind == "str | None":
        if value is None:
            return None
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise ConfigError(key, f"expected a string, got {_describe(value, key)}")
        return str(value)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {_describe(value, key)}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, f"expected a number, got {_describe(value, key)}")
        return float(value)
    if kind.startswith("Mapping"):
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a mapping, got {_describe(value, key)}")
        props: dict[str, str] = {}
        for k, v in value.items():
            if isinstance(v, dict | list) or v is None:
                raise ConfigError(f"{key}.{k}", f"expected a scalar value, got {_describe(v, str(k))}")
            props[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
        return props
    raise AssertionError(f"no coercion for {key}: {kind}")  # a new field without a rule


def _describe(value: Any, key: str = "") -> str:
    if value is None:
        return "nothing"
    if is_secret(key.rsplit(".", 1)[-1]):
        return type(value).__name__  # an error message must not echo a secret
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}"


def _check(config: Config) -> None:
    """Cross-field and range checks that a type alone cannot express."""
    for name in ("source", "destination"):
        cluster: ClusterConfig = getattr(config, name)
        if not _ALIAS_RE.match(cluster.alias):
            raise ConfigError(f"{name}.alias", "use 1-64 letters, digits, '_' or '-'")
        if "bootstrap.servers" in cluster.properties:
            raise ConfigError(f"{name}.properties.bootstrap.servers", f"set {name}.bootstrap_servers instead")
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
        ("worker.commit_interval_s", config.worker.commit_interval_s),
        ("worker.shutdown_timeout_s", config.worker.shutdown_timeout_s),
        ("worker.health_stall_s", config.worker.health_stall_s),
    ):
        if value <= 0:
            raise ConfigError(key, f"must be positive, got {value}")
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
    for key in ("max_partitions_per_worker", "worker_restart_grace_s", "lag_threshold_records"):
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
