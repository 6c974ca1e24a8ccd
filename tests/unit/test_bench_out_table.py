"""bench/render.py's one table writer, and a run's summary being its own rendered section."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from bench import recording, render

DATE = "2026-11-26T06:00:00+00:00"


def test_table_aligns_columns_and_keeps_empty_cells() -> None:
    assert render.table(["variant", "rate", ""], [["a", "1,000", ""], ["b", 2, "x"]], "lr") == [
        "| variant | rate | |",
        "|---|---:|---|",
        "| a | 1,000 | |",
        "| b | 2 | x |",
    ]
    assert render.table(["only"]) == ["| only |", "|---|"]


def test_a_section_is_its_paragraphs_and_tables_apart() -> None:
    assert render.section("## Title", "One line.", render.table(["a"], [[1]])) == (
        "## Title\n\nOne line.\n\n| a |\n|---|\n| 1 |")


def render_value(entry: dict[str, Any]) -> str:
    return f"value {entry['value']}"


def test_a_run_without_a_summary_prints_its_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    previous = signal.getsignal(signal.SIGTERM)
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n")
    section = render.Section("fake-bench", "fake", __name__, "render_value")
    try:
        status = recording.run_and_record(lambda: {"date": DATE, "value": 7}, section=section,
                                          results_dir=tmp_path / "results", doc=doc, no_write=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert status == 0
    assert capsys.readouterr().out == "value 7\n"
    assert not (tmp_path / "results").exists()


def test_render_entry_is_what_the_newest_file_renders() -> None:
    section = render.by_name("latency-bench")
    path = section.newest()
    assert path is not None
    entries = json.loads(path.read_text())
    full = [e for e in entries if not e.get("quick")][-1]
    assert section.render_entry(full, path) == section.render(path)
