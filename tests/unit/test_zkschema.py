"""ZooKeeper documents round-trip and bad documents raise SchemaError."""

from __future__ import annotations

import pytest

from ureplicator.common.zkschema import (
    Assignment,
    PartitionStatus,
    SchemaError,
    TopicRecord,
    WorkerStatus,
    valid_topic_name,
)


def test_documents_round_trip():
    a = Assignment(7, frozenset({("t", 0), ("t", 3), ("u", 1)}))
    assert Assignment.decode(a.encode()) == a
    assert b'"partitions":{"t":[0,3],"u":[1]}' in a.encode()
    s = WorkerStatus(7, {("t", 0): PartitionStatus(committed=10, lag=2, error="boom")}, "now")
    assert WorkerStatus.decode(s.encode()) == s
    r = TopicRecord("t", "t", 8, "paused", "2026-01-01T00:00:00+00:00", {"x": 1})
    assert TopicRecord.decode(r.encode()) == r


@pytest.mark.parametrize("data", [b"", b"[]", b"{", b'{"partitions": {}}', b'{"generation": "x"}'])
def test_bad_assignment_documents(data):
    with pytest.raises(SchemaError):
        Assignment.decode(data)


def test_bad_topic_state():
    with pytest.raises(SchemaError, match="unknown state"):
        TopicRecord.decode(b'{"topic":"t","destination":"t","partitions":1,"state":"gone"}')


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x" * 250, "é", None, 3])
def test_invalid_topic_names(name):
    assert not valid_topic_name(name)


def test_valid_topic_names():
    assert valid_topic_name("orders.v1_EU-west")
