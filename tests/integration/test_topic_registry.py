"""Topic registration and removal on real ZooKeeper: each is one write with its blacklist entry.

"One write" is observable: every operation of a ZooKeeper transaction gets the same zxid, so a
topic removed and blacklisted together leaves the blacklist entry's creation zxid equal to the
zxid of the last child change of the topics node.
"""

from __future__ import annotations

import pytest

from ureplicator.common import config as config_module
from ureplicator.common import zk
from ureplicator.common.zkschema import Paths, TopicRecord

pytestmark = pytest.mark.integration


@pytest.fixture
def registry(pipeline):
    cfg = config_module.from_dict(pipeline.config_doc())
    client = zk.connect(cfg)
    try:
        yield client, Paths(cfg.root)
    finally:
        client.stop()
        client.close()


def blacklisted(client, paths: Paths, topic: str) -> bool:
    return client.exists(paths.blacklisted_topic(topic)) is not None


def registered(client, paths: Paths, topic: str) -> bool:
    return client.exists(paths.topic(topic)) is not None


def test_removing_a_topic_unregisters_and_blacklists_it_in_one_write(registry):
    client, paths = registry
    assert zk.create_topic(client, paths, TopicRecord("orders", "orders", 2))

    assert zk.remove_topic(client, paths, "orders") is True

    assert not registered(client, paths, "orders") and blacklisted(client, paths, "orders")
    assert client.exists(paths.blacklisted_topic("orders")).czxid == client.exists(paths.topics).pzxid


def test_removing_a_topic_that_is_already_blacklisted_still_unregisters_it(registry):
    client, paths = registry
    client.create(paths.blacklisted_topic("audit"))
    assert zk.create_topic(client, paths, TopicRecord("audit", "audit", 1), lift_blacklist=True)
    client.create(paths.blacklisted_topic("audit"))  # blacklisted again through POST /blacklist

    assert zk.remove_topic(client, paths, "audit") is True

    assert not registered(client, paths, "audit") and blacklisted(client, paths, "audit")


def test_removing_an_unregistered_topic_writes_nothing(registry):
    client, paths = registry

    assert zk.remove_topic(client, paths, "never-added") is False

    assert not blacklisted(client, paths, "never-added")


def test_an_explicit_add_lifts_the_blacklist_entry_in_the_same_write(registry):
    client, paths = registry
    client.create(paths.blacklisted_topic("payments"))

    assert zk.create_topic(client, paths, TopicRecord("payments", "payments", 3)) is True

    assert registered(client, paths, "payments") and not blacklisted(client, paths, "payments")
    assert client.exists(paths.topic("payments")).czxid == client.exists(paths.blacklist_topics).pzxid


def test_auto_whitelisting_cannot_register_a_blacklisted_topic(registry):
    client, paths = registry
    client.create(paths.blacklisted_topic("removed"))

    with pytest.raises(zk.TopicBlacklisted, match="'removed' was removed through the API"):
        zk.create_topic(client, paths, TopicRecord("removed", "removed", 1), lift_blacklist=False)

    assert not registered(client, paths, "removed") and blacklisted(client, paths, "removed")


def test_auto_whitelisting_registers_a_topic_that_is_not_blacklisted_and_leaves_no_entry(registry):
    client, paths = registry

    assert zk.create_topic(client, paths, TopicRecord("fresh", "fresh", 1), lift_blacklist=False) is True

    assert registered(client, paths, "fresh") and not blacklisted(client, paths, "fresh")
    assert zk.create_topic(client, paths, TopicRecord("fresh", "fresh", 1), lift_blacklist=False) is False
