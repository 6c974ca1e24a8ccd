"""Exactly-once mode on the controller's side: the pipeline's delivery mode, and fencing departed workers.

* **Mode.** A worker whose ``worker.exactly_once`` differs from the recorded mode refuses
  to start (``worker/mirror.py``, ``_check_mode``): a pipeline half at-least-once and half
  exactly-once would read its start positions from two different groups. The node is
  ``<root>/mode``, ``{"exactly_once": true|false}`` (``worker/transactions.py`` reads the
  same node; the two packages may not import each other).
* **Fencing joins the hand-off gate** (KIP-618's zombie fencing, on ZooKeeper
  generations). A departed worker (its assignment node is there, its registration is
  gone) may still be alive — frozen, partitioned — with a transaction open that it could
  commit later. Its partitions are withheld, and its assignment node kept, until its
  transactional id is fenced: a throwaway producer with that id runs
  ``init_transactions``, which bumps the id's epoch and aborts whatever it left open
  (librdkafka has no fence-producers admin call). The fence runs on a thread of its own
  (:class:`Fencer`), never in the reconcile round, and is recorded at
  ``<root>/fences/<worker>``. A new leader finds the departed worker's assignment node
  still there, so it fences again: an undone fence is always finished.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException
from kazoo.exceptions import KazooException, NodeExistsError

from ureplicator.common import kafka, logs
from ureplicator.common.config import Config

MODE_NODE = "mode"
FENCES_NODE = "fences"
_FENCE_TIMEOUT_S = 30.0


def record_mode(client: Any, root: str, exactly_once: bool, log: Any) -> None:
    """Write ``<root>/mode`` when it is missing or says otherwise; a ZooKeeper error is logged (next term retries)."""
    path = f"{root}/{MODE_NODE}"
    data = json.dumps({"exactly_once": exactly_once}).encode()
    try:
        try:
            client.create(path, data, makepath=True)
        except NodeExistsError:
            current, _ = client.get(path)
            if current != data:
                client.set(path, data)
                log.warning("delivery_mode_changed", exactly_once=exactly_once,
                            consequence="workers started with the other mode refuse to start")
    except KazooException as exc:
        log.warning("delivery_mode_not_recorded", error=logs.error_text(exc))


class Fencer:
    """Fence departed workers' transactional ids beside the reconcile loop; ``unfenced`` is what the gate asks."""

    def __init__(self, config: Config, client: Any, root: str, wake: Callable[[], None], log: Any,
                 init: Callable[[str], None] | None = None,
                 spawn: Callable[[Callable[[], None], str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self._config = config
        self._client = client
        self._root = root
        self._wake = wake
        self._log = log
        self._init = init or self._init_transactions  # tests pass a fake
        # Runs a fence beside the reconcile loop: a daemon thread; tests run it when they choose.
        self._spawn = spawn or _daemon_thread
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._fenced: set[str] = set()
        self._running: set[str] = set()

    def transactional_id(self, worker: str) -> str:
        worker_cfg = self._config.worker
        return kafka.transactional_id(worker_cfg.transactional_id_prefix, self._config.consumer_group, worker,
                                      self._config.route_id)  # the route's own: never another route's worker

    def unfenced(self, departed: set[str], live: set[str]) -> set[str]:
        """The workers to hold: ``departed`` ones not fenced yet, and ``live`` ones whose fence still runs.

        Starts the fences still needed. A worker that registered again fenced its predecessor
        itself (``init_transactions`` with the same id), so its record here is forgotten: a
        later departure fences anew. But a fence already running when it registered again goes
        on, and is held until it ends: the fence's ``init_transactions`` meets the worker's
        open transaction, and librdkafka retries it every 500 ms while the coordinator aborts
        that transaction, fencing each new producer the worker takes (the exactly-once soak:
        4 and 7 producers in a row after a worker and the destination were frozen together).
        A worker without partitions opens no transaction, so the fence's next try ends it.
        """
        with self._lock:
            self._fenced -= live
            todo = departed - self._fenced - self._running
            self._running |= todo
            waiting = (departed - self._fenced) | (live & self._running)
        for worker in sorted(todo):
            self._spawn(functools.partial(self._fence, worker), f"fence-{worker}")
        return waiting

    def _fence(self, worker: str) -> None:
        txn_id = self.transactional_id(worker)
        started = self._clock()
        try:
            self._record(worker, {"transactional_id": txn_id, "state": "fencing"})
            self._init(txn_id)
            self._record(worker, {"transactional_id": txn_id, "state": "fenced",
                                  "fenced_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        except (KafkaException, KazooException) as exc:
            self._log.warning("transactional_id_fence_failed", worker=worker, transactional_id=txn_id,
                              error=logs.error_text(exc),
                              consequence="its partitions stay withheld; retried next round")
            with self._lock:
                self._running.discard(worker)
            self._sleep(1.0)  # the next round retries; never a tight loop against a cluster that is down
            self._wake()
            return
        with self._lock:
            self._running.discard(worker)
            self._fenced.add(worker)
        self._log.info("transactional_id_fenced", worker=worker, transactional_id=txn_id,
                       duration_s=round(self._clock() - started, 3))
        self._wake()

    def _init_transactions(self, txn_id: str) -> None:
        producer = kafka.producer(self._config.destination, f"ureplicator-{self._config.pipeline}-fencer",
                                  **{"transactional.id": txn_id, "enable.idempotence": True})
        try:
            producer.init_transactions(_FENCE_TIMEOUT_S)
        finally:
            producer.flush(0)

    def _record(self, worker: str, doc: dict[str, Any]) -> None:
        path = f"{self._root}/{FENCES_NODE}/{worker}"
        data = json.dumps(doc).encode()
        try:
            self._client.create(path, data, makepath=True)
        except NodeExistsError:
            self._client.set(path, data)


def _daemon_thread(run: Callable[[], None], name: str) -> None:
    threading.Thread(target=run, name=name, daemon=True).start()
