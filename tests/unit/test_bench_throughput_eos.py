"""The exactly-once throughput comparison: MirrorMaker 2's settings, the ratios and the rendered section."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from bench import mm2, throughput
from bench.throughput import Dataset, Run


def test_mm2_exactly_once_is_enabled_per_target_cluster_only_when_asked() -> None:
    plain = mm2.properties("src1", "s:1", "d:1", "t")
    exact = mm2.properties("src1", "s:1", "d:1", "t", exactly_once=True)
    assert not any("exactly.once" in key for key in plain)
    assert exact[f"{mm2.DESTINATION}.exactly.once.source.support"] == "enabled"
    assert {k: v for k, v in exact.items() if "exactly.once" not in k} == plain


def _run(variant: str, rate: float, cpu: float) -> Run:
    run = Run(variant, 1, "100B", 1, 1, 1_000_000, ok=True, records_per_s=rate, cpu_s_per_m=cpu,
              cpu_s_per_m_without_compiler=cpu, window_s=60.0, cpu_s=cpu * rate * 60 / 1e6)
    run.extra["end"] = {"records_checked": 123}
    return run


def test_the_summary_sets_exactly_once_against_our_own_rate_and_mirrormaker2s() -> None:
    runs = [_run("ureplicator", 200_000, 1.5), _run("ureplicator-eos", 170_000, 2.0),
            _run("mirrormaker2-eos", 50_000, 8.0)]
    summary = throughput.summarize(runs, [Dataset("100B", 100, 1_000_000)], [1])
    ratios = summary["datasets"]["100B"]["ratios"]
    assert ratios["ureplicator-eos/ureplicator records_per_s"] == 0.85
    assert ratios["ureplicator-eos/mm2-eos records_per_s"] == 3.4
    assert ratios["ureplicator-eos/mm2-eos cpu_s_per_m"] == 0.25


def test_the_eos_section_leads_with_the_least_favourable_ratio_of_each_kind(tmp_path: Path) -> None:
    runs = [_run("ureplicator", 200_000, 1.5), _run("ureplicator-eos", 150_000, 2.0),
            _run("mirrormaker2-eos", 50_000, 8.0)]
    kb = [Run(r.variant, 1, "1KB", 1, 2, 100_000, ok=True, records_per_s=r.records_per_s / 4,
              cpu_s_per_m=r.cpu_s_per_m, cpu_s_per_m_without_compiler=r.cpu_s_per_m) for r in runs]
    kb[1].records_per_s = 45_000  # 0.9x own at 1 KB: 100 B's 0.75x is the worse reading
    summary = throughput.summarize([*runs, *kb], [Dataset("100B", 100, 1), Dataset("1KB", 1024, 1)], [1])
    entry = {"machine": {"cpu_model": "cpu", "cores": 2, "ram_bytes": 24 * 2**30, "python": "3.11", "java": "17",
                         "kafka_brokers": "3.9.1", "mirrormaker2": "3.9.1", "librdkafka": "2.12.1"},
             "settings": {"warmup_s": 40, "steady_s": 60, "partitions": 16, "worker_repo": "/work/main"},
             "summary": summary, "runs": [asdict(r) for r in [*runs, *kb]], "rounds_done": 1, "duration_s": 600.0,
             "code": {"commit": "abc1234", "worker_common_modified": False},
             "date": "2026-11-25T00:00:00+00:00", "load_at_start": [0.1, 0.1, 0.1], "command": "c",
             "results_file": "bench/results/throughput-eos-2026-11-25.json", "notes": []}
    text = throughput.render_eos_section(entry)
    assert "exactly-once runs at 0.75× our own at-least-once rate at 100 B" in text
    assert "3.00× MirrorMaker 2's exactly-once rate at 100 B" in text
    assert text.count("| 100 B |") == 4 and text.count("| 1 KB |") == 4  # 3 variants + 1 ratio row each


def test_exactly_once_selects_its_variants_and_one_worker() -> None:
    args = throughput.parse_args(["--exactly-once"])
    assert args.variants == list(throughput.EOS_VARIANTS) and args.scale == [1]
    with pytest.raises(SystemExit):
        throughput.parse_args(["--variants", "ureplicator,nope"])
