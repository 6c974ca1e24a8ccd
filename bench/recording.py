"""The shared tail of the benchmark scripts: run, map failures to exit codes, print, record."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import common
from bench.harness import BenchError, install_signal_handlers
from bench.render import Section, by_name, render_file
from devtools import stack
from ureplicator.common.errors import UReplicatorError

BENCH_ERRORS: tuple[type[BaseException], ...] = (BenchError, UReplicatorError, stack.StackError, TimeoutError)

Entry = dict[str, Any]


def parser(prog: str, doc: str | None, heap: str | None = None, render: bool = False) -> argparse.ArgumentParser:
    """A benchmark's command line with the options they share: ``--broker-heap`` (given a default ``heap``),
    ``--no-write`` and (``render``) ``--render FILE``, which :func:`rendered` handles."""
    out = argparse.ArgumentParser(prog=prog, description=(doc or "").splitlines()[0])
    if heap is not None:
        out.add_argument("--broker-heap", default=heap, help=f"heap of each local broker (default {heap})")
    out.add_argument("--no-write", action="store_true", help="print only; no JSON, no docs section")
    if render:
        out.add_argument("--render", type=Path, metavar="FILE",
                         help="only re-render the docs section from the last entry of this results file")
    return out


def rendered(args: argparse.Namespace, section: str) -> bool:
    """With ``--render FILE``: re-render ``section`` from FILE and say so (the script then exits 0)."""
    if getattr(args, "render", None) is None:
        return False
    render_file(by_name(section), args.render)
    return True


def run_and_record(run: Callable[[], Entry], *, section: Section | str,
                   summary: Callable[[Entry], int | None] | None = None,
                   no_write: bool = False, written: str = "results appended to {path}; {doc} section updated",
                   failed: str = "FAILED", failed_status: int = 1,
                   results_dir: Path | None = None, doc: Path | None = None) -> int:
    """Run one benchmark, print its summary (without ``summary``: its rendered section), append the entry to
    ``<results_dir>/<prefix>-<date>.json`` and re-render its section of ``doc`` from that file.

    Returns 130 when interrupted, ``failed_status`` when ``run`` raises one of ``BENCH_ERRORS``, else what
    ``summary`` returned (it runs before anything is written, so it may amend the entry).
    """
    section = by_name(section) if isinstance(section, str) else section
    results_dir = common.RESULTS_DIR if results_dir is None else results_dir
    doc = common.DOC if doc is None else doc
    install_signal_handlers()
    try:
        entry = run()
    except KeyboardInterrupt:
        common.say("interrupted; everything started was stopped")
        return 130
    except BENCH_ERRORS as exc:
        common.say(f"{failed}: {exc}")
        return failed_status
    path = results_dir / f"{section.prefix}-{entry['date'][:10]}.json"
    if summary is None:  # the run's own section is its summary
        print(section.render_entry(entry, path))
    status = summary(entry) if summary is not None else None
    if not no_write:
        common.append_json(path, entry)  # only a summary when the raw samples went to results/raw/
        common.replace_section(doc, section.start, section.end, section.render(path))
        common.say(written.format(path=path, doc=doc))
    return status or 0
