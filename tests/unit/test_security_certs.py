"""The local stack's TLS material and SASL_SSL listener settings: what brokers and clients are given."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding

from devtools import certs, stack
from ureplicator.verifier import kafka_options


def test_broker_certificate_names_the_stack_addresses_and_chains_to_the_ca(tmp_path: Path):
    files = certs.write(tmp_path / "tls")
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    pem = files.keystore.read_bytes()
    # Kafka's PEM keystore: the private key (unencrypted PKCS#8), then the chain, leaf first.
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    chain = x509.load_pem_x509_certificates(pem[pem.index(b"-----BEGIN CERTIFICATE-----"):])
    leaf = chain[0]
    assert [c.subject for c in chain[1:]] == [ca.subject]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert leaf.issuer == ca.subject
    ca.public_key().verify(leaf.signature, leaf.tbs_certificate_bytes, padding.PKCS1v15(),
                           leaf.signature_hash_algorithm)
    key = serialization.load_pem_private_key(pem, password=None)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()
    assert files.keystore.stat().st_mode & 0o077 == 0  # the key is readable by its owner only


def test_secure_listener_sits_next_to_plaintext_and_keeps_brokers_on_plaintext(tmp_path: Path):
    tls = certs.BrokerTls(ca=tmp_path / "ca.pem", keystore=tmp_path / "broker.pem")
    props = stack._kafka_properties(tmp_path, "source", 9092, 9093, stack._secure_listener(9092, 9094, 9093, tls))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert "SASL_SSL:SASL_SSL" in props["listener.security.protocol.map"].split(",")
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["listener.name.sasl_ssl.ssl.keystore.location"] == str(tls.keystore)
    command = stack._format_command("java", tmp_path, "source", "cid", "pw-1")
    assert command[-2:] == ["--add-scram", "SCRAM-SHA-512=[name=ureplicator,password=pw-1]"]
    assert "--add-scram" not in stack._format_command("java", tmp_path, "source", "cid", None)


def test_the_stack_client_properties_map_to_the_java_client_the_verifier_uses():
    secure = {"source": "127.0.0.1:1", "destination": "127.0.0.1:2", "ca": "/s/tls/ca.pem",
              "mechanism": "SCRAM-SHA-512", "username": "ureplicator", "password": 'p"w\\1'}
    librdkafka = stack.secure_client_properties(secure)
    java, unmapped = kafka_options.java_options("source", librdkafka)
    assert unmapped == []
    assert java == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="ureplicator" password="p\\"w\\\\1";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/s/tls/ca.pem",
    }


def test_client_certificate_is_for_client_authentication_and_chains_to_the_ca(tmp_path: Path):
    from cryptography.x509.oid import ExtendedKeyUsageOID

    files = certs.write(tmp_path / "tls")
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    assert files.client_cert is not None and files.client_key is not None
    leaf = x509.load_pem_x509_certificate(files.client_cert.read_bytes())
    assert leaf.issuer == ca.subject
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    key = serialization.load_pem_private_key(files.client_key.read_bytes(), password=None)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()
    assert files.client_key.stat().st_mode & 0o077 == 0


def test_zookeeper_secure_port_uses_netty_and_the_stack_pem_files(tmp_path: Path):
    tls = certs.BrokerTls(ca=tmp_path / "ca.pem", keystore=tmp_path / "broker.pem")
    cfg = stack._zoo_cfg(tmp_path, 2181, stack._zookeeper_tls(2281, tls))
    assert (cfg["clientPort"], cfg["secureClientPort"]) == (2181, 2281)
    assert cfg["serverCnxnFactory"] == "org.apache.zookeeper.server.NettyServerCnxnFactory"
    assert (cfg["ssl.keyStore.location"], cfg["ssl.trustStore.location"]) == (str(tls.keystore), str(tls.ca))
    assert cfg["ssl.keyStore.type"] == cfg["ssl.trustStore.type"] == "PEM"
    secure = {"zookeeper": "127.0.0.1:2281", "ca": "/t/ca.pem", "client_certfile": "/t/c.pem",
              "client_keyfile": "/t/k.pem"}
    assert stack.secure_zookeeper(secure) == {"connect": "127.0.0.1:2281", "tls": True, "tls_ca": "/t/ca.pem",
                                              "tls_certfile": "/t/c.pem", "tls_keyfile": "/t/k.pem"}
