"""Keep verification reports on disk: per-run JSON + HTML, the latest summary, an append-only history.

Layout of a reports directory::

    runs/<run id>.json   the full report (schema: reports/report.schema.json)
    runs/<run id>.html   the same report rendered for people
    latest.json          copy of the newest report; latest.html likewise
    summary.json         model.summary() of the newest report (what the controller serves)
    history.jsonl        one line per run, appended, never rewritten; runs that could not
                         verify anything have status ERROR and a reason

Readers (the controller's API and metrics) only read ``summary.json`` and
``history.jsonl``, which stay small however large a report is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ureplicator.reports import html, model

HISTORY = "history.jsonl"
SUMMARY = "summary.json"
LATEST = "latest.json"
LATEST_HTML = "latest.html"
RUNS = "runs"
CHART_RUNS = 60


def history_entry(report: Mapping[str, Any]) -> dict[str, Any]:
    """The line a completed run adds to history.jsonl."""
    totals = report["totals"]
    return {
        "schema_version": model.SCHEMA_VERSION,
        "run_id": report["run_id"],
        "started_at": report["started_at"],
        "finished_at": report["finished_at"],
        "duration_s": report["duration_s"],
        "status": report["status"],
        "mode": report["mode"],
        "topics": totals["topics"],
        "verified_records": totals["verified_records"],
        "records_read": totals["records_read"],
        "ranges": ranges(report),
        "partitions": totals["partitions"],
        "categories": totals["categories"],
        "report": f"{RUNS}/{report['run_id']}.json",
        "error": None,
    }


def ranges(report: Mapping[str, Any]) -> dict[str, Any]:
    """Per topic, how it was read and which offsets: {topic: {mode, source: {p: [start, end)}, destination: ...}}."""
    return {
        t["topic"]: {
            "mode": t["mode"],
            "source": {str(p["partition"]): p["verified_range"] for p in t["partitions"]},
            "destination": {
                str(p["partition"]): p["destination_range"] for p in t["partitions"] if p["destination_range"]
            },
        }
        for t in report["topics"]
    }


def error_entry(run_id: str, started_at: str, finished_at: str, duration_s: float, reason: str) -> dict[str, Any]:
    """The line a run that could not verify anything adds to history.jsonl."""
    return {
        "schema_version": model.SCHEMA_VERSION,
        "run_id": run_id,
        "started_at": started_at,
        "finished_at": finished_at,
        "duration_s": round(duration_s, 3),
        "status": model.ERROR,
        "mode": None,
        "topics": 0,
        "verified_records": 0,
        "records_read": {"source": 0, "destination": 0},
        "ranges": {},
        "partitions": dict.fromkeys((model.OK, model.WARN, model.FAIL), 0),
        "categories": dict.fromkeys(model.CATEGORIES, 0),
        "report": None,
        "error": reason,
    }


class ReportStore:
    """One reports directory; safe to read while a verifier writes (files are replaced atomically)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def save(self, report: Mapping[str, Any], keep_runs: int | None = None) -> Path:
        """Write the report, its HTML, the latest copies and summary; append to history. Returns the JSON path."""
        runs = self.root / RUNS
        runs.mkdir(parents=True, exist_ok=True)
        entry = history_entry(report)
        chart = [*self.history(limit=CHART_RUNS - 1), entry]
        page = html.render(report, chart)
        text = json.dumps(report, indent=1, sort_keys=False) + "\n"
        path = runs / f"{report['run_id']}.json"
        _write(path, text)
        _write(runs / f"{report['run_id']}.html", page)
        _write(self.root / LATEST, text)
        _write(self.root / LATEST_HTML, page)
        _write(self.root / SUMMARY, json.dumps(model.summary(report), indent=1) + "\n")
        self.append(entry)
        if keep_runs is not None:
            self.prune(keep_runs)
        return path

    def append(self, entry: Mapping[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / HISTORY
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        if _ends_mid_line(path):
            line = "\n" + line  # a crash cut the last line short: do not glue ours onto it
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs oldest first (the last ``limit`` when given); unreadable lines are skipped."""
        try:
            lines = (self.root / HISTORY).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        entries = []
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash mid-write
            if isinstance(entry, dict) and "run_id" in entry:
                entries.append(entry)
        return entries[-limit:] if limit else entries

    def summary(self) -> dict[str, Any] | None:
        """model.summary() of the newest report, or None when no run has completed."""
        try:
            doc = json.loads((self.root / SUMMARY).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def prune(self, keep: int) -> list[str]:
        """Delete all but the newest ``keep`` run files (history.jsonl keeps every line)."""
        runs = sorted((self.root / RUNS).glob("*.json"))
        removed = []
        for path in runs[: max(0, len(runs) - keep)]:
            path.unlink(missing_ok=True)
            path.with_suffix(".html").unlink(missing_ok=True)
            removed.append(path.stem)
        return removed


def _ends_mid_line(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except FileNotFoundError:
        return False


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
