"""The verifier's Spark SQL expressions: the record hash, the ``urep`` header's fields, per-partition lookups.

Everything per record is built-in SQL that whole-stage code generation
compiles: no string formatting, no decimal arithmetic and no lambda in the
common case. Lambdas (``filter``) run only in CASE branches for rare records:
a ``urep`` header that is not the last one, or a header with a null value.

The expressions name the columns of Spark's Kafka source (``key``, ``value``,
``timestamp``, ``headers``, ``partition``) and the helper columns that
``kafka_source.with_header_columns`` adds: ``_hdrs`` (headers, never null),
``_upos`` (1-based position of the first ``urep`` header, 0 when none),
``_kept`` (the content headers) and ``_urep`` (the ``urep`` value read).
The byte positions below are common/provenance.py's layout (its module
docstring), 1-based as SQL's ``substr`` counts; tests/unit/test_verifier_sql.py
checks them against values ``provenance.encode`` writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ureplicator.common import provenance

HEADER = provenance.HEADER
# 1-based positions and lengths in a urep value (both versions agree up to the origin alias).
VERSION_AT = 1
OFFSET_AT, OFFSET_BYTES = 2, 8  # i64, big-endian
PARTITION_AT, PARTITION_BYTES = 10, 4  # i32, big-endian
ORIGIN_LENGTH_AT = 14  # u8 n, then n bytes of the origin alias
ORIGIN_AT = 15
FIXED_BYTES = 14  # a version 1 value is FIXED_BYTES + n bytes; version 2 adds u8 m and m bytes of the hop source

_HEADER_TYPE = "ARRAY<STRUCT<key: STRING, value: BINARY>>"
# The record's headers, never null.
HEADERS = f"coalesce(headers, CAST(array() AS {_HEADER_TYPE}))"
# 1-based position of the first urep header; 0 when there is none. The replicator appends exactly
# one, last: then _upos = size(_hdrs), and the content headers are a slice, not a filter.
UREP_POSITION = f"CAST(array_position(_hdrs.key, '{HEADER}') AS INT)"
KEPT_HEADERS = (
    "CASE WHEN _upos = 0 THEN _hdrs "
    "WHEN _upos = size(_hdrs) THEN slice(_hdrs, 1, size(_hdrs) - 1) "
    f"ELSE filter(_hdrs, h -> h.key <> '{HEADER}') END"
)
# A random value no header carries: arrays_overlap() is NULL exactly when a header value is null.
_SENTINEL = "X'9B1C3F6E22D54A8FA07E5C31D8B46F20'"
# Positions of headers whose value is null: Spark's hash skips nulls, so they are hashed explicitly.
_NULL_HEADERS = (
    f"CASE WHEN arrays_overlap(_kept.value, array({_SENTINEL})) IS NOT FALSE "
    "THEN filter(sequence(1, size(_kept)), i -> element_at(_kept, i).value IS NULL) "
    "ELSE CAST(array() AS ARRAY<INT>) END"
)
# docs/verification.md "The record hash": Spark's xxhash64 (seed 42) chained over typed fields.
CONTENT_HASH = (
    "xxhash64(key IS NULL, key, value IS NULL, value, coalesce(unix_millis(timestamp), -1L), "
    f"size(_kept), _kept, {_NULL_HEADERS})"
)
# A destination record's urep value: its only urep header's (none, or several, read as no urep).
UREP_VALUE = (
    "CASE WHEN _upos = 0 THEN NULL "
    "WHEN _upos = size(_hdrs) THEN element_at(_hdrs, _upos).value "
    f"WHEN size(filter(_hdrs, h -> h.key = '{HEADER}')) = 1 THEN element_at(_hdrs, _upos).value END"
)
# A source record's urep value: the last urep header's, as the worker reads a record's origin.
LAST_UREP = (
    f"CASE WHEN _upos = 0 THEN NULL ELSE try_element_at(filter(_hdrs, h -> h.key = '{HEADER}'), -1).value END"
)


def _byte(at: int | str) -> str:
    return f"substr(_urep, {at}, 1)"


def _number(at: int, size: int, signed: bool) -> str:
    return f"conv(hex(substr(_urep, {at}, {size})), 16, {-10 if signed else 10})"


# Byte comparisons against literals instead of number parsing (conv costs ~230 ns a record): the alias
# length byte must equal octet_length - FIXED_BYTES, looked up in an array of the 256 one-byte values.
# Version 2 values parse their two length bytes (checked only when the version byte says 2).
_BYTES = "array(" + ", ".join(f"X'{b:02X}'" for b in range(256)) + ")"
ORIGIN_LENGTH = f"CAST({_number(ORIGIN_LENGTH_AT, 1, signed=False)} AS INT)"
_HOP_LENGTH_AT = f"{ORIGIN_AT} + {ORIGIN_LENGTH}"  # version 2: u8 m right after the origin alias
UREP_VALID = (
    f"coalesce(CASE {_byte(VERSION_AT)} "
    f"WHEN X'{provenance.VERSION_1:02X}' THEN octet_length(_urep) BETWEEN {FIXED_BYTES} AND {FIXED_BYTES + 255} "
    f"AND {_byte(ORIGIN_LENGTH_AT)} = element_at({_BYTES}, octet_length(_urep) - {FIXED_BYTES - 1}) "
    f"WHEN X'{provenance.VERSION:02X}' THEN octet_length(_urep) >= {FIXED_BYTES + 1} + {ORIGIN_LENGTH} "
    f"AND octet_length(_urep) = {FIXED_BYTES + 1} + {ORIGIN_LENGTH} + "
    f"CAST(conv(hex({_byte(_HOP_LENGTH_AT)}), 16, 10) AS INT) "
    "ELSE false END, false)"
)
# The one number parsed per record, and the partition (parsed only when its bytes are not the record's own).
UREP_OFFSET = f"CAST({_number(OFFSET_AT, OFFSET_BYTES, signed=True)} AS BIGINT)"
UREP_PARTITION = f"CAST({_number(PARTITION_AT, PARTITION_BYTES, signed=False)} AS BIGINT)"


# The urep value's partition bytes, compared with partition_bytes() of the record's own partition.
PARTITION_FIELD = f"substr(_urep, {PARTITION_AT}, {PARTITION_BYTES})"


def partition_bytes(partition: int) -> str:
    """The literal a urep value's partition bytes equal for ``partition``."""
    return f"X'{partition:08X}'"


