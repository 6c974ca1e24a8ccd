"""Exactly-once positions with fake clients (issue 44, section 4): a refusal inside a run, the later start, sharing.

The same cases on real clusters: tests/integration/test_eos_offsets.py.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from tests.unit.fakes import FakeConsumer
from tests.unit.test_worker_exactly_once import exactly_once_worker, turns, values
from ureplicator.common import config as config_module
from ureplicator.common import provenance
from ureplicator.common.config import ConfigError
from ureplicator.common.zkschema import TopicRecord, WorkerStatus
from ureplicator.failover.groups import _source_offset
from ureplicator.worker.handoff import _shared_destinations


def test_a_record_produce_refuses_inside_a_run_aborts_the_run_and_stops_exactly_at_the_record():
    # Given an exactly-once worker that committed t's 20 records, and whose producer refuses records over 50 bytes
    worker, consumer, producer, zk, paths, clock = exactly_once_worker()
    turns(worker, clock, 4, commit=True)
    producer.max_message_bytes = 50
    # When t:0 gets 3 small records, one too large (offset 13) and 2 more, fetched in one batch
    consumer.append(("t", 0), *values(3, 0, start=10), b"x" * 100, *values(2, 0, start=14))
    with capture_logs() as logs:
        turns(worker, clock, 4)
        turns(worker, clock, 2, commit=True)
    events = [e["event"] for e in logs]
    # Then the run's 3 records were aborted with the transaction, sent again each with its report,
    assert "produce_refused_in_run" in events and producer.calls.count("abort") == 1
    assert producer.written[("t", 0)][-3:] == values(3, 0, start=10)
    # and the partition stops at the refused record with the position after the 3 committed
    status = WorkerStatus.decode(zk.nodes[paths.worker_status("w1")]).partitions
    assert status[("t", 0)].error.startswith("offset 13:")
    assert {(tp.topic, tp.partition): tp.offset for tp in producer.offsets} == {("t", 0): 13}


def test_a_refused_record_that_opens_a_run_stops_its_partition_without_an_abort():
    # Given an exactly-once worker that committed t's 20 records, whose producer refuses records over 50 bytes
    worker, consumer, producer, zk, paths, clock = exactly_once_worker()
    turns(worker, clock, 4, commit=True)
    producer.max_message_bytes = 50
    # When the first record of t:0's next batch is too large
    consumer.append(("t", 0), b"x" * 100, *values(2, 0, start=11))
    turns(worker, clock, 4)
    # Then nothing in front of it is unreported: the partition stops there, nothing aborted
    assert producer.calls.count("abort") == 0
    status = WorkerStatus.decode(zk.nodes[paths.worker_status("w1")]).partitions
    assert status[("t", 0)].error.startswith("offset 10:")


@pytest.mark.parametrize(("source_group", "destination_group", "first"), [
    (30, 10, 30),  # exactly-once, then at-least-once up to 30, then exactly-once again: the source group's
    (5, 10, 10),  # the copy to the source group lags (best effort): the destination's rules
    (None, 10, 10),
    (30, None, 30),  # never exactly-once before: the source group's, as always
])
def test_exactly_once_starts_at_the_later_of_the_two_groups(source_group, destination_group, first):
    destination = FakeConsumer({})
    if destination_group is not None:
        destination.group[("t", 0)] = destination_group
    worker, consumer, producer, zk, paths, clock = exactly_once_worker(destination)
    consumer.append(("t", 0), *values(30, 0, start=10))
    if source_group is not None:
        consumer.group[("t", 0)] = source_group
    turns(worker, clock, 4, commit=True)
    assert producer.written[("t", 0)][0] == values(1, 0, start=first)[0]


def test_topics_sharing_a_destination_topic_are_named():
    records = {"a": TopicRecord("a", "x", 1), "b": TopicRecord("b", "x", 1), "c": TopicRecord("c", "c", 1)}
    refused = _shared_destinations(records, {"a": "x", "c": "c"})
    assert list(refused) == ["a"]
    assert "'x'" in refused["a"] and "a, b" in refused["a"]


def test_the_translation_reads_only_copies_from_its_own_source_cluster():
    def headers(source: str | None) -> list[tuple[str, bytes]]:
        return [(provenance.HEADER, provenance.encode(7, 0, "origin", source))]

    assert _source_offset(headers("src"), 0, "src") == 7
    assert _source_offset(headers("other"), 0, "src") is None  # another route's copy (shared: true)
    assert _source_offset(headers(None), 0, "src") == 7  # version 1: written before routes
    assert _source_offset(headers("src"), 1, "src") is None


def _doc(exactly_once: bool, mapping: dict[str, str]) -> dict:
    return {
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
        "controller": {"topic_naming": "mapping", "topic_mapping": mapping},
        "worker": {"exactly_once": exactly_once},
    }


def test_exactly_once_refuses_a_mapping_of_two_topics_onto_one():
    with pytest.raises(ConfigError) as refused:
        config_module.from_dict(_doc(True, {"eu": "orders", "us": "orders"}))
    assert refused.value.key == "controller.topic_mapping"
    assert "'eu'" in str(refused.value) and "'us'" in str(refused.value) and "'orders'" in str(refused.value)
    config_module.from_dict(_doc(False, {"eu": "orders", "us": "orders"}))  # at-least-once: allowed
    config_module.from_dict(_doc(True, {"eu": "orders-eu", "us": "orders-us"}))
