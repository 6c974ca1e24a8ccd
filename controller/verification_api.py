"""REST view of the verifier's reports: the newest summary and the run history (a Flask Blueprint).

The controller registers ``make_blueprint(config.controller.verification_dir)``
as a route-scoped blueprint (served bare and under ``/routes/<id>/``); the
directory is the one ``ureplicator verify --output`` writes (a shared volume, or
the CronJob's PVC in the Helm chart). Each route's reports live in
:func:`route_reports_dir`: the directory itself for the implicit ``default``
route (today's layout, so an upgrade finds its history), ``<dir>/<route id>/``
for a declared route. ``register_metrics`` adds the
``ureplicator_verification_*`` series to the controller's registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from flask import Blueprint, jsonify, request
from prometheus_client import CollectorRegistry, Metric
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ureplicator.common.config import IMPLICIT_ROUTE
from ureplicator.reports.metrics import VerificationCollector
from ureplicator.reports.store import ReportStore

MAX_HISTORY = 1000


def route_reports_dir(reports_dir: Path | str, route_id: str) -> Path:
    """Where the verifier keeps ``route_id``'s reports under ``controller.verification_dir``."""
    if not route_id or route_id == IMPLICIT_ROUTE:
        return Path(reports_dir)
    return Path(reports_dir) / route_id


def make_blueprint(reports_dir: Path | None, route_of: Callable[[], str] | None = None) -> Blueprint:
    """``GET /verification`` (newest summary) and ``GET /verification/history?limit=N`` (newest first).

    ``route_of()`` names the request's route (the controller passes its route resolution);
    without it the blueprint serves ``reports_dir`` itself.
    """
    blueprint = Blueprint("verification", __name__)

    def route_store() -> ReportStore | None:
        if reports_dir is None:
            return None
        return ReportStore(route_reports_dir(reports_dir, route_of() if route_of else ""))

    def not_found(message: str) -> tuple[Any, int]:
        return jsonify({"error": {"code": 404, "message": message}}), 404

    def no_dir() -> tuple[Any, int]:
        return not_found("verification reports are not configured (controller.verification_dir)")

    @blueprint.get("/verification")
    def latest() -> Any:
        store = route_store()
        if store is None:
            return no_dir()
        summary = store.summary()
        if summary is None:
            return not_found(f"no verification report in {store.root} yet")
        return jsonify(summary)

    @blueprint.get("/verification/history")
    def history() -> Any:
        store = route_store()
        if store is None:
            return no_dir()
        raw = request.args.get("limit", "100")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_HISTORY:
            return jsonify({"error": {"code": 400, "message": f"limit must be 1..{MAX_HISTORY}, got {raw!r}"}}), 400
        runs = store.history(limit=int(raw))
        if not runs:
            return not_found(f"no verification run recorded in {store.root} yet")
        return jsonify({"runs": list(reversed(runs))})

    return blueprint


class RouteVerificationCollector(Collector):
    """The verification gauges of every route, each series labelled with its ``route``.

    ``routes()`` names the deployment's routes at scrape time; each route's newest report is
    read from its own directory (:func:`route_reports_dir`).
    """

    def __init__(self, reports_dir: Path, routes: Callable[[], Iterable[str]]) -> None:
        self.reports_dir = reports_dir
        self.routes = routes

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, GaugeMetricFamily] = {}
        for route in sorted(self.routes()):
            for family in VerificationCollector(route_reports_dir(self.reports_dir, route)).collect():
                for sample in family.samples:
                    labels = list(sample.labels)
                    out = merged.setdefault(family.name, GaugeMetricFamily(
                        family.name, family.documentation, labels=[*labels, "route"]))
                    out.add_metric([*(sample.labels[k] for k in labels), route], sample.value)
        yield from merged.values()


def register_metrics(registry: CollectorRegistry, reports_dir: Path | None,
                     routes: Callable[[], Iterable[str]] | None = None) -> Collector:
    """Add the verification gauges to ``registry`` (read from the reports directory on every scrape).

    With ``routes`` (the controller's), one series per route, labelled ``route``; without, the
    directory's own reports, unlabelled.
    """
    collector: Collector
    if routes is not None and reports_dir is not None:
        collector = RouteVerificationCollector(Path(reports_dir), routes)
    else:
        collector = VerificationCollector(Path(reports_dir) if reports_dir is not None else None)
    registry.register(collector)
    return collector
