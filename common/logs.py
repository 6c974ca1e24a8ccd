"""Configure structlog once per process: JSON off a TTY, console on one; stdlib logs routed through it.

kazoo logs through the stdlib ``logging`` module and librdkafka through the
``logger`` client setting, which confluent-kafka hands a stdlib logger; both end
up in the same renderer with the same timestamp and level keys. Just before
rendering, every line has its secrets masked (:func:`mask_secrets`): values of
secret-looking keys, and the configured secret values wherever they appear.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any

import structlog

from ureplicator.common.config import REDACTED, is_secret

_configured = False
# Secret values of this process's config (passwords, tokens): masked in any text that shows them.
_known_secrets: set[str] = set()
# Shorter values would mask ordinary words and numbers; the config refuses tokens under 8 characters.
_MIN_SECRET_LENGTH = 4


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
            mask_secrets,
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


def register_secrets(values: Iterable[str]) -> None:
    """Mask these values in every later log line, whatever key or message carries them."""
    _known_secrets.update(v for v in values if v and len(v) >= _MIN_SECRET_LENGTH)


def mask_secrets(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: ``***`` for secret-looking keys (password, token, ...) and registered values."""
    return {key: _masked(key, value) for key, value in event.items()}


def _masked(key: str, value: Any) -> Any:
    if key and is_secret(key) and value is not None:
        return REDACTED
    if isinstance(value, dict):
        return {k: _masked(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked("", v) for v in value]
    if isinstance(value, str):
        # Longest first, so a value that contains another is masked whole.
        for secret in sorted(_known_secrets, key=len, reverse=True):
            if secret in value:
                value = value.replace(secret, REDACTED)
    return value


def get(name: str, **context: Any) -> structlog.stdlib.BoundLogger:
    """A bound logger for one unit of work (pipeline, worker, topic, partition, ...)."""
    if not _configured:
        setup()
    return structlog.get_logger(name).bind(**context)


def librdkafka_logger(client: str) -> logging.Logger:
    """The stdlib logger confluent-kafka should log librdkafka events through."""
    return logging.getLogger(f"librdkafka.{client}")


def error_text(error: BaseException | None) -> str:
    """An exception for a log's ``error`` field: its class, and its message when it has one.

    ``str()`` alone is empty for many of kazoo's (``ConnectionLoss``, ``SessionExpiredError``).
    """
    if error is None:
        return "unknown"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
