"""Win the controller election and, while leader, reconcile desired topics into worker assignments.

Every controller replica runs a :class:`Leadership`; exactly one holds the
kazoo ``Election`` lock and runs :meth:`Leadership._reconcile` whenever a
watch fires or ``controller.reconcile_interval_s`` passes. Watches never do
work themselves: they only set ``_wake`` (reconcile, don't diff events).

A leader whose ZooKeeper connection is SUSPENDED stops writing at once; one
whose session is LOST leaves the leader function, so it cannot act after a
successor was elected. Every assignment write also checks the leader's own
election node, so a stale leader's write is refused by ZooKeeper itself.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from common import logs, zk
from common.config import Config
from common.zkschema import Assignment, Paths, TopicPartition
from controller.assignment import assign, gate_handoff


@dataclass
class LeaderState:
    """What the REST API and metrics read about this replica's leadership."""

    is_leader: bool = False
    generation: int = 0
    last_reconcile: float = 0.0
    rebalances: int = 0
    assigned: int = 0
    unassigned: int = 0
    withheld: list[TopicPartition] = field(default_factory=list)


class Leadership:
    """Contend for leadership in a background thread; reconcile while leader."""

    def __init__(self, config: Config, client: KazooClient, identifier: str) -> None:
        self._config = config
        self._client = client
        self._paths = Paths(config.root)
        self._identifier = identifier
        self._election = client.Election(self._paths.election, identifier)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._connected = threading.Event()
        self._connected.set()
        self._session_lost = threading.Event()
        self._status_watched: set[str] = set()
        self.state = LeaderState()
        self._log = logs.get(__name__, pipeline=config.pipeline, controller=identifier)
        self._thread = threading.Thread(target=self._contend, name="leader-election", daemon=True)
        client.add_listener(self._on_connection)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._election.cancel()
        self._thread.join(timeout_s)

    def request_reconcile(self) -> None:
        self._wake.set()

    def leader_id(self) -> str | None:
        try:
            contenders = self._election.contenders()
        except KazooException:
            return None
        return contenders[0] if contenders else None

    # --- election ----------------------------------------------------------------------------

    def _on_connection(self, state: str) -> None:
        # Runs on kazoo's event thread: set flags only, never block.
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
            if state == KazooState.LOST:
                self._session_lost.set()
        self._wake.set()

    def _contend(self) -> None:
        while not self._stop.is_set():
            try:
                self._election.run(self._lead)
            except KazooException as exc:
                self._log.warning("election_failed", error=str(exc))
            self.state.is_leader = False
            if not self._stop.is_set():
                self._connected.wait(1.0)
                time.sleep(0.2)

    def _lead(self) -> None:
        self._session_lost.clear()
        fence = f"{self._election.lock.path}/{self._election.lock.node}"
        self.state.is_leader = True
        self._log.info("leadership_acquired", fence=fence)
        self._watch()
        try:
            while not self._stop.is_set() and not self._session_lost.is_set():
                if self._connected.is_set():
                    try:
                        self._reconcile(fence)
                    except zk.TransactionFailed as exc:
                        # Our election node is gone: someone else may lead now.
                        self._log.warning("leadership_fenced", error=str(exc))
                        return
                    except KazooException as exc:
                        self._log.warning("reconcile_failed", error=str(exc))
                self._wake.wait(self._config.controller.reconcile_interval_s)
                self._wake.clear()
        finally:
            self.state.is_leader = False
            self._log.info("leadership_released")

    def _watch(self) -> None:
        # ChildrenWatch re-arms itself and passes the full list; we only need the signal.
        self._status_watched = set()
        for path in (self._paths.workers, self._paths.topics):
            self._client.ChildrenWatch(path, self._signal_children)
        self._client.ChildrenWatch(self._paths.status, self._signal_status)

    def _signal_children(self, children: list[str]) -> bool:
        self._wake.set()
        return self.state.is_leader

    def _signal_status(self, children: list[str]) -> bool:
        # Status data changes (a worker confirming a release) drive the hand-off: watch each once.
        for child in set(children) - self._status_watched:
            self._status_watched.add(child)
            self._client.DataWatch(f"{self._paths.status}/{child}", self._signal_data(child))
        self._wake.set()
        return self.state.is_leader

    def _signal_data(self, child: str):  # noqa: ANN202 - returns a kazoo callback
        def on_change(data: bytes | None, stat: object) -> bool:
            self._wake.set()
            if data is None or not self.state.is_leader:
                self._status_watched.discard(child)
                return False
            return True

        return on_change

    # --- reconcile ---------------------------------------------------------------------------

    def _reconcile(self, fence: str) -> None:
        client, paths = self._client, self._paths
        topics = zk.read_topics(client, paths)
        partitions = {
            (name, p)
            for name, record in topics.items()
            if record.state == "active"
            for p in range(record.partitions)
        }
        workers = zk.live_workers(client, paths)
        statuses = zk.read_statuses(client, paths)
        written = zk.read_assignments(client, paths)
        self.state.generation = max([self.state.generation, *(a.generation for a in written.values())])

        desired = assign({w: a.partitions for w, a in written.items()}, workers, partitions)
        applied = {w: s.owned for w, s in statuses.items()}
        plan = gate_handoff(desired, applied)
        changed_workers = [w for w in workers if plan.get(w, frozenset()) != _partitions(written.get(w))]
        departed = [w for w in written if w not in workers]
        withheld = sorted(tp for w in workers for tp in desired.get(w, frozenset()) - plan.get(w, frozenset()))
        self.state.withheld = withheld
        self.state.assigned = sum(len(p) for p in plan.values())
        self.state.unassigned = len(partitions) - self.state.assigned
        self.state.last_reconcile = time.time()
        if not changed_workers and not departed:
            return
        generation = self.state.generation + 1
        changed = {w: Assignment(generation, plan.get(w, frozenset())) for w in changed_workers}
        zk.write_assignments(client, paths, changed, written.keys(), departed, fence)
        self.state.generation = generation
        self.state.rebalances += 1
        self._log.info(
            "assignment_written",
            generation=generation,
            workers=len(workers),
            changed=sorted(changed_workers),
            departed=departed,
            partitions=len(partitions),
            withheld=len(withheld),
        )


def _partitions(assignment: Assignment | None) -> frozenset[TopicPartition]:
    return assignment.partitions if assignment is not None else frozenset()
