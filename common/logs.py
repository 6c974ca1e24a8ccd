"""Configure structlog once per process: JSON off a TTY, console on one; stdlib logs routed through it.

kazoo logs through the stdlib ``logging`` module and librdkafka through the
``logger`` client setting, which confluent-kafka hands a stdlib logger; both end
up in the same renderer with the same timestamp and level keys.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_configured = False


def setup(level: str = "info", json: bool | None = None, stream: Any = None) -> None:
    """Configure logging for this process. ``json=None`` picks JSON unless stderr is a TTY."""
    global _configured
    stream = stream or sys.stderr
    if json is None:
        json = not stream.isatty()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, _name_as_logger],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # kazoo is chatty at INFO about every reconnect attempt; warnings are what matter.
    logging.getLogger("kazoo.client").setLevel(max(logging.WARNING, root.level))
    logging.getLogger("werkzeug").setLevel(max(logging.WARNING, root.level))
    _configured = True


def _name_as_logger(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    record = event.get("_record")
    if record is not None:
        event.setdefault("logger", record.name)
    return event


def get(name: str, **context: Any) -> structlog.stdlib.BoundLogger:
    """A bound logger for one unit of work (pipeline, worker, topic, partition, ...)."""
    if not _configured:
        setup()
    return structlog.get_logger(name).bind(**context)


def librdkafka_logger(client: str) -> logging.Logger:
    """The stdlib logger confluent-kafka should log librdkafka events through."""
    return logging.getLogger(f"librdkafka.{client}")
