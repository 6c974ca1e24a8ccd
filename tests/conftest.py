"""Session fixtures: one real ZooKeeper + two single-broker KRaft clusters for all integration tests."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.pipeline import Pipeline

# Property tests check properties, not speed: on a loaded 2-core CI machine one example can take
# longer than hypothesis' default 200 ms deadline, which would fail a correct run.
settings.register_profile("ureplicator", deadline=None)
settings.load_profile("ureplicator")

# No class data sharing archive dumped by the tests' Spark drivers: the first cold `verify` would
# write ~170 MB into $HOME and spend seconds at its JVM's exit (the CDS tests pass their own env).
os.environ.setdefault("UREPLICATOR_SPARK_CDS", "off")

# Reproductions of open bugs fail until the bug is fixed: collected only on purpose.
collect_ignore = [] if os.environ.get("UREPLICATOR_REPRODUCTIONS") else ["reproductions"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "disruptive: stops, restarts or freezes a service of the session stack, or starts a stack of"
        " its own that it stops (the `three` fixture): `make test-parallel` runs these alone, after the others"
        " (devtools/testrun.py)")


def pytest_collection_modifyitems(config, items):
    """Integration tests that run Spark share one pytest-xdist worker (``xdist_group("spark")``, used by
    ``--dist loadgroup``, devtools/testrun.py): two Spark drivers on a 2-core machine starve each other."""
    for item in items:
        if "integration" not in item.nodeid.split("::")[0]:
            continue
        spark = "spark" in getattr(item, "fixturenames", ()) or item.module.__name__.rsplit(".", 1)[-1].startswith(
            "test_verifier") or "run_verifier" in inspect.getsource(item.function)
        if spark:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def services(tmp_path_factory):
    """Start the stack once (same code as `ureplicator stack up --secure`); stop it at the end.

    Each broker has a SASL_SSL listener next to its PLAINTEXT one, and ZooKeeper a TLS port next to
    its plain one: ``services["secure"]`` says how to reach them (tests/integration/test_security.py,
    test_zookeeper_tls.py), without starting more services.
    """
    from devtools import stack

    reuse = os.environ.get("UREPLICATOR_TEST_STACK")
    if reuse:  # a developer's running `ureplicator stack up --dir D`: faster edit-test loops
        directory = Path(reuse)
        yield {**json.loads((directory / "stack.json").read_text()), "dir": directory}
        return
    directory = tmp_path_factory.mktemp("stack")
    # 3 minutes, not the CLI's 90 s: the machine that runs the suite is often shared, and a
    # session that cannot start its stack fails every integration test at once.
    # Three clusters, as `make test-parallel`'s stack: the routes tests' c3 is then one more broker
    # here, not a second ZooKeeper and three more brokers started mid-session (`three`).
    addresses = stack.up(directory, secure=True, clusters=3, timeout_s=180)
    yield {**addresses, "dir": directory}
    stack.down(directory)


@pytest.fixture(scope="session")
def three(services, tmp_path_factory, request):
    """ZooKeeper and clusters c1, c2, c3 (and ``dir``, to stop one), for the `disruptive` tests that need three.

    The session's own stack (``services`` without ``UREPLICATOR_TEST_STACK``), which has c3 and whose
    services the other disruptive tests stop and restart too. A stack named by ``UREPLICATOR_TEST_STACK``
    may be shared with other people, so then a stack of its own (`stack up --clusters 3`), started by
    the first test that asks and stopped at the end of the session.
    """
    from devtools import stack

    if not os.environ.get("UREPLICATOR_TEST_STACK") and "c3" in services.get("clusters", {}):
        return services
    directory = tmp_path_factory.mktemp("stack3")
    addresses = stack.up(directory, timeout_s=240, clusters=3)
    request.addfinalizer(lambda: stack.down(directory))
    return {**addresses, "dir": directory}


@pytest.fixture(scope="session")
def clusters3(services, request):
    """ZooKeeper and clusters c1, c2, c3 that a test only reads and writes (never stops): the session
    stack's when it has three clusters, else the ``three`` stack."""
    if {"c1", "c2", "c3"} <= set(services.get("clusters", {})):
        return {k: v for k, v in services.items() if k != "dir"}
    return request.getfixturevalue("three")


@pytest.fixture
def pipeline(services, tmp_path, request):
    """A fresh pipeline (own ZooKeeper root and consumer group); its processes stop after the test."""
    p = Pipeline(services={k: v for k, v in services.items() if k != "dir"}, workdir=tmp_path)
    request.node.pipeline = p
    yield p
    p.stop_all()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the service logs and the pipeline processes' logs to the report."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    pipeline = getattr(item, "pipeline", None)
    if pipeline is not None:
        report.sections.append(("ureplicator processes", pipeline.logs()))
    services = item.funcargs.get("services") if hasattr(item, "funcargs") else None
    if services:
        from devtools import stack

        for name, text in stack.service_logs(services["dir"], lines=40).items():
            report.sections.append((f"{name} log", text))
