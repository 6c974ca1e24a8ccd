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
        # Per route (docs/routes.md); the families above describe the deployment's first route.
        self.route_live_workers = Gauge("ureplicator_controller_route_live_workers",
                                        "Workers registered for the route", ["route"], registry=r)
        self.route_assigned = Gauge("ureplicator_controller_route_assigned_partitions",
                                    "Active partitions of the route with an owner", ["route"], registry=r)
        self.route_unassigned = Gauge("ureplicator_controller_route_unassigned_partitions",
                                      "Active partitions of the route without an owner", ["route"], registry=r)
        self.route_waiting = Gauge("ureplicator_controller_route_waiting_for_workers",
                                   "1 while the route is active and has no worker (a state, not an error)",
                                   ["route"], registry=r)
        self.route_paused = Gauge("ureplicator_controller_route_paused", "1 while the route is paused", ["route"],
                                  registry=r)

    def observe(self, state: Any) -> None:
        self.live_workers.set(state.live_workers)
        self.assigned.set(state.assigned)
        self.unassigned.set(state.unassigned)
        self.generation.set(state.generation)

    def observe_route(self, route: str, state: Any, paused: bool) -> None:
        self.route_live_workers.labels(route).set(state.live_workers)
        self.route_assigned.labels(route).set(state.assigned)
        self.route_unassigned.labels(route).set(state.unassigned)
        self.route_waiting.labels(route).set(int(not paused and state.live_workers == 0))
        self.route_paused.labels(route).set(int(paused))

    def forget_route(self, route: str) -> None:
        """Drop a deleted route's series (no stale gauges)."""
        for family in (self.route_live_workers, self.route_assigned, self.route_unassigned, self.route_waiting,
                       self.route_paused):
            try:
                family.remove(route)
            except KeyError:
                pass
