"""XXH64 in pure Python: an implementation independent of Spark's, to check the hashes reports carry."""

from __future__ import annotations

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def _lane(data: bytes, i: int, size: int = 8) -> int:
    return int.from_bytes(data[i:i + size], "little")


def xxh64(data: bytes, seed: int = 0) -> int:
    """The unsigned 64-bit XXH64 of ``data`` (reference algorithm, github.com/Cyan4973/xxHash)."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed & _MASK, (seed - _P1) & _MASK]
        while i + 32 <= n:
            v = [_round(v[k], _lane(data, i + 8 * k)) for k in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _MASK
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, _lane(data, i)), 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ ((_lane(data, i, 4) * _P1) & _MASK), 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * _P5) & _MASK), 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    return h ^ (h >> 32)


def _chain(seed: int, parts: list[bytes | None]) -> int:
    """Spark's xxhash64 over several values: each hashed with the previous result as seed, nulls skipped."""
    h = seed
    for part in parts:
        if part is not None:
            h = xxh64(part, h)
    return h


def _i32(n: int) -> bytes:
    return n.to_bytes(4, "little", signed=True)


def content_hash(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | tuple, timestamp: int
) -> int:
    """Record hash version 2 (docs/verification.md): Spark's seed chaining over typed fields, seed 42.

    A bool or i32 hashes 4 little-endian bytes, an i64 8; bytes and strings hash as they are; a null is
    skipped; an array or struct hashes its elements in order.
    """
    kept = [(k, v) for k, v in headers if k != "urep"]
    parts: list[bytes | None] = [_i32(key is None), key, _i32(value is None), value,
                                 timestamp.to_bytes(8, "little", signed=True), _i32(len(kept))]
    for k, v in kept:
        parts += [k.encode(), v]
    parts += [_i32(i) for i, (_, v) in enumerate(kept, 1) if v is None]
    return _chain(42, parts)
