"""Load the optional C mirror loop (worker/_native.c) and check it against the confluent-kafka in use.

The C loop reads confluent-kafka's ``Producer`` and ``Message`` objects directly, hands
confluent-kafka's own delivery-report callback a per-record state laid out like its private
``struct Producer_msgstate``, and calls the librdkafka copy that confluent-kafka links. So it
is only used when:

* confluent-kafka is one of :data:`REVIEWED_VERSIONS`, whose ``Handle``, ``Message`` and
  ``Producer_msgstate`` layouts were read against worker/_native.c;
* :func:`worker._native.init` resolved librdkafka's functions through confluent-kafka's own
  extension module (``dlopen`` with ``RTLD_NOLOAD``: the copy already loaded) and checked
  the ``Message`` layout against a real ``Message``;
* and, per producer, ``is_producer`` found that librdkafka names the handle it reads after
  the worker's client id (the ``Handle.rk`` check).

Anything else gives :class:`Unavailable` with the reason: the worker then runs its Python
loop, which has the same semantics, and its start-up log line ``mirror_loop`` says why.
"""

from __future__ import annotations

import confluent_kafka
from confluent_kafka import Message, Producer

from common import provenance

# confluent-kafka releases whose struct layouts worker/_native.c was reviewed against: 2.13.0
# to 2.15.0 from their sources (Handle.rk first, Message fields up to tstype, Producer_msgstate
# {self, dr_cb} freed with free(): unchanged; later additions are appended after what is read),
# and 2.16.1, the release the C loop is built and tested with here (test_native_loop.py).
REVIEWED_VERSIONS = frozenset({"2.13.0", "2.13.2", "2.14.0", "2.14.2", "2.15.0", "2.16.1"})

_LAYOUT_SAMPLE = {"topic": "layout", "partition": 7, "offset": 1234567890123, "key": b"k", "value": b"vv",
                  "timestamp": (1, 987654321012)}


class Unavailable(Exception):
    """The C loop cannot be used here; the message says why."""


def extension_path() -> str:
    """The file of confluent-kafka's extension module (loaded; it links librdkafka)."""
    from confluent_kafka import cimpl

    path = getattr(cimpl, "__file__", None)
    if not path:
        raise Unavailable("confluent_kafka.cimpl has no file (a static build?)")
    return str(path)


def installed_version() -> str:
    """confluent-kafka's release (``version()`` is a string in 2.16, a (string, int) tuple before)."""
    found = confluent_kafka.version()
    return str(found[0] if isinstance(found, tuple) else found)


def load(version: str | None = None) -> object:
    """The initialised ``worker._native`` module; raises :class:`Unavailable` with the reason."""
    version = version or installed_version()
    if version not in REVIEWED_VERSIONS:
        raise Unavailable(f"confluent-kafka {version} is not a release whose layout worker/_native.c was "
                          f"reviewed against ({', '.join(sorted(REVIEWED_VERSIONS))})")
    try:
        from worker import _native
    except ImportError as exc:
        raise Unavailable(f"worker._native is not built ({exc}); `make install` compiles it") from None
    try:
        sample = Message(**_LAYOUT_SAMPLE)
    except TypeError as exc:
        raise Unavailable(f"confluent-kafka {version} cannot build a Message ({exc})") from None
    try:
        _native.init(extension_path(), Message, Producer, sample, provenance.HEADER.encode())
    except RuntimeError as exc:
        raise Unavailable(f"{exc} (confluent-kafka {version})") from None
    return _native
