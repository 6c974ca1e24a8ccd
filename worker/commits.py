"""Commit acknowledged source offsets to the source cluster's consumer group, and say when it fails."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_exponential

from worker.acks import TP, AckLedger
from worker.metrics import WorkerMetrics


class Committer:
    """Commit ``acknowledged position`` (the next offset to mirror) per partition, explicitly."""

    def __init__(self, consumer: Any, ledger: AckLedger, metrics: WorkerMetrics, log: Any) -> None:
        self._consumer = consumer
        self._ledger = ledger
        self._metrics = metrics
        self._log = log

    def commit(self, only: list[TP] | None = None) -> dict[TP, int]:
        """One attempt; returns the positions that were *not* committed (empty: all done)."""
        positions = self._ledger.to_commit(only)
        if not positions:
            return {}
        offsets = [TopicPartition(t, p, pos) for (t, p), pos in positions.items()]
        try:
            result = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self._metrics.commits.labels("error").inc()
            self._log.warning("commit_failed", error=str(exc.args[0]))
            return positions
        done: dict[TP, int] = {}
        for tp in result or []:
            if tp.error is None:
                done[(tp.topic, tp.partition)] = tp.offset
            else:
                self._log.warning("commit_failed", topic=tp.topic, partition=tp.partition, error=str(tp.error))
        self._ledger.mark_committed(done)
        failed = {tp: pos for tp, pos in positions.items() if tp not in done}
        self._metrics.commits.labels("error" if failed else "ok").inc()
        return failed

    def commit_for_release(self, partitions: list[TP], attempts: int = 5, max_wait_s: float = 2.0) -> dict[TP, int]:
        """Commit before giving partitions up: retried, and what still fails is surfaced, never dropped.

        A position that cannot be committed is not lost data — the next owner starts
        from the older committed offset and mirrors those records again — but it is
        duplicates the operator should know about: an error log line and
        ``ureplicator_worker_release_commit_failures_total``.
        """
        retrying = Retrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.1, max=max_wait_s),
            retry=retry_if_result(bool),
            retry_error_callback=lambda state: state.outcome.result(),
        )
        failed = retrying(self.commit, partitions)
        if failed:
            self._metrics.release_commit_failures.inc(len(failed))
            self._log.error("release_commit_failed", partitions=[f"{t}:{p}" for t, p in sorted(failed)],
                            positions={f"{t}:{p}": pos for (t, p), pos in sorted(failed.items())},
                            consequence="the next owner mirrors these records again (duplicates, no loss)")
        return failed
