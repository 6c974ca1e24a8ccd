"""Where a verification ends up: report files and history, the HTML page, the controller's API and metrics."""

from __future__ import annotations

import json

import pytest
from flask import Flask
from prometheus_client import CollectorRegistry, generate_latest

from tests.support.verifier_samples import sample_report
from ureplicator.controller.verification_api import make_blueprint, register_metrics
from ureplicator.reports import html
from ureplicator.reports.store import ReportStore, error_entry


def _doc(run_id: str = "20251121T120000Z-abcdef", **changes):
    doc = sample_report().to_dict()
    doc["run_id"] = run_id
    doc.update(changes)
    return doc


def test_save_writes_report_html_latest_summary_and_appends_history(tmp_path):
    store = ReportStore(tmp_path)
    first = store.save(_doc("20251121T120000Z-aaaaaa"))
    second = store.save(_doc("20251121T121000Z-bbbbbb"))
    assert first == tmp_path / "runs" / "20251121T120000Z-aaaaaa.json"
    assert json.loads(second.read_text())["run_id"] == "20251121T121000Z-bbbbbb"
    assert (tmp_path / "runs" / "20251121T121000Z-bbbbbb.html").exists()
    assert json.loads((tmp_path / "latest.json").read_text())["run_id"] == "20251121T121000Z-bbbbbb"
    assert store.summary()["run_id"] == "20251121T121000Z-bbbbbb"
    history = store.history()
    assert [h["run_id"] for h in history] == ["20251121T120000Z-aaaaaa", "20251121T121000Z-bbbbbb"]
    assert history[0]["status"] == "FAIL" and history[0]["verified_records"] == 220
    assert history[0]["report"] == "runs/20251121T120000Z-aaaaaa.json"


def test_history_is_append_only_and_survives_a_torn_line(tmp_path):
    store = ReportStore(tmp_path)
    store.save(_doc("20251121T120000Z-aaaaaa"))
    with open(tmp_path / "history.jsonl", "a") as handle:
        handle.write('{"run_id": "20251121T1205')  # a crash mid-write
    store.append(error_entry("20251121T121000Z-cccccc", "2025-11-21T12:10:00Z", "2025-11-21T12:10:02Z", 2.0,
                             "source cluster src did not answer"))
    history = store.history()
    assert [h["status"] for h in history] == ["FAIL", "ERROR"]
    assert history[1]["error"] == "source cluster src did not answer"
    assert store.history(limit=1) == history[1:]


def test_prune_keeps_the_newest_run_files_and_every_history_line(tmp_path):
    store = ReportStore(tmp_path)
    for minute in range(4):
        store.save(_doc(f"20251121T12{minute:02d}00Z-aaaaaa"), keep_runs=2)
    assert sorted(p.name for p in (tmp_path / "runs").glob("*.json")) == [
        "20251121T120200Z-aaaaaa.json", "20251121T120300Z-aaaaaa.json"]
    assert len(list((tmp_path / "runs").glob("*.html"))) == 2
    assert len(store.history()) == 4


def test_html_puts_the_verdict_first_then_failures_then_the_chart_and_escapes_text():
    doc = _doc()
    doc["topics"][0]["partitions"][1]["notes"] = ["<script>alert(1)</script>"]
    page = html.render(doc, [{"run_id": "r1", "status": "OK", "verified_records": 10, "categories": {}},
                             {"run_id": "r2", "status": "FAIL", "verified_records": 20,
                              "categories": {"MISSING": 3}}])
    assert page.startswith("<!DOCTYPE html>")
    assert page.index("Verification of pipeline p") < page.index("Failing and warning partitions")
    assert page.index("Failing and warning partitions") < page.index("<svg") < page.index("All topics")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "20–21, 30" in page  # MISSING ranges of orders:1
    assert page.count("<rect") == 2  # one bar per past run
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # self-contained


def test_html_names_the_route_and_its_forwarding_policy_when_the_report_has_them():
    doc = _doc()
    doc.update({"route": "dc1-to-dc2", "forward": "origin"})
    page = html.render(doc, [])
    assert "Verification of pipeline p, route dc1-to-dc2" in page and "forwarding <code>origin</code>" in page
    assert "route" not in html.render(_doc(), []).split("</h1>")[0]


def test_chart_without_history_says_so():
    assert "No earlier runs" in html.chart([])


@pytest.fixture
def api(tmp_path):
    app = Flask("test")
    app.register_blueprint(make_blueprint(tmp_path))
    return app.test_client(), ReportStore(tmp_path)


def test_api_is_a_json_404_until_a_report_exists(api):
    client, _ = api
    for path in ("/verification", "/verification/history"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.get_json()["error"]["code"] == 404 and response.get_json()["error"]["message"]


def test_api_serves_the_newest_summary_and_history_newest_first(api):
    client, store = api
    store.save(_doc("20251121T120000Z-aaaaaa"))
    store.save(_doc("20251121T121000Z-bbbbbb"))
    latest = client.get("/verification").get_json()
    assert latest["run_id"] == "20251121T121000Z-bbbbbb"
    assert latest["status"] == "FAIL"
    assert latest["failing_partitions"][0]["topic"] == "orders"
    runs = client.get("/verification/history?limit=5").get_json()["runs"]
    assert [r["run_id"] for r in runs] == ["20251121T121000Z-bbbbbb", "20251121T120000Z-aaaaaa"]
    assert client.get("/verification/history?limit=1").get_json()["runs"][0]["run_id"].endswith("bbbbbb")
    bad = client.get("/verification/history?limit=0")
    assert bad.status_code == 400 and bad.get_json()["error"]["code"] == 400


def test_api_without_a_configured_directory_names_the_key():
    app = Flask("test")
    app.register_blueprint(make_blueprint(None))
    response = app.test_client().get("/verification")
    assert response.status_code == 404
    assert "controller.verification_dir" in response.get_json()["error"]["message"]


def test_metrics_follow_the_newest_report(tmp_path):
    registry = CollectorRegistry()
    register_metrics(registry, tmp_path)
    assert b"ureplicator_verification" not in generate_latest(registry)  # never ran: no series
    store = ReportStore(tmp_path)
    store.save(_doc("20251121T120000Z-aaaaaa"))
    text = generate_latest(registry).decode()
    assert "ureplicator_verification_status 2.0" in text
    assert 'ureplicator_verification_records{category="missing"} 3.0' in text
    assert 'ureplicator_verification_records{category="verified"} 220.0' in text
    assert "ureplicator_verification_last_run_timestamp_seconds 1.763726409e+09" in text
    ok = _doc("20251121T121000Z-bbbbbb")
    ok["topics"] = []
    ok["status"] = "OK"
    ok["totals"]["categories"] = dict.fromkeys(ok["totals"]["categories"], 0)
    store.save(ok)
    assert "ureplicator_verification_status 0.0" in generate_latest(registry).decode()
