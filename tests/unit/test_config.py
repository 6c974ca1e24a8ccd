"""Config loading: every problem names its key; secrets never leave in logs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ureplicator.common import config
from ureplicator.common.errors import ConfigError

MINIMAL = """
pipeline: dr
zookeeper: {connect: "127.0.0.1:2181"}
source: {alias: src, bootstrap_servers: "127.0.0.1:9092"}
destination: {alias: dst, bootstrap_servers: "127.0.0.1:9093"}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_minimal_file_gets_documented_defaults(tmp_path):
    cfg = config.load(write(tmp_path, MINIMAL), env={})
    assert cfg.pipeline == "dr"
    assert cfg.root == "/ureplicator/dr"
    assert cfg.consumer_group == "ureplicator.dr"
    assert cfg.controller.rest_port == 9000
    assert cfg.worker.commit_interval_s == 5.0
    assert config.worker_id(cfg).endswith(f"-{__import__('os').getpid()}")


def test_environment_overrides_file_and_fills_properties(tmp_path):
    env = {
        "UREPLICATOR_WORKER_COMMIT_INTERVAL_S": "2.5",
        "UREPLICATOR_CONTROLLER_REST_PORT": "9100",
        "UREPLICATOR_SOURCE_PROPERTIES_SASL_PASSWORD": "hunter22",
        "UREPLICATOR_SOURCE_PROPERTIES_SECURITY_PROTOCOL": "SASL_SSL",
        "UREPLICATOR_WORKER_ID": "007",
        "UREPLICATOR_CACHE": "/not/a/config/key",
    }
    cfg = config.load(write(tmp_path, MINIMAL), env=env)
    assert cfg.worker.commit_interval_s == 2.5
    assert cfg.controller.rest_port == 9100
    assert cfg.worker.id == "007"  # ids stay strings even when they look like numbers
    assert cfg.source.properties == {"sasl.password": "hunter22", "security.protocol": "SASL_SSL"}
    assert cfg.source.client_config()["bootstrap.servers"] == "127.0.0.1:9092"


def test_environment_alone_is_enough():
    env = {
        "UREPLICATOR_PIPELINE": "p",
        "UREPLICATOR_ZOOKEEPER_CONNECT": "zk:2181",
        "UREPLICATOR_SOURCE_ALIAS": "a",
        "UREPLICATOR_SOURCE_BOOTSTRAP_SERVERS": "a:9092",
        "UREPLICATOR_DESTINATION_ALIAS": "b",
        "UREPLICATOR_DESTINATION_BOOTSTRAP_SERVERS": "b:9092",
    }
    assert config.load(None, env=env).destination.bootstrap_servers == "b:9092"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (MINIMAL.replace("pipeline: dr\n", ""), "pipeline"),
        (MINIMAL.replace('zookeeper: {connect: "127.0.0.1:2181"}', "zookeeper: {}"), "zookeeper.connect"),
        (MINIMAL.replace("source: {alias: src, ", "source: {"), "source.alias"),
        (MINIMAL + "worker: {commit_interval_s: soon}\n", "worker.commit_interval_s"),
        (MINIMAL + "controller: {rest_port: 70000}\n", "controller.rest_port"),
        (MINIMAL + "controller: {rest_port: true}\n", "controller.rest_port"),
        (MINIMAL + "worker: {commit_interval_s: 0}\n", "worker.commit_interval_s"),
        (MINIMAL + "worker: {comit_interval_s: 1}\n", "worker.comit_interval_s"),
        (MINIMAL + "worker: {native_loop: fast}\n", "worker.native_loop"),
        (MINIMAL + "colour: blue\n", "colour"),
        (MINIMAL + "source2: {}\n", "source2"),
        (MINIMAL.replace("alias: dst", "alias: src"), "destination.alias"),
        (MINIMAL + "controller: {admin_token: short}\n", "controller.admin_token"),
        (MINIMAL + "zookeeper: {connect: x, root: relative}\n", "zookeeper.root"),
        ("- a list\n", "<root>"),
        ("pipeline: [unclosed\n", "<file>"),
    ],
)
def test_each_bad_key_is_named(tmp_path, text, key):
    with pytest.raises(ConfigError) as err:
        config.load(write(tmp_path, text), env={})
    assert err.value.key == key
    assert str(err.value).startswith(f"config error: {key}: ")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(tmp_path / "nope.yaml", env={})


def test_redacted_hides_secrets_but_keeps_the_rest(tmp_path):
    text = MINIMAL.replace(
        'bootstrap_servers: "127.0.0.1:9092"}',
        'bootstrap_servers: "127.0.0.1:9092", properties: {sasl.password: s3cret!, sasl.username: bob}}',
    ) + "controller: {admin_token: topsecret-token}\n"
    shown = config.load(write(tmp_path, text), env={}).redacted()
    assert shown["source"]["properties"] == {"sasl.password": "***", "sasl.username": "bob"}
    assert shown["controller"]["admin_token"] == "***"
    assert "s3cret!" not in repr(shown) and "topsecret-token" not in repr(shown)


def test_cli_exits_2_with_one_message_naming_the_key(tmp_path):
    path = write(tmp_path, MINIMAL + "worker: {commit_interval_s: soon}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "ureplicator", "worker", "--config", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "worker.commit_interval_s" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
