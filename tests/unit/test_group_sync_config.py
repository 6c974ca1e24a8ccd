"""``controller.group_sync``: off by default, settable from YAML and the environment, bad values named."""

from __future__ import annotations

import pytest

from ureplicator.common import config
from ureplicator.common.errors import ConfigError

BASE = {
    "pipeline": "dr",
    "zookeeper": {"connect": "127.0.0.1:2181"},
    "source": {"alias": "src", "bootstrap_servers": "127.0.0.1:9092"},
    "destination": {"alias": "dst", "bootstrap_servers": "127.0.0.1:9093"},
}


def test_group_sync_is_off_until_enabled():
    sync = config.from_dict(BASE).controller.group_sync
    assert (sync.enabled, sync.interval_s, sync.include, sync.exclude) == (False, 60.0, None, None)


def test_group_sync_from_yaml_and_environment():
    doc = {**BASE, "controller": {"group_sync": {"enabled": True, "include": "orders-.*"}}}
    env = {"UREPLICATOR_CONTROLLER_GROUP_SYNC_INTERVAL_S": "15", "UREPLICATOR_CONTROLLER_GROUP_SYNC_EXCLUDE": ".*-test"}
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in doc.items()}
    config._apply_env(raw, env)
    sync = config.from_dict(raw).controller.group_sync
    assert (sync.enabled, sync.interval_s, sync.include, sync.exclude) == (True, 15.0, "orders-.*", ".*-test")


@pytest.mark.parametrize(("value", "message"), [
    ({"enabled": "yes"}, "controller.group_sync.enabled: expected true or false"),
    ({"interval_s": 0}, "controller.group_sync.interval_s: must be positive"),
    ({"include": "("}, "controller.group_sync.include: not a valid regular expression"),
    ({"exclude": "[a"}, "controller.group_sync.exclude: not a valid regular expression"),
    ({"every": 5}, "controller.group_sync.every: unknown key"),
    ("on", "controller.group_sync: expected a mapping"),
])
def test_bad_group_sync_settings_name_their_key(value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        config.from_dict({**BASE, "controller": {"group_sync": value}})
