"""Secrets never reach a log line: secret-looking keys and the configured secret values are masked."""

from __future__ import annotations

import io
import json
import logging

import pytest

from ureplicator.common import config, logs

TOKEN = "tok-3f9a1c77e2"
PASSWORD = "Scram-Pw-5512"


@pytest.fixture
def stream():
    logs._known_secrets.clear()
    out = io.StringIO()
    logs.setup(stream=out, json=True)
    yield out
    logs._known_secrets.clear()


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_secret_keys_are_masked_at_any_depth(stream):
    logs.get("controller").info(
        "controller_starting",
        admin_token=TOKEN,
        config={"source": {"properties": {"sasl.password": PASSWORD, "sasl.username": "bob"}},
                "zookeeper": {"auth": f"replicator:{PASSWORD}"}},
        partitions=[{"ssl.keystore.password": PASSWORD}],
    )
    (line,) = lines(stream)
    assert line["admin_token"] == "***"
    assert line["config"]["source"]["properties"] == {"sasl.password": "***", "sasl.username": "bob"}
    assert line["config"]["zookeeper"]["auth"] == "***"
    assert line["partitions"] == [{"ssl.keystore.password": "***"}]
    assert PASSWORD not in stream.getvalue() and TOKEN not in stream.getvalue()


def test_registered_values_are_masked_in_messages_stdlib_records_and_tracebacks(stream):
    logs.register_secrets([TOKEN, PASSWORD, "ab"])  # too short to mask safely: ignored
    log = logs.get("worker")
    log.warning("login_failed", detail=f"broker said: bad password {PASSWORD} for bob")
    logging.getLogger("kazoo.client").warning("auth digest replicator:%s rejected", PASSWORD)
    logs.librdkafka_logger("producer.dst").error(f"SASL authentication error for {PASSWORD}")
    try:
        raise ValueError(f"token {TOKEN} refused")
    except ValueError:
        log.exception("request_failed")
    text = stream.getvalue()
    assert PASSWORD not in text and TOKEN not in text
    got = lines(stream)
    assert got[0]["detail"] == "broker said: bad password *** for bob"
    assert got[1]["event"] == "auth digest replicator:*** rejected"
    assert got[2]["event"] == "SASL authentication error for ***"
    assert "ValueError: token *** refused" in got[3]["exception"]
    assert "ab" not in logs._known_secrets  # a 2-character "secret" would mask ordinary words


def test_console_renderer_masks_too(stream):
    out = io.StringIO()
    logs.setup(stream=out, json=False)
    logs.register_secrets([PASSWORD])
    logs.get("cli").info("connecting", sasl_password=PASSWORD, note=f"pw={PASSWORD}")
    assert PASSWORD not in out.getvalue() and "***" in out.getvalue()


def test_secret_values_of_a_config_are_what_gets_registered():
    cfg = config.from_dict({
        "pipeline": "p",
        "zookeeper": {"connect": "127.0.0.1:2181", "auth": f"replicator:{PASSWORD}"},
        "source": {"alias": "a", "bootstrap_servers": "h:1", "properties": {"sasl.password": PASSWORD}},
        "destination": {"alias": "b", "bootstrap_servers": "h:2"},
        "controller": {"admin_token": TOKEN},
    })
    assert {TOKEN, PASSWORD, f"replicator:{PASSWORD}"} <= set(config.secret_values(cfg))
