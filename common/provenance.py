"""Encode and decode the ``urep`` provenance header carried by every mirrored record.

Value layout, version 1 (big-endian)::

    u8 version=1 | i64 source offset | i32 source partition | u8 n | n bytes origin alias (UTF-8)

The source offset and partition name this hop's source record (the verifier
joins on them); the origin alias names the cluster where the record was first
produced and survives further hops, so an active-active pair can skip records
that came from the cluster it writes to (loop prevention).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

HEADER = "urep"
VERSION = 1
_FIXED = struct.Struct(">BqiB")


class ProvenanceError(ValueError):
    """A ``urep`` header this code cannot read (unknown version or truncated)."""


@dataclass(frozen=True, slots=True)
class Provenance:
    source_offset: int
    source_partition: int
    origin: str


def encode(source_offset: int, source_partition: int, origin: str) -> bytes:
    alias = origin.encode()
    if len(alias) > 255:
        raise ProvenanceError("origin alias longer than 255 bytes")
    return _FIXED.pack(VERSION, source_offset, source_partition, len(alias)) + alias


def encoder(origin: str) -> Callable[[int, int], bytes]:
    """``encode`` with the origin fixed: one struct pack per record (the alias is part of the format)."""
    alias = origin.encode()
    if len(alias) > 255:
        raise ProvenanceError("origin alias longer than 255 bytes")
    size = len(alias)
    pack = struct.Struct(f">BqiB{size}s").pack

    def encode_for(source_offset: int, source_partition: int) -> bytes:
        return pack(VERSION, source_offset, source_partition, size, alias)

    return encode_for


def decode(value: bytes | None) -> Provenance:
    if not value:
        raise ProvenanceError("empty provenance header")
    if value[0] != VERSION:
        raise ProvenanceError(f"unknown provenance header version {value[0]}")
    if len(value) < _FIXED.size:
        raise ProvenanceError(f"truncated provenance header ({len(value)} bytes)")
    _, offset, partition, n = _FIXED.unpack_from(value)
    if len(value) != _FIXED.size + n:
        raise ProvenanceError(f"provenance header length {len(value)} does not match alias length {n}")
    try:
        origin = value[_FIXED.size:].decode()
    except UnicodeDecodeError:
        raise ProvenanceError("origin alias is not UTF-8") from None
    return Provenance(offset, partition, origin)


def origin_of(value: bytes) -> str | None:
    """The origin alias of a header value, or None when it cannot be read."""
    try:
        return decode(value).origin
    except ProvenanceError:
        return None
