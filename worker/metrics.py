"""Prometheus metrics of a worker process (``ureplicator_worker_*``), served by :mod:`worker.probes`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WorkerMetrics:
    """One registry per worker so tests can run several workers in one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.records = Counter(
            "ureplicator_worker_records_mirrored", "Records acknowledged by the destination",
            ["topic"], registry=r,
        )
        self.bytes = Counter(
            "ureplicator_worker_mirrored", "Key+value bytes acknowledged by the destination",
            ["topic"], registry=r, unit="bytes",
        )
        self.skipped = Counter(
            "ureplicator_worker_records_skipped",
            "Records not mirrored: the route's forwarding policy skips their origin",
            ["topic"], registry=r,
        )
        self.produce_errors = Counter(
            "ureplicator_worker_produce_errors", "Records the destination refused (partition stopped)",
            ["topic"], registry=r,
        )
        self.expired = Counter(
            "ureplicator_worker_records_expired",
            "Source records deleted by retention before they were mirrored (committed offset < log start)",
            ["topic"], registry=r,
        )
        self.latency = Histogram(
            "ureplicator_worker_replication_latency_seconds",
            "Destination acknowledgement time minus source record timestamp",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )
        self.in_flight = Gauge(
            "ureplicator_worker_in_flight_bytes", "Bytes sent to the destination and not yet acknowledged",
            registry=r,
        )
        self.generation = Gauge(
            "ureplicator_worker_assignment_generation", "Generation of the applied assignment", registry=r,
        )
        self.partitions = Gauge(
            "ureplicator_worker_partitions_owned", "Source partitions this worker mirrors", registry=r,
        )
        self.lag = Gauge(
            "ureplicator_worker_source_lag_records", "Source end offset minus next offset to mirror",
            ["topic", "partition"], registry=r,
        )
        self.commits = Counter(
            "ureplicator_worker_offset_commits", "Offset commits to the source cluster", ["result"], registry=r,
        )
        self.release_commit_failures = Counter(
            "ureplicator_worker_release_commit_failures",
            "Partitions released without their final commit (after retries): the next owner repeats records",
            registry=r,
        )
        self.rewinds = Counter(
            "ureplicator_worker_partition_rewinds",
            "Partitions restarted from their acknowledged position after purged or abandoned records",
            registry=r,
        )
        self.producer_replacements = Counter(
            "ureplicator_worker_producer_replacements",
            "Destination producers replaced by a fresh one: after a purge (fencing, session loss, release "
            "timeout, stalled producer) or a fatal error (then every record is reported exactly for a while)",
            registry=r,
        )
        self.transactions = Counter(
            "ureplicator_worker_transactions",
            "Exactly-once mode: transactions ended, by outcome (committed, aborted, fatal: producer replaced)",
            ["outcome"], registry=r,
        )
        self.commit_client_replacements = Counter(
            "ureplicator_worker_commit_client_replacements",
            "Commit clients (the worker's group-coordinator connection) opened anew after failed commits",
            registry=r,
        )
