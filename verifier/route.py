"""The route being verified: how each cluster is reached, which records the route copies, and the record classes.

A record's class (a small integer, so that pass 1 groups on fixed-width keys)
is decided by the snapshot's offsets and by the route's rule: the SQL over
Spark's Kafka source (verifier/kafka_source.py) and the digest reader
(jvm/digest, which repeats these numbers) classify every record the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ureplicator.verifier import sql

# Record classes, small integers so that pass 1 groups on fixed-width keys.
VERIFIED = 0  # in this run's verified range
PENDING = 1  # at or above it: not committed by the replicator yet
SKIPPED = 2  # source records from the destination cluster: loop prevention keeps them there
EXPIRED = 3  # destination copies of source offsets below the source's log start
OLD = 4  # destination copies of source offsets an earlier run verified (incremental runs)
FOREIGN = 5  # destination records a declared route did not write (produced there, or another route's copies)
ORDER = 6  # digest reader only: one row per destination chunk, the order proof of its attributed copies
UNREADABLE = 10  # destination records with no readable urep header; this and the next three are orphans
OTHER_PARTITION = 11
NO_SOURCE_PARTITION = 12
BEYOND_END = 13
ORPHAN_CLASSES = (UNREADABLE, OTHER_PARTITION, NO_SOURCE_PARTITION, BEYOND_END)
ATTRIBUTED = (EXPIRED, PENDING, VERIFIED)


@dataclass(frozen=True)
class KafkaSide:
    """How Spark reaches one cluster: bootstrap servers, Java client options (no prefix), its alias."""

    bootstrap_servers: str
    options: Mapping[str, str] = field(default_factory=dict)
    alias: str = ""


@dataclass(frozen=True)
class RouteRule:
    """Which source records the route copies and which destination records are its own.

    ``forward`` is the worker's policy (worker/forwarding.py): under ``transit`` a source record whose
    readable ``urep`` origin is the destination is not copied; under ``origin`` one whose readable origin
    is not the source. Those are SKIPPED. ``attribute`` (declared routes): the destination topic may hold
    records this route did not write (produced on the destination, or copied by another route into an
    identity-named topic); a record with no ``urep`` header or a version 2 ``urep`` naming another hop
    source is FOREIGN, neither verified nor an orphan. The implicit route keeps today's rule: every
    destination record is the route's.
    """

    source: str
    destination: str
    forward: str = "transit"
    attribute: bool = False

    def skipped_sql(self) -> str:
        """SQL: whether a source record (``_urep`` = its last urep value) is one the route does not copy."""
        return sql.skipped(self.forward, self.source, self.destination)

    def skipped_note(self) -> str:
        if self.forward == "origin":
            return (f"the source record did not originate on {self.source} and the route forwards origin only: "
                    "it should not have been copied")
        return f"the source record came from {self.destination}: loop prevention should have kept it there"


def default_rule(source: KafkaSide, destination: KafkaSide) -> RouteRule:
    """Today's single pipeline: transit, every destination record the route's."""
    return RouteRule(source.alias, destination.alias)
