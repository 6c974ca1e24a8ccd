"""Load the optional C mirror loop (worker/_native.c) once it has proven itself against the confluent-kafka in use.

The C loop reads confluent-kafka's ``Producer`` and ``Message`` objects directly, hands
confluent-kafka's own delivery-report callback a per-record state laid out like its private
``struct Producer_msgstate``, and calls the librdkafka copy that confluent-kafka links. No list
of reviewed releases decides whether that is safe: :func:`load` runs the self-test
(:mod:`worker.selftest`) in a child process, which proves every field and offset the C code
reads on real records (non-null headers, errors, keys and timestamps) of librdkafka's
in-process mock cluster, and the C loop's delivery reports. Then:

* :func:`worker._native.init` resolves librdkafka's functions through confluent-kafka's own
  extension module (``dlopen`` with ``RTLD_NOLOAD``: the copy already loaded) and checks the
  ``Message`` layout against a real ``Message`` once more, in this process;
* and, per producer, ``is_producer`` validates the ``Handle``'s ``rk`` (a readable address whose
  librdkafka opaque is that ``Handle``) and that librdkafka names it after the worker's client id.

Anything else gives :class:`Unavailable` naming the field and the reason: with
``worker.native_loop: auto`` the worker then runs its Python loop, which has the same
semantics, and says so (start-up log ``mirror_loop``, gauge ``ureplicator_worker_native_loop``,
``ureplicator status``); with ``on`` it refuses to start.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

import confluent_kafka
from confluent_kafka import Message, Producer

from ureplicator.common import provenance
from ureplicator.worker import selftest

# A build of worker/_native.c to use instead of the one next to this file: `make sanitize` points
# it at its AddressSanitizer/UBSan build so the native-loop tests run that one.
MODULE_ENV = selftest.MODULE_ENV

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


# The self-test's verdict per (build of worker/_native.c, confluent-kafka extension, release):
# proven once per process, however many workers or producers it starts.
_verdicts: dict[tuple[str, str, str], selftest.Outcome] = {}


def load() -> ModuleType:
    """The proven, initialised ``worker._native`` module; raises :class:`Unavailable` with the reason."""
    version = installed_version()
    module = _import()
    key = (str(module.__file__), extension_path(), version)
    verdict = _verdicts.get(key)
    if verdict is None:
        verdict = _verdicts[key] = selftest.run(key[0])
    if not verdict.ok:
        raise Unavailable(f"the C loop's self-test failed on {verdict.field or 'a check'} "
                          f"(confluent-kafka {version}): {verdict.reason}")
    return initialised()


def initialised() -> ModuleType:
    """``worker._native`` with :func:`init` run in this process (the self-test's first step); :class:`Unavailable`."""
    version = installed_version()
    module = _import()
    try:
        sample = Message(**_LAYOUT_SAMPLE)
    except TypeError as exc:
        raise Unavailable(f"confluent-kafka {version} cannot build a Message ({exc})") from None
    try:
        module.init(extension_path(), Message, Producer, sample, provenance.HEADER.encode())
    except RuntimeError as exc:
        raise Unavailable(f"{exc} (confluent-kafka {version})") from None
    return module


def _import() -> ModuleType:
    """``worker._native``: the in-place build, or the one ``$UREPLICATOR_NATIVE_MODULE`` names; :class:`Unavailable`."""
    try:
        return _import_module()
    except ImportError as exc:
        raise Unavailable(f"worker._native is not built ({exc}); `make install` compiles it") from None


def _import_module() -> ModuleType:
    """The import itself (ImportError when there is no build)."""
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
