"""Translate a cluster's librdkafka properties into the Java client options of Spark's Kafka source.

The pipeline config holds librdkafka properties (the replicator's clients are
librdkafka); Spark reads Kafka with the Java client, whose names and formats
differ for security settings. Mapped (librdkafka -> Java):

* ``security.protocol`` -> same (upper-cased)
* ``sasl.mechanism`` / ``sasl.mechanisms`` -> ``sasl.mechanism``
* ``sasl.username`` + ``sasl.password`` -> ``sasl.jaas.config`` with PlainLoginModule
  (PLAIN) or ScramLoginModule (SCRAM-SHA-256/512)
* ``sasl.kerberos.service.name`` -> same; ``sasl.kerberos.keytab`` +
  ``sasl.kerberos.principal`` -> Krb5LoginModule ``sasl.jaas.config`` (GSSAPI)
* ``sasl.oauthbearer.method=oidc`` with ``sasl.oauthbearer.client.id`` /
  ``client.secret`` / ``scope`` / ``token.endpoint.url`` -> OAuthBearerLoginModule
  and the Java client's OIDC login callback handler
* ``ssl.ca.location`` -> ``ssl.truststore.location`` with ``ssl.truststore.type=PEM``;
  ``ssl.ca.pem`` -> ``ssl.truststore.certificates`` (PEM)
* ``ssl.certificate.location`` + ``ssl.key.location`` -> the files' PEM text as
  ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (``ssl.keystore.type=PEM``),
  ``ssl.key.password`` -> same; ``ssl.certificate.pem`` / ``ssl.key.pem`` likewise
* ``ssl.keystore.location`` + ``ssl.keystore.password`` (PKCS#12) -> same, type PKCS12
* ``ssl.endpoint.identification.algorithm`` -> same (``none`` becomes empty)

Client tuning properties (``linger.ms``, ``fetch.wait.max.ms``, ...) do not
apply to the Java client and are ignored; other ``ssl.*`` / ``sasl.*``
properties are reported as unmapped so the operator can pass a Java
equivalent with ``--kafka-option``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ureplicator.common.errors import ConfigError

_SAME_NAME = ("sasl.kerberos.service.name", "ssl.key.password", "ssl.keystore.password")
_CONSUMED = {
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "sasl.kerberos.keytab", "sasl.kerberos.principal", "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope",
    "sasl.oauthbearer.token.endpoint.url", "ssl.ca.location", "ssl.ca.pem",
    "ssl.certificate.location", "ssl.key.location", "ssl.certificate.pem", "ssl.key.pem",
    "ssl.keystore.location", "ssl.endpoint.identification.algorithm", *_SAME_NAME,
}
_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
_KERBEROS = "com.sun.security.auth.module.Krb5LoginModule"
_OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_OIDC_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def java_options(
    name: str,
    properties: Mapping[str, str],
    extra: Mapping[str, str] | None = None,
    read_file: Callable[[str], str] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """(Java client settings without the ``kafka.`` prefix, unmapped security property names).

    ``name`` is the config section (``source``/``destination``) for error
    messages; ``extra`` (from ``--kafka-option``) is applied last, verbatim.
    """
    read = read_file or _read_text
    props = {k.strip(): str(v) for k, v in properties.items()}
    out: dict[str, str] = {}
    if "security.protocol" in props:
        out["security.protocol"] = props["security.protocol"].upper()
    mechanism = props.get("sasl.mechanism") or props.get("sasl.mechanisms")
    if mechanism:
        mechanism = mechanism.strip().upper()
        out["sasl.mechanism"] = mechanism
    jaas = _jaas(name, mechanism, props)
    if jaas:
        out["sasl.jaas.config"] = jaas
    if mechanism == "OAUTHBEARER" and props.get("sasl.oauthbearer.method", "").lower() == "oidc":
        out["sasl.login.callback.handler.class"] = _OIDC_HANDLER
        if "sasl.oauthbearer.token.endpoint.url" in props:
            out["sasl.oauthbearer.token.endpoint.url"] = props["sasl.oauthbearer.token.endpoint.url"]
    for key in _SAME_NAME:
        if key in props:
            out[key] = props[key]
    _ssl(name, props, out, read)
    unmapped = sorted(
        k for k in props if k not in _CONSUMED and (k.startswith("ssl.") or k.startswith("sasl."))
    )
    out.update(extra or {})
    return out, unmapped


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _jaas(name: str, mechanism: str | None, props: Mapping[str, str]) -> str | None:
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        if "sasl.username" not in props and "sasl.password" not in props:
            return None
        for key in ("sasl.username", "sasl.password"):
            if key not in props:
                raise ConfigError(f"{name}.properties.{key}", f"required with sasl.mechanism {mechanism}")
        module = _PLAIN if mechanism == "PLAIN" else _SCRAM
        return (
            f"{module} required username={_quote(props['sasl.username'])} "
            f"password={_quote(props['sasl.password'])};"
        )
    if mechanism == "GSSAPI" and "sasl.kerberos.keytab" in props:
        principal = props.get("sasl.kerberos.principal")
        if not principal:
            raise ConfigError(f"{name}.properties.sasl.kerberos.principal", "required with a keytab")
        return (
            f"{_KERBEROS} required useKeyTab=true storeKey=true "
            f"keyTab={_quote(props['sasl.kerberos.keytab'])} principal={_quote(principal)};"
        )
    if mechanism == "OAUTHBEARER" and props.get("sasl.oauthbearer.method", "").lower() == "oidc":
        parts = [f"{_OAUTH} required"]
        for key, field in (("client.id", "clientId"), ("client.secret", "clientSecret"), ("scope", "scope")):
            if f"sasl.oauthbearer.{key}" in props:
                parts.append(f"{field}={_quote(props[f'sasl.oauthbearer.{key}'])}")
        return " ".join(parts) + ";"
    return None


def _ssl(name: str, props: Mapping[str, str], out: dict[str, str], read: Callable[[str], str]) -> None:
    if "ssl.ca.location" in props:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = props["ssl.ca.location"]
    elif "ssl.ca.pem" in props:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.certificates"] = props["ssl.ca.pem"]
    cert = props.get("ssl.certificate.pem")
    key = props.get("ssl.key.pem")
    if "ssl.certificate.location" in props:
        cert = _file(name, "ssl.certificate.location", props["ssl.certificate.location"], read)
    if "ssl.key.location" in props:
        key = _file(name, "ssl.key.location", props["ssl.key.location"], read)
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise ConfigError(
                f"{name}.properties.ssl.key.location", "a client certificate needs both certificate and key"
            )
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.certificate.chain"] = cert
        out["ssl.keystore.key"] = key
    elif "ssl.keystore.location" in props:
        out["ssl.keystore.type"] = "PKCS12"
        out["ssl.keystore.location"] = props["ssl.keystore.location"]
    algorithm = props.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm


def _file(name: str, key: str, path: str, read: Callable[[str], str]) -> str:
    try:
        return read(path)
    except OSError as exc:
        raise ConfigError(f"{name}.properties.{key}", f"cannot read {path}: {exc.strerror or exc}") from None


def _read_text(path: str) -> str:
    return Path(path).read_text()


def parse_option(text: str) -> tuple[str, str, str]:
    """``source:key=value`` (from ``--kafka-option``) -> (side, key, value)."""
    side, sep, rest = text.partition(":")
    key, eq, value = rest.partition("=")
    if not sep or not eq or side not in ("source", "destination") or not key:
        raise ConfigError("--kafka-option", f"expected source:KEY=VALUE or destination:KEY=VALUE, got {text!r}")
    return side, key.strip(), value
