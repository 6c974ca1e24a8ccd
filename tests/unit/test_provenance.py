"""The urep header codec: round trip, unknown version, truncation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common import provenance


@given(
    offset=st.integers(min_value=0, max_value=2**63 - 1),
    partition=st.integers(min_value=0, max_value=2**31 - 1),
    origin=st.text(min_size=1, max_size=60),
)
def test_round_trip(offset, partition, origin):
    decoded = provenance.decode(provenance.encode(offset, partition, origin))
    assert decoded == provenance.Provenance(offset, partition, origin)


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


def test_extra_bytes_are_refused():
    with pytest.raises(provenance.ProvenanceError, match="does not match"):
        provenance.decode(provenance.encode(5, 1, "src") + b"x")


def test_layout_is_stable():
    # The verifier (Spark SQL) parses these bytes; changing them needs a new version.
    assert provenance.encode(258, 3, "ab").hex() == "01" + "0000000000000102" + "00000003" + "02" + "6162"


@given(offset=st.integers(min_value=0, max_value=2**63 - 1), partition=st.integers(min_value=0, max_value=2**31 - 1))
def test_fixed_origin_encoder_matches_encode(offset, partition):
    assert provenance.encoder("src")(offset, partition) == provenance.encode(offset, partition, "src")
