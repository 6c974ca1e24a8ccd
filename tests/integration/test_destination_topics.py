"""Destination topics the controller creates carry a replication factor and min.insync.replicas."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from tests.support import kafka_io

pytestmark = pytest.mark.integration


def _destination_topic(bootstrap: str, topic: str) -> tuple[int, dict]:
    admin = AdminClient(kafka_io.client_config(bootstrap))
    metadata = admin.list_topics(topic=topic, timeout=10)
    replicas = {len(p.replicas) for p in metadata.topics[topic].partitions.values()}
    assert len(replicas) == 1
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    return replicas.pop(), entries


def test_destination_topic_gets_the_configured_safety_capped_by_the_brokers(pipeline, services):
    # Given a source topic that asks for min.insync.replicas=1, and a controller configured for three
    # replicas and min.insync.replicas 2 on a one-broker destination
    topic = f"{pipeline.name}-safe"
    kafka_io.create_topic(services["source"], topic, 2, {"min.insync.replicas": "1"})
    pipeline.start_controller(controller={"destination_replication_factor": 3,
                                          "destination_min_insync_replicas": 2})

    # When the topic is added
    status, body = pipeline.api("POST", "/topics", {"topic": topic})
    assert status == 201 and body["destination_topic"] == "created", body

    # Then the destination topic has as many replicas as there are brokers (1), and min.insync.replicas is
    # set on the topic itself (not the broker default), capped by that replication factor
    replication, configs = _destination_topic(services["destination"], topic)
    assert replication == 1
    entry = configs["min.insync.replicas"]
    assert entry.value == "1"
    assert entry.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def test_by_default_the_destination_topic_takes_the_source_topics_min_insync(pipeline, services):
    topic = f"{pipeline.name}-default"
    kafka_io.create_topic(services["source"], topic, 1, {"min.insync.replicas": "1"})
    pipeline.start_controller()
    status, body = pipeline.api("POST", "/topics", {"topic": topic})
    assert status == 201, body
    replication, configs = _destination_topic(services["destination"], topic)
    assert replication == 1
    assert configs["min.insync.replicas"].value == "1"
    assert configs["min.insync.replicas"].source in (ConfigSource.DYNAMIC_TOPIC_CONFIG,
                                                     ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
