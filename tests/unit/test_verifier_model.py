"""The verifier's pure report model: offset ranges, watermarks, bucket comparison, status rules, the JSON document."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.verifier_samples import sample_report
from ureplicator.reports import model
from ureplicator.reports.model import BucketAggregate, Watermarks

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "reports" / "report.schema.json").read_text())


# --- ranges --------------------------------------------------------------------------------------


def test_compress_joins_consecutive_offsets_and_keeps_gaps():
    assert model.compress([5, 6, 7, 8, 9, 12]) == [[5, 9], [12, 12]]
    assert model.compress([12, 5, 6, 6, 5]) == [[5, 6], [12, 12]]
    assert model.compress([]) == []


@given(st.sets(st.integers(min_value=0, max_value=500)))
def test_compressed_ranges_hold_exactly_the_offsets(offsets):
    ranges = model.compress(offsets)
    expanded = {o for a, b in ranges for o in range(a, b + 1)}
    assert expanded == offsets
    # ranges are sorted and never touch: otherwise they would have been joined
    assert all(ranges[i][1] + 1 < ranges[i + 1][0] for i in range(len(ranges) - 1))


def test_merge_ranges_joins_overlapping_and_adjacent():
    assert model.merge_ranges([[10, 12], [0, 3], [4, 5], [11, 20], [30, 30]]) == [[0, 5], [10, 20], [30, 30]]
    with pytest.raises(ValueError):
        model.merge_ranges([[5, 4]])


def test_cap_ranges_keeps_the_lowest_and_says_when_some_were_left_out():
    ranges = [[i * 10, i * 10 + 1] for i in range(5)]
    assert model.cap_ranges(ranges, 5) == (ranges, False)
    assert model.cap_ranges(ranges, 3) == (ranges[:3], True)


def test_hash_hex_is_the_unsigned_value_in_16_digits():
    assert model.hash_hex(-1) == "ffffffffffffffff"
    assert model.hash_hex(255) == "00000000000000ff"
    assert model.hash_hex(None) is None


# --- watermarks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log_start", "end", "committed", "watermark"),
    [
        (0, 100, 100, 100),  # fully mirrored
        (0, 100, 60, 60),  # the replicator is behind: the rest is pending
        (0, 100, 120, 100),  # never beyond what the source holds
        (40, 100, 10, 40),  # committed below the log start: nothing verifiable, not negative
        (5, 100, None, 5),  # no commit yet: nothing verified
    ],
)
def test_watermark_is_min_of_end_and_committed_never_below_log_start(log_start, end, committed, watermark):
    w = Watermarks(0, log_start, end, committed)
    assert w.watermark == watermark
    assert w.verified_range == (log_start, watermark)


def test_watermark_notes_explain_unusual_commits():
    assert Watermarks(0, 0, 10, 10, 0, 10).notes("g") == []
    assert "no committed offset" in Watermarks(0, 0, 10, None, 0, 10).notes("g")[0]
    assert "[10, 40) expired before they were mirrored" in Watermarks(0, 40, 90, 10, 0, 10).notes("g")[0]
    assert Watermarks(0, 0, 10, 10).notes("g") == ["the destination partition does not exist"]


# --- buckets -------------------------------------------------------------------------------------


def test_only_buckets_that_differ_or_exist_on_one_side_are_mismatched():
    a = BucketAggregate(10, Decimal(12345), 7)
    source = {(0, 0): a, (0, 1): a, (1, 0): a}
    destination = {
        (0, 0): a,
        (0, 1): BucketAggregate(10, Decimal(12346), 7),  # one hash differs
        (2, 5): a,  # only in the destination
    }
    assert model.mismatched_buckets(source, destination) == [(0, 1), (1, 0), (2, 5)]


def test_bucket_span_is_clipped_to_the_verified_range():
    assert model.bucket_span(2, 100, 0, 1000) == (200, 300)
    assert model.bucket_span(0, 100, 40, 1000) == (40, 100)
    assert model.bucket_span(9, 100, 0, 950) == (900, 950)


# --- status --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "status"),
    [
        ({}, "OK"),
        ({"PENDING": 5, "EXPIRED": 9}, "OK"),
        ({"DUPLICATE": 1}, "WARN"),
        ({"DUPLICATE": 1, "PENDING": 3}, "WARN"),
        ({"MISSING": 1}, "FAIL"),
        ({"CORRUPTED": 1}, "FAIL"),
        ({"ORPHAN": 1}, "FAIL"),
        ({"REORDERED": 1}, "FAIL"),
        ({"REORDERED": 1, "DUPLICATE": 4}, "FAIL"),
    ],
)
def test_partition_status_rules(counts, status):
    assert model.partition_status(counts) == status


def test_worst_status_ranks_fail_above_error_above_warn():
    assert model.worst([]) == "OK"
    assert model.worst(["OK", "WARN"]) == "WARN"
    assert model.worst(["WARN", "ERROR"]) == "ERROR"
    assert model.worst(["ERROR", "FAIL", "OK"]) == "FAIL"


# --- the document --------------------------------------------------------------------------------


def test_report_document_matches_the_schema_and_rolls_statuses_up():
    doc = sample_report().to_dict()
    jsonschema.validate(doc, SCHEMA)
    assert doc["status"] == "FAIL"
    assert [t["status"] for t in doc["topics"]] == ["FAIL", "WARN", "ERROR"]
    assert doc["totals"] == {
        "topics": 3,
        "topics_not_verified": 1,
        "partitions": {"OK": 1, "WARN": 1, "FAIL": 1},
        "verified_records": 220,
        "records_read": {"source": 0, "destination": 0},
        "categories": {"MISSING": 3, "DUPLICATE": 1, "CORRUPTED": 0, "ORPHAN": 0, "REORDERED": 0,
                       "PENDING": 20, "EXPIRED": 0, "COMPACTED": 0, "SKIPPED": 0},
    }
    broken = doc["topics"][0]["partitions"][1]
    assert broken["verified_range"] == [10, 80]
    assert broken["categories"]["MISSING"]["ranges"] == [[20, 21], [30, 30]]
    assert broken["categories"]["ORPHAN"] == {
        "count": 0, "ranges_of": "destination", "ranges": [], "ranges_truncated": False, "samples": []}


def test_schema_rejects_a_report_with_a_wrong_shape():
    doc = sample_report().to_dict()
    doc["topics"][0]["partitions"][0]["counts"]["MISSING"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def test_summary_lists_failing_partitions_worst_first():
    summary = model.summary(sample_report().to_dict())
    assert summary["status"] == "FAIL"
    assert summary["failing_partitions"] == [
        {"topic": "orders", "partition": 1, "status": "FAIL", "counts": {"MISSING": 3, "PENDING": 20}},
        {"topic": "audit", "partition": 2, "status": "WARN", "counts": {"DUPLICATE": 1}},
    ]
    assert [t["status"] for t in summary["topics"]] == ["FAIL", "WARN", "ERROR"]


def test_an_empty_run_is_ok():
    report = sample_report()
    report.topics = []
    doc = report.to_dict()
    jsonschema.validate(doc, SCHEMA)
    assert doc["status"] == "OK" and doc["totals"]["topics"] == 0
