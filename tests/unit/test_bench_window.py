"""bench/window.py and the pure parts of bench/throughput.py: window edges, CPU arithmetic, count check, summary."""

from __future__ import annotations

import os
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from bench import throughput
from bench.throughput import Dataset, Run
from bench.window import (
    Point,
    Threads,
    compiler_cpu,
    is_compiler_thread,
    measure,
    rate_spread,
    thread_cpu_between,
    thread_group,
    threads,
)


@pytest.mark.parametrize(("warmup", "steady"), [("-1", "60"), ("40", "0"), ("0", "-5")])
def test_the_command_refuses_negative_or_empty_windows(warmup: str, steady: str) -> None:
    with pytest.raises(SystemExit):
        throughput.parse_args(["--warmup", warmup, "--steady", steady])


def test_measure_uses_only_the_edge_samples() -> None:
    got = measure(Point(10.0, 1_000_000, 50.0), Point(70.0, 19_000_000, 122.0), compiler_s=12.0)
    assert got["window_s"] == 60.0
    assert got["window_records"] == 18_000_000
    assert got["records_per_s"] == 300_000.0
    assert got["cpu_s"] == 72.0
    assert got["cpu_s_per_m"] == pytest.approx(4.0)
    assert got["cpu_s_per_m_without_compiler"] == pytest.approx(60.0 / 18, abs=1e-3)
    assert got["compiler_cpu_s"] == 12.0
    assert set(got) <= {f.name for f in fields(Run)}  # the names a run records them under


def test_measure_caps_compiler_cpu_at_the_process_cpu() -> None:
    """Thread samples are up to a second stale; compiler CPU can never exceed what the process used."""
    got = measure(Point(0.0, 0, 0.0), Point(1.0, 1_000_000, 2.0), compiler_s=3.0)
    assert got["compiler_cpu_s"] == 2.0
    assert got["cpu_s_per_m_without_compiler"] == 0.0


