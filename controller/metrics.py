"""Prometheus metrics of a controller replica (``ureplicator_controller_*``), served at ``/metrics``."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ControllerMetrics:
    """One registry per controller so tests can run several in one process."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.leader = Gauge("ureplicator_controller_leader", "1 while this replica is the leader", registry=r)
        self.live_workers = Gauge("ureplicator_controller_live_workers", "Registered workers", registry=r)
        self.assigned = Gauge(
            "ureplicator_controller_assigned_partitions", "Active partitions with an owner", registry=r
        )
        self.unassigned = Gauge(
            "ureplicator_controller_unassigned_partitions",
            "Active partitions without an owner (no worker, capped, or in hand-off)", registry=r,
        )
        self.generation = Gauge("ureplicator_controller_assignment_generation", "Latest generation", registry=r)
        self.rebalances = Counter(
            "ureplicator_controller_rebalances", "Assignment writes by this replica as leader", registry=r
        )
        self.election_errors = Counter(
            "ureplicator_controller_election_errors",
            "Unexpected errors the election thread survived (each one is logged with its traceback)",
            registry=r,
        )
        self.handoff = Histogram(
            "ureplicator_controller_handoff_duration_seconds",
            "From withholding a moving partition until its old owner released it",
            registry=r, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )

    def observe(self, state: Any) -> None:
        self.live_workers.set(state.live_workers)
        self.assigned.set(state.assigned)
        self.unassigned.set(state.unassigned)
        self.generation.set(state.generation)