def origin_is(alias: str) -> str:
    """Whether a valid urep names ``alias`` as its origin (both versions: length byte, then the alias)."""
    raw = alias.encode()
    return (f"({_byte(ORIGIN_LENGTH_AT)} = X'{len(raw):02X}' "
            f"AND substr(_urep, {ORIGIN_AT}, {len(raw)}) = X'{raw.hex()}')")


def other_hop(source: str) -> str:
    """Whether a valid urep is a version 2 value naming another hop source than ``source``."""
    raw = source.encode()
    return (f"({_byte(VERSION_AT)} = X'{provenance.VERSION:02X}' AND NOT ({_byte(_HOP_LENGTH_AT)} = "
            f"X'{len(raw):02X}' AND substr(_urep, {_HOP_LENGTH_AT} + 1, {len(raw)}) = X'{raw.hex()}'))")


def skipped(forward: str, source: str, destination: str) -> str:
    """Whether a source record (``_urep`` = its last urep value) is one the route does not copy: under
    ``origin``, a readable origin other than ``source``; under ``transit``, a readable origin ``destination``."""
    if forward == "origin":
        return f"coalesce({UREP_VALID} AND NOT {origin_is(source)}, false)" if source else "false"
    return f"coalesce({UREP_VALID} AND {origin_is(destination)}, false)" if destination else "false"


def per_partition(values: Sequence[int | None]) -> str:
    """An array literal indexed by partition: ``try_element_at(<this>, p + 1)`` is O(1) per record."""
    if not values:
        return "CAST(array() AS ARRAY<BIGINT>)"
    return "array(" + ", ".join("CAST(NULL AS BIGINT)" if v is None else f"{int(v)}L" for v in values) + ")"


def lookup(values: Mapping[int, int], column: str) -> str:
    """``values[column]`` per record; NULL for a partition ``values`` does not have."""
    dense = [values.get(p) for p in range(max(values) + 1)] if values else []
    return f"try_element_at({per_partition(dense)}, {column} + 1)"


def int_map(values: Mapping[int, int]) -> str:
    """A map literal for the few per-partition values pass 2 prints in notes."""
    if not values:
        return "map()"
    pairs = ", ".join(f"{int(k)}, {int(v)}L" for k, v in sorted(values.items()))
    return f"map({pairs})"
