"""Every generated section of docs/benchmarks.md re-renders from its checked-in JSON, byte for byte; every
entry of every results file renders through its section's renderer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import render
from bench.common import DOC, RESULTS_DIR


@pytest.mark.parametrize("section", [s for s in render.SECTIONS if s.newest() is not None], ids=lambda s: s.name)
def test_section_renders_from_its_json(section: render.Section) -> None:
    in_doc = render.current(DOC.read_text(), section)
    assert in_doc is not None, f"docs/benchmarks.md has results for {section.name} but no section"
    assert section.render(section.newest()).strip("\n") == in_doc


def test_every_section_of_the_doc_has_a_renderer() -> None:
    text = DOC.read_text()
    markers = {line[5:-10] for line in text.splitlines() if line.startswith("<!-- ") and line.endswith(":start -->")}
    assert markers <= {s.name for s in render.SECTIONS}


def test_unknown_section_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        render.main(["nosuch"])
    assert exc.value.code == 2
    assert "no generated section 'nosuch'" in capsys.readouterr().err


# Results files that no section renders: the 2026-11-21 A/B runs of a patched worker (a hand-made record
# the throughput notes cite, never a benchmark's entry).
NOT_A_SECTION = {"throughput-ab-2026-11-21.json"}


def _section_of(path: Path) -> render.Section:
    """The section whose ``<prefix>-<date>`` names ``path`` (the longest prefix: throughput-eos, not throughput)."""
    owners = [s for s in render.SECTIONS if re.fullmatch(re.escape(s.prefix) + r"-\d.*\.json", path.name)]
    assert owners, f"{path.name}: no section renders it (add it to NOT_A_SECTION with a reason)"
    return max(owners, key=lambda s: len(s.prefix))


@pytest.mark.parametrize("path", [p for p in sorted(RESULTS_DIR.glob("*.json")) if p.name not in NOT_A_SECTION],
                         ids=lambda p: p.name)
def test_every_entry_of_every_results_file_renders(path: Path) -> None:
    """Old formats too: a renderer migrates an old entry's shape on load instead of failing on it."""
    section = _section_of(path)
    loaded = json.loads(path.read_text())
    for entry in loaded if isinstance(loaded, list) else [loaded]:
        assert section.render_entry(entry, path).strip()
