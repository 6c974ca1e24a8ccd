"""The route's forwarding policy: which fetched records that carry a ``urep`` header are copied.

A record with no ``urep`` header started on the source cluster and is always copied. A
record with one was mirrored into the source from elsewhere; its origin (the cluster it
was first produced on) decides:

* ``origin`` copies only records whose origin is the source cluster: each route carries
  only its source's own records, so a mesh of routes can never deliver a record twice
  or loop (the controller's topology check relies on it).
* ``transit`` copies everything except records whose origin is the destination cluster
  (they came from there): chains need it, and it is today's single-pipeline behaviour.

A ``urep`` header this code cannot read counts as no header (the record is copied and
stamped as starting here). The mirror loop inlines this rule (hot path); the unit tests
hold it to this function.
"""

from __future__ import annotations

POLICIES = ("origin", "transit")


def copies(policy: str, origin: str | None, source: str, destination: str) -> bool:
    """Whether a record whose ``urep`` origin is ``origin`` (None: no readable header) is copied."""
    if origin is None:
        return True
    if policy == "origin":
        return origin == source
    return origin != destination
