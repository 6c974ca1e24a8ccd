"""The status document (controller.status_api.evaluate): what needs a person, and what does not."""

from __future__ import annotations

from ureplicator.common.zkschema import Assignment, PartitionStatus, TopicRecord, WorkerStatus
from ureplicator.controller.status_api import View, evaluate

NOW = 1_800_000_000.0


def _view(**changes) -> View:
    topic = TopicRecord("orders", "orders", 2)
    status = WorkerStatus(3, {("orders", 0): PartitionStatus(committed=10, lag=0, last_progress_at=NOW - 1),
                              ("orders", 1): PartitionStatus(committed=5, lag=7, last_progress_at=NOW - 1)})
    base = dict(
        pipeline="p", topics={"orders": topic}, live=frozenset({"w1"}), blacklisted_workers=frozenset(),
        blacklisted_partitions=frozenset(),
        assignments={"w1": Assignment(3, frozenset({("orders", 0), ("orders", 1)}))},
        statuses={"w1": status}, leader="c1", is_leader=True, withheld=frozenset(),
        lag_seconds={("orders", 1): 42.0},
    )
    base.update(changes)
    return View(**base)


def test_a_mirroring_pipeline_is_healthy_with_lag_in_records_and_seconds():
    doc = evaluate(_view(), NOW)
    assert doc["healthy"] is True and doc["problems"] == []
    rows = {p["partition"]: p for p in doc["partitions"]}
    assert (rows[0]["lag_records"], rows[0]["lag_seconds"]) == (0, 0.0)
    assert (rows[1]["lag_records"], rows[1]["lag_seconds"], rows[1]["committed"]) == (7, 42.0, 5)
    assert doc["workers"][0]["health"] == "ok"


def test_unknown_lag_is_none_never_minus_one():
    status = WorkerStatus(3, {("orders", 0): PartitionStatus(lag=-1), ("orders", 1): PartitionStatus(lag=-1)})
    doc = evaluate(_view(statuses={"w1": status}, lag_seconds={}), NOW)
    assert all(p["lag_records"] is None and p["lag_seconds"] is None and p["committed"] is None
               for p in doc["partitions"])


def test_a_stopped_worker_in_restart_grace_needs_a_person():
    doc = evaluate(_view(live=frozenset(), statuses={}, lost={"w1": NOW - 12}), NOW)
    assert doc["healthy"] is False
    assert doc["workers"][0]["health"] == "lost" and "12s" in doc["workers"][0]["detail"]
    assert {p["health"] for p in doc["partitions"]} == {"owner down"}
    assert doc["unowned"] == ["orders:0", "orders:1"]


def test_withheld_partitions_are_listed_but_a_hand_off_needs_nobody():
    doc = evaluate(_view(assignments={"w1": Assignment(4, frozenset({("orders", 0)}))},
                         withheld=frozenset({("orders", 1)})), NOW)
    assert doc["withheld"] == ["orders:1"]
    assert not any("orders:1" in p for p in doc["problems"])


def test_stuck_errors_no_leader_and_a_failed_verification_are_problems():
    stuck = WorkerStatus(3, {("orders", 0): PartitionStatus(committed=1, lag=9, last_progress_at=NOW - 600),
                             ("orders", 1): PartitionStatus(committed=1, lag=0, error="TOPIC_AUTHORIZATION_FAILED")})
    doc = evaluate(_view(statuses={"w1": stuck}, leader=None,
                         verification={"run_id": "r1", "status": "FAIL", "finished_at": "2027-01-15T08:00:00Z"}),
                   NOW)
    assert doc["stuck"] == ["orders:0", "orders:1"]
    text = " | ".join(doc["problems"])
    assert "no controller is the leader" in text and "verification (r1) is FAIL" in text
    assert "TOPIC_AUTHORIZATION_FAILED" in text


def test_group_sync_stale_after_three_intervals_on_the_leader():
    fresh = evaluate(_view(group_sync_enabled=True, group_sync_interval_s=60, group_sync_last=NOW - 100), NOW)
    stale = evaluate(_view(group_sync_enabled=True, group_sync_interval_s=60, group_sync_last=NOW - 400), NOW)
    assert fresh["group_sync"]["stale"] is False and fresh["healthy"]
    assert stale["group_sync"] == {"last_sync_at": stale["group_sync"]["last_sync_at"], "age_s": 400.0, "stale": True}
    assert not stale["healthy"]


