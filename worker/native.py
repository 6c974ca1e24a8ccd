"""Load the optional C mirror loop (worker/_native.c) and check it against the confluent-kafka in use.

The C loop reads confluent-kafka's ``Producer`` and ``Message`` objects directly and calls the
librdkafka copy that confluent-kafka loaded, so it is only used after :func:`load` found that
copy and :func:`worker._native.init` checked the struct layouts against a real ``Message``.
Anything unexpected (no compiled module, no ``/proc``, another confluent-kafka build) gives
``None`` and a reason: the worker then runs its Python loop, which has the same semantics.
"""

from __future__ import annotations

import confluent_kafka
from confluent_kafka import Message, Producer

from common import provenance

_LAYOUT_SAMPLE = {"topic": "layout", "partition": 7, "offset": 1234567890123, "key": b"k", "value": b"vv",
                  "timestamp": (1, 987654321012)}


class Unavailable(Exception):
    """The C loop cannot be used here; the message says why."""


def librdkafka_path() -> str:
    """The file of the librdkafka that confluent-kafka's extension loaded (from /proc/self/maps)."""
    import confluent_kafka.cimpl  # noqa: F401  (loads librdkafka)

    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                name = path.rsplit("/", 1)[-1]
                if name.startswith("librdkafka") and ".so" in name:
                    return path
    except OSError as exc:
        raise Unavailable(f"cannot read /proc/self/maps ({exc})") from None
    raise Unavailable(f"no librdkafka mapped in this process (confluent-kafka {confluent_kafka.version()[0]})")


def load() -> object:
    """The initialised ``worker._native`` module; raises :class:`Unavailable` with the reason."""
    try:
        from worker import _native
    except ImportError as exc:
        raise Unavailable(f"worker._native is not built ({exc}); `make install` compiles it") from None
    try:
        sample = Message(**_LAYOUT_SAMPLE)
    except TypeError as exc:
        raise Unavailable(f"confluent-kafka {confluent_kafka.version()[0]} cannot build a Message ({exc})") from None
    try:
        _native.init(librdkafka_path(), Message, Producer, sample, provenance.HEADER.encode())
    except RuntimeError as exc:
        raise Unavailable(f"{exc} (confluent-kafka {confluent_kafka.version()[0]})") from None
    return _native
