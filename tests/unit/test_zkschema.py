"""ZooKeeper documents round-trip and bad documents raise SchemaError."""

from __future__ import annotations

import pytest

from ureplicator.common.zkschema import (
    Assignment,
    PartitionStatus,
    RateLimit,
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


def test_a_status_round_trips_infinite_rates_and_orders_partitions_by_number():
    s = WorkerStatus(3, {("t", 10): PartitionStatus(records_per_s=float("inf")), ("t", 2): PartitionStatus()}, "x")
    data = s.encode()
    assert WorkerStatus.decode(data) == s
    assert data.index(b'"2":') < data.index(b'"10":')


def test_a_newer_writer_s_extra_keys_are_ignored_and_problems_are_named():
    doc = b'{"generation":1,"partitions":{"t":{"0":{"committed":5,"new_field":1}}}}'
    assert WorkerStatus.decode(doc).partitions[("t", 0)].committed == 5
    with pytest.raises(SchemaError, match="rate limit records_per_s must not be negative"):
        RateLimit.decode(b'{"records_per_s":-1}')
    with pytest.raises(SchemaError, match="worker status mistypes 'partitions.t.x"):
        WorkerStatus.decode(b'{"generation":1,"partitions":{"t":{"x":{}}}}')
    with pytest.raises(SchemaError, match="assignment lacks 'generation'"):
        Assignment.decode(b'{"partitions":{}}')
