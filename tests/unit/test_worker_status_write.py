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


def test_a_note_shows_as_the_partitions_error_for_an_hour_then_goes() -> None:
    from ureplicator.worker import status as status_module
    from ureplicator.worker.metrics import WorkerMetrics

    class _Consumer:
        def get_watermark_offsets(self, tp: Any, cached: bool = False) -> tuple[int, int]:
            return 0, 10

    now = [1000.0]
    ledger = AckLedger()
    ledger.acquire(("orders", 0), "orders", 5)
    reporter = StatusReporter(zk=None, path="/w/status/w1", consumer=_Consumer(), ledger=ledger,
                              metrics=WorkerMetrics(), log=_Log(), clock=lambda: now[0])
    reporter.note(("orders", 0), "records [3, 5) were deleted from the source before they were mirrored")
    assert reporter.build(1, now[0]).partitions[("orders", 0)].error.startswith("records [3, 5)")
    now[0] += status_module.NOTE_KEEP_S - 1
    assert reporter.build(1, now[0]).partitions[("orders", 0)].error is not None
    now[0] += 2  # past the hour: the pipeline is not "needs attention" for the partition's life
    assert reporter.build(1, now[0]).partitions[("orders", 0)].error is None
