"""The route's forwarding policy applied by the worker's loop, and the one run rule it shares with the C loop."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.fakes import FakeMessage
from tests.unit.test_worker_mirror import Rig, make_rig, values
from ureplicator.common import provenance
from ureplicator.worker import forwarding

# t:0's records, as the source cluster "src" holds them (the worker writes to "dst")
HEADERS = {
    1: [("urep", provenance.encode(11, 0, "dst", "dst"))],  # came from the destination
    2: [("urep", provenance.encode(12, 0, "third", "third"))],  # relayed into src from a third cluster
    3: [("urep", provenance.encode(13, 0, "src", "other"))],  # started on src, came back through another
    4: [("urep", provenance.encode(14, 0, "third"))],  # version 1 header from a third cluster
    5: [("trace", b"x")],  # a user header: no decision
}
ORIGINS = {1: "dst", 2: "third", 3: "src", 4: "third"}


def rig_with(policy: str) -> Rig:
    rig = make_rig()
    worker = rig.worker
    worker.config = dataclasses.replace(worker.config, forward=policy)
    worker.loop._only_origin = policy == "origin"
    for offset, headers in HEADERS.items():
        rig.consumer.headers[("t", 0, offset)] = headers
    return rig


def urep_of(msg: FakeMessage) -> provenance.Provenance:
    found = [value for name, value in msg.headers() or [] if name == "urep"]
    assert len(found) == 1, "exactly one urep header on every copy"
    return provenance.decode(found[0])


@pytest.mark.parametrize(("policy", "copied", "callbacks"), [
    # origin: only records that started on src: 0, 3 (origin src) and 5-9 (no urep)
    ("origin", [0, 3, 5, 6, 7, 8, 9], 3),
    # transit: everything except what came from dst
    ("transit", [0, 2, 3, 4, 5, 6, 7, 8, 9], 5),
])
def test_the_forwarding_policy_decides_which_copies_are_relayed(policy, copied, callbacks):
    # Given t:0 with records from several origins, mirrored from src to dst under ``policy``
    rig = rig_with(policy)
    rig.assign(1, ("t", 0))
    # When the loop mirrors the partition
    rig.turns(2)
    # Then exactly the records the policy copies are written, in order, and the commit reaches the end
    assert rig.producer.written[("t", 0)] == [values(10, 0)[i] for i in copied]
    assert rig.consumer.group[("t", 0)] == 10
    assert copied == [o for o in range(10) if forwarding.copies(policy, ORIGINS.get(o), "src", "dst")]
    # And every copy carries a version 2 header naming its origin and this hop's source, src
    written = rig.producer.records[("t", 0)]
    for offset, msg in zip(copied, written, strict=True):
        assert urep_of(msg) == provenance.Provenance(offset, 0, ORIGINS.get(offset, "src"), "src")
    # And the user's header is kept in front of the stamp
    assert written[copied.index(5)].headers()[0] == ("trace", b"x")
    # And the run rule: a run closes before each urep record, each copied urep record is a run of its
    # own, and a user header continues a run (5-9 are one run)
    assert rig.producer.callbacks == callbacks
    assert rig.worker.metrics.skipped.labels("t")._value.get() == 10 - len(copied)


@pytest.mark.parametrize("policy", forwarding.POLICIES)
def test_a_record_without_a_urep_header_is_always_copied(policy):
    assert forwarding.copies(policy, None, "src", "dst")


def test_origin_copies_only_the_sources_own_records_and_transit_all_but_the_destinations():
    assert [forwarding.copies("origin", o, "a", "b") for o in ("a", "b", "c")] == [True, False, False]
    assert [forwarding.copies("transit", o, "a", "b") for o in ("a", "b", "c")] == [True, False, True]
