"""The worker's named waits, and the deprecated key that used to mean all of them."""

from __future__ import annotations

from typing import Any

import pytest

from ureplicator.common import config as config_module
from ureplicator.common.errors import ConfigError

WAITS = ("stop_timeout_s", "release_ack_timeout_s", "release_commit_timeout_s", "producer_stall_s")


def worker_config(**worker: Any) -> config_module.WorkerConfig:
    return config_module.from_dict({
        "pipeline": "unit",
        "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:1"},
        "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:2"},
        "worker": worker,
    }).worker


def test_each_wait_has_its_own_setting():
    cfg = worker_config(stop_timeout_s=40, release_ack_timeout_s=5, release_commit_timeout_s=8, producer_stall_s=60)
    assert [getattr(cfg, name) for name in WAITS] == [40.0, 5.0, 8.0, 60.0]


def test_the_deprecated_shutdown_timeout_sets_all_four_waits():
    # Given a config written before the split (the Helm chart still renders it)
    cfg = worker_config(shutdown_timeout_s=12)
    # Then it means what it meant: every one of the four waits
    assert [getattr(cfg, name) for name in WAITS] == [12.0] * 4


def test_the_waits_default_to_what_the_single_setting_defaulted_to():
    cfg = worker_config()
    assert [getattr(cfg, name) for name in WAITS] == [30.0] * 4


@pytest.mark.parametrize("name", WAITS)
def test_a_wait_must_be_positive(name):
    with pytest.raises(ConfigError, match=f"worker.{name}: must be positive"):
        worker_config(**{name: 0})


def test_the_deprecated_key_must_not_be_negative():
    with pytest.raises(ConfigError, match="worker.shutdown_timeout_s: must not be negative"):
        worker_config(shutdown_timeout_s=-1)


@pytest.mark.parametrize(("session_s", "lease"),
                         [(30.0, 27.0), (15.0, 13.5), (10.0, 9.0), (6.0, 5.0), (3.0, 2.0), (1.5, 0.75)])
def test_the_lease_is_the_session_minus_a_tenth_and_at_least_a_second_of_margin(session_s, lease):
    from ureplicator.worker.mirror import lease_s

    assert lease_s(session_s) == pytest.approx(lease)
