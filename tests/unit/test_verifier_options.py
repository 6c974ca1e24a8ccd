"""The verifier's inputs: librdkafka -> Java client security settings, --every durations, --topic mappings."""

from __future__ import annotations

import argparse

import pytest

from ureplicator.common.config import from_dict
from ureplicator.common.errors import ConfigError
from ureplicator.verifier import kafka_options
from ureplicator.verifier.cli import parse_interval
from ureplicator.verifier.run import Target, VerifyError, resolve_targets


def test_plaintext_cluster_needs_no_options():
    assert kafka_options.java_options("source", {}) == ({}, [])


def test_sasl_plain_and_scram_become_a_jaas_config_with_quotes_escaped():
    options, unmapped = kafka_options.java_options("source", {
        "security.protocol": "sasl_ssl", "sasl.mechanisms": "PLAIN",
        "sasl.username": "mirror", "sasl.password": 'p"w\\d',
    })
    assert unmapped == []
    assert options == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="mirror" password="p\\"w\\\\d";',
    }
    options, _ = kafka_options.java_options("destination", {
        "sasl.mechanism": "scram-sha-512", "sasl.username": "u", "sasl.password": "p"})
    assert options["sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.ScramLoginModule required")


def test_a_username_without_password_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match="source.properties.sasl.password"):
        kafka_options.java_options("source", {"sasl.mechanism": "PLAIN", "sasl.username": "u"})


def test_kerberos_and_oidc():
    options, _ = kafka_options.java_options("source", {
        "sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": "kafka",
        "sasl.kerberos.keytab": "/etc/k.keytab", "sasl.kerberos.principal": "mirror@EXAMPLE.COM"})
    assert options["sasl.kerberos.service.name"] == "kafka"
    assert 'keyTab="/etc/k.keytab" principal="mirror@EXAMPLE.COM"' in options["sasl.jaas.config"]
    options, _ = kafka_options.java_options("source", {
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "id", "sasl.oauthbearer.client.secret": "s",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token"})
    assert options["sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"
    assert options["sasl.login.callback.handler.class"].endswith("OAuthBearerLoginCallbackHandler")
    assert 'clientId="id" clientSecret="s";' in options["sasl.jaas.config"]


def test_ssl_files_become_pem_trust_and_key_stores():
    files = {"/ca.pem": "CA", "/client.pem": "CERT", "/client.key": "KEY"}
    options, unmapped = kafka_options.java_options("source", {
        "security.protocol": "SSL", "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/client.pem",
        "ssl.key.location": "/client.key", "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": "none", "ssl.cipher.suites": "X",
    }, read_file=files.__getitem__)
    assert options == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "CERT", "ssl.keystore.key": "KEY",
        "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": "",
    }
    assert unmapped == ["ssl.cipher.suites"]


def test_unreadable_certificate_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="ssl.certificate.location"):
        kafka_options.java_options("source", {
            "ssl.certificate.location": str(tmp_path / "absent.pem"), "ssl.key.location": str(tmp_path / "k")})


def test_client_tuning_is_ignored_and_kafka_options_win():
    options, unmapped = kafka_options.java_options(
        "source", {"linger.ms": "5", "security.protocol": "SSL"}, {"security.protocol": "SASL_SSL"})
    assert options == {"security.protocol": "SASL_SSL"} and unmapped == []
    assert kafka_options.parse_option("destination:fetch.max.bytes=1048576") == (
        "destination", "fetch.max.bytes", "1048576")
    with pytest.raises(ConfigError):
        kafka_options.parse_option("target:a=b")


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("30s", 30), ("10m", 600), ("1h30m", 5400),
                                                ("500ms", 0.5), ("1d", 86400)])
def test_intervals(text, seconds):
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "10x", "0s", "5m garbage"])
def test_bad_intervals(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_interval(text)


def test_explicit_topic_mappings_need_no_zookeeper():
    config = from_dict({
        "pipeline": "p", "zookeeper": {"connect": "127.0.0.1:1"},
        "source": {"alias": "a", "bootstrap_servers": "x:1"},
        "destination": {"alias": "b", "bootstrap_servers": "y:1"},
    })
    assert resolve_targets(config, ["orders=dr.orders", "audit=audit"]) == [
        Target("orders", "dr.orders"), Target("audit", "audit")]
    with pytest.raises(VerifyError):
        resolve_targets(config, ["=x"])
