"""The stalls and failover sections' pure parts: the load note, the slow-coordinator rows, the headlines."""

from __future__ import annotations

import json
from pathlib import Path

from bench.stalls import SLOW_COORDINATOR, _log_events, load_note, render


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


def coordinator_phase(gap: float) -> dict:
    event = {"name": SLOW_COORDINATOR, "system": "ureplicator", "partitions": 16, "moved": 5,
             "unmoved_max_gap_s": gap, "moved_max_gap_s": 18.3, "moved_flowing_after_s": 17.7,
             "settled_after_s": 17.8, "generations_written": 1, "duplicates": 3004,
             "notes": {"hang_s": 17.6, "acquiring_after_s": 9.6, "held_requests": {"OffsetCommit": 2},
                       "held_data_requests": 0},
             "worker_log_events": {"committed_offsets_retry": 3, "commit_failed": 0}}
    return {"system": "ureplicator", "source_via": "devtools.kproxy", "baseline": {"window_s": 5.0, "max_gap_s": 0.3},
            "events": [event], "comparison": {"t": {"records": 100, "lost": 2, "duplicated": 0}}}


def stored_run_before_the_phase() -> dict:
    """A checked-in run from before the slow-coordinator phase existed (with MirrorMaker 2)."""
    path = Path(__file__).parents[2] / "bench" / "results" / "stalls-2026-11-25.json"
    return json.loads(path.read_text())[-1]


def test_a_run_with_the_slow_coordinator_phase_renders_its_row_verdict_and_losses():
    run = stored_run_before_the_phase()
    run["phases"]["ureplicator-coordinator"] = coordinator_phase(0.42)
    text = render(run)
    assert f"| ureplicator, source through kproxy | {SLOW_COORDINATOR} (source coordinator hung 17.6 s" in text
    assert "longest gap 0.42 s, within the 0.5 s target" in text and "OffsetCommit x2" in text
    assert "`committed_offsets_retry` x3" in text and "`commit_failed`" not in text
    stored_lost = sum(c["lost"] for c in run["phases"]["ureplicator"]["comparison"].values())
    assert f"ureplicator lost {stored_lost + 2} records over all events (must be 0)" in text


def test_a_gap_over_the_target_is_called_so():
    run = stored_run_before_the_phase()
    run["phases"]["ureplicator-coordinator"] = coordinator_phase(1.52)
    assert "longest gap 1.52 s, **over** the 0.5 s target" in render(run)


def test_the_headline_says_where_mirrormaker2_did_better():
    run = stored_run_before_the_phase()
    ours = next(e for e in run["phases"]["ureplicator"]["events"] if e["name"] == "add topic")
    theirs = next(e for e in run["phases"]["mirrormaker2"]["events"] if e["name"] == "add topic")
    theirs["unmoved_max_gap_s"] = ours["unmoved_max_gap_s"] + 1.0
    assert "MirrorMaker 2 did better in *add topic*" not in render(run)
    theirs["unmoved_max_gap_s"] = ours["unmoved_max_gap_s"] / 2
    assert (f"MirrorMaker 2 did better in *add topic*: unmoved: longest gap {theirs['unmoved_max_gap_s']:.2f} s "
            f"against {ours['unmoved_max_gap_s']:.2f} s") in render(run)


def test_runs_without_the_phase_render_as_before():
    assert "kproxy" not in render(stored_run_before_the_phase())


def test_the_workers_coordinator_log_events_are_counted(tmp_path):
    (tmp_path / "w1.log").write_text('{"event": "commit_failed", "x": 1}\n{"event": "commit_failed"}\nplain line\n')
    (tmp_path / "w2.log").write_text('{"event": "commit_client_replaced"}\n')
    counts = _log_events(tmp_path, ("w1", "w2", "w3"))
    assert counts["commit_failed"] == 2 and counts["commit_client_replaced"] == 1
    assert counts["committed_offsets_retry"] == 0


def test_every_stored_run_of_the_scenario_and_control_plane_sections_renders():
    from bench import render as bench_render

    for name in ("stalls-bench", "drill", "soak", "soak-eos", "failover-bench", "leader-cost", "verifier-bench",
                 "controller-scale"):
        section = bench_render.by_name(name)
        files = sorted(bench_render.RESULTS_DIR.glob(f"{section.prefix}-[0-9]*.json"))
        assert files, name
        for path in files:
            loaded = json.loads(path.read_text())
            for run in loaded if isinstance(loaded, list) else [loaded]:
                assert section.render_entry(run, path).startswith("## "), (name, path.name)


def test_the_failover_headline_says_where_mirrormaker2_did_better():
    from bench import failover

    path = Path(__file__).parents[2] / "bench" / "results" / "failover-2026-11-23.json"
    loaded = json.loads(path.read_text())
    run = loaded[-1] if isinstance(loaded, list) else loaded
    assert "MirrorMaker 2 did better" not in failover.render(run)
    for group in run["mirrormaker2"]["groups"].values():
        group["reread"] = 0
    run["ureplicator"]["groups"]["early"]["reread"] = 5
    text = failover.render(run)
    assert "ureplicator re-read 5," in text and "MirrorMaker 2 did better on: re-read." in text
