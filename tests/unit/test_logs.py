"""Logging: JSON off a TTY, console on one, stdlib (kazoo/librdkafka) records through the same renderer."""

from __future__ import annotations

import io
import json
import logging

from ureplicator.common import logs


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_when_not_a_tty_with_bound_context_and_stdlib_records():
    stream = io.StringIO()
    logs.setup(stream=stream)
    logs.get("worker", pipeline="p", worker="w1").info("partitions_acquired", partitions=["t:0"])
    logging.getLogger("kazoo.client").warning("Connection dropped: socket connection broken")
    logs.librdkafka_logger("producer.dst").error("FAIL|rdkafka#producer-1| broker down")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["event"] == "partitions_acquired" and lines[0]["worker"] == "w1" and lines[0]["level"] == "info"
    assert lines[1]["logger"] == "kazoo.client" and lines[1]["level"] == "warning"
    assert lines[2]["logger"] == "librdkafka.producer.dst" and "broker down" in lines[2]["event"]
    assert all("timestamp" in line for line in lines)


def test_console_renderer_on_a_tty():
    stream = FakeTty()
    logs.setup(stream=stream)
    logs.get("controller").info("leadership_acquired", fence="/x")
    text = stream.getvalue()
    assert "leadership_acquired" in text and not text.lstrip().startswith("{")
