"""Exactly-once mode on the controller's side: record the pipeline's delivery mode for its workers.

A worker whose ``worker.exactly_once`` differs from the recorded mode refuses to start
(``worker/mirror.py``, ``_check_mode``): a pipeline half at-least-once and half
exactly-once would read its start positions from two different groups. The node is
``<root>/mode``, ``{"exactly_once": true|false}`` (``worker/transactions.py`` reads the
same node; the two packages may not import each other).

Not built yet (issue 26, point 4): fencing a departed worker's transactional id before
the gate hands its partitions on. Until then the worker's own lease and abort, and the
predecessor fencing that ``init_transactions`` does on a restart with the same worker
id, are what stop a zombie (docs/operations.md, "Exactly-once mode").
"""

from __future__ import annotations

import json
from typing import Any

from kazoo.exceptions import KazooException, NodeExistsError

MODE_NODE = "mode"


def record_mode(client: Any, root: str, exactly_once: bool, log: Any) -> None:
    """Write ``<root>/mode`` when it is missing or says otherwise; a ZooKeeper error is logged (next term retries)."""
    path = f"{root}/{MODE_NODE}"
    data = json.dumps({"exactly_once": exactly_once}).encode()
    try:
        try:
            client.create(path, data, makepath=True)
        except NodeExistsError:
            current, _ = client.get(path)
            if current != data:
                client.set(path, data)
                log.warning("delivery_mode_changed", exactly_once=exactly_once,
                            consequence="workers started with the other mode refuse to start")
    except KazooException as exc:
        log.warning("delivery_mode_not_recorded", error=str(exc))
