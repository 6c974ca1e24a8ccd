"""TLS options in the config: REST API certificate/key pairs and ZooKeeper client TLS (kazoo's use_ssl)."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from ureplicator.common import config, zktls
from ureplicator.common.errors import ConfigError

BASE = {
    "pipeline": "p",
    "zookeeper": {"connect": "zk:2281"},
    "source": {"alias": "src", "bootstrap_servers": "s:9092"},
    "destination": {"alias": "dst", "bootstrap_servers": "d:9092"},
}


def _load(**sections):
    return config.from_dict({**BASE, **{k: {**BASE.get(k, {}), **v} for k, v in sections.items()}})


def test_zookeeper_tls_becomes_kazoos_ssl_options():
    cfg = _load(zookeeper={"tls": True, "tls_ca": "/ca.pem", "tls_certfile": "/c.pem", "tls_keyfile": "/k.pem"})
    options = zktls.options(cfg)
    assert options == {"use_ssl": True, "verify_certs": True, "ca": "/ca.pem", "certfile": "/c.pem",
                       "keyfile": "/k.pem"}
    client = KazooClient(hosts="zk:2281", **options)  # kazoo accepts them (no connection is made)
    assert client.use_ssl is True
    assert zktls.options(_load()) == {}


@pytest.mark.parametrize(("sections", "key"), [
    ({"zookeeper": {"tls": True, "tls_certfile": "/c.pem"}}, "zookeeper.tls_keyfile"),
    ({"zookeeper": {"tls_ca": "/ca.pem"}}, "zookeeper.tls"),
    ({"controller": {"rest_tls_certfile": "/c.pem"}}, "controller.rest_tls_keyfile"),
    ({"controller": {"rest_tls_keyfile": "/k.pem"}}, "controller.rest_tls_keyfile"),
])
def test_half_configured_tls_is_refused_naming_the_key(sections, key):
    with pytest.raises(ConfigError) as info:
        _load(**sections)
    assert info.value.key == key


def test_tls_keys_come_from_the_environment_too():
    cfg = config.load(None, {
        "UREPLICATOR_PIPELINE": "p", "UREPLICATOR_ZOOKEEPER_CONNECT": "zk:2281", "UREPLICATOR_ZOOKEEPER_TLS": "true",
        "UREPLICATOR_SOURCE_ALIAS": "src", "UREPLICATOR_SOURCE_BOOTSTRAP_SERVERS": "s:9092",
        "UREPLICATOR_DESTINATION_ALIAS": "dst", "UREPLICATOR_DESTINATION_BOOTSTRAP_SERVERS": "d:9092",
        "UREPLICATOR_CONTROLLER_REST_TLS_CERTFILE": "/c.pem", "UREPLICATOR_CONTROLLER_REST_TLS_KEYFILE": "/k.pem",
    })
    assert cfg.zookeeper.tls is True
    assert (cfg.controller.rest_tls_certfile, cfg.controller.rest_tls_keyfile) == ("/c.pem", "/k.pem")
