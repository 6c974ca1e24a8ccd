"""Authentication and authorization failures are named as such, never as "did not answer"."""

from __future__ import annotations

from confluent_kafka import KafkaError

from ureplicator.common import autherrors
from ureplicator.common.errors import ClusterUnavailable


def test_a_transport_failure_after_a_refused_login_names_the_login():
    watch = autherrors.ErrorWatch()
    watch(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))  # not an auth error: ignored
    assert watch.failure() is None
    watch(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: invalid credentials"))
    error = autherrors.unavailable("dst", "d:9093", KafkaError(KafkaError._TRANSPORT), watch)
    assert isinstance(error, autherrors.AuthenticationFailed) and isinstance(error, ClusterUnavailable)
    assert str(error) == ("cluster dst (d:9093) refused our credentials: authentication failed: SASL authentication "
                          "error: invalid credentials (check dst's sasl.* / ssl.* properties)")


def test_a_silent_cluster_still_did_not_answer():
    error = autherrors.unavailable("dst", "d:9093", KafkaError(KafkaError._TRANSPORT), autherrors.ErrorWatch())
    assert type(error) is ClusterUnavailable
    assert "did not answer" in str(error)


def test_a_missing_acl_says_authorization():
    error = autherrors.unavailable("src", "s:9093", KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert isinstance(error, autherrors.AuthenticationFailed)
    assert "refused the request: authorization failed" in str(error)


def test_an_old_failure_is_forgotten(monkeypatch):
    watch = autherrors.ErrorWatch(max_age_s=60)
    clock = [1000.0]
    monkeypatch.setattr(autherrors.time, "monotonic", lambda: clock[0])
    watch(KafkaError(KafkaError._SSL, "certificate verify failed"))
    assert watch.failure() == ("authentication", "certificate verify failed")
    clock[0] += 31
    assert watch.failure(within_s=30) is None and watch.failure() is not None
    clock[0] += 30
    assert watch.failure() is None
