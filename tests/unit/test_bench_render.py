"""Every generated section of docs/benchmarks.md re-renders from its checked-in JSON, byte for byte."""

from __future__ import annotations

import pytest

from bench import render
from bench.common import DOC


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
