"""Fixtures shared by the integration tests of one component: the verifier's local Spark and planted topics."""

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


@pytest.fixture(scope="session")
def planted_defects(services):
    """The defect topic of tests/support/verifier_topics.py, planted once for every module that verifies it
    (test_verifier, test_verifier_readers): the verifier only reads, and each run writes its own reports."""
    from tests.support import verifier_topics

    return verifier_topics.plant_defects(services)


@pytest.fixture(scope="session")
def planted_gaps(services):
    """The compacted topic with offset gaps of tests/support/verifier_topics.py, planted once (as above).
    What a consumer sees of it no longer changes: the keys left after cleaning are unique, and the
    cleaner only removes aborted records and markers, which a read_committed reader never sees."""
    from tests.support import verifier_topics

    return verifier_topics.plant_gaps(services)
