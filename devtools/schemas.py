"""Regenerate, or check, the documents generated from the pydantic models: the OpenAPI document and the report schema.

``python -m devtools.schemas`` rewrites them; ``python -m devtools.schemas --check`` (run by
``make lint``) exits 1 naming each file that differs from what the models give, so a model
changed without its document (or a document edited by hand) fails the build.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ureplicator.controller import openapi
from ureplicator.reports import document

ROOT = Path(__file__).resolve().parents[1]
GENERATED: dict[str, Callable[[], str]] = {
    "controller/openapi.json": openapi.render,
    "reports/report.schema.json": document.render,
}


def stale() -> list[str]:
    """The generated files whose checked-in text differs from a fresh rendering."""
    return [name for name, render in GENERATED.items()
            if not (ROOT / name).exists() or (ROOT / name).read_text() != render()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.schemas", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"{name} differs from its models: run python -m devtools.schemas and commit it", file=sys.stderr)
        return 1 if names else 0
    for name, render in GENERATED.items():
        (ROOT / name).write_text(render())
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
