"""The verifier benchmark's docs section: rendered from its results JSON, floor and worker rows included."""

from __future__ import annotations

from bench import verifier_bench


def _entry(**extra):
    rounds = [{"seconds": 2.0, "load": 1.0}]
    return {
        "date": "2026-11-25", "results_file": "verifier-2026-11-25.json",
        "machine": {"cores": 2, "cpu_model": "cpu", "ram_bytes": 8 * 2**30, "python": "3.11", "java": "17"},
        "spark": "4.1.1", "master": "local[2]", "driver_memory": "1g", "partitions": 8, "value_bytes": 88,
        "bucket_size": 10_000,
        "pass1": {"records": 2_000_000, "rounds": rounds, "median_s": 4.0, "records_per_s": 500_000,
                  "cpu_s_per_million": 3.3, "floor_fraction": 0.625},
        "start_to_verdict": {"records": 100_000, "rounds": rounds, "median_s": 7.5},
        "incremental": {"base_records": 2_000_000, "new_records": 20_000, "ratio": 0.04,
                        "incremental": {"seconds": 0.2, "read": {"source": 20_000, "destination": 20_000}},
                        "full": {"seconds": 5.0, "read": {"source": 2_020_000, "destination": 2_020_000}}},
        **extra,
    }


def test_the_floor_the_fallback_reader_and_the_worker_each_get_a_row_with_their_verdict():
    text = verifier_bench.render(_entry(
        floor={"source": {"records_per_s": 1_600_000}, "destination": {"records_per_s": 1_600_000},
               "records_per_s": 800_000, "cpu_s_per_million": 1.0},
        pass1_kafka={"records_per_s": 120_000, "floor_fraction": 0.15, "cpu_s_per_million": 12.0},
        worker={"cpu_s_per_million": 1.2, "results_file": "throughput-2026-11-24.json"},
    ))
    assert "| 800,000 verified records/s |" in text
    assert "| pass 1 as a fraction of the floor | 0.62× | ≥ 0.5× | met |" in text
    assert "120,000 records/s (0.15× the floor), 12.0 CPU-s per million" in text
    assert "| 2.8× | ≤ 3× | met |" in text


def test_results_from_before_the_floor_render_as_before():
    text = verifier_bench.render(_entry())
    assert "floor" not in text and "| 500,000 records/s (4.0 s) |" in text


def test_a_missed_target_says_so():
    text = verifier_bench.render(_entry(start_to_verdict={"records": 100_000, "rounds": [{"seconds": 9, "load": 1}],
                                                          "median_s": 9.0}))
    assert "| 9.0 s | < 8 s | **missed** |" in text
    assert "| 500,000 records/s (4.0 s) | 1,000,000 records/s | **missed** |" in text
