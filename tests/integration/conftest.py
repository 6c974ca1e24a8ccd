"""Fixtures shared by the integration tests of one component: the verifier's local Spark."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """One local Spark for every verifier test (2 cores: local[2], two shuffle partitions, small heap)."""
    from ureplicator.verifier import sparkjob

    session = sparkjob.session(
        "local[2]", {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "768m"}
    )
    yield session
    session.stop()
