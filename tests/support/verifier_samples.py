"""A hand-built verification report for tests of the report model, its files and the controller's views."""

from __future__ import annotations

from ureplicator.reports import model
from ureplicator.reports.model import CategoryResult, PartitionReport, Report, Sample, TopicReport, Watermarks


def sample_report() -> Report:
    """Three topics: one failing partition next to a clean one, one with a duplicate, one not verified."""
    clean = PartitionReport(0, Watermarks(0, 0, 100, 100, 0, 100), verified_records=100, buckets=1)
    broken = PartitionReport(1, Watermarks(1, 10, 100, 80, 0, 95), verified_records=70, buckets=1, buckets_mismatched=1)
    broken.categories[model.MISSING] = CategoryResult(
        3, [[20, 21], [30, 30]], False,
        [Sample(1, 20, None, "00000000000000aa", None), Sample(1, 21, None, "00000000000000ab", None)],
    )
    broken.categories[model.PENDING] = CategoryResult(20, [[80, 99]])
    duplicated = PartitionReport(2, Watermarks(2, 0, 50, 50, 0, 51), verified_records=50, buckets=1)
    duplicated.categories[model.DUPLICATE] = CategoryResult(
        1, [[7, 7]], False, [Sample(2, 7, 8, "0000000000000001", "0000000000000001", "copy 2")]
    )
    topics = [
        TopicReport("orders", "orders", [clean, broken]),
        TopicReport("audit", "dr.audit", [duplicated]),
        TopicReport("gone", "gone", error="topic 'gone' does not exist on the source cluster src"),
    ]
    return Report(
        run_id="20251121T120000Z-abcdef", started_at="2025-11-21T12:00:00Z", finished_at="2025-11-21T12:00:09Z",
        duration_s=9.0, pipeline="p", group="ureplicator.p",
        clusters={"source": {"alias": "src", "bootstrap_servers": "s:9092"},
                  "destination": {"alias": "dst", "bootstrap_servers": "d:9092"}},
        spark={"master": "local[2]", "version": "4.1.1"}, bucket_size=10_000, topics=topics,
    )
