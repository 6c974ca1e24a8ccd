"""A leader that loses its ZooKeeper session stops leading, and its stale writes are refused."""

from __future__ import annotations

import pytest

from tests.integration.test_worker_fencing import expire_session
from tests.support.kafka_io import wait_for
from ureplicator.common import config as config_module
from ureplicator.common import zk
from ureplicator.common.zkschema import Assignment, Paths
from ureplicator.controller.leader import Leadership

pytestmark = pytest.mark.integration


def test_expired_leader_steps_down_and_cannot_write(pipeline, services):
    cfg = config_module.from_dict(pipeline.config_doc())
    first_client, second_client = zk.connect(cfg), zk.connect(cfg)
    first = Leadership(cfg, first_client, "first")
    second = Leadership(cfg, second_client, "second")
    try:
        first.start()
        wait_for(lambda: first.state.is_leader, 15, "first leads", interval_s=0.1)
        second.start()
        lock = first._election.lock
        stale_fence = f"{lock.path}/{lock.node}"
        # When the leader's session expires
        expire_session(first_client, services["zookeeper"])
        # Then it stops acting as leader and the standby takes over
        wait_for(lambda: not first.state.is_leader, 15, "first steps down", interval_s=0.1)
        wait_for(lambda: second.state.is_leader, 15, "second leads", interval_s=0.1)
        # and once the old leader's client has a new session, a write fenced by its old
        # election node is refused by ZooKeeper itself
        wait_for(lambda: first_client.connected, 15, "old leader reconnected", interval_s=0.1)
        paths = Paths(cfg.root)
        with pytest.raises(zk.TransactionFailed):
            zk.write_assignments(first_client, paths, {"ghost": Assignment(999, frozenset({("t", 0)}))},
                                 [], [], stale_fence)
        assert not first_client.exists(paths.assignment("ghost"))
    finally:
        for leadership, client in ((first, first_client), (second, second_client)):
            leadership.stop()
            client.stop()
            client.close()
