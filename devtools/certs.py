"""Make a throwaway certificate authority, a broker certificate and a client certificate for the local stack's TLS.

PEM files only: the brokers read them with ``ssl.keystore.type=PEM``, librdkafka with
``ssl.ca.location``, and the verifier's Java client with ``ssl.truststore.type=PEM``, so no
keytool and no keystore password are needed. The broker certificate names 127.0.0.1 and
localhost, the addresses the stack listens on and advertises, so hostname verification stays on.
ZooKeeper's secureClientPort serves the same broker certificate and asks every client for one of
its own (mutual TLS, ZooKeeper's default): ``client-cert.pem`` / ``client-key.pem``, for
``zookeeper.tls_certfile`` / ``zookeeper.tls_keyfile``. It names the same hosts because ZooKeeper
also checks a client certificate against the address the client connects from.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=30)  # a test stack lives minutes; an old folder fails loudly, not silently


@dataclass(frozen=True)
class BrokerTls:
    """Where the files are: the CA certificate clients trust, the broker's key + certificate chain,
    and a client certificate with its key (separate files, as kazoo's certfile/keyfile take them)."""

    ca: Path
    keystore: Path
    client_cert: Path | None = None
    client_key: Path | None = None


def write(folder: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> BrokerTls:
    """Write ``ca.pem``, ``broker.pem`` (unencrypted key, then certificate, then CA), ``client-cert.pem``
    and ``client-key.pem`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ureplicator local stack CA")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key, now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    broker_key = _key()
    broker_cert = _leaf(hosts, ca_name, ca_key, broker_key, ExtendedKeyUsageOID.SERVER_AUTH, now)
    client_key = _key()
    client_cert = _leaf(hosts, ca_name, ca_key, client_key, ExtendedKeyUsageOID.CLIENT_AUTH, now)
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    files = BrokerTls(ca=folder / "ca.pem", keystore=folder / "broker.pem",
                      client_cert=folder / "client-cert.pem", client_key=folder / "client-key.pem")
    files.ca.write_bytes(ca_pem)
    files.keystore.write_bytes(_pem_key(broker_key) + broker_cert.public_bytes(serialization.Encoding.PEM) + ca_pem)
    files.keystore.chmod(0o600)
    (folder / "client-cert.pem").write_bytes(client_cert.public_bytes(serialization.Encoding.PEM))
    (folder / "client-key.pem").write_bytes(_pem_key(client_key))
    (folder / "client-key.pem").chmod(0o600)
    return files


def _leaf(hosts: tuple[str, ...], ca_name: x509.Name, ca_key: rsa.RSAPrivateKey, key: rsa.RSAPrivateKey,
          usage: x509.ObjectIdentifier, now: datetime.datetime) -> x509.Certificate:
    """A certificate for ``hosts`` signed by the CA, for one use (server or client authentication)."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return (
        _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]), ca_name, key, now)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _builder(subject: x509.Name, issuer: x509.Name, key: rsa.RSAPrivateKey,
             now: datetime.datetime) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clock skew between processes
        .not_valid_after(now + VALID_FOR)
    )
