"""Security settings: an open REST API is refused at start, the ZooKeeper credential is checked and hidden."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from ureplicator.common import config
from ureplicator.common.errors import ConfigError

MINIMAL = """
pipeline: dr
zookeeper: {connect: "127.0.0.1:2181"}
source: {alias: src, bootstrap_servers: "127.0.0.1:9092"}
destination: {alias: dst, bootstrap_servers: "127.0.0.1:9093"}
"""


def load(text: str) -> config.Config:
    return config.from_dict(yaml.safe_load(text))


def _load_env(text: str, env: dict[str, str]) -> config.Config:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        handle.write(text)
        handle.flush()
        return config.load(handle.name, env=env)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "localhost", "::1", "[::1]"])
def test_a_loopback_api_needs_no_token(host):
    config.check_rest_exposure(load(MINIMAL + f'controller: {{rest_host: "{host}"}}\n'))


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "ureplicator.example.com"])
def test_a_network_api_without_token_is_refused_with_what_to_do(host):
    cfg = load(MINIMAL + f'controller: {{rest_host: "{host}"}}\n')
    with pytest.raises(ConfigError) as err:
        config.check_rest_exposure(cfg)
    message = str(err.value)
    assert err.value.key == "controller.admin_token"
    assert f"{host}:9000" in message
    for remedy in ("controller.admin_token", "UREPLICATOR_CONTROLLER_ADMIN_TOKEN", "controller.rest_host: 127.0.0.1",
                   "controller.allow_anonymous: true"):
        assert remedy in message


def test_the_default_rest_host_is_refused_without_a_token():
    with pytest.raises(ConfigError, match="reachable from the network"):
        config.check_rest_exposure(load(MINIMAL))


def test_a_token_or_an_explicit_allow_anonymous_lets_a_network_api_start():
    config.check_rest_exposure(load(MINIMAL + "controller: {admin_token: correct-horse}\n"))
    config.check_rest_exposure(load(MINIMAL + "controller: {allow_anonymous: true}\n"))
    env_allowed = _load_env(MINIMAL, {"UREPLICATOR_CONTROLLER_ALLOW_ANONYMOUS": "true"})
    assert env_allowed.controller.allow_anonymous is True
    config.check_rest_exposure(env_allowed)


def test_controller_process_refuses_to_start_and_exits_2(tmp_path: Path):
    """A real `ureplicator controller`: one clear line, exit status 2, before touching ZooKeeper."""
    path = tmp_path / "c.yaml"
    # ZooKeeper at a port nobody serves: the refusal must come first, not a connection timeout.
    path.write_text(MINIMAL.replace("127.0.0.1:2181", "127.0.0.1:1") + "controller: {rest_host: 0.0.0.0}\n")
    proc = subprocess.run([sys.executable, "-m", "ureplicator", "controller", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "ureplicator: config error: controller.admin_token: the REST API would listen on 0.0.0.0:9000" in proc.stderr
    assert "controller.allow_anonymous: true" in proc.stderr


@pytest.mark.parametrize("bad", ["alice", ":pw", "alice:", 42])
def test_zookeeper_auth_must_be_user_colon_password(bad):
    with pytest.raises(ConfigError) as err:
        load(MINIMAL.replace('{connect: "127.0.0.1:2181"}', f'{{connect: "127.0.0.1:2181", auth: "{bad}"}}'))
    assert err.value.key == "zookeeper.auth"


def test_zookeeper_auth_comes_from_the_environment_verbatim_and_is_redacted():
    # A password that YAML would read as a number or a bool must stay the string it is.
    cfg = _load_env(MINIMAL, {"UREPLICATOR_ZOOKEEPER_AUTH": "replicator:0123"})
    assert cfg.zookeeper.auth == "replicator:0123"
    assert cfg.redacted()["zookeeper"]["auth"] == "***"
    assert "0123" in config.secret_values(cfg)


def test_secret_values_lists_every_configured_secret():
    cfg = load(MINIMAL.replace('bootstrap_servers: "127.0.0.1:9092"}',
                               'bootstrap_servers: "127.0.0.1:9092", properties: {sasl.password: pw-src-1}}')
               + "controller: {admin_token: token-abc-123}\n")
    assert {"pw-src-1", "token-abc-123"} <= set(config.secret_values(cfg))


def test_a_mistyped_secret_is_not_echoed_in_the_error():
    with pytest.raises(ConfigError) as err:
        load(MINIMAL + "controller: {admin_token: [hunter2-hunter2]}\n")
    assert "hunter2" not in str(err.value) and "expected a string, got list" in str(err.value)
