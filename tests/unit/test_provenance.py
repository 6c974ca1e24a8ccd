"""The urep header codec: version 2 round trip and layout, version 1 still read, unknown version, truncation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ureplicator.common import provenance


@given(
    offset=st.integers(min_value=0, max_value=2**63 - 1),
    partition=st.integers(min_value=0, max_value=2**31 - 1),
    origin=st.text(min_size=1, max_size=60),
    source=st.text(min_size=1, max_size=60),
)
def test_version_2_round_trip_names_the_origin_and_this_hops_source(offset, partition, origin, source):
    value = provenance.encode(offset, partition, origin, source)
    assert value[0] == 2
    assert provenance.decode(value) == provenance.Provenance(offset, partition, origin, source)


@given(
    offset=st.integers(min_value=0, max_value=2**63 - 1),
    partition=st.integers(min_value=0, max_value=2**31 - 1),
    origin=st.text(min_size=1, max_size=60),
)
def test_version_1_values_stay_readable_without_a_source(offset, partition, origin):
    # Copies written before version 2 carry no source alias
    value = provenance.encode(offset, partition, origin)
    assert value[0] == 1
    assert provenance.decode(value) == provenance.Provenance(offset, partition, origin, None)
    assert provenance.origin_of(value) == origin


def test_unknown_version_is_refused():
    value = bytearray(provenance.encode(5, 1, "src"))
    value[0] = 9
    with pytest.raises(provenance.ProvenanceError, match="unknown provenance header version 9"):
        provenance.decode(bytes(value))
    assert provenance.origin_of(bytes(value)) is None


@pytest.mark.parametrize("cut", [0, 1, 5, 13, 15])
def test_truncated_value_is_refused(cut):
    value = provenance.encode(5, 1, "src")
    with pytest.raises(provenance.ProvenanceError):
        provenance.decode(value[:cut])


@pytest.mark.parametrize("cut", [0, 1, 13, 15, 16, 17])
def test_truncated_version_2_value_is_refused(cut):
    value = provenance.encode(5, 1, "src", "mid")  # 15 + 3 + 3 bytes
    with pytest.raises(provenance.ProvenanceError):
        provenance.decode(value[:cut])


@pytest.mark.parametrize("source", [None, "mid"])
def test_extra_bytes_are_refused(source):
    with pytest.raises(provenance.ProvenanceError, match="does not match"):
        provenance.decode(provenance.encode(5, 1, "src", source) + b"x")


def test_layout_is_stable():
    # The verifier (Spark SQL) parses these bytes; changing them needs a new version.
    assert provenance.encode(258, 3, "ab").hex() == "01" + "0000000000000102" + "00000003" + "02" + "6162"
    assert provenance.encode(258, 3, "ab", "xyz").hex() == (
        "02" + "0000000000000102" + "00000003" + "02" + "6162" + "03" + "78797a")


@given(offset=st.integers(min_value=0, max_value=2**63 - 1), partition=st.integers(min_value=0, max_value=2**31 - 1))
def test_fixed_alias_encoder_matches_encode(offset, partition):
    assert provenance.encoder("src", "mid")(offset, partition) == provenance.encode(offset, partition, "src", "mid")
