"""One periodic sync round: which groups it touches, what it counts, and that one failing group stops nothing."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ureplicator.common.config import GroupSyncConfig
from ureplicator.common.errors import ClusterUnavailable
from ureplicator.failover.groups import GroupNotFound, GroupTranslation, SyncOutcome
from ureplicator.failover.sync import GroupSync, GroupSyncMetrics
from ureplicator.failover.translation import PartitionTranslation, SyncPlan


def _partition(committed: int, mirrored: int) -> PartitionTranslation:
    return PartitionTranslation("orders", 0, "src.orders", committed, min(committed, mirrored), mirrored, mirrored, 200)


class FakeGroups:
    """Source groups and what syncing each one does (a fake of the Kafka edge)."""

    def __init__(self) -> None:
        self.synced: list[str] = []
        self.outcomes = {
            "billing": SyncPlan({("src.orders", 0): 40}, {}),
            "audit": SyncPlan({("src.orders", 0): 100}, {}),
            "reports": SyncPlan({}, {}, "the group has 1 active member(s) on the destination"),
            "ledger": SyncPlan({}, {("src.orders", 0): "unchanged"}),
        }

    def source_groups(self) -> list[str]:
        return ["__consumer_offsets", "audit", "billing", "broken", "ledger", "legacy", "reports", "ureplicator.dr"]

    def sync(self, group: str, force: bool = False) -> SyncOutcome:
        self.synced.append(group)
        if group == "broken":
            raise ClusterUnavailable("the destination cluster dst did not answer")
        if group == "legacy":
            raise GroupNotFound("no committed offset on a mirrored topic")
        plan = self.outcomes[group]
        ahead = group == "audit"  # committed 105 with 100 mirrored
        translation = GroupTranslation(group, [_partition(105 if ahead else 40, 100)], reads=3, elapsed_s=0.01)
        return SyncOutcome(group, translation, plan, dict(plan.commit))


def test_a_round_syncs_eligible_groups_skips_active_ones_and_counts_partitions_ahead():
    registry = CollectorRegistry()
    groups = FakeGroups()
    job = GroupSync(GroupSyncConfig(enabled=True, exclude="ledg.*"), groups, lambda: True,  # type: ignore[arg-type]
                    GroupSyncMetrics(registry), "dr")
    outcomes = job.round()
    # Internal and replicator groups are never asked for; the excluded one neither
    assert groups.synced == ["audit", "billing", "broken", "legacy", "reports"]
    assert outcomes == {"audit": "synced", "billing": "synced", "broken": "failed", "reports": "active"}

    def value(name: str) -> float:
        return registry.get_sample_value(name, {"route": "default"}) or 0.0

    assert value("ureplicator_groupsync_groups_synced_total") == 2
    assert value("ureplicator_groupsync_offsets_committed_total") == 2
    assert value("ureplicator_groupsync_groups_skipped_total") == 1
    assert value("ureplicator_groupsync_errors_total") == 1
    assert value("ureplicator_groupsync_partitions_ahead") == 1
    assert value("ureplicator_groupsync_ahead_records") == 5
    assert value("ureplicator_groupsync_last_sync_timestamp_seconds") > 0


def test_include_limits_the_round_to_matching_groups():
    groups = FakeGroups()
    job = GroupSync(GroupSyncConfig(enabled=True, include="bill.*"), groups, lambda: True,  # type: ignore[arg-type]
                    GroupSyncMetrics(CollectorRegistry()), "dr")
    assert job.round() == {"billing": "synced"}
    assert groups.synced == ["billing"]