def test_a_paused_topic_and_a_draining_worker_are_not_problems():
    doc = evaluate(_view(topics={"orders": TopicRecord("orders", "orders", 2, state="paused")},
                         assignments={}, statuses={}, blacklisted_workers=frozenset({"w1"})), NOW)
    assert doc["healthy"] is True
    assert {p["health"] for p in doc["partitions"]} == {"paused"}
    assert doc["workers"][0]["health"] == "draining"


def test_a_cluster_that_refuses_the_controllers_credentials_needs_a_person():
    doc = evaluate(_view(auth_failures={"dst": "authentication failed: SASL authentication error"}), NOW)
    assert doc["healthy"] is False
    assert doc["problems"] == ["cluster dst refused this controller's credentials: authentication failed: "
                               "SASL authentication error"]


def test_the_page_escapes_what_it_shows():
    from pathlib import Path

    from flask import Flask, render_template_string

    import ureplicator.controller.status_api as status_api

    status = WorkerStatus(3, {("orders", 0): PartitionStatus(committed=1, lag=1, error="<script>alert(1)</script>"),
                              ("orders", 1): PartitionStatus(committed=1, lag=0)})
    doc = evaluate(_view(statuses={"w1": status}), NOW)
    template = (Path(status_api.__file__).parent / "status_page.html").read_text()
    with Flask(__name__).app_context():
        page = render_template_string(template, status=doc)
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'class="problem"' in page  # the failing partition's row is red


def test_two_routes_each_have_their_rows_problems_and_group_sync():
    from dataclasses import replace

    from ureplicator.controller.status_api import evaluate_routes

    # Given route a2b healthy with a fresh sync, and route a2c with a partition nobody owns and a stale sync
    healthy = _view(route="a2b", group_sync_enabled=True, group_sync_interval_s=60, group_sync_last=NOW - 10)
    broken = replace(_view(route="a2c", group_sync_enabled=True, group_sync_interval_s=60, group_sync_last=NOW - 400),
                     assignments={"w2": Assignment(3, frozenset({("orders", 0)}))}, live=frozenset({"w2"}),
                     statuses={})
    # When the deployment's status is evaluated, with a third route this controller cannot read
    doc = evaluate_routes([healthy, broken], NOW, {"x2y": "its clusters are not in this file"})
    # Then every row names its route, each route's problems are its own, and the stale sync is the one shown
    assert {(p["route"], p["partition"]) for p in doc["partitions"]} == {(r, p) for r in ("a2b", "a2c") for p in (0, 1)}
    assert {(w["route"], w["worker"]) for w in doc["workers"]} == {("a2b", "w1"), ("a2c", "w2")}
    assert doc["unowned"] == ["a2c/orders:1"]
    assert doc["routes"]["a2b"]["healthy"] is True and doc["routes"]["a2c"]["healthy"] is False
    assert all(p.startswith(("route a2c: ", "route x2y: ")) for p in doc["problems"]), doc["problems"]
    assert "route x2y: this controller cannot read it: its clusters are not in this file" in doc["problems"]
    assert doc["group_sync"]["route"] == "a2c" and doc["group_sync"]["stale"] is True
    assert doc["healthy"] is False


def test_a_worker_on_the_python_loop_is_a_warning_with_its_reason_not_a_problem(capsys):
    from ureplicator.cli.status import render

    slow = {"w1": ("python", "the C loop's self-test failed on Message.value (confluent-kafka 9.9.9): ...")}
    doc = evaluate(_view(loops=slow), NOW)
    assert doc["healthy"] is True and doc["problems"] == []
    assert doc["warnings"] == ["worker w1 runs the Python copy loop, not the C loop: the C loop's self-test failed "
                               "on Message.value (confluent-kafka 9.9.9): ..."]
    assert (doc["workers"][0]["loop"], doc["workers"][0]["loop_reason"]) == slow["w1"]
    render(doc)
    assert "~ warning: worker w1 runs the Python copy loop, not the C loop: the C loop's self-test failed" in (
        capsys.readouterr().out)
    # the C loop, and a worker registered before the field existed, warn of nothing
    assert evaluate(_view(loops={"w1": ("native", "")}), NOW)["warnings"] == []
    legacy = evaluate(_view(loops={}), NOW)
    assert legacy["warnings"] == [] and legacy["workers"][0]["loop"] is None
