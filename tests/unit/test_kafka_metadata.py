"""Metadata reads give a refused credential its answer at once, and a silent or slow cluster its full timeout."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from ureplicator.common import autherrors, kafka
from ureplicator.common.config import ClusterConfig
from ureplicator.common.errors import ClusterUnavailable

CLUSTER = ClusterConfig(alias="dst", bootstrap_servers="d:9093")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlicedAdmin:
    """An admin client whose metadata answer takes ``answer_after_s`` per request (None: never comes);
    a wait that times out "passes" its time on the clock. ``refuse_login`` feeds the error callback
    a SASL failure during the first wait, as librdkafka does on a wrong password."""

    def __init__(self, clock: Clock, answer_after_s: float | None, refuse_login: bool = False,
                 fail_at_once: bool = False) -> None:
        self.clock, self.answer_after_s, self.refuse_login = clock, answer_after_s, refuse_login
        self.fail_at_once = fail_at_once
        self.waits: list[float] = []
        self.pending: list[KafkaError] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.waits.append(round(timeout, 3))
        if self.refuse_login and len(self.waits) == 1:
            self.pending.append(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: invalid"))
        if self.answer_after_s is not None and timeout >= self.answer_after_s:
            self.clock.now += self.answer_after_s
            return "metadata"
        if not self.fail_at_once:
            self.clock.now += timeout
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))

    def poll(self, timeout: float) -> int:  # serves the error callbacks, as librdkafka's poll does
        served, self.pending = self.pending, []
        for error in served:
            self._ureplicator_errors(error)
        return len(served)


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(kafka.time, "monotonic", clock)
    monkeypatch.setattr(autherrors.time, "monotonic", clock)
    return clock


def _admin(clock: Clock, **kwargs: Any) -> SlicedAdmin:
    return autherrors.attach({}, lambda config: SlicedAdmin(clock, **kwargs))


def test_a_refused_login_ends_the_wait_after_the_first_slice_not_the_timeout(clock):
    admin = _admin(clock, answer_after_s=None, refuse_login=True)
    with pytest.raises(autherrors.AuthenticationFailed, match="cluster dst .* refused our credentials"):
        kafka.read_metadata(admin, CLUSTER, 30.0, "t")
    assert admin.waits == [0.5]


def test_a_silent_cluster_gets_its_whole_timeout_in_doubling_slices(clock):
    admin = _admin(clock, answer_after_s=None)
    with pytest.raises(ClusterUnavailable, match="did not answer") as raised:
        kafka.read_metadata(admin, CLUSTER, 30.0, "t")
    assert not isinstance(raised.value, autherrors.AuthenticationFailed)
    assert admin.waits == [0.5, 1.0, 2.0, 4.0, 8.0, 14.5]
    assert clock.now == pytest.approx(1030.0)


def test_a_slow_healthy_cluster_still_answers_within_the_timeout(clock):
    admin = _admin(clock, answer_after_s=3.0)
    assert kafka.read_metadata(admin, CLUSTER, 10.0, "t") == "metadata"
    assert admin.waits == [0.5, 1.0, 2.0, 4.0]


def test_an_old_refusal_from_before_the_call_does_not_end_a_silent_wait(clock):
    admin = _admin(clock, answer_after_s=None)
    admin._ureplicator_errors(KafkaError(KafkaError._AUTHENTICATION, "an hour-old rotation"))
    clock.now += 100  # still within the watch's 120 s memory, but before this call
    with pytest.raises(ClusterUnavailable):
        kafka.read_metadata(admin, CLUSTER, 4.0, "t")
    assert sum(admin.waits) == pytest.approx(4.0)


def test_a_client_without_a_watch_waits_once_for_the_whole_timeout(clock):
    admin = SlicedAdmin(clock, answer_after_s=None)
    with pytest.raises(ClusterUnavailable, match="did not answer"):
        kafka.read_metadata(admin, CLUSTER, 10.0)
    assert admin.waits == [10.0]


def test_an_error_that_comes_before_its_slice_ends_is_the_answer(clock):
    admin = _admin(clock, answer_after_s=None, fail_at_once=True)
    with pytest.raises(ClusterUnavailable, match="did not answer"):
        kafka.read_metadata(admin, CLUSTER, 30.0, "t")
    assert admin.waits == [0.5]

