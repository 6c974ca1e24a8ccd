"""Prometheus metrics of a worker process (``ureplicator_worker_*``), served by :mod:`worker.probes`.

Every family carries the label ``route``: the route the worker serves (``default`` for the
implicit route of a config without ``routes``, as the controller's metrics). A pinned worker
serves one route for its life; a shared-pool worker (worker/main.py) serves one at a time
and keeps one registry for the process: :func:`per_route` gives a view of each route it
serves over the same families, and :meth:`WorkerMetrics.forget` drops a left route's
gauges (its counters stay: they only ever grow, and a rate over them stays right).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ureplicator.common.config import IMPLICIT_ROUTE

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class _Families:
    """The families, registered once per registry; each has ``route`` as its first label."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry

        def labelled(*names: str) -> list[str]:
            return ["route", *names]

        self.records = Counter(
            "ureplicator_worker_records_mirrored", "Records acknowledged by the destination",
            labelled("topic"), registry=r,
        )
        self.bytes = Counter(
            "ureplicator_worker_mirrored", "Key+value bytes acknowledged by the destination",
            labelled("topic"), registry=r, unit="bytes",
        )
        self.skipped = Counter(
            "ureplicator_worker_records_skipped",
            "Records not mirrored: the route's forwarding policy skips their origin",
            labelled("topic"), registry=r,
        )
        self.produce_errors = Counter(
            "ureplicator_worker_produce_errors", "Records the destination refused (partition stopped)",
            labelled("topic"), registry=r,
        )
        self.expired = Counter(
            "ureplicator_worker_records_expired",
            "Source records deleted by retention before they were mirrored (committed offset < log start)",
            labelled("topic"), registry=r,
        )
        self.latency = Histogram(
            "ureplicator_worker_replication_latency_seconds",
            "Destination acknowledgement time minus source record timestamp",
            labelled(), registry=r, buckets=_LATENCY_BUCKETS,
        )
        self.in_flight = Gauge(
            "ureplicator_worker_in_flight_bytes", "Bytes sent to the destination and not yet acknowledged",
            labelled(), registry=r,
        )
        self.generation = Gauge(
            "ureplicator_worker_assignment_generation", "Generation of the applied assignment", labelled(),
            registry=r,
        )
        self.partitions = Gauge(
            "ureplicator_worker_partitions_owned", "Source partitions this worker mirrors", labelled(), registry=r,
        )
        self.lag = Gauge(
            "ureplicator_worker_source_lag_records", "Source end offset minus next offset to mirror",
            labelled("topic", "partition"), registry=r,
        )
        self.commits = Counter(
            "ureplicator_worker_offset_commits", "Offset commits to the source cluster", labelled("result"),
            registry=r,
        )
        self.release_commit_failures = Counter(
            "ureplicator_worker_release_commit_failures",
            "Partitions released without their final commit (after retries): the next owner repeats records",
            labelled(), registry=r,
        )
        self.rewinds = Counter(
            "ureplicator_worker_partition_rewinds",
            "Partitions restarted from their acknowledged position after purged or abandoned records",
            labelled(), registry=r,
        )
        self.producer_replacements = Counter(
            "ureplicator_worker_producer_replacements",
            "Destination producers replaced by a fresh one: after a purge (fencing, session loss, release "
            "timeout, stalled producer) or a fatal error (then every record is reported exactly for a while)",
            labelled(), registry=r,
        )
        self.transactions = Counter(
            "ureplicator_worker_transactions",
            "Exactly-once mode: transactions ended, by outcome (committed, aborted, fatal: producer replaced)",
            labelled("outcome"), registry=r,
        )
        self.fetch_stalls = Counter(
            "ureplicator_worker_fetch_stalls",
            "Source partitions whose consumer stopped fetching while the source grew (worker.fetch_stall_s), "
            "by remedy: replace_consumer (a new source consumer)",
            labelled("action"), registry=r,
        )
        self.turns = Counter(
            "ureplicator_worker_loop_turns",
            "Turns of the worker's loop (apply the assignment, fetch and send or wait, commit, report): "
            "a count of the worker's own rounds to wait for, and flat while the loop is stuck",
            labelled(), registry=r,
        )
        self.native_loop = Gauge(
            "ureplicator_worker_native_loop",
            "1: records are copied by the C loop (worker/_native.c); 0: by the Python loop, slower, for the "
            "reason in the label (docs/operations.md, 'Which loop am I on')",
            labelled("reason"), registry=r,
        )
        self.commit_client_replacements = Counter(
            "ureplicator_worker_commit_client_replacements",
            "Commit clients (the worker's group-coordinator connection) opened anew after failed commits",
            labelled(), registry=r,
        )


