"""Prometheus view of the newest verification: a custom collector that reads the reports directory per scrape.

Exposed series (the controller registers the collector next to its own)::

    ureplicator_verification_last_run_timestamp_seconds   end of the newest completed run
    ureplicator_verification_status                      0 OK, 1 WARN, 2 FAIL, 3 ERROR (a topic not verified)
    ureplicator_verification_records{category="..."}     records per category in that run, plus "verified"

No report yet means no series, so an alert on ``absent()`` tells "never ran"
from "ran and failed".
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ureplicator.reports import model
from ureplicator.reports.store import ReportStore


class VerificationCollector(Collector):
    def __init__(self, reports_dir: Path | None) -> None:
        self.store = ReportStore(reports_dir) if reports_dir is not None else None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        summary = self.store.summary() if self.store is not None else None
        if summary is None:
            return
        finished = GaugeMetricFamily(
            "ureplicator_verification_last_run_timestamp_seconds",
            "Unix time at which the newest completed verification run finished",
        )
        finished.add_metric([], _epoch(summary["finished_at"]))
        yield finished
        status = GaugeMetricFamily(
            "ureplicator_verification_status",
            "Result of the newest verification run: 0 OK, 1 WARN, 2 FAIL, 3 ERROR",
        )
        status.add_metric([], model.STATUS_CODE.get(summary["status"], model.STATUS_CODE[model.ERROR]))
        yield status
        records = GaugeMetricFamily(
            "ureplicator_verification_records",
            "Records per category in the newest verification run ('verified' = records proven equal)",
            labels=["category"],
        )
        totals = summary["totals"]
        records.add_metric(["verified"], totals["verified_records"])
        for category in model.CATEGORIES:
            records.add_metric([category.lower()], totals["categories"].get(category, 0))
        yield records


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