@pytest.mark.parametrize(("opened", "closed", "message"), [
    (Point(5.0, 0, 0.0), Point(5.0, 10, 1.0), "closed"),
    (Point(0.0, 10, 0.0), Point(5.0, 10, 1.0), "no records"),
])
def test_measure_refuses_empty_windows(opened: Point, closed: Point, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        measure(opened, closed, 0.0)


def test_compiler_threads_are_recognized_by_their_truncated_names() -> None:
    assert is_compiler_thread("C2 CompilerThre")
    assert is_compiler_thread("C1 CompilerThre")
    assert is_compiler_thread("C# CompilerThre")
    assert not is_compiler_thread("GC Thread#0")
    assert not is_compiler_thread("main")
    assert not is_compiler_thread("rdk:broker#")


def test_thread_group_folds_digits_and_names_the_first_thread_main() -> None:
    assert thread_group("rdk:broker3", main=False) == "rdk:broker#"
    assert thread_group("C2 CompilerThre", main=False) == "C# CompilerThre"
    assert thread_group("python", main=True) == "main"


def test_threads_that_exit_mid_window_keep_their_last_seen_cpu() -> None:
    ledger: Threads = {}
    ledger.update({(1, 1): ("python", 10.0, 0.0), (1, 7): ("C2 CompilerThre", 4.0, 0.0)})
    start = dict(ledger)
    ledger.update({(1, 7): ("C2 CompilerThre", 9.0, 0.0)})  # sampled once more, then it exits
    ledger.update({(1, 1): ("python", 30.0, 0.0), (1, 8): ("C1 CompilerThre", 2.0, 0.0)})  # a new compiler thread
    groups = thread_cpu_between(start, dict(ledger))
    assert groups == {"main": 20.0, "C# CompilerThre": 7.0}
    assert compiler_cpu(groups) == 7.0


def test_this_process_has_its_threads_cpu_and_run_queue_wait() -> None:
    stats = threads([os.getpid(), 2**22 + 1])  # the second pid does not exist
    name, cpu, wait = stats[(os.getpid(), os.getpid())]
    assert cpu > 0 and wait >= 0 and name


def test_rate_spread_splits_the_window_into_equal_parts() -> None:
    series = [(float(t), 1000 * t) for t in range(0, 31)]
    assert rate_spread(series, 3) == [1000.0, 1000.0, 1000.0]
    slowing = [(0.0, 0), (10.0, 30_000), (20.0, 50_000), (30.0, 60_000)]
    assert rate_spread(slowing, 3) == [3000.0, 2000.0, 1000.0]
    assert rate_spread([(0.0, 5)], 3) == []


def test_dataset_targets_spread_the_backlog_round_robin() -> None:
    ds = Dataset("100B", 100, 35)
    targets = ds.targets()
    assert len(targets) == throughput.PARTITIONS
    assert sum(targets) == 35
    assert max(targets) - min(targets) <= 1


def test_plan_runs_puts_the_raw_pair_last_for_each_dataset() -> None:
    a, b = Dataset("100B", 100, 10), Dataset("1KB", 1024, 10)
    order = throughput.plan_runs([a, b], ["ureplicator", "mirrormaker2", "raw"], [1, 2, 4], 1)
    assert [(ds.label, v, n) for _, ds, v, n in order] == [
        ("100B", "ureplicator", 1), ("100B", "mirrormaker2", 1),
        ("100B", "ureplicator", 2), ("100B", "mirrormaker2", 2),
        ("100B", "ureplicator", 4), ("100B", "mirrormaker2", 4), ("100B", "raw", 1),
        ("1KB", "ureplicator", 1), ("1KB", "mirrormaker2", 1), ("1KB", "raw", 1),
    ]


def test_plan_runs_alternates_which_side_runs_first_from_round_to_round() -> None:
    a = Dataset("100B", 100, 10)
    order = throughput.plan_runs([a], ["ureplicator", "mirrormaker2"], [1], 3)
    assert [(rnd, v) for rnd, _, v, _ in order] == [
        (1, "ureplicator"), (1, "mirrormaker2"), (2, "mirrormaker2"), (2, "ureplicator"),
        (3, "ureplicator"), (3, "mirrormaker2"),
    ]


def _run(variant: str, dataset: str, rate: float, cpu_per_m: float, without: float, scale: int = 1,
         ok: bool = True) -> Run:
    run = Run(variant, scale, dataset, 1, 1, 1_000_000, ok=ok, records_per_s=rate, window_s=60.0,
              window_records=int(rate * 60), cpu_s=cpu_per_m * rate * 60 / 1e6,
              compiler_cpu_s=(cpu_per_m - without) * rate * 60 / 1e6, cpu_s_per_m=cpu_per_m,
              cpu_s_per_m_without_compiler=without)
    run.extra = {"rate_thirds": [rate, rate, rate], "machine_busy_pct": 90.0, "thread_cpu_window_s": {"main": 1.0}}
    if not ok:
        run.error = "count check failed"
    return run


def test_summary_ratios_and_headline_take_the_least_favourable_reading() -> None:
    datasets = [Dataset("100B", 100, 10), Dataset("1KB", 1024, 10)]
    runs = [
        _run("ureplicator", "100B", 300_000, 4.0, 4.0), _run("mirrormaker2", "100B", 400_000, 3.0, 2.5),
        _run("raw", "100B", 600_000, 2.0, 2.0),
        _run("ureplicator", "1KB", 200_000, 6.0, 6.0), _run("mirrormaker2", "1KB", 100_000, 12.0, 8.0),
        _run("ureplicator", "100B", 350_000, 5.0, 5.0, scale=2),
        _run("mirrormaker2", "100B", 420_000, 3.5, 3.0, scale=2),
        _run("mirrormaker2", "100B", 0, 0, 0, scale=2, ok=False),
    ]
    summary = throughput.summarize(runs, datasets, [1, 2])
    ratios = summary["datasets"]["100B"]["ratios"]
    assert ratios["ureplicator/mm2 records_per_s"] == 0.75
    assert ratios["ureplicator/mm2 cpu_s_per_m_without_compiler"] == 1.6
    assert ratios["ureplicator/raw records_per_s"] == 0.5
    head = summary["headline"]
    assert (head["rate_dataset"], head["rate_ratio"]) == ("100B", 0.75)
    assert (head["cpu_dataset"], head["cpu_ratio_without_compiler"]) == ("100B", 1.6)
    point = summary["scaling"]["points"]["2"]
    assert point["mirrormaker2"]["runs"] == 1 and point["mirrormaker2"]["failed"] == 1
    assert point["ratios"]["records_per_s"] == round(350_000 / 420_000, 3)


def test_render_produces_every_table_from_the_entry() -> None:
    datasets = [Dataset("100B", 100, 10), Dataset("1KB", 1024, 10)]
    runs = [_run("ureplicator", "100B", 300_000, 4.0, 4.0), _run("mirrormaker2", "100B", 400_000, 3.0, 2.5),
            _run("ureplicator", "1KB", 200_000, 6.0, 6.0), _run("mirrormaker2", "1KB", 100_000, 12.0, 8.0),
            _run("ureplicator", "100B", 350_000, 5.0, 5.0, scale=2),
            _run("mirrormaker2", "100B", 420_000, 3.5, 3.0, scale=2), _run("raw", "1KB", 0, 0, 0, ok=False)]
    entry = {
        "date": "2026-11-23T19:00:00+00:00", "command": "python -m bench.throughput", "duration_s": 600.0,
        "load_at_start": (1.0, 1.0, 1.0), "rounds_done": 1, "results_file": "bench/results/x.json",
        "code": {"commit": "abc1234", "worker_common_modified": False},
        "machine": {"cpu_model": "cpu", "cores": 2, "ram_bytes": 2**30, "kernel": "k", "python": "3.11",
                    "confluent_kafka": "2", "librdkafka": "2", "java": "17", "kafka_brokers": "3.9.1",
                    "mirrormaker2": "3.9.1"},
        "settings": {"worker_repo": "/work/main", "warmup_s": 40.0, "steady_s": 60.0, "partitions": 16,
                     "broker_heap": "1g", "producer": {"acks": "all"}, "mm2_producer": {"acks": "all"},
                     "mirrormaker2_jvm": ["-Xmx512m"]},
        "summary": throughput.summarize(runs, datasets, [1, 2]),
        "runs": [asdict(r) for r in runs],
    }
    text = throughput.render_section(entry)
    assert "0.75× MirrorMaker 2's steady-state rate (one task) at 100 B" in text
    assert "| ureplicator (1 worker) | 300,000 |" in text
    assert "| 2 | 350,000 |" in text
    assert "2 cores" in text
    assert "| raw client pair | failed: count check failed |" in text  # never a row of zeros
    assert "oversubscribed" not in text and "quiet before" not in text  # no load figures, no load claim

    # Busy before the first run: other jobs shared the cores. Quiet before, loaded during: our own load.
    entry["runs"][0]["load_before"] = [2.2, 1.0, 1.0]
    entry["runs"][0]["load_window"] = [7.6, 3.0, 1.0]
    entry["load_at_start"] = (1.9, 1.0, 1.0)
    busy = throughput.render_section(entry)
    assert "**The machine was oversubscribed during these runs** (1-minute load average 1.9 before" in busy
    entry["load_at_start"] = (0.0, 0.0, 0.0)
    quiet = throughput.render_section(entry)
    assert "oversubscribed" not in quiet
    assert "quiet before the benchmark (1-minute load average 0.00); the load during the runs (up to 8" in quiet


def test_top_up_covers_the_variant_that_drained_the_backlog_with_margin() -> None:
    assert throughput.top_up_size(1_000_000, 500_000.0, 30, 60) == int(500_000 * 100 * 1.5)
    assert throughput.top_up_size(80_000_000, 1_000.0, 30, 60) == 120_000_000  # never less than 1.5x


def test_check_disk_refuses_a_backlog_the_disk_cannot_hold(tmp_path: Path) -> None:
    ds = Dataset("1KB", 1024, 1_000)
    throughput.check_disk(tmp_path, ds, 2_000)
    with pytest.raises(throughput.BenchError, match="GB of disk"):
        throughput.check_disk(tmp_path, ds, 10**12)


def test_source_index_inverts_the_round_robin_preload() -> None:
    """Record i goes to partition i % P as that partition's (i // P)-th record: the identity check relies on it."""
    parts = throughput.PARTITIONS
    for i in (0, 1, parts - 1, parts, 12_345, 99_999_999 + parts):
        assert throughput.source_index(i // parts, i % parts) == i
    assert throughput.preload_key(7) == b"00000007"
    assert throughput.preload_key(100_000_007) == b"00000007"
