"""Render a verification report (the JSON document) as one self-contained HTML page.

Order of the page: the verdict and totals, then the partitions that failed or
warned with their offset ranges and samples, then a chart of past runs
(inline SVG), then every topic, then the hash definition. No scripts, no
external files: the page can be mailed or archived as is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from reports import model

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


def badge(status: str) -> str:
    colour = _COLOURS.get(status, "#555")
    return f'<span class="badge" style="background:{colour}">{escape(status)}</span>'


def _num(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else escape(str(value))


def _ranges(ranges: Sequence[Sequence[int]], truncated: bool) -> str:
    text = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in ranges)
    if truncated:
        text += f", … (first {len(ranges)} ranges shown)"
    return f"<code>{escape(text)}</code>" if text else "—"


def _table(header: Iterable[str], rows: Iterable[Iterable[str]], numeric: Iterable[int] = ()) -> str:
    numeric = set(numeric)
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _summary(report: Mapping[str, Any]) -> str:
    totals = report["totals"]
    clusters = report["clusters"]
    cards = [
        ("records verified", totals["verified_records"]),
        ("topics", totals["topics"]),
        ("partitions OK", totals["partitions"]["OK"]),
        ("partitions WARN", totals["partitions"]["WARN"]),
        ("partitions FAIL", totals["partitions"]["FAIL"]),
        ("topics not verified", totals["topics_not_verified"]),
    ]
    card_html = "".join(f'<div class="card"><b>{_num(v)}</b>{escape(k)}</div>' for k, v in cards)
    category_rows = [(escape(c), _num(n)) for c, n in totals["categories"].items()]
    return (
        f"<h1>Verification of pipeline {escape(report['pipeline'])} {badge(report['status'])}</h1>"
        f'<p class="muted">run <code>{escape(report["run_id"])}</code>, {escape(report["started_at"])} → '
        f"{escape(report['finished_at'])} ({report['duration_s']:.1f}s) · "
        f"<b>{escape(report.get('mode', 'full'))}</b> run, records read: "
        f"{_num(totals.get('records_read', {}).get('source', 0))} source, "
        f"{_num(totals.get('records_read', {}).get('destination', 0))} destination · "
        f"{escape(clusters['source']['alias'])} ({escape(clusters['source']['bootstrap_servers'])}) → "
        f"{escape(clusters['destination']['alias'])} ({escape(clusters['destination']['bootstrap_servers'])}) · "
        f"group <code>{escape(report['group'])}</code> · Spark {escape(report['spark']['version'])} on "
        f"<code>{escape(report['spark']['master'])}</code></p>"
        f'<div class="cards">{card_html}</div>'
        "<h3>Records per category</h3>"
        + _table(["category", "records"], category_rows, numeric=[1])
    )


def _problems(report: Mapping[str, Any]) -> str:
    errors = [t for t in report["topics"] if t["error"]]
    bad = [
        (t, p)
        for t in report["topics"]
        for p in t["partitions"]
        if p["status"] != model.OK
    ]
    bad.sort(key=lambda tp: (-model.STATUS_ORDER.index(tp[1]["status"]), tp[0]["topic"], tp[1]["partition"]))
    parts = ["<h2>Failing and warning partitions</h2>"]
    if not bad and not errors:
        parts.append("<p>None: every verified partition matches its source.</p>")
    for topic in errors:
        parts.append(f"<p>{badge(model.ERROR)} <b>{escape(topic['topic'])}</b> not verified: "
                     f"{escape(topic['error'])}</p>")
    for topic, p in bad:
        start, end = p["verified_range"]
        parts.append(
            f"<h3>{badge(p['status'])} {escape(topic['topic'])} partition {p['partition']}"
            f' <span class="muted">verified [{start}, {end}), watermark {p["watermark"]}</span></h3>'
        )
        for category in model.CATEGORIES:
            detail = p["categories"][category]
            if not detail["count"] or category in model.INFORMATION:
                continue
            parts.append(
                f"<p><b>{escape(category)}</b>: {_num(detail['count'])} record(s), "
                f"{escape(detail['ranges_of'])} offsets {_ranges(detail['ranges'], detail['ranges_truncated'])}</p>"
            )
            rows = [
                (
                    _opt(s["source_partition"]), _opt(s["source_offset"]), _opt(s["destination_offset"]),
                    f"<code>{_opt(s['source_hash'])}</code>", f"<code>{_opt(s['destination_hash'])}</code>",
                    escape(s["note"] or ""),
                )
                for s in detail["samples"]
            ]
            if rows:
                parts.append(
                    _table(["source partition", "source offset", "destination offset", "source hash",
                            "destination hash", "note"], rows, numeric=[0, 1, 2])
                )
    return "".join(parts)


def _opt(value: Any) -> str:
    return "—" if value is None else escape(str(value))


def chart(history: Sequence[Mapping[str, Any]], width: int = 1000, height: int = 180) -> str:
    """Inline SVG: one bar per run, height = records verified, colour = status; defects as a line."""
    if not history:
        return '<p class="muted">No earlier runs.</p>'
    pad_left, pad_bottom, pad_top = 60, 24, 12
    plot_w, plot_h = width - pad_left - 10, height - pad_bottom - pad_top
    peak = max(max(int(e.get("verified_records") or 0) for e in history), 1)
    step = plot_w / len(history)
    bar_w = max(2.0, step * 0.7)
    shapes = []
    points = []
    defects_peak = max(max(_defects(e) for e in history), 1)
    for i, entry in enumerate(history):
        value = int(entry.get("verified_records") or 0)
        h = plot_h * value / peak
        x = pad_left + i * step + (step - bar_w) / 2
        y = pad_top + plot_h - h
        colour = _COLOURS.get(entry.get("status", ""), "#555")
        title = (
            f"{entry.get('run_id')} {entry.get('status')}: {value:,} verified, {_defects(entry):,} defects"
            + (f" — {entry['error']}" if entry.get("error") else "")
        )
        bar_h = max(h, 2.0)
        shapes.append(
            f'<rect x="{x:.1f}" y="{y - (bar_h - h):.1f}" width="{bar_w:.1f}" height="{bar_h:.1f}" '
            f'fill="{colour}"><title>{escape(title)}</title></rect>'
        )
        dy = pad_top + plot_h - plot_h * _defects(entry) / defects_peak
        points.append(f"{pad_left + i * step + step / 2:.1f},{dy:.1f}")
    axis = (
        f'<line x1="{pad_left}" y1="{pad_top + plot_h}" x2="{width - 10}" y2="{pad_top + plot_h}" stroke="#999"/>'
        f'<text x="{pad_left - 6}" y="{pad_top + 10}" text-anchor="end" font-size="11">{peak:,}</text>'
        f'<text x="{pad_left - 6}" y="{pad_top + plot_h}" text-anchor="end" font-size="11">0</text>'
        f'<text x="{pad_left}" y="{height - 6}" font-size="11">{escape(str(history[0].get("started_at", "")))}</text>'
        f'<text x="{width - 10}" y="{height - 6}" font-size="11" text-anchor="end">'
        f'{escape(str(history[-1].get("started_at", "")))}</text>'
    )
    line = (
        f'<polyline points="{" ".join(points)}" fill="none" stroke="#222" stroke-width="1.5" '
        'stroke-dasharray="4 3"><title>defective records (MISSING+DUPLICATE+CORRUPTED+ORPHAN+REORDERED)</title>'
        "</polyline>"
        if len(points) > 1
        else ""
    )
    legend = " ".join(f"{badge(s)}" for s in model.STATUS_ORDER)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="records verified per run">{axis}{"".join(shapes)}{line}</svg>'
        f'<p class="muted">Bars: records verified per run (colour = status). Dashed line: defective records '
        f"(scale 0–{defects_peak:,}). {legend}</p>"
    )


def _defects(entry: Mapping[str, Any]) -> int:
    categories = entry.get("categories") or {}
    return sum(int(categories.get(c, 0)) for c in model.CATEGORIES if c in model.FAILING | model.WARNING)


def _topics(report: Mapping[str, Any]) -> str:
    parts = ["<h2>All topics</h2>"]
    for topic in report["topics"]:
        arrow = "" if topic["destination"] == topic["topic"] else f" → {escape(topic['destination'])}"
        rows = []
        for p in topic["partitions"]:
            start, end = p["verified_range"]
            counts = p["counts"]
            read = p.get("destination_range")
            rows.append(
                (badge(p["status"]), str(p["partition"]), escape(p.get("mode", "full")), f"[{start}, {end})",
                 "—" if not read else f"[{read[0]}, {read[1]})", _opt(p["committed"]),
                 _num(p["verified_records"]), *(_num(counts[c]) for c in model.CATEGORIES),
                 escape("; ".join(p["notes"])))
            )
        header = ["status", "partition", "mode", "verified range", "destination read", "committed", "verified",
                  *model.CATEGORIES, "notes"]
        open_attr = " open" if topic["status"] != model.OK else ""
        parts.append(
            f"<details{open_attr}><summary>{badge(topic['status'])} <b>{escape(topic['topic'])}</b>{arrow} "
            f'<span class="muted">{len(topic["partitions"])} partition(s), {topic["duration_s"]:.1f}s, '
            f'{escape(topic.get("mode", "full"))}'
            + (f' ({escape(topic["mode_reason"])})' if topic.get("mode_reason") else "")
            + "</span></summary>"
            + (f"<p>{escape(topic['error'])}</p>" if topic["error"] else "")
            + _table(header, rows, numeric=[1, *range(5, 7 + len(model.CATEGORIES))])
            + "</details>"
        )
    if not report["topics"]:
        parts.append("<p>The pipeline mirrors no topics.</p>")
    return "".join(parts)


def _hash_spec(report: Mapping[str, Any]) -> str:
    spec = report["hash"]
    rows = [(escape(k), f"<code>{escape(str(v))}</code>") for k, v in spec.items()]
    return "<h2>How records are compared</h2>" + _table(["", ""], rows) + (
        f"<p class=\"muted\">Bucket size {report['bucket_size']:,} offsets. "
        "See docs/verification.md.</p>"
    )


def render(report: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> str:
    """The HTML page for ``report``; ``history`` (oldest first, this run last) feeds the chart."""
    body = (
        _summary(report)
        + _problems(report)
        + "<h2>Past runs</h2>"
        + chart(history)
        + _topics(report)
        + _hash_spec(report)
    )
    title = f"{report['status']} · verification {report['run_id']} · {report['pipeline']}"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>{body}</body></html>\n"
    )
