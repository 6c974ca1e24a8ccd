"""bench/latency.py: the arithmetic behind the latency table (windows, percentiles, legs, CPU, verdicts)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from bench import latency


def test_dotted_settings_become_yaml_sections_and_librdkafka_keys_stay_whole() -> None:
    settings = {
        "worker.fetch_wait_ms": 5,
        "worker.batch_size": 200,
        "destination.properties.linger.ms": 1,
        "source.properties.fetch.wait.max.ms": 10,
    }
    assert latency.nested_overrides(settings) == {
        "worker": {"fetch_wait_ms": 5, "batch_size": 200},
        "destination": {"properties": {"linger.ms": 1}},
        "source": {"properties": {"fetch.wait.max.ms": 10}},
    }


def test_a_key_without_a_section_is_refused() -> None:
    with pytest.raises(ValueError, match="'linger' is not <section>.<key>"):
        latency.nested_overrides({"linger": 1})


def test_command_line_settings_are_read_as_yaml_values() -> None:
    assert latency.parse_setting("worker.fetch_wait_ms=2") == ("worker.fetch_wait_ms", 2)
    assert latency.parse_setting("destination.properties.compression.type=lz4") == (
        "destination.properties.compression.type", "lz4")
    with pytest.raises(argparse.ArgumentTypeError, match="expected KEY=VALUE"):
        latency.parse_setting("worker.fetch_wait_ms")


def test_percentiles_are_nearest_rank_over_unsorted_latencies() -> None:
    # 1..1000 ms, shuffled by a fixed stride: p50 is the 500th value, p99 the 990th.
    values = [float((i * 7919) % 1000 + 1) for i in range(1000)]
    stats = latency.latency_stats(values)
    assert stats == {"p50_ms": 500.0, "p95_ms": 950.0, "p99_ms": 990.0, "p999_ms": 999.0, "max_ms": 1000.0,
                     "mean_ms": 500.5}


def test_no_records_give_zeros_not_an_error() -> None:
    assert latency.latency_stats([]) == {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0, "p999_ms": 0.0,
                                         "max_ms": 0.0, "mean_ms": 0.0}


def test_the_window_opens_warmup_seconds_after_the_first_create_time() -> None:
    assert latency.measured_window([5_000.0, 1_000.0, 3_000.0], 2.5) == 3_500.0


def test_growth_is_zero_for_a_mirror_that_keeps_up_and_the_backlog_age_when_it_falls_behind() -> None:
    created = [float(t) for t in range(0, 30_000, 100)]  # one record per 100 ms for 30 s
    steady = [20.0 for _ in created]
    assert latency.latency_growth_s(created, steady, 0.0, 30_000.0) == 0.0
    # Falling behind by 0.1 s per second: the last 10 s are 2 s later than the first 10 s.
    behind = [20.0 + ct / 10 for ct in created]
    assert latency.latency_growth_s(created, behind, 0.0, 30_000.0) == pytest.approx(2.0, abs=0.01)


def test_cpu_is_reported_per_core_and_per_record() -> None:
    assert latency.cpu_figures(cpu_s=3.0, seconds=30.0, records=600_000) == {"cpu_percent": 10.0,
                                                                              "cpu_us_per_record": 5.0}
    assert latency.cpu_figures(cpu_s=1.0, seconds=0.0, records=0) == {"cpu_percent": 0.0, "cpu_us_per_record": 0.0}


@pytest.mark.parametrize(("elapsed", "failed", "received", "drain", "growth", "expected"), [
    (30.5, 0, 1000, 0.1, 0.0, (True, True, True)),
    (32.0, 0, 1000, 0.1, 0.0, (False, True, False)),  # producer more than 5 % late
    (30.0, 1, 1000, 0.1, 0.0, (False, True, False)),  # a record the source refused
    (30.0, 0, 999, 0.1, 0.0, (True, False, False)),  # a record missing at the destination
    (30.0, 0, 1000, 6.0, 0.0, (True, True, False)),  # backlog drained after the end
    (30.0, 0, 1000, 0.1, 1.5, (True, True, False)),  # latency grew during the run
])
def test_a_rate_is_sustained_only_when_all_four_conditions_hold(elapsed: float, failed: int, received: int,
                                                                  drain: float, growth: float,
                                                                  expected: tuple[bool, bool, bool]) -> None:
    verdict = latency.is_sustained(30.0, elapsed, failed, 1000, received, drain, growth)
    assert (verdict["producer_kept_schedule"], verdict["all_arrived"], verdict["sustained"]) == expected


def test_the_replicator_leg_joins_both_probes_by_sequence_number() -> None:
    legs = latency.replicator_legs(dst_seq=[2, 0, 1, 7], dst_received_ms=[130.0, 150.0, 160.0, 170.0],
                                   src_seq=[0, 1, 2], src_received_ms=[100.0, 110.0, 120.0])
    assert legs[:3] == [10.0, 50.0, 50.0]
    assert math.isnan(legs[3])  # never seen on the source (the source probe missed it)
    assert math.isnan(latency.replicator_legs([0], [1.0], [], [])[0])


def test_unknown_variants_are_named_in_the_error() -> None:
    with pytest.raises(latency.BenchError, match="unknown variant.*mm3"):
        latency.variants(["ureplicator-default", "mm3"], latency.LOW_LATENCY)


def test_mm2_low_latency_settings_name_the_run_source_alias() -> None:
    variant = latency.variants(["mirrormaker2-low-latency"], latency.LOW_LATENCY)[0]
    props = latency.mm2_properties(variant, "src42", {"source": "s:1", "destination": "d:2"}, "t")
    assert props["src42.consumer.fetch.max.wait.ms"] == latency.MM2_LOW_LATENCY["{source}.consumer.fetch.max.wait.ms"]
    assert props["destination.producer.linger.ms"] == 0
    assert not any("{source}" in key for key in props)


def test_nearest_rank_is_exact_at_whole_ranks() -> None:
    ordered = [float(v) for v in range(1, 1001)]
    assert [latency.nearest_rank(ordered, q) for q in (0, 50, 99, 99.9, 100)] == [1.0, 500.0, 990.0, 999.0, 1000.0]
    assert latency.nearest_rank([7.0], 99) == 7.0
    assert latency.nearest_rank([], 50) == 0.0


def test_mm2_effective_settings_come_from_the_task_clients_config_blocks(tmp_path: Path) -> None:
    log = tmp_path / "mm2.log"
    log.write_text(
        "[2026-11-23 18:11:22,195] INFO ProducerConfig values: \n"
        "\tacks = -1\n\tclient.id = src1-mm2-src1->destination-offsets\n\tlinger.ms = 5\n"
        "[2026-11-23 18:11:22,300] INFO some other line (org.apache.kafka)\n"
        "[2026-11-23 18:11:44,376] INFO ProducerConfig values: \n"
        "\tacks = -1\n\tbatch.size = 1000000\n\tclient.id = connector-producer-MirrorSourceConnector-0\n"
        "\tlinger.ms = 0\n"
        "[2026-11-23 18:11:45,329] INFO ConsumerConfig values: \n"
        "\tclient.id = src1->destination|MirrorSourceConnector-0|replication-consumer\n"
        "\tfetch.max.wait.ms = 10\n\tfetch.min.bytes = 1\n\tmax.poll.records = 500\n"
        "[2026-11-23 18:11:45,400] INFO started (org.apache.kafka)\n")
    assert latency.mm2_effective(log) == {
        "connector-producer-MirrorSourceConnector-0": {"linger.ms": "0", "batch.size": "1000000", "acks": "-1"},
        "src1->destination|MirrorSourceConnector-0|replication-consumer": {
            "fetch.max.wait.ms": "10", "fetch.min.bytes": "1", "max.poll.records": "500"},
    }
    assert latency.mm2_effective(tmp_path / "missing.log") == {}


def _rate(rate: int, p99: float, sustained: bool = True, cpu_us: float = 5.0) -> dict[str, object]:
    return {"rate": rate, "p50_ms": p99 / 3, "p95_ms": p99 / 2, "p99_ms": p99, "max_ms": p99 * 2,
            "source_leg_p50_ms": 2.0, "source_leg_p99_ms": 9.0, "replicator_p50_ms": p99 / 4,
            "replicator_p99_ms": p99 - 5, "cpu_percent": rate * cpu_us / 1e4, "cpu_us_per_record": cpu_us,
            "sustained": sustained, "producer_kept_schedule": sustained, "all_arrived": True, "drain_s": 0.1,
            "latency_growth_s": 0.0, "load_before": [1.0, 1.0, 1.0], "load_after": [2.0, 1.0, 1.0]}


def _entry() -> dict[str, object]:
    return {
        "date": "2026-11-23T18:30:00+00:00", "mode": "full", "elapsed_s": 600.0,
        "machine": {"cpu_model": "AMD EPYC", "cores": 2, "ram_bytes": 2**34, "python": "3.11.7", "java": "17",
                    "kafka_brokers": "3.9.1", "mirrormaker2": "3.9.1", "librdkafka": "2.12.1"},
        "setup": {"warmup_s": 5.0, "duration_s": 30.0, "partitions": 16, "value_bytes": 100,
                  "ureplicator_workers": 1, "variant_warmup_s": 15.0, "idle_s": 5.0},
        "load_at_start": [1.0, 1.0, 1.0], "load_at_end": [2.0, 2.0, 2.0],
        "variants": [
            {"variant": "ureplicator-default", "settings": {}, "idle_cpu_percent": 0.5,
             "rates": [_rate(5000, 90.0), _rate(20000, 95.0, cpu_us=4.0)]},
            {"variant": "ureplicator-low-latency", "settings": {"worker.fetch_wait_ms": 5},
             "idle_cpu_percent": 2.0, "rates": [_rate(5000, 20.0), _rate(20000, 30.0, cpu_us=6.0)]},
            {"variant": "mirrormaker2-low-latency", "settings": {"destination.producer.linger.ms": 0},
             "idle_cpu_percent": 1.0, "rates": [_rate(5000, 25.0), _rate(20000, 60.0, sustained=False)]},
        ],
    }


def test_the_section_has_one_row_per_variant_and_rate_and_says_why_a_rate_was_not_sustained() -> None:
    text = latency.render(_entry())
    rows = [line for line in text.splitlines() if line.startswith(("| ureplicator-", "| mirrormaker2-"))]
    assert len(rows) == 3 + 6  # the settings table, then the numbers
    assert "| ureplicator-low-latency | `worker.fetch_wait_ms=5` | 2.0 % |" in rows
    assert ("| ureplicator-low-latency | 20,000/s | 10.0 ms | 15.0 ms | **30.0 ms** | 60 ms | 2 / 9 ms | 8 / 25 ms "
            "| 12 % | 6 µs | – | – | 1.0/1.0/1.0 → 2.0/1.0/1.0 | yes |") in rows  # no broker, no loop figures: "–"
    assert "| no (producer fell behind) |" in text
    assert "saturated" not in text  # load average 2 on 2 cores


def test_a_saturated_machine_is_called_out_above_the_verdicts() -> None:
    entry = _entry()
    entry["variants"][0]["rates"][1]["load_after"] = [23.0, 20.0, 15.0]  # type: ignore[index]
    lines = latency.analysis(entry)
    assert lines[0].startswith("**Headline: goal met**")
    assert lines[1].startswith("**The machine was saturated**: the 1-minute load average reached 23 on 2 cores")


def _without_pairwise(entry: dict) -> str:
    """The headline without its every-rate comparison (tested on its own below)."""
    return latency.headline(entry).replace(latency.pairwise(entry), "")


def test_the_headline_names_a_winner_on_p99_only_beyond_the_tie_margin() -> None:
    entry = _entry()
    mm2 = entry["variants"][2]["rates"][1]  # type: ignore[index]
    mm2.update({"sustained": True, "p50_ms": 12.0, "p99_ms": 31.0})  # ureplicator-low-latency: 10.0 / 30.0 ms
    assert _without_pairwise(entry).endswith("MirrorMaker 2's best: p99 31.0 ms (mirrormaker2-low-latency), "
                                            "a tie on p99 at this resolution.")
    mm2["p99_ms"] = 40.0
    assert _without_pairwise(entry).endswith("MirrorMaker 2's best: p99 40.0 ms (mirrormaker2-low-latency).")
    mm2["p99_ms"] = 20.0
    assert _without_pairwise(entry).endswith("MirrorMaker 2's best: p99 20.0 ms (mirrormaker2-low-latency), "
                                            "**lower than ours**.")


def test_run_queue_figures_split_the_loop_thread_from_the_rest() -> None:
    # Worker pid 100: its main thread (tid 100) runs the loop; 101 is a librdkafka thread;
    # 102 started inside the window and counts from zero.
    before = {(100, 100): ("python", 1.0, 2.0), (100, 101): ("rdk:broker1", 0.0, 0.5)}
    after = {(100, 100): ("python", 2.0, 8.0), (100, 101): ("rdk:broker1", 0.5, 1.5),
             (100, 102): ("rdk:main", 0.1, 0.2)}
    figures = latency.run_queue_figures(before, after, [100], "ureplicator", 10.0)
    assert figures == {"threads_cpu_s": 1.6, "threads_runq_wait_s": 7.2, "loop_cpu_s": 1.0,
                       "loop_runq_wait_s": 6.0, "loop_runq_wait_percent": 60.0}


def test_mirrormaker2s_loop_thread_is_its_task_thread() -> None:
    assert latency.loop_thread(7, 9, "task-thread-MirrorSourceConnector-0", "mirrormaker2")
    assert not latency.loop_thread(7, 7, "java", "mirrormaker2")
    assert latency.loop_thread(7, 7, "python", "ureplicator")
    assert not latency.loop_thread(7, 8, "rdk:broker1", "ureplicator")


def test_a_starved_loop_thread_is_named_as_where_the_time_went() -> None:
    entry = _entry()
    low = entry["variants"][1]["rates"][1]  # type: ignore[index]
    low.update({"loop_cpu_s": 1.4, "loop_runq_wait_s": 8.3, "loop_runq_wait_percent": 59.0})
    text = latency.render(entry)
    assert "| 1.4 s / 8.3 s (59 %) |" in text
    assert ("At 20,000/s the loop thread was ready to work but waited for a CPU for 59 % (ureplicator-low-latency) "
            "of the window: the percentiles include the machine's contention.") in text
    low["loop_runq_wait_percent"] = 2.0
    assert "waited for a CPU" not in latency.render(entry)


def test_the_headline_reads_the_goal_least_favourably() -> None:
    entry = _entry()
    # Met by the low-latency variant; MirrorMaker 2 did not sustain the rate, so it is not compared.
    assert _without_pairwise(entry) == ("**Headline: goal met** — ureplicator's best p99 at 20,000 records/s was "
                                       "30.0 ms (ureplicator-low-latency; goal < 50 ms); with the defaults: p99 "
                                       "95.0 ms.")
    # A MirrorMaker 2 with a worse p99 but a lower median: the headline says so.
    theirs = entry["variants"][2]["rates"][1]  # type: ignore[index]
    theirs.update({"sustained": True, "p99_ms": 40.0, "p50_ms": 8.0})
    assert _without_pairwise(entry) == ("**Headline: goal met** — ureplicator's best p99 at 20,000 records/s was "
                                       "30.0 ms (ureplicator-low-latency; goal < 50 ms); with the defaults: p99 "
                                       "95.0 ms; MirrorMaker 2's best: p99 40.0 ms (mirrormaker2-low-latency); "
                                       "its p50 is lower than ours (8.0 vs 10.0 ms).")
    theirs.update({"p99_ms": 60.0, "p50_ms": 40.0})
    low = entry["variants"][1]["rates"][1]  # type: ignore[index]
    low["sustained"] = False  # the best p99 does not count when the rate was not kept
    assert _without_pairwise(entry) == ("**Headline: goal missed** — ureplicator's best p99 at 20,000 records/s "
                                       "was 95.0 ms (ureplicator-default; goal < 50 ms); MirrorMaker 2's best: "
                                       "p99 60.0 ms (mirrormaker2-low-latency), **lower than ours**.")
    entry["variants"][0]["rates"][1]["sustained"] = False  # type: ignore[index]
    assert _without_pairwise(entry) == ("**Headline: goal missed** — no ureplicator variant sustained 20,000 "
                                       "records/s; MirrorMaker 2's best: p99 60.0 ms (mirrormaker2-low-latency).")


def test_mirrormaker2s_producer_overrides_are_named_in_the_settings_table_not_called_defaults() -> None:
    entry = _entry()
    entry["variants"].append(  # type: ignore[union-attr]
        {"variant": "mirrormaker2-default", "settings": {}, "idle_cpu_percent": 1.0,
         "properties": {"destination.producer.linger.ms": "5", "clusters": "src1, destination"},
         "rates": [_rate(5000, 25.0), _rate(20000, 40.0)]})
    rows = latency.render(entry).splitlines()
    assert "| mirrormaker2-default | the worker's producer settings: `linger.ms=5` | 1.0 % |" in rows
    # A run's own setting is shown and not repeated from the properties.
    low = {"variant": "mirrormaker2-low-latency", "settings": {"destination.producer.linger.ms": 0},
           "properties": {"destination.producer.linger.ms": "0", "destination.producer.acks": "all"}}
    assert latency.settings_cell(low) == ("`destination.producer.linger.ms=0`; the worker's producer settings: "
                                          "`acks=all`")
    assert "| ureplicator-default | defaults | 0.5 % |" in rows


def test_the_headline_names_every_rate_and_setting_where_mirrormaker2_is_lower():
    def variant(name, *rates):
        return {"variant": name, "rates": [{"rate": r, "p50_ms": p50, "p99_ms": p99} for r, p50, p99 in rates]}

    entry = {"variants": [variant("ureplicator-default", (20_000, 10.0, 38.5), (50_000, 11.8, 57.2)),
                          variant("ureplicator-low-latency", (20_000, 9.1, 42.9)),
                          variant("mirrormaker2-low-latency", (20_000, 13.0, 105.8)),
                          variant("mirrormaker2-default", (20_000, 12.0, 69.8), (50_000, 13.4, 54.4))]}
    assert latency.pairwise(entry) == "; **MirrorMaker 2 is lower at** default 50,000/s p99 57.2 vs 54.4 ms"
    entry["variants"][0]["rates"][1]["p99_ms"] = 54.4
    assert latency.pairwise(entry).startswith("; at every rate and setting, ureplicator's p50 and p99 are at or below")
    assert latency.pairwise({"variants": entry["variants"][:2]}) == ""


def _run(date: str, digest: str | None, ours_p50: float, mode: str = "full") -> dict:
    def variant(name: str, p50: float) -> dict:
        return {"variant": name, "rates": [{"rate": 20_000, "p50_ms": p50, "p99_ms": 40.0}]}

    return {"date": date, "mode": mode, "load_at_start": [0.5, 0.4, 0.3],
            "setup": {"code_commit": date[-2:], **({"code_sha256": digest} if digest else {})},
            "variants": [variant("ureplicator-default", ours_p50), variant("mirrormaker2-default", 10.0)]}


def test_the_stored_runs_are_listed_newest_first_and_counted_only_when_they_ran_the_shown_worker_sources():
    shown = _run("2026-11-29T15:00", "abc", 9.0)
    others = [_run("2026-11-29T14:00", "abc", 11.0), _run("2026-11-28T10:00", "old", 8.0),
              _run("2026-11-29T13:00", "abc", 9.5, mode="quick"),  # a smoke run is not a measurement
              {**_run("2026-11-29T12:00", "abc", 9.0), "variants": []}]  # without the shown pairs
    lines = latency.runs_compared(shown, others)
    rows = [line for line in lines if line.startswith("| 2026")]
    first = "ureplicator-default"  # the variants' order in the run
    assert rows == [f"| 2026-11-29 15:00 (shown) | `00` · | 0.5 | {first} | 9.0 / 10.0 | 40.0 / 40.0 |",
                    f"| 2026-11-29 14:00 | `00` · | 0.5 | {first} | 11.0 / 10.0 | 40.0 / 40.0 |",
                    f"| 2026-11-28 10:00 | `00` | 0.5 | {first} | 8.0 / 10.0 | 40.0 / 40.0 |"]
    # p50: at or below in the shown run only; p99: a tie counts as at or below, in both.
    assert lines[-1] == ("In how many of the 2 runs of the shown run's worker sources ureplicator was at or below "
                         "MirrorMaker 2: default 20k p50 1, default 20k p99 2.")
    assert latency.runs_compared(shown, []) == []  # one run: nothing to compare across
    assert not latency.runs_compared({**shown, "setup": {}}, others)[-1].startswith("In how many")


def test_a_brokers_cpu_is_read_from_its_process_and_a_broker_that_is_gone_is_left_out():
    import os
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    used = latency.brokers_cpu_s({"source": os.getpid(), "destination": gone.pid})
    assert set(used) == {"source"} and used["source"] > 0


def test_the_rate_table_shows_the_brokers_cpu_and_a_dash_for_runs_that_did_not_record_it():
    values = {"source_broker_cpu_percent": 41.26, "destination_broker_cpu_percent": 55.0}
    fmt = dict(latency.RATE_COLUMNS)["broker CPU: source / destination"]
    assert latency._cell(fmt, values) == "41 % / 55 %"
    assert latency._cell(fmt, {}) == "–"
