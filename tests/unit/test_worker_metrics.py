"""Worker metrics carry the route they describe (worker/metrics.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from ureplicator.worker.metrics import WorkerMetrics, per_route


def test_a_pinned_workers_series_name_its_route_and_the_implicit_one_is_default():
    named, implicit = WorkerMetrics("east"), WorkerMetrics()
    for metrics in (named, implicit):
        metrics.records.labels("orders").inc(3)
        metrics.partitions.set(2)
        metrics.latency.observe(0.02)
    assert named.registry.get_sample_value("ureplicator_worker_records_mirrored_total",
                                           {"route": "east", "topic": "orders"}) == 3
    assert implicit.registry.get_sample_value("ureplicator_worker_partitions_owned", {"route": "default"}) == 2
    exposition = generate_latest(named.registry).decode()
    samples = [line for line in exposition.splitlines() if line.startswith("ureplicator_worker_")]
    assert samples and all('route="east"' in line for line in samples)


def test_a_pool_worker_keeps_its_counters_per_route_and_drops_a_left_routes_gauges():
    # Given one registry for a pool worker's process, which served route a and then route b
    registry = CollectorRegistry()
    metrics_for = per_route(registry)
    assert b'route="' not in generate_latest(registry)  # nothing before a route is served
    a = metrics_for("a")
    a.records.labels("orders").inc(5)
    a.lag.labels("orders", "0").set(7)
    a.partitions.set(1)
    # When it leaves a and serves b
    a.forget()
    b = metrics_for("b")
    b.records.labels("orders").inc(2)
    value = registry.get_sample_value
    # Then a's counter stays and its gauges are gone; b's series are its own
    assert value("ureplicator_worker_records_mirrored_total", {"route": "a", "topic": "orders"}) == 5
    assert value("ureplicator_worker_records_mirrored_total", {"route": "b", "topic": "orders"}) == 2
    assert value("ureplicator_worker_source_lag_records", {"route": "a", "topic": "orders", "partition": "0"}) is None
    assert value("ureplicator_worker_partitions_owned", {"route": "a"}) is None
    assert value("ureplicator_worker_partitions_owned", {"route": "b"}) == 0


def test_the_native_loop_gauge_is_one_series_per_route_with_the_reason_when_it_is_the_python_loop():
    from prometheus_client import generate_latest

    metrics = WorkerMetrics("r1")
    metrics.show_loop(False, "worker.native_loop is off")
    metrics.show_loop(True, "")
    text = generate_latest(metrics.registry).decode()
    assert 'ureplicator_worker_native_loop{reason="",route="r1"} 1.0' in text
    assert "native_loop is off" not in text  # the earlier series is gone, not left at 0
    metrics.show_loop(False, "the C loop's self-test failed on Message.key")
    text = generate_latest(metrics.registry).decode()
    assert ('ureplicator_worker_native_loop{reason="the C loop\'s self-test failed on Message.key",route="r1"} 0.0'
            in text)
    assert 'reason="",route="r1"' not in text
    metrics.forget()
    assert "ureplicator_worker_native_loop{" not in generate_latest(metrics.registry).decode()
