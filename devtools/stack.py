"""Start and stop a local ZooKeeper plus two single-broker KRaft clusters (source, destination), or N.

With ``secure``, each broker also gets a SASL_SSL listener (SCRAM-SHA-512, a certificate from a
throwaway CA made by devtools.certs) next to its PLAINTEXT one, and one SCRAM user created when
its storage is formatted; ZooKeeper also opens a ``secureClientPort`` (TLS through Netty, the
same CA, a client certificate required). stack.json's ``secure`` block says how to connect
(docs/security.md).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from devtools import jvm, stack_common, stack_kafka, stack_zookeeper
from devtools.ports import NoFreePorts, free_ports
from devtools.stack_common import (
    HOST,
    SECURE_MECHANISM,
    SECURE_USER,
    SERVICES,
    STACK_FILE,
    STATE_FILE,
    StackError,
    _address,
    _alive,
    _config_path,
    _data_dir,
    _failure_report,
    _kill,
    _launch,
    _locked,
    _log_path,
    _owned,
    _plan_ports,
    _port_free,
    _port_holders,
    _props,
    _read_state,
    _say,
    _svc_dir,
    _tail,
    _terminate,
    _write_json,
)
from devtools.stack_kafka import (
    _cluster_id,
    _format_brokers,
    _kafka_command,
    _kafka_properties,
    _KafkaProbe,
    _log4j_properties,
    _secure_listener,
    brokers,
    cluster_alias,
    secure_client_properties,
)
from devtools.stack_zookeeper import (
    _LOGBACK_XML,
    _zoo_cfg,
    _zookeeper_command,
    _zookeeper_ok,
    _zookeeper_tls,
    _zookeeper_tls_ok,
)

# Names the tests, the CLI and the tools use as stack.<name>, though this module does not.
BROKERS, LOG_NAME, MAX_CLUSTERS = stack_common.BROKERS, stack_common.LOG_NAME, stack_common.MAX_CLUSTERS
_format_command = stack_kafka._format_command
secure_zookeeper = stack_zookeeper.secure_zookeeper

# Heaps sized for a 2-core test box running both brokers, ZooKeeper, workers and Spark;
# benchmarks can raise them without code changes (bench sets stack.KAFKA_HEAP before up()).
KAFKA_HEAP = os.environ.get("UREPLICATOR_STACK_KAFKA_HEAP", "256m")
ZOOKEEPER_HEAP = os.environ.get("UREPLICATOR_STACK_ZOOKEEPER_HEAP", "128m")


def _services(state: dict[str, Any] | None) -> tuple[str, ...]:
    """The services a stack was started with (its state file), or the default three."""
    recorded = tuple((state or {}).get("services", {}))
    return recorded or SERVICES

def _write_configs(
    root: Path,
    ports: dict[str, int],
    controller_ports: dict[str, int],
    extra: dict[str, dict[str, Any]],
) -> None:
    for name in ports:
        svc = _svc_dir(root, name)
        shutil.rmtree(_data_dir(root, name), ignore_errors=True)
        _data_dir(root, name).mkdir(parents=True)
        _log_path(root, name).write_text("")
        if name == "zookeeper":
            (svc / "logback.xml").write_text(_LOGBACK_XML)
            cfg = _zoo_cfg(root, ports[name], extra.get(name, {}))
        else:
            (svc / "log4j.properties").write_text(_log4j_properties(name))
            cfg = _kafka_properties(root, name, ports[name], controller_ports[name], extra.get(name, {}))
        _config_path(root, name).write_text(_props(cfg))


def _wait_ready(root: Path, name: str, pid: int, port: int, deadline: float, log_offset: int = 0,
                client: dict[str, str] | None = None, zookeeper_tls: dict[str, Any] | None = None) -> None:
    probe = _KafkaProbe(port, client) if name != "zookeeper" else None
    while True:
        if not _alive(pid):
            raise StackError(f"{name} exited during startup; " + _failure_report(_log_path(root, name), log_offset))
        remaining = deadline - time.monotonic()
        if probe is not None:
            ok = probe.ready(remaining)
        else:
            ok = _zookeeper_tls_ok(port, zookeeper_tls) if zookeeper_tls else _zookeeper_ok(port)
        if ok:
            return
        if time.monotonic() >= deadline:
            raise StackError(
                f"{name} on {HOST}:{port} was not ready in time; " + _failure_report(_log_path(root, name), log_offset)
            )
        time.sleep(0.2)


def _live_services(state: dict[str, Any]) -> dict[str, int]:
    live = {}
    for name, svc in state.get("services", {}).items():
        if _owned(svc.get("pid"), svc["config"]):
            live[name] = int(svc["pid"])
    return live


def up(
    dir: Path,
    ports: dict[str, int] | None = None,
    timeout_s: float = 90,
    extra_config: dict[str, dict[str, Any]] | None = None,
    secure: bool = False,
    clusters: int = 2,
) -> dict[str, Any]:
    """Start ZooKeeper and the source and destination brokers in dir; returns (and writes
    to dir/stack.json) {"zookeeper": "127.0.0.1:p", "source": ..., "destination": ...,
    "clusters": {"c1": <source>, "c2": <destination>, ...}}.

    clusters > 2 starts that many single-broker clusters: c1 and c2 are source and
    destination, c3..cN are services of those names.

    extra_config adds/overrides zoo.cfg or server.properties entries per service.
    secure adds a SASL_SSL listener per broker, a TLS port to ZooKeeper, and a "secure" block:
    {"source": address, "destination": address, "c3"...: address, "zookeeper": TLS address,
    "ca": PEM path, "client_certfile", "client_keyfile" (ZooKeeper's client certificate),
    "mechanism", "username", "password"}.
    Raises StackError, after stopping whatever it started, when anything fails; also
    when a stack is already running in dir.
    """
    root = Path(dir).resolve()
    extra = dict(extra_config or {})
    broker_names = brokers(clusters)
    services = ("zookeeper", *broker_names)
    unknown = sorted(set(extra) - set(services))
    if unknown:
        raise StackError(f"unknown service(s) in extra_config: {', '.join(unknown)}")
    with _locked(root):
        state = _read_state(root)
        if state is not None:
            live = _live_services(state)
            if live:
                pids = ", ".join(f"{n} pid {p}" for n, p in live.items())
                raise StackError(f"a stack is already running in {root} ({pids}); run `ureplicator stack down` first")
            (root / STATE_FILE).unlink(missing_ok=True)  # leftovers of a dead stack
        (root / STACK_FILE).unlink(missing_ok=True)

        # Everything that can fail without side effects is checked before any JVM starts.
        try:
            java = jvm.java_executable()
            jvm.classpath("zookeeper")
            jvm.classpath("kafka")
        except jvm.JvmError as exc:
            raise StackError(str(exc)) from exc
        client_ports, controller_ports = _plan_ports(ports, services, broker_names)
        secure_ports: dict[str, int] = {}
        if secure:
            try:
                taken = {*client_ports.values(), *controller_ports.values()}
                secure_ports = dict(zip(services, free_ports(len(services), taken), strict=True))
            except NoFreePorts as exc:
                raise StackError(str(exc)) from None

        started = time.monotonic()
        deadline = started + timeout_s
        for name in services:
            _svc_dir(root, name).mkdir(parents=True, exist_ok=True)
        secure_block: dict[str, Any] | None = None
        if secure:
            from devtools import certs  # cryptography (the dev extra) is needed only here

            tls = certs.write(root / "tls")
            secure_block = {
                **{name: _address(secure_ports[name]) for name in services},
                "ca": str(tls.ca), "client_certfile": str(tls.client_cert), "client_keyfile": str(tls.client_key),
                "mechanism": SECURE_MECHANISM, "username": SECURE_USER,
                "password": secrets.token_urlsafe(18),
            }
            extra["zookeeper"] = {**_zookeeper_tls(secure_ports["zookeeper"], tls), **extra.get("zookeeper", {})}
            for name in broker_names:
                listener = _secure_listener(client_ports[name], secure_ports[name], controller_ports[name], tls)
                extra[name] = {**listener, **extra.get(name, {})}
        _write_configs(root, client_ports, controller_ports, extra)
        cluster_ids = {name: _cluster_id() for name in broker_names}
        state = {"dir": str(root), "created_at": time.time(), "services": {}}
        launched: list[int] = []
        try:
            # ZooKeeper boots while the brokers' storage is formatted: JVM start-up
            # dominates, so overlapping them roughly halves the wall time.
            commands = {"zookeeper": _zookeeper_command(java, root, ZOOKEEPER_HEAP)}
            commands.update({n: _kafka_command(java, root, n, KAFKA_HEAP) for n in broker_names})
            launch_times: dict[str, float] = {}

            def start(name: str) -> None:
                _say(f"starting {name} on {_address(client_ports[name])}")
                pid = _launch(root, name, commands[name])
                launched.append(pid)
                launch_times[name] = time.monotonic()
                state["services"][name] = {
                    "address": _address(client_ports[name]),
                    "port": client_ports[name],
                    "controller_port": controller_ports.get(name),
                    "secure_port": secure_ports.get(name),
                    "cluster_id": cluster_ids.get(name),
                    "pid": pid,
                    "config": str(_config_path(root, name)),
                    "log": str(_log_path(root, name)),
                    "command": commands[name],
                    "started_at": time.time(),
                }
                # Recorded at once, so `stack down` finds it even if this process dies.
                _write_json(root / STATE_FILE, state)

            start("zookeeper")
            _say(f"formatting the storage of {', '.join(broker_names)}")
            _format_brokers(root, java, cluster_ids, deadline, secure_block["password"] if secure_block else None)
            for name in broker_names:
                start(name)
            for name in services:
                svc = state["services"][name]
                _wait_ready(root, name, svc["pid"], svc["port"], deadline)
                _say(f"{name} ready in {time.monotonic() - launch_times[name]:.1f}s")
            if secure_block is not None:
                _wait_ready(root, "zookeeper", state["services"]["zookeeper"]["pid"], secure_ports["zookeeper"],
                            deadline, zookeeper_tls=secure_block)
                for name in broker_names:  # a SCRAM login over TLS, as every secure client will do it
                    svc = state["services"][name]
                    _wait_ready(root, name, svc["pid"], secure_ports[name], deadline,
                                client=secure_client_properties(secure_block))
                _say(f"SASL_SSL listeners and ZooKeeper TLS on {secure_block['zookeeper']} ready "
                     f"({SECURE_MECHANISM}, user {SECURE_USER}, CA {secure_block['ca']})")
        except BaseException:
            # No orphan JVM: whatever this call started goes, the logs stay.
            _kill([p for p in launched if _alive(p)])
            (root / STATE_FILE).unlink(missing_ok=True)
            raise
        addresses: dict[str, Any] = {name: _address(client_ports[name]) for name in SERVICES}
        addresses["clusters"] = {cluster_alias(name): _address(client_ports[name]) for name in broker_names}
        if secure_block is not None:
            addresses["secure"] = secure_block
        _write_json(root / STACK_FILE, addresses)
        _say(f"up in {time.monotonic() - started:.1f}s: {root / STACK_FILE}")
        return addresses


def down(dir: Path, timeout_s: float = 30) -> list[str]:
    """Stop the processes recorded in dir's state file and remove their data and the
    state files (logs and configs stay). Returns the services that were running."""
    root = Path(dir).resolve()
    if not root.is_dir():
        return []
    with _locked(root):
        state = _read_state(root) or {}
        live = _live_services(state)
        if live:
            _say(f"stopping {', '.join(live)}")
            _terminate(list(live.values()), timeout_s)
        leftover = [n for n, p in live.items() if _alive(p)]
        if leftover:
            raise StackError(f"could not stop {', '.join(leftover)} in {root}")
        for name in _services(state):
            shutil.rmtree(_data_dir(root, name), ignore_errors=True)
        (root / STATE_FILE).unlink(missing_ok=True)
        (root / STACK_FILE).unlink(missing_ok=True)
        return list(live)


def status(dir: Path) -> dict[str, dict[str, Any]]:
    """Per service {"address", "pid", "running"}; empty when no stack was started in dir."""
    state = _read_state(Path(dir).resolve()) or {}
    result: dict[str, dict[str, Any]] = {}
    for name in _services(state):
        svc = state.get("services", {}).get(name)
        if svc is None:
            continue
        result[name] = {
            "address": svc["address"],
            "pid": svc.get("pid"),
            "running": _owned(svc.get("pid"), svc["config"]),
        }
    return result


def _service_state(root: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    state = _read_state(root)
    if name not in _services(state):
        raise StackError(f"unknown service {name!r}; expected one of {_services(state)}")
    if state is None or name not in state.get("services", {}):
        raise StackError(f"no stack in {root}; run `ureplicator stack up` first")
    return state, state["services"][name]


def stop_service(dir: Path, name: str, timeout_s: float = 30) -> None:
    """Stop one service cleanly (SIGTERM; SIGKILL after timeout_s), keeping its data."""
    root = Path(dir).resolve()
    with _locked(root):
        state, svc = _service_state(root, name)
        if _owned(svc.get("pid"), svc["config"]):
            _say(f"stopping {name} (pid {svc['pid']})")
            _terminate([int(svc["pid"])], timeout_s)
        svc["pid"] = None
        _write_json(root / STATE_FILE, state)


def kill_service(dir: Path, name: str) -> None:
    """SIGKILL one service (a crash), keeping its data."""
    root = Path(dir).resolve()
    with _locked(root):
        state, svc = _service_state(root, name)
        if _owned(svc.get("pid"), svc["config"]):
            _say(f"killing {name} (pid {svc['pid']})")
            _kill([int(svc["pid"])])
        svc["pid"] = None
        _write_json(root / STATE_FILE, state)


def start_service(dir: Path, name: str, timeout_s: float = 60) -> str:
    """Start a stopped service again on the same port with the same data; returns its
    address. A no-op when it is already running."""
    root = Path(dir).resolve()
    with _locked(root):
        state, svc = _service_state(root, name)
        if _owned(svc.get("pid"), svc["config"]):
            return str(svc["address"])
        ports = [p for p in (svc["port"], svc.get("controller_port"), svc.get("secure_port")) if p]
        # Sockets of the previous process can linger for a moment after it is gone.
        grace = time.monotonic() + min(5.0, timeout_s / 2)
        busy = [p for p in ports if not _port_free(p)]
        while busy and time.monotonic() < grace:
            time.sleep(0.2)
            busy = [p for p in ports if not _port_free(p)]
        if busy:
            raise StackError(
                f"cannot restart {name}: port {busy[0]} is already in use on {HOST}" + _port_holders(busy[0])
            )
        with open(_log_path(root, name), "a") as log:
            log.write(f"\n===== ureplicator stack: restarting {name} at {time.ctime()} =====\n")
            log_offset = log.tell()
        _say(f"starting {name} on {svc['address']}")
        started = time.monotonic()
        pid = _launch(root, name, svc["command"])
        svc["pid"] = pid
        svc["started_at"] = time.time()
        _write_json(root / STATE_FILE, state)
        try:
            _wait_ready(root, name, pid, svc["port"], started + timeout_s, log_offset)
        except BaseException:
            _kill([pid] if _alive(pid) else [])
            svc["pid"] = None
            _write_json(root / STATE_FILE, state)
            raise
        _say(f"{name} ready in {time.monotonic() - started:.1f}s")
        return str(svc["address"])


def service_logs(dir: Path, lines: int = 50) -> dict[str, str]:
    """The last lines of each service's log (for test failure reports)."""
    root = Path(dir).resolve()
    names = _services(_read_state(root))
    return {name: _tail(_log_path(root, name), lines) for name in names if _log_path(root, name).exists()}


def default_dir() -> Path:
    return jvm.CACHE_DIR / "stack"


if __name__ == "__main__":
    import sys

    from devtools.stack_cli import main

    sys.exit(main())
