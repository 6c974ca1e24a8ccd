"""The Kafka proxy's frame logic (devtools/kproxy.py): framing, headers, address rewriting, the hang's order."""

from __future__ import annotations

import struct

import pytest

from devtools.kproxy import (
    GROUP_COORDINATOR_KEYS,
    ConnectionLedger,
    FrameBuffer,
    ProtocolError,
    request_header,
    rewrite_response,
)

BROKER, PROXY = ("127.0.0.1", 20065), ("127.0.0.1", 41234)
MAP = {BROKER: PROXY}


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(text: str | None, compact: bool) -> bytes:
    if text is None:
        return uvarint(0) if compact else struct.pack(">h", -1)
    raw = text.encode()
    return (uvarint(len(raw) + 1) if compact else struct.pack(">h", len(raw))) + raw


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def request(api_key: int, correlation_id: int, client_id: str = "rdkafka", version: int = 0) -> bytes:
    return frame(struct.pack(">hhi", api_key, version, correlation_id) + string(client_id, False) + b"payload")


TAGS = uvarint(1) + uvarint(7) + uvarint(3) + b"abc"  # one unknown tagged field: skipped, kept


def metadata(version: int, host: str, port: int) -> bytes:
    flexible = version >= 9
    body = struct.pack(">i", 42) + (TAGS if flexible else b"")
    if version >= 3:
        body += struct.pack(">i", 0)
    brokers = [(1, host, port, "rack-a"), (2, "10.0.0.9", 9092, None)]
    body += uvarint(len(brokers) + 1) if flexible else struct.pack(">i", len(brokers))
    for node, h, p, rack in brokers:
        body += struct.pack(">i", node) + string(h, flexible) + struct.pack(">i", p)
        if version >= 1:
            body += string(rack, flexible)
        if flexible:
            body += TAGS
    return frame(body + b"TOPICS-AND-THE-REST")


def find_coordinator(version: int, host: str, port: int) -> bytes:
    flexible = version >= 3
    body = struct.pack(">i", 7) + (TAGS if flexible else b"")
    if version >= 1:
        body += struct.pack(">i", 0)
    if version <= 3:
        body += struct.pack(">h", 0)
        if version >= 1:
            body += string(None, flexible)
        body += struct.pack(">i", 1) + string(host, flexible) + struct.pack(">i", port)
        return frame(body + (uvarint(0) if flexible else b""))
    body += uvarint(3)
    for key in ("group-a", "group-b"):
        body += string(key, True) + struct.pack(">i", 1) + string(host, True) + struct.pack(">i", port)
        body += struct.pack(">h", 0) + string(None, True) + uvarint(0)
    return frame(body + uvarint(0))


def test_frames_are_cut_at_their_size_whatever_the_reads_deliver():
    stream = request(9, 1) + request(1, 2) + request(8, 3)
    buffer = FrameBuffer()
    got = [f for i in range(0, len(stream), 5) for f in buffer.feed(stream[i:i + 5])]
    assert got == [request(9, 1), request(1, 2), request(8, 3)]


def test_a_stream_that_is_not_kafka_is_refused():
    with pytest.raises(ProtocolError, match="frame size"):
        FrameBuffer().feed(b"\x16\x03\x01\x02\x00")  # a TLS ClientHello


def test_the_request_header_names_api_key_version_correlation_and_client():
    header = request_header(request(9, 77, "w1-commits", version=8))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (9, 8, 77, "w1-commits")


@pytest.mark.parametrize("version", [0, 1, 3, 8, 9, 12])
def test_metadata_names_the_proxy_instead_of_the_broker_and_keeps_the_rest(version):
    out = rewrite_response(3, version, metadata(version, *BROKER), MAP)
    assert out == metadata(version, *PROXY)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5])
def test_find_coordinator_names_the_proxy_in_every_version(version):
    out = rewrite_response(10, version, find_coordinator(version, *BROKER), MAP)
    assert out == find_coordinator(version, *PROXY)


def test_a_longer_host_changes_the_frame_size():
    out = rewrite_response(3, 12, metadata(12, *BROKER), {BROKER: ("proxy.example.internal", 1)})
    assert out == metadata(12, "proxy.example.internal", 1)
    assert struct.unpack_from(">i", out)[0] == len(out) - 4


def test_other_brokers_and_other_responses_are_left_alone():
    unrelated = metadata(12, "10.1.1.1", 9092)
    assert rewrite_response(3, 12, unrelated, MAP) == unrelated
    fetch = frame(struct.pack(">i", 5) + b"records")
    assert rewrite_response(1, 12, fetch, MAP) is fetch


def test_an_unknown_metadata_version_is_an_error_not_a_silent_bypass():
    with pytest.raises(ProtocolError, match="Metadata response v13"):
        rewrite_response(3, 13, metadata(12, *BROKER), MAP)


def test_while_hanging_a_group_request_and_everything_after_it_on_its_connection_wait_in_order():
    ledger = ConnectionLedger()
    frames = [request(1, 1), request(9, 2), request(1, 3), request(10, 4)]
    admitted = [ledger.admit(request_header(f), f, True, GROUP_COORDINATOR_KEYS) for f in frames]
    assert admitted == [True, False, False, False]
    assert ledger.held_data() == 1 and ledger.carries_groups_and_data(GROUP_COORDINATOR_KEYS)
    assert ledger.released() == frames[1:]
    assert ledger.released() == []
    assert ledger.sent == {1: 2, 9: 1, 10: 1}


def test_without_a_hang_nothing_waits_and_answers_find_their_request():
    ledger = ConnectionLedger()
    for f in (request(9, 1, version=8), request(8, 2)):
        assert ledger.admit(request_header(f), f, False, GROUP_COORDINATOR_KEYS)
    assert not ledger.carries_groups_and_data(GROUP_COORDINATOR_KEYS)
    assert ledger.answered(1) == (9, 8)
    assert ledger.answered(1) is None
