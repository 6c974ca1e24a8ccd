"""`make test`'s two phases (devtools/testrun.py): what each runs, and how their exit statuses combine."""

from __future__ import annotations

import pytest

from devtools import testrun


def test_the_first_phase_runs_the_undisruptive_tests_on_workers_and_the_second_the_rest_alone() -> None:
    (first_name, first), (second_name, second) = testrun.phases(2, ["-x"])
    assert first[:1] == second[:1] == ["tests"]
    assert first[first.index("-n") + 1] == "2" and first[first.index("--dist") + 1] == "loadgroup"
    assert first[first.index("-m") + 1] == "not disruptive" and first[-1] == "-x"
    assert "-n" not in second and second[second.index("-m") + 1] == "disruptive" and second[-1] == "-x"
    assert "parallel" in first_name and "one at a time" in second_name


def test_no_workers_means_no_xdist_and_named_paths_replace_tests() -> None:
    (_, first), (_, second) = testrun.phases(0, ["tests/unit/test_testrun.py::test_x", "-k", "faults"])
    assert "-n" not in first and "--dist" not in first
    assert "tests" not in first and "tests" not in second  # the named test replaces the whole suite
    assert first[-3:] == second[-3:] == ["tests/unit/test_testrun.py::test_x", "-k", "faults"]
    # a word that names no path (here -k's) leaves `tests` in
    assert testrun.phases(0, ["-k", "faults"])[0][1][0] == "tests"


@pytest.mark.parametrize(("statuses", "expected"), [
    ([0, 0], 0), ([0, 5], 0), ([5, 0], 0), ([5, 5], 5), ([1, 0], 1), ([0, 1], 1), ([2, 1], 2), ([5, 1], 1),
])
def test_both_phases_must_pass_and_only_two_empty_phases_mean_no_tests(statuses: list[int], expected: int) -> None:
    assert testrun.combined(statuses) == expected


def test_a_negative_worker_count_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        testrun.main(["--workers", "-1"])
    assert exc.value.code == 2
    assert "--workers must be 0 or more, got -1" in capsys.readouterr().err
