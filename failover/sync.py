"""The periodic group-offset sync: while this controller leads, copy translated offsets of eligible groups.

Started by the controller when ``controller.group_sync.enabled`` is set. Each
round lists the source's groups, keeps those :func:`eligible_group` admits
under the include/exclude filters, and syncs each one with
:meth:`GroupOffsets.sync` (never a group with members on the destination,
never backwards). It runs on its own thread and asks ``is_leader`` before
every round, so the leader's reconcile loop is never slowed by Kafka calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from ureplicator.common import logs
from ureplicator.common.config import GroupSyncConfig
from ureplicator.common.errors import UReplicatorError
from ureplicator.failover.groups import GroupNotFound, GroupOffsets
from ureplicator.failover.translation import AHEAD, eligible_group


class GroupSyncMetrics:
    """``ureplicator_groupsync_*`` in the controller's registry, labelled with the ``route`` the sync serves."""

    def __init__(self, registry: CollectorRegistry, route: str = "default") -> None:
        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, ["route"], registry=registry).labels(route)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, ["route"], registry=registry).labels(route)

        self.groups_synced = counter(
            "ureplicator_groupsync_groups_synced", "Groups whose offsets a sync round wrote on the destination")
        self.offsets_committed = counter(
            "ureplicator_groupsync_offsets_committed", "Partition offsets written on the destination")
        self.groups_skipped = counter(
            "ureplicator_groupsync_groups_skipped", "Groups left alone: active on the destination")
        self.errors = counter("ureplicator_groupsync_errors", "Groups whose sync failed")
        self.partitions_ahead = gauge(
            "ureplicator_groupsync_partitions_ahead",
            "Partitions where a synced group committed past what is mirrored (last round)")
        self.records_ahead = gauge(
            "ureplicator_groupsync_ahead_records",
            "Source offsets groups committed that are not mirrored yet (last round)")
        self.last_sync = gauge(
            "ureplicator_groupsync_last_sync_timestamp_seconds", "End of the last completed sync round")


class GroupSync:
    """A daemon thread running one sync round every ``interval_s`` while ``is_leader()``."""

    def __init__(self, settings: GroupSyncConfig, groups: GroupOffsets, is_leader: Callable[[], bool],
                 metrics: GroupSyncMetrics, pipeline: str) -> None:
        self._settings = settings
        self._groups = groups
        self._is_leader = is_leader
        self.metrics = metrics
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="group-sync", daemon=True)
        self._log = logs.get(__name__, pipeline=pipeline)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self._settings.interval_s):
            if self._is_leader():
                try:
                    self.round()
                except UReplicatorError as exc:
                    self._log.warning("group_sync_round_failed", error=logs.error_text(exc))

    def round(self) -> dict[str, str]:
        """Sync every eligible group once; returns group -> outcome (synced, unchanged, active, failed)."""
        outcomes: dict[str, str] = {}
        ahead_partitions = ahead_records = 0
        for group in self._groups.source_groups():
            if not eligible_group(group, self._settings.include, self._settings.exclude):
                continue
            try:
                outcome = self._groups.sync(group)
            except GroupNotFound:
                continue  # no commit on a mirrored topic: nothing to sync
            except UReplicatorError as exc:
                self.metrics.errors.inc()
                outcomes[group] = "failed"
                self._log.warning("group_sync_failed", group=group, error=logs.error_text(exc))
                continue
            ahead = [p for p in outcome.translation.partitions if p.state == AHEAD]
            ahead_partitions += len(ahead)
            ahead_records += sum(p.ahead_by for p in ahead)
            if outcome.plan.refused:
                self.metrics.groups_skipped.inc()
                outcomes[group] = "active"
            elif outcome.committed:
                self.metrics.groups_synced.inc()
                self.metrics.offsets_committed.inc(len(outcome.committed))
                outcomes[group] = "synced"
            else:
                outcomes[group] = "unchanged"
        self.metrics.partitions_ahead.set(ahead_partitions)
        self.metrics.records_ahead.set(ahead_records)
        self.metrics.last_sync.set(time.time())
        if any(o != "unchanged" for o in outcomes.values()):
            self._log.info("group_sync_round", **{o: sorted(g for g, v in outcomes.items() if v == o)
                                                  for o in set(outcomes.values())})
        return outcomes
