"""Encode and decode the ``urep`` provenance header carried by every mirrored record.

Value layouts (big-endian; every alias UTF-8, at most 255 bytes)::

    version 2 (written since routes):
    u8 version=2 | i64 source offset | i32 source partition | u8 n | n bytes origin alias | u8 m | m bytes source alias

    version 1 (still read):
    u8 version=1 | i64 source offset | i32 source partition | u8 n | n bytes origin alias

Byte by byte, version 2: byte 0 is ``0x02``; bytes 1-8 the source offset (signed 64-bit);
bytes 9-12 the source partition (signed 32-bit); byte 13 is ``n``; bytes 14 to 13+n the
origin alias; byte 14+n is ``m``; bytes 15+n to 14+n+m the source alias. The value is
exactly ``15 + n + m`` bytes long (a version 1 value exactly ``14 + n``). Version 2 is
version 1 with the source alias appended, so the first 14+n bytes read the same in both.

* source offset and partition name this hop's source record (the verifier joins on them);
* the **origin** alias names the cluster where the record was first produced and survives
  further hops (loop prevention and the forwarding policies read it);
* the **source** alias (version 2) names the cluster this copy was read from, so with the
  cluster it sits on it names the route that wrote it. A version 1 value has none
  (:attr:`Provenance.source` is None).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

HEADER = "urep"
VERSION = 2  # what the worker writes
VERSION_1 = 1  # still read: copies written before version 2
_FIXED = struct.Struct(">BqiB")  # version, source offset, source partition, origin length


class ProvenanceError(ValueError):
    """A ``urep`` header this code cannot read (unknown version or truncated)."""


@dataclass(frozen=True, slots=True)
class Provenance:
    source_offset: int
    source_partition: int
    origin: str
    source: str | None = None  # the cluster this copy was read from; None in a version 1 value


def _alias(name: str, what: str) -> bytes:
    raw = name.encode()
    if len(raw) > 255:
        raise ProvenanceError(f"{what} alias longer than 255 bytes")
    return raw


def encode(source_offset: int, source_partition: int, origin: str, source: str | None = None) -> bytes:
    """The header value; with ``source`` version 2, without it version 1 (what older copies carry)."""
    alias = _alias(origin, "origin")
    head = _FIXED.pack(VERSION if source is not None else VERSION_1, source_offset, source_partition, len(alias))
    if source is None:
        return head + alias
    hop = _alias(source, "source")
    return head + alias + bytes((len(hop),)) + hop


def encoder(origin: str, source: str) -> Callable[[int, int], bytes]:
    """Version 2 :func:`encode` with both aliases fixed: one struct pack per record."""
    alias = _alias(origin, "origin")
    hop = _alias(source, "source")
    pack = struct.Struct(f">BqiB{len(alias)}sB{len(hop)}s").pack
    n, m = len(alias), len(hop)

    def encode_for(source_offset: int, source_partition: int) -> bytes:
        return pack(VERSION, source_offset, source_partition, n, alias, m, hop)

    return encode_for


def decode(value: bytes | None) -> Provenance:
    if not value:
        raise ProvenanceError("empty provenance header")
    version = value[0]
    if version not in (VERSION, VERSION_1):
        raise ProvenanceError(f"unknown provenance header version {version}")
    if len(value) < _FIXED.size:
        raise ProvenanceError(f"truncated provenance header ({len(value)} bytes)")
    _, offset, partition, n = _FIXED.unpack_from(value)
    end = _FIXED.size + n
    source: str | None = None
    if version == VERSION_1:
        if len(value) != end:
            raise ProvenanceError(f"provenance header length {len(value)} does not match alias length {n}")
    else:
        if len(value) <= end or len(value) != end + 1 + value[end]:
            raise ProvenanceError(f"provenance header length {len(value)} does not match its alias lengths")
        source = _text(value[end + 1:], "source")
    return Provenance(offset, partition, _text(value[_FIXED.size:end], "origin"), source)


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise ProvenanceError(f"{what} alias is not UTF-8") from None


def origin_of(value: bytes) -> str | None:
    """The origin alias of a header value, or None when it cannot be read."""
    try:
        return decode(value).origin
    except ProvenanceError:
        return None