class _OfRoute:
    """One route's children of a family with more labels than ``route``: ``labels``/``remove`` take the others.

    It remembers what it handed out, so :meth:`WorkerMetrics.forget` can drop the route's series.
    """

    def __init__(self, family: Any, route: str) -> None:
        self._family = family
        self._route = route
        self.handed: set[tuple[str, ...]] = set()

    def labels(self, *values: str) -> Any:
        self.handed.add(values)
        return self._family.labels(self._route, *values)

    def remove(self, *values: str) -> None:
        self.handed.discard(values)
        self._family.remove(self._route, *values)


class WorkerMetrics:
    """One registry per worker process (tests run several workers in one process, each with its own).

    The attributes are the families' children for ``route``: label-less ones take
    ``inc``/``set``/``observe`` directly, the others ``labels(<their other labels>)``.
    """

    def __init__(self, route: str = IMPLICIT_ROUTE, registry: CollectorRegistry | None = None,
                 families: _Families | None = None) -> None:
        self.route = route or IMPLICIT_ROUTE
        if families is None:
            registry = registry or CollectorRegistry()
            families = _Families(registry)
        self.registry = registry
        self._families = f = families
        route = self.route
        self.records = _OfRoute(f.records, route)
        self.bytes = _OfRoute(f.bytes, route)
        self.skipped = _OfRoute(f.skipped, route)
        self.produce_errors = _OfRoute(f.produce_errors, route)
        self.expired = _OfRoute(f.expired, route)
        self.lag = _OfRoute(f.lag, route)
        self.commits = _OfRoute(f.commits, route)
        self.transactions = _OfRoute(f.transactions, route)
        self.fetch_stalls = _OfRoute(f.fetch_stalls, route)
        self.latency = f.latency.labels(route)
        self.in_flight = f.in_flight.labels(route)
        self.generation = f.generation.labels(route)
        self.partitions = f.partitions.labels(route)
        self.release_commit_failures = f.release_commit_failures.labels(route)
        self.rewinds = f.rewinds.labels(route)
        self.producer_replacements = f.producer_replacements.labels(route)
        self.commit_client_replacements = f.commit_client_replacements.labels(route)
        self.turns = f.turns.labels(route)
        self._loop_reason: str | None = None  # the reason label of this route's native_loop series

    def show_loop(self, native: bool, reason: str) -> None:
        """``ureplicator_worker_native_loop``: 1 on the C loop, else 0 with ``reason``; one series per route."""
        label = "" if native else reason[:200]
        if self._loop_reason is not None and self._loop_reason != label:
            try:
                self._families.native_loop.remove(self.route, self._loop_reason)
            except KeyError:
                pass
        self._families.native_loop.labels(self.route, label).set(1 if native else 0)
        self._loop_reason = label

    def forget(self) -> None:
        """Drop this route's gauges: the worker stopped serving it (a scrape shows no stale lag or ownership)."""
        f = self._families
        for family in (f.in_flight, f.generation, f.partitions):
            try:
                family.remove(self.route)
            except KeyError:
                pass
        if self._loop_reason is not None:
            try:
                f.native_loop.remove(self.route, self._loop_reason)
            except KeyError:
                pass
            self._loop_reason = None
        for values in list(self.lag.handed):
            try:
                self.lag.remove(*values)
            except KeyError:
                pass


def per_route(registry: CollectorRegistry) -> Callable[[str], WorkerMetrics]:
    """A pool worker's metrics: the families registered once in ``registry``, and a view per route over them.

    No series exists before a route is served: an unbound pool worker exports no ``route``.
    """
    families = _Families(registry)
    return lambda route: WorkerMetrics(route, registry, families)
