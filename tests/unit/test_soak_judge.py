"""The soak's verdict: lost, reordered, corrupted and duplicates per fault against the bound."""

from __future__ import annotations

from array import array
from typing import Any

from bench.harness import LogRead
from bench.soak import corrupted, judge


def soak(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "comparison": {"records": 100, "mirrored": 100, "lost": 0, "reordered": 0, "duplicated": 30},
        "acknowledged": {"missing_on_destination": 0},
        "load": {"sent": 100, "acked": 100, "failed": 0},
        "corrupted": {"records": 0, "samples": []},
        "duplicates_bound_per_fault": 20,
        "steps": [{"name": "kill -9 worker w1", "duplicates": 20}, {"name": "zookeeper restart", "duplicates": 10}],
        "verifier": {"exit_status": 0},
    }
    doc.update(overrides)
    return doc


def test_a_clean_run_within_the_duplicates_bound_passes():
    assert judge(soak()) == (0, "OK")


def test_every_broken_promise_is_named():
    status, text = judge(soak(
        comparison={"records": 100, "lost": 2, "reordered": 3, "duplicated": 30},
        corrupted={"records": 4, "samples": ["0:1"]},
        steps=[{"name": "worker w2 frozen", "duplicates": 21}],
    ))
    assert status == 1
    assert "2 records lost" in text and "3 records reordered" in text and "4 records corrupted" in text
    assert "duplicates above 20 after worker w2 frozen" in text


def test_a_destination_record_not_matching_the_source_record_it_names_is_corrupted():
    source = {0: LogRead(array("q", [0, 1, 2]), array("q", [10, 11, 12]), array("q", [-1, -1, -1]))}
    # offsets named by the provenance header: 0 ok, 1 ok, 1 with another key, 5 absent, -1 no header
    destination = {0: LogRead(array("q", [0, 1, 2, 3, 4]), array("q", [10, 11, 99, 12, 12]),
                              array("q", [0, 1, 1, 5, -1]))}
    assert corrupted(source, destination) == {"records": 3, "samples": ["0:1", "0:5", "0:-1"]}


def test_the_docs_section_shows_corruption_the_bound_and_the_worst_fault_of_each_kind():
    from bench.soak import render

    entry = {
        "seed": 7, "date": "2026-11-23T19:00:00+00:00", "machine": {"cores": 2}, "load_at_start": [1.0, 2.0, 3.0],
        "setup": {"minutes": 30, "rate": 1000}, "verdict": "OK",
        "soak": soak(steps=[{"name": "kill -9 worker w1", "duplicates": 20},
                            {"name": "kill -9 worker w3", "duplicates": 7}],
                     verifier={"exit_status": 0, "verdict_line": "WARN: duplicates only"}),
    }
    text = render(entry)
    assert "`make soak MINUTES=30 SEED=7`" in text
    assert "| kill -9 worker | 2 | 20 |" in text
    assert "corrupted **0**" in text and "duplicates allowed per fault: 20 (10 s of the load)" in text
    assert "Verifier: exit 0, `WARN: duplicates only`" in text and "**Verdict: OK.**" in text


def test_in_exactly_once_mode_one_duplicate_fails_the_run():
    status, text = judge(soak(exactly_once=True, duplicates_bound_per_fault=0,
                              comparison={"records": 100, "lost": 0, "reordered": 0, "duplicated": 1},
                              steps=[{"name": "kill -9 worker w1", "duplicates": 0}]))
    assert status == 1 and "1 records duplicated in exactly-once mode" in text


def test_the_exactly_once_section_names_its_mode_and_the_longest_gaps_per_fault_kind():
    from bench.soak import render

    entry = {
        "seed": 7, "date": "2026-11-25T19:00:00+00:00", "machine": {"cores": 2}, "load_at_start": [1.0, 2.0, 3.0],
        "setup": {"minutes": 30, "rate": 1000}, "verdict": "OK",
        "soak": soak(exactly_once=True, duplicates_bound_per_fault=0,
                     comparison={"records": 100, "mirrored": 100, "lost": 0, "reordered": 0, "duplicated": 0},
                     steps=[{"name": "zookeeper restart", "duplicates": 0, "max_gap_s": 0.4},
                            {"name": "zookeeper restart", "duplicates": 0, "max_gap_s": 0.9},
                            {"name": "zookeeper restart", "duplicates": 0, "max_gap_s": 0.5}],
                     verifier={"exit_status": 0, "verdict_line": "OK"}),
    }
    text = render(entry)
    assert text.startswith("## Soak, exactly-once mode")
    assert "BENCH_ARGS=--exactly-once" in text and "read_committed" in text
    assert "| zookeeper restart | 3 | 0 | 0.5 s, 0.9 s |" in text and "duplicates allowed per fault: 0." in text


def test_the_section_says_when_the_verifier_was_skipped_or_could_not_run():
    from bench.soak import render

    entry = {"seed": 7, "date": "2026-11-23T19:00:00+00:00", "machine": {"cores": 2}, "load_at_start": [1.0, 2.0, 3.0],
             "setup": {"minutes": 1, "rate": 1000}, "verdict": "OK (verifier skipped)",
             "soak": soak(verifier={"skipped": "--no-verify"})}
    assert "Verifier: skipped (--no-verify)." in render(entry)
    entry["soak"]["verifier"] = {"exit_status": 2, "verdict_line": "", "stderr_tail": "Traceback\nJavaError: no JVM"}
    assert "Verifier: exit 2, `no verdict line`; it could not run: `JavaError: no JVM`." in render(entry)
