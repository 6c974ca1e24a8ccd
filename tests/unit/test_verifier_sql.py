"""The verifier's SQL builders read the urep header where common.provenance writes its fields."""

from __future__ import annotations

import re

import pytest

from ureplicator.common import provenance
from ureplicator.verifier import sql

_COMPARISON = re.compile(r"substr\(_urep, ([0-9 +]+), (\d+)\) = X'([0-9A-Fa-f]*)'")


def _comparisons(expression: str, value: bytes) -> list[bool]:
    """Each ``substr(_urep, AT, LEN) = X'..'`` of ``expression`` evaluated on ``value``, in order. The one
    computed position SQL uses (after the origin alias) is replaced by its number first."""
    expression = expression.replace(sql.ORIGIN_LENGTH, str(value[sql.ORIGIN_LENGTH_AT - 1]))
    found = []
    for at, length, literal in _COMPARISON.findall(expression):
        start = sum(int(n) for n in at.split("+")) - 1
        found.append(value[start:start + int(length)] == bytes.fromhex(literal))
    assert found, expression
    return found


VALUES = [
    provenance.encode(0, 0, "src"),
    provenance.encode(2**40 + 7, 3, "c1", "c2"),
    provenance.encode(-1, 2**31 - 1, "a" * 255, "hop"),
    provenance.encoder("dc-east", "dc-west")(123_456_789, 17),
]


@pytest.mark.parametrize("value", VALUES)
def test_the_field_positions_are_the_ones_provenance_writes(value):
    decoded = provenance.decode(value)
    origin = decoded.origin.encode()
    offset = value[sql.OFFSET_AT - 1:sql.OFFSET_AT - 1 + sql.OFFSET_BYTES]
    assert int.from_bytes(offset, "big", signed=True) == decoded.source_offset
    partition = value[sql.PARTITION_AT - 1:sql.PARTITION_AT - 1 + sql.PARTITION_BYTES]
    assert partition.hex().upper() == sql.partition_bytes(decoded.source_partition)[2:-1]
    assert value[sql.ORIGIN_LENGTH_AT - 1] == len(origin)
    assert value[sql.ORIGIN_AT - 1:sql.ORIGIN_AT - 1 + len(origin)] == origin
    hop = b"" if decoded.source is None else bytes([len(decoded.source.encode())]) + decoded.source.encode()
    assert len(value) == sql.FIXED_BYTES + len(origin) + len(hop)  # what UREP_VALID's length checks assume
    assert value[sql.VERSION_AT - 1] == (provenance.VERSION if hop else provenance.VERSION_1)


@pytest.mark.parametrize("value", VALUES)
def test_origin_is_holds_for_the_written_origin_only(value):
    origin = provenance.decode(value).origin
    assert all(_comparisons(sql.origin_is(origin), value))
    assert not all(_comparisons(sql.origin_is(origin[:-1] + ("b" if origin[-1] != "b" else "c")), value))
    if len(origin) < 255:
        assert not all(_comparisons(sql.origin_is(origin + "x"), value))
    assert not all(_comparisons(sql.origin_is(origin[:-1] or "z"), value))


def test_another_hop_source_is_seen_only_in_a_version_2_value():
    def other(value: bytes, source: str) -> bool:
        version_2, same_length, same_alias = _comparisons(sql.other_hop(source), value)
        return version_2 and not (same_length and same_alias)

    copy = provenance.encode(5, 1, "c1", "c2")
    assert not other(copy, "c2")
    assert other(copy, "c3") and other(copy, "c22")
    assert not other(provenance.encode(5, 1, "c1"), "c3")  # version 1 names no hop source


def test_skipped_follows_the_forwarding_policy():
    assert sql.skipped("transit", "src", "dst") == f"coalesce({sql.UREP_VALID} AND {sql.origin_is('dst')}, false)"
    assert sql.skipped("origin", "src", "dst") == (
        f"coalesce({sql.UREP_VALID} AND NOT {sql.origin_is('src')}, false)")
    assert sql.skipped("transit", "src", "") == "false" and sql.skipped("origin", "", "dst") == "false"


def test_per_partition_lookups_are_dense_arrays_with_nulls_for_missing_partitions():
    assert sql.lookup({0: 5, 2: 7}, "dp") == "try_element_at(array(5L, CAST(NULL AS BIGINT), 7L), dp + 1)"
    assert sql.lookup({}, "p") == "try_element_at(CAST(array() AS ARRAY<BIGINT>), p + 1)"
    assert sql.int_map({3: 1, 1: 2}) == "map(1, 2L, 3, 1L)" and sql.int_map({}) == "map()"


def test_the_offset_and_partition_parsers_read_the_written_bytes():
    # conv(hex(substr(_urep, AT, LEN)), 16, ±10): the slice they name holds the number provenance packed
    at, length = (int(n) for n in re.search(r"substr\(_urep, (\d+), (\d+)\)", sql.UREP_OFFSET).groups())
    assert (at, length) == (sql.OFFSET_AT, sql.OFFSET_BYTES) and "16, -10" in sql.UREP_OFFSET  # signed
    at, length = (int(n) for n in re.search(r"substr\(_urep, (\d+), (\d+)\)", sql.UREP_PARTITION).groups())
    assert (at, length) == (sql.PARTITION_AT, sql.PARTITION_BYTES)
    value = provenance.encode(-2, 9, "src")
    assert value[sql.OFFSET_AT - 1:sql.OFFSET_AT + 7].hex() == (2**64 - 2).to_bytes(8, "big").hex()
