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

import importlib.util
import os
import sys
from types import ModuleType

import confluent_kafka
from confluent_kafka import Message, Producer

from ureplicator.common import provenance

# confluent-kafka releases whose struct layouts worker/_native.c was reviewed against: 2.13.0
# to 2.15.0 from their sources (Handle.rk first, Message fields up to tstype, Producer_msgstate
# {self, dr_cb} freed with free(): unchanged; later additions are appended after what is read),
# and 2.16.1, the release the C loop is built and tested with here (test_native_loop.py).
REVIEWED_VERSIONS = frozenset({"2.13.0", "2.13.2", "2.14.0", "2.14.2", "2.15.0", "2.16.1"})

# A build of worker/_native.c to use instead of the one next to this file: `make sanitize` points
# it at its AddressSanitizer/UBSan build so the native-loop tests run that one.
MODULE_ENV = "UREPLICATOR_NATIVE_MODULE"

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
        _native = _import()
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


def _import() -> ModuleType:
    """``worker._native``: the in-place build, or the file named by ``$UREPLICATOR_NATIVE_MODULE``."""
    path = os.environ.get(MODULE_ENV)
    if not path:
        from ureplicator.worker import _native

        return _native
    loaded = sys.modules.get("ureplicator.worker._native")
    if loaded is not None and getattr(loaded, "__file__", None) == path:
        return loaded
    spec = importlib.util.spec_from_file_location("ureplicator.worker._native", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{MODULE_ENV}={path} is not an extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["ureplicator.worker._native"] = module
    return module
