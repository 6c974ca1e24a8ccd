"""A failed Kafka call in consumer-group failover: unavailable (REST 503) or refused (REST 502)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from ureplicator.common.errors import ClusterUnavailable, UReplicatorError
from ureplicator.failover.groups import cluster_failure

WHAT = "the source cluster src (127.0.0.1:9092)"


@pytest.mark.parametrize("code", [
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NOT_LEADER_FOR_PARTITION,
])
def test_a_cluster_that_did_not_answer_or_answered_not_now_is_unavailable(code):
    failure = cluster_failure(WHAT, KafkaError(code))

    assert isinstance(failure, ClusterUnavailable)
    assert str(failure).startswith(f"{WHAT} did not answer: ")


@pytest.mark.parametrize("code", [
    KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.INVALID_REQUEST,
    KafkaError.UNSUPPORTED_VERSION,
])
def test_a_cluster_that_refused_the_request_is_a_bad_gateway_not_unavailable(code):
    failure = cluster_failure(WHAT, KafkaError(code))

    assert type(failure) is UReplicatorError
    assert str(failure) == f"{WHAT} refused the request: {KafkaError(code).str()}"


def test_a_timeout_without_a_kafka_error_is_unavailable():
    failure = cluster_failure(WHAT, "no answer within 10s")

    assert isinstance(failure, ClusterUnavailable)
    assert str(failure) == f"{WHAT} did not answer: no answer within 10s"
