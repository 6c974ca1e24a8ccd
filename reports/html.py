"""Render a verification report (the JSON document) as one self-contained HTML page.

Order of the page: the verdict and totals, then the partitions that failed or
warned with their offset ranges and samples, then a chart of past runs
(inline SVG), then every topic, then the hash definition. No scripts, no
external files: the page can be mailed or archived as is.

The page is the Jinja2 template ``reports/report.html`` with autoescape on, so no
caller escapes anything by hand; this module only orders the data and computes the
chart's geometry.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ureplicator.reports import model

_COLOURS = {model.OK: "#2e7d32", model.WARN: "#b26a00", model.FAIL: "#c62828", model.ERROR: "#6a1b9a"}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#1d1d1f;padding:0 1rem}
h1{font-size:1.5rem;margin:0 0 .3rem}h2{font-size:1.15rem;margin:2rem 0 .6rem;border-bottom:1px solid #ddd}
h3{font-size:1rem;margin:1.2rem 0 .4rem}.muted{color:#666}
.badge{display:inline-block;padding:.1rem .6rem;border-radius:.8rem;color:#fff;font-weight:600;font-size:.85rem}
table{border-collapse:collapse;margin:.4rem 0 1rem;width:100%}th,td{border:1px solid #ddd;padding:.25rem .5rem;
text-align:left;vertical-align:top}th{background:#f5f5f7;font-weight:600}td.n{text-align:right;
font-variant-numeric:tabular-nums}code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.cards{display:flex;gap:1rem;flex-wrap:wrap}.card{border:1px solid #ddd;border-radius:.5rem;padding:.6rem 1rem;
min-width:9rem}.card b{display:block;font-size:1.3rem}details{margin:.3rem 0}summary{cursor:pointer}
"""


def _ranges_text(ranges: Sequence[Sequence[int]], truncated: bool) -> str:
    text = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in ranges)
    if truncated:
        text += f", … (first {len(ranges)} ranges shown)"
    return text


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=True,  # every value from the report is text, never markup
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.globals.update(colours=_COLOURS, ranges_text=_ranges_text, statuses=model.STATUS_ORDER,
                       categories=model.CATEGORIES, css=Markup(_CSS))
    return env


def chart_geometry(history: Sequence[Mapping[str, Any]], width: int = 1000, height: int = 180) -> dict[str, Any]:
    """The past-runs chart: one bar per run (height = records verified, colour = status), defects as a line."""
    if not history:
        return {}
    pad_left, pad_bottom, pad_top = 60, 24, 12
    plot_w, plot_h = width - pad_left - 10, height - pad_bottom - pad_top
    peak = max(max(int(e.get("verified_records") or 0) for e in history), 1)
    step = plot_w / len(history)
    bar_w = max(2.0, step * 0.7)
    defects_peak = max(max(_defects(e) for e in history), 1)
    bars, points = [], []
    for i, entry in enumerate(history):
        value = int(entry.get("verified_records") or 0)
        h = plot_h * value / peak
        bar_h = max(h, 2.0)
        x = pad_left + i * step + (step - bar_w) / 2
        y = pad_top + plot_h - h
        title = (f"{entry.get('run_id')} {entry.get('status')}: {value:,} verified, {_defects(entry):,} defects"
                 + (f" — {entry['error']}" if entry.get("error") else ""))
        bars.append({"x": f"{x:.1f}", "y": f"{y - (bar_h - h):.1f}", "w": f"{bar_w:.1f}", "h": f"{bar_h:.1f}",
                     "status": entry.get("status", ""), "title": title})
        dy = pad_top + plot_h - plot_h * _defects(entry) / defects_peak
        points.append(f"{pad_left + i * step + step / 2:.1f},{dy:.1f}")
    return {"width": width, "height": height, "left": pad_left, "top": pad_top, "base": pad_top + plot_h,
            "peak": peak, "defects_peak": defects_peak, "bars": bars, "points": points,
            "first": str(history[0].get("started_at", "")), "last": str(history[-1].get("started_at", ""))}


def chart(history: Sequence[Mapping[str, Any]], width: int = 1000, height: int = 180) -> str:
    """The past-runs chart alone, as HTML (inline SVG)."""
    chart_macro = _environment().get_template("report_chart.html").module.past_runs  # type: ignore[attr-defined]
    return str(chart_macro(chart_geometry(history, width, height)))


def _defects(entry: Mapping[str, Any]) -> int:
    categories = entry.get("categories") or {}
    return sum(int(categories.get(c, 0)) for c in model.CATEGORIES if c in model.FAILING | model.WARNING)


def render(report: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> str:
    """The HTML page for ``report``; ``history`` (oldest first, this run last) feeds the chart."""
    problems = [(t, p) for t in report["topics"] for p in t["partitions"] if p["status"] != model.OK]
    problems.sort(key=lambda tp: (-model.STATUS_ORDER.index(tp[1]["status"]), tp[0]["topic"], tp[1]["partition"]))
    return _environment().get_template("report.html").render(
        report=report,
        errors=[t for t in report["topics"] if t["error"]],
        problems=problems,
        shown_categories=[c for c in model.CATEGORIES if c not in model.INFORMATION],
        chart=chart_geometry(history),
    )
