"""Run real controller and worker processes of one pipeline against the test stack."""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devtools.harness import Proc as Process
from devtools.harness import spawn
from devtools.ports import free_port
from ureplicator.controller.client import request

_ids = itertools.count()


@dataclass
class Pipeline:
    """One pipeline (own ZooKeeper root and consumer group) with its processes."""

    services: dict[str, str]
    workdir: Path
    name: str = field(default_factory=lambda: f"it{os.getpid()}x{next(_ids)}")
    overrides: dict[str, Any] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)
    rest_port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def group(self) -> str:
        return f"ureplicator.{self.name}"

    def config_doc(self, **extra: Any) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "pipeline": self.name,
            "zookeeper": {"connect": self.services["zookeeper"], "session_timeout_s": 6},
            "source": {"alias": "src", "bootstrap_servers": self.services["source"]},
            "destination": {"alias": "dst", "bootstrap_servers": self.services["destination"]},
            # No heartbeat topic unless a test asks for one: tests count their pipeline's topics.
            # A short rollout settle (3 s by default): every test's first assignment waits for it.
            "controller": {"rest_host": "127.0.0.1", "rest_port": self.rest_port, "reconcile_interval_s": 1,
                           "heartbeat_interval_s": 0, "initial_assignment_delay_s": 0.5},
            "worker": {"commit_interval_s": 1, "shutdown_timeout_s": 20},
        }
        for section, values in {**self.overrides, **extra}.items():
            if isinstance(values, dict):
                doc.setdefault(section, {}).update(values)
            else:
                doc[section] = values
        return doc

    def write_config(self, label: str, **extra: Any) -> Path:
        path = self.workdir / f"{self.name}-{label}.yaml"
        path.write_text(yaml.safe_dump(self.config_doc(**extra)))
        return path

    def _spawn(self, label: str, args: list[str], env: dict[str, str] | None = None) -> Process:
        proc = spawn(label, [sys.executable, "-m", "ureplicator", *args], self.workdir / f"{self.name}-{label}.log",
                     env=env or {})
        self.processes.append(proc)
        return proc

    def start_controller(self, label: str = "controller", **extra: Any) -> Process:
        proc = self._spawn(label, ["controller", "--config", str(self.write_config(label, **extra))])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.alive(), f"controller exited:\n{proc.tail()}"
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return proc
            except urllib.error.HTTPError as exc:
                # Started, and not ready because a cluster refuses its credentials: what the
                # wrong-password tests want to look at.
                if json.loads(exc.read() or b"{}").get("status") == "credentials refused":
                    return proc
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"controller not healthy:\n{proc.tail()}")

    def start_worker(self, worker_id: str, **extra: Any) -> Process:
        worker = {"id": worker_id, **extra.pop("worker", {})}
        return self._spawn(worker_id, ["worker", "--config", str(self.write_config(worker_id, worker=worker, **extra))])

    def declare_routes(self, clusters: dict[str, str], routes: list[dict[str, Any]]) -> None:
        """Every later process gets ``clusters`` (alias -> bootstrap) and ``routes`` instead of source/destination."""
        self.overrides = {
            **self.overrides, "source": None, "destination": None,
            "clusters": {alias: {"bootstrap_servers": address} for alias, address in clusters.items()},
            "routes": routes,
        }

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        return request(f"{self.url}{path}", method, body, token)

    def stop_all(self) -> None:
        for proc in self.processes:
            proc.terminate(30)  # SIGKILL after 30 s

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.tail(60)}" for p in self.processes)

    def status(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.api("GET", "/topics")[1]))
