"""The pinned Go tools the chart tests run (built by `make helm` and `make promtool`, which `make test` runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import helmtool
from devtools import promtool as promtool_module


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return helmtool.require()
    except helmtool.HelmToolError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def promtool() -> Path:
    try:
        return promtool_module.require()
    except promtool_module.PromtoolError as exc:
        pytest.fail(str(exc), pytrace=False)
