"""Prometheus metrics of a controller replica (``ureplicator_controller_*``), served at ``/metrics``.

Every family that describes a route's work carries the label ``route`` (the implicit route of a
config without ``routes`` is ``default``); a replica exports a route's series while it leads and
reconciles that route, and drops them when it stops. Only ``_election_errors_total`` and
``_pool_rounds_total`` have no ``route``: the deployment has one election and one shared pool for
all of its routes.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ControllerMetrics:
    """One registry per controller so tests can run several in one process."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        route = ["route"]
        self.leader = Gauge("ureplicator_controller_leader",
                            "1 while this replica is the leader and reconciles the route", route, registry=r)
        self.live_workers = Gauge("ureplicator_controller_live_workers", "Workers registered for the route", route,
                                  registry=r)
        self.assigned = Gauge(
            "ureplicator_controller_assigned_partitions", "Active partitions of the route with an owner", route,
            registry=r,
        )
        self.unassigned = Gauge(
            "ureplicator_controller_unassigned_partitions",
            "Active partitions of the route without an owner (no worker, capped, or in hand-off)", route, registry=r,
        )
        self.generation = Gauge("ureplicator_controller_assignment_generation", "Latest generation of the route",
                                route, registry=r)
        self.rebalances = Counter(
            "ureplicator_controller_rebalances", "Assignment writes for the route by this replica as leader", route,
            registry=r,
        )
        self.election_errors = Counter(
            "ureplicator_controller_election_errors",
            "Unexpected errors the election thread survived (each one is logged with its traceback)",
            registry=r,
        )
        self.handoff = Histogram(
            "ureplicator_controller_handoff_duration_seconds",
            "From withholding a moving partition until its old owner released it",
            route, registry=r, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )
        self.waiting = Gauge("ureplicator_controller_route_waiting_for_workers",
                             "1 while the route is active and has no worker (a state, not an error)", route,
                             registry=r)
        self.paused = Gauge("ureplicator_controller_route_paused", "1 while the route is paused", route, registry=r)
        # Rounds, so a test (or an operator) can wait for "N rounds later" instead of for N seconds.
        self.reconcile_rounds = Counter(
            "ureplicator_controller_reconcile_rounds",
            "Reconcile rounds of the route completed by this replica as leader", route, registry=r,
        )
        self.topic_sync_rounds = Counter(
            "ureplicator_controller_topic_sync_rounds",
            "Topic-sync passes of the route (Kafka admin reads, topics created or grown) completed as leader",
            route, registry=r,
        )
        # The shared pool's rounds are the deployment's, not a route's: no ``route`` label.
        self.pool_rounds = Counter(
            "ureplicator_controller_pool_rounds",
            "Rounds of the shared worker pool's bindings completed by this replica as leader", registry=r,
        )

    def observe(self, route: str, state: Any, paused: bool) -> None:
        """One reconcile round of ``route``: its workers, partitions and generation."""
        self.leader.labels(route).set(1)  # each round, so a term that ends late never hides a new one
        self.live_workers.labels(route).set(state.live_workers)
        self.assigned.labels(route).set(state.assigned)
        self.unassigned.labels(route).set(state.unassigned)
        self.generation.labels(route).set(state.generation)
        self.waiting.labels(route).set(int(not paused and state.live_workers == 0))
        self.paused.labels(route).set(int(paused))

    def forget_route(self, route: str) -> None:
        """Drop a route's series when this replica stops reconciling it (no stale gauges, no stale leader)."""
        for family in (self.leader, self.live_workers, self.assigned, self.unassigned, self.generation,
                       self.rebalances, self.handoff, self.waiting, self.paused, self.reconcile_rounds,
                       self.topic_sync_rounds):
            try:
                family.remove(route)
            except KeyError:
                pass
