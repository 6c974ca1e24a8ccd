"""bench/recording.py: the shared tail of the benchmark scripts' main()."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from bench import recording
from bench import render as bench_render
from bench.harness import BenchError
from devtools import stack
from ureplicator.common.errors import UReplicatorError

START = "<!-- fake-bench:start -->"
END = "<!-- fake-bench:end -->"
DATE = "2026-11-23T17:00:00+00:00"


@pytest.fixture(autouse=True)
def _keep_sigterm() -> Any:
    """run_and_record installs a SIGTERM handler; put the test runner's back."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture()
def paths(tmp_path: Path) -> tuple[Path, Path]:
    results = tmp_path / "results"
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nbefore\n\n{START}\nold section\n{END}\n\nafter\n")
    return results, doc


def render(entry: dict[str, Any]) -> str:
    return f"rendered {entry['value']}"


def record(run: Any, paths: tuple[Path, Path], **kwargs: Any) -> int:
    results, doc = paths
    section = bench_render.Section("fake-bench", "fake", __name__, "render")
    return recording.run_and_record(run, section=section, results_dir=results, doc=doc, **kwargs)


def test_success_appends_results_and_replaces_only_the_section(paths: tuple[Path, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    results, doc = paths
    printed: list[dict[str, Any]] = []
    status = record(lambda: {"date": DATE, "value": 1}, paths, summary=printed.append)
    assert status == 0
    assert printed == [{"date": DATE, "value": 1}]
    path = results / "fake-2026-11-23.json"
    assert json.loads(path.read_text()) == [{"date": DATE, "value": 1}]
    assert doc.read_text() == f"# Benchmarks\n\nbefore\n\n{START}\nrendered 1\n{END}\n\nafter\n"
    assert f"bench: results appended to {path}; {doc} section updated" in capsys.readouterr().err

    assert record(lambda: {"date": DATE, "value": 2}, paths) == 0
    assert [e["value"] for e in json.loads(path.read_text())] == [1, 2]
    assert doc.read_text() == f"# Benchmarks\n\nbefore\n\n{START}\nrendered 2\n{END}\n\nafter\n"


def test_no_write_leaves_files_alone(paths: tuple[Path, Path]) -> None:
    results, doc = paths
    before = doc.read_text()
    assert record(lambda: {"date": DATE, "value": 1}, paths, no_write=True) == 0
    assert not results.exists()
    assert doc.read_text() == before


def test_summary_status_and_custom_message(paths: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    results, doc = paths

    def summary(entry: dict[str, Any]) -> int:
        entry["verdict"] = "bad"
        return 1

    status = record(lambda: {"date": DATE, "value": 3}, paths, summary=summary, written="results in {path}; {doc} x")
    assert status == 1
    path = results / "fake-2026-11-23.json"
    assert json.loads(path.read_text())[-1]["verdict"] == "bad"  # the summary may amend the entry
    assert f"bench: results in {path}; {doc} x" in capsys.readouterr().err


def _raise(exc: BaseException) -> Any:
    def run() -> dict[str, Any]:
        raise exc
    return run


@pytest.mark.parametrize("exc", [BenchError("boom"), UReplicatorError("boom"), stack.StackError("boom"),
                                 TimeoutError("boom")])
def test_bench_errors_fail_with_1_and_write_nothing(paths: tuple[Path, Path], exc: BaseException,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    results, doc = paths
    before = doc.read_text()
    summary_called: list[Any] = []
    assert record(_raise(exc), paths, summary=summary_called.append) == 1
    assert capsys.readouterr().err == "bench: FAILED: boom\n"
    assert not summary_called
    assert not results.exists()
    assert doc.read_text() == before


def test_failure_label_and_status(paths: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert record(_raise(TimeoutError("slow")), paths, failed="FAILED (seed 7)", failed_status=2) == 2
    assert capsys.readouterr().err == "bench: FAILED (seed 7): slow\n"


def test_interrupt_exits_130(paths: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    results, _ = paths
    assert record(_raise(KeyboardInterrupt()), paths) == 130
    assert capsys.readouterr().err == "bench: interrupted; everything started was stopped\n"
    assert not results.exists()


def test_other_errors_propagate(paths: tuple[Path, Path]) -> None:
    with pytest.raises(ValueError):
        record(_raise(ValueError("bug")), paths)


def test_sigterm_handler_is_installed(paths: tuple[Path, Path]) -> None:
    def run() -> dict[str, Any]:
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)  # what a SIGTERM would do: unwind like Ctrl-C
        raise AssertionError("not reached")

    assert record(run, paths) == 130


def test_render_uses_last_full_entry_of_newest_file(paths: tuple[Path, Path]) -> None:
    results, doc = paths
    results.mkdir()
    (results / "fake-2026-11-01.json").write_text(json.dumps([{"value": "old"}]))
    (results / "fake-2026-11-20.json").write_text(json.dumps([{"value": "a"}, {"value": "b"},
                                                              {"value": "smoke", "quick": True}]))
    (results / "fake-other-2026-12-01.json").write_text(json.dumps([{"value": "other"}]))
    section = bench_render.Section("fake-bench", "fake", __name__, "render")
    newest = section.newest(results)
    assert newest == results / "fake-2026-11-20.json"
    bench_render.render_file(section, newest, doc)
    assert doc.read_text() == f"# Benchmarks\n\nbefore\n\n{START}\nrendered b\n{END}\n\nafter\n"


def test_a_run_over_1mb_keeps_its_samples_out_of_git(tmp_path: Path) -> None:
    from bench import common

    samples = list(range(300_000))  # ~2 MB of per-sample JSON
    entry = {"date": DATE, "value": "v", "runs": [{"rate": 5000, "p99_ms": 12.5, "samples": samples}]}
    path = tmp_path / "results" / "fake-2026-11-23.json"
    stored = common.append_json(path, entry)
    raw = tmp_path / "results" / "raw" / "fake-2026-11-23-2026-11-23T170000.json"
    assert json.loads(raw.read_text()) == entry
    assert stored["runs"][0] == {"rate": 5000, "p99_ms": 12.5, "samples": {"raw_file": f"raw/{raw.name}",
                                                                         "items": 300_000}}
    assert json.loads(path.read_text()) == [stored]
    assert path.stat().st_size < common.RAW_LIMIT_BYTES


def test_a_small_run_is_stored_whole(tmp_path: Path) -> None:
    from bench import common

    entry = {"date": DATE, "runs": [{"samples": [1, 2, 3]}]}
    path = tmp_path / "fake-2026-11-23.json"
    assert common.append_json(path, entry) == entry
    assert not (tmp_path / "raw").exists()


def test_no_checked_in_run_is_over_1mb() -> None:
    from bench import common

    for path in common.RESULTS_DIR.glob("*.json"):
        loaded = json.loads(path.read_text())
        for entry in loaded if isinstance(loaded, list) else [loaded]:
            assert len(json.dumps(entry, indent=2)) <= common.RAW_LIMIT_BYTES, path


def test_a_dated_controller_scale_file_is_newer_than_the_first_time_stamped_ones(tmp_path: Path) -> None:
    for name in ("controller-scale-20261121T122155Z.json", "controller-scale-2026-11-28.json",
                 "controller-scale-20261121T122213Z.json"):
        (tmp_path / name).write_text("[]")
    assert bench_render.by_name("controller-scale").newest(tmp_path) == tmp_path / "controller-scale-2026-11-28.json"
