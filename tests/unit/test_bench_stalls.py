"""bench/stalls.py's pure parts: whose load the section's load averages are."""

from __future__ import annotations

from bench.stalls import load_note


def entry(before: float, cores: int = 2) -> dict:
    return {"machine": {"cores": cores}, "load_at_start": [before, 3.7, 3.3], "load_at_end": [5.2, 6.6, 5.2]}


def test_a_machine_quiet_before_the_run_is_not_blamed_on_other_jobs():
    note = load_note(entry(0.9))

    assert note.startswith("quiet before the benchmark; the load during it is the benchmark's own")
    assert "other jobs" not in note and "on 2 cores" in note


def test_a_machine_busy_before_the_run_says_other_jobs_shared_it():
    assert load_note(entry(4.7)) == "busy before the benchmark: other jobs shared the 2 cores"


def test_the_threshold_is_half_the_cores():
    assert load_note(entry(2.0, cores=4)).startswith("quiet")
    assert load_note(entry(2.1, cores=4)).startswith("busy")
