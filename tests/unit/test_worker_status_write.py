"""The worker's status write: a failed answer from ZooKeeper is logged with what failed."""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import ConnectionLoss

from ureplicator.worker.acks import AckLedger
from ureplicator.worker.status import StatusReporter


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    info = warning


class _Failed:
    """kazoo's async result for a request that failed with ``exception``."""

    def __init__(self, exception: BaseException) -> None:
        self.exception = exception

    def successful(self) -> bool:
        return False


def test_a_lost_connection_is_named_in_the_failed_status_write() -> None:
    log = _Log()
    reporter = StatusReporter(zk=None, path="/w/status/w1", consumer=None, ledger=AckLedger(), metrics=None,
                              log=log)
    reporter._published(b"{}", _Failed(ConnectionLoss()))  # str(ConnectionLoss()) is empty
    assert log.events == [("status_write_failed", {"error": "ConnectionLoss"})]
