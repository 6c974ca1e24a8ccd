"""Render every generated section of docs/benchmarks.md from its JSON in bench/results/ (one command).

    .venv/bin/python -m bench.render            # rewrite every section whose results file exists
    .venv/bin/python -m bench.render --check    # exit 1 when a section differs from what its JSON renders
    .venv/bin/python -m bench.render stalls-bench  # only the named sections

A section is the last full entry of the newest ``<prefix>-*.json``, rendered by its benchmark's function.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import DOC, RESULTS_DIR, entries, replace_section, say

Entry = dict[str, Any]


def table(header: Sequence[str], rows: Iterable[Iterable[object]] = (), align: str = "") -> list[str]:
    """A Markdown table: header, rule and rows; ``align`` has an ``r`` for each right-aligned column (``"lrr"``)."""
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align.ljust(len(header))) + "|"
    return [row(header), rule, *(row(r) for r in rows)]


def row(cells: Iterable[object]) -> str:
    """One Markdown table row."""
    return "|" + "".join(f" {c} |" if str(c) else " |" for c in cells)


def section(*paragraphs: str | list[str]) -> str:
    """A generated section's text: paragraphs (a table as its lines) separated by blank lines."""
    return "\n\n".join(p if isinstance(p, str) else "\n".join(p) for p in paragraphs)


def machine(m: Entry) -> str:
    """What a run was measured on, in one line (:func:`bench.common.machine_info`)."""
    return (f"{m['cpu_model']}, {m['cores']} cores, {m['ram_bytes'] / 2**30:.0f} GiB RAM, Python {m['python']}, "
            f"{m['java']}, Kafka {m['kafka_brokers']}, MirrorMaker 2 {m['mirrormaker2']}, "
            f"librdkafka {m['librdkafka']}")


@dataclass(frozen=True)
class Section:
    """One generated section: its markers, its results files and the benchmark function rendering it;
    ``extra`` adds what the function needs from the results file besides the entry."""

    name: str
    prefix: str  # results files are <prefix>-<date>.json
    module: str
    function: str
    extra: Callable[[Path, Entry], tuple[Entry, tuple[Any, ...]]] | None = None

    @property
    def start(self) -> str:
        return f"<!-- {self.name}:start -->"

    @property
    def end(self) -> str:
        return f"<!-- {self.name}:end -->"

    def newest(self, results_dir: Path = RESULTS_DIR) -> Path | None:
        # "<prefix>-2..." so that "throughput" does not pick up throughput-eos or throughput-ab; by the date's
        # digits, so that controller-scale-2026-11-28 is newer than the first files' controller-scale-20261121T12...
        files = sorted(results_dir.glob(f"{self.prefix}-[0-9]*.json"),
                       key=lambda path: (re.sub(r"\D", "", path.name)[:8], path.name))
        return files[-1] if files else None

    def render(self, path: Path) -> str:
        # A smoke run (--quick) is recorded but never replaces a full run in the doc.
        runs = entries(path)
        return self.render_entry(next((e for e in reversed(runs) if not e.get("quick")), runs[-1]), path)

    def render_entry(self, entry: Entry, path: Path) -> str:
        """``entry`` as the section shows it; ``path`` is its results file (which need not exist yet)."""
        entry, args = self.extra(path, entry) if self.extra else (entry, ())
        return getattr(importlib.import_module(self.module), self.function)(entry, *args)


def _others(prefix: str) -> Callable[[Path, Entry], tuple[Entry, tuple[Any, ...]]]:
    """Every other stored run of ``<prefix>-*.json``, for a section that lists them under the one it shows."""
    def extra(path: Path, entry: Entry) -> tuple[Entry, tuple[Any, ...]]:
        runs = [run for other in sorted(path.parent.glob(f"{prefix}-[0-9]*.json")) for run in entries(other)]
        return entry, ([r for r in runs if r.get("date") != entry.get("date")],)

    return extra


def _controller_scale(path: Path, entry: Entry) -> tuple[Entry, tuple[Any, ...]]:
    # Files written before the entry carried its date: the date is the file name's stamp.
    stamp = re.search(r"(\d{4})(\d{2})(\d{2})T", path.name)
    return ({**entry, "date": "-".join(stamp.groups())} if "date" not in entry and stamp else entry), ()


SECTIONS: tuple[Section, ...] = (
    Section("controller-scale", "controller-scale", "bench.controller_scale", "render", _controller_scale),
    Section("verifier-bench", "verifier", "bench.verifier_bench", "render",
            lambda path, entry: ({**entry, "results_file": path.name}, ())),
    Section("latency-bench", "latency", "bench.latency", "render", _others("latency")),
    Section("ack-latency", "ack-latency", "bench.ack_latency", "render"),
    Section("stalls-bench", "stalls", "bench.stalls", "render", _others("stalls")),
    Section("drill", "drill", "bench.drill", "render"),
    Section("throughput-bench", "throughput", "bench.throughput", "render_section"),
    Section("failover-bench", "failover", "bench.failover", "render"),
    Section("soak", "soak", "bench.soak", "render"),
    Section("soak-eos", "soak-eos", "bench.soak", "render"),
    Section("leader-cost", "leader-cost", "bench.leader_cost", "render"),
    Section("eos-bench", "throughput-eos", "bench.throughput", "render_eos_section"),
)


def by_name(name: str) -> Section:
    for section in SECTIONS:
        if section.name == name:
            return section
    raise KeyError(f"no generated section {name!r}; known: {', '.join(s.name for s in SECTIONS)}")


def current(doc_text: str, section: Section) -> str | None:
    """The body between the section's markers in ``doc_text`` (None when the doc has no such section)."""
    if section.start not in doc_text or section.end not in doc_text:
        return None
    return doc_text.split(section.start, 1)[1].split(section.end, 1)[0].strip("\n")


def render_file(section: Section, path: Path, doc: Path = DOC) -> None:
    """Re-render ``section`` of ``doc`` from the last entry of ``path`` (the benchmarks' ``--render FILE``)."""
    replace_section(doc, section.start, section.end, section.render(path))
    say(f"{doc} {section.name} section rendered from {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.render", description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", help=f"only these ({', '.join(s.name for s in SECTIONS)})")
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a section differs")
    args = parser.parse_args(argv)
    try:
        chosen = [by_name(n) for n in args.sections] if args.sections else list(SECTIONS)
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    differs = []
    for section in chosen:
        if (path := section.newest()) is None:
            continue
        if not args.check:
            render_file(section, path)
        elif current(DOC.read_text(), section) != section.render(path).strip("\n"):
            differs.append(section.name)
    if differs:
        say(f"differs from its JSON: {', '.join(differs)} (python -m bench.render rewrites them)")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
