"""A Kafka-protocol-aware TCP proxy in front of one broker that can make its group coordinator hang.

Every cluster of the local stack is one broker, so stopping the broker would stop
the data path too. A real cluster's group coordinator is one broker among several;
when it hangs, fetches and produces to the other brokers go on. The proxy recreates
that on one broker: clients bootstrap through it, and while :meth:`KafkaProxy.hang`
is on it withholds every request that only a group coordinator serves
(:data:`GROUP_COORDINATOR_KEYS`: OffsetCommit, OffsetFetch, the group membership
calls, TxnOffsetCommit ...) until :meth:`KafkaProxy.release`. Everything else
(Produce, Fetch, ListOffsets, Metadata, FindCoordinator, ...) flows untouched.

* **All client traffic goes through it.** The proxy rewrites the broker's address
  to its own in Metadata and FindCoordinator responses, so a client that
  bootstrapped through it never learns the broker's real port. No broker setting
  changes, so it can stand in front of a running shared stack. PLAINTEXT only: a
  TLS listener's frames cannot be read.
* **A hang is per connection, in order.** A broker answers a connection's requests
  in order; one that does not answer a request answers nothing after it either. So
  once a connection has a request withheld, every later request on it waits too. A
  connection that carries data requests as well as group requests (librdkafka
  normally talks to the coordinator over a connection of its own) would then hold
  data; :meth:`KafkaProxy.stats` counts those (``held_data_requests``,
  ``mixed_connections``) so a run can show the hang hit only the coordinator.

Example::

    with KafkaProxy("127.0.0.1:9092") as proxy:   # clients use proxy.address
        proxy.hang()
        ...                                        # commits and committed() reads wait
        proxy.release()
        print(proxy.stats())
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

HOST = "127.0.0.1"

# Requests that only the group coordinator answers (KIP-848's too). FindCoordinator is not
# among them: any broker answers it, and a client must be able to ask while the coordinator hangs.
GROUP_COORDINATOR_KEYS: frozenset[int] = frozenset({
    8,   # OffsetCommit
    9,   # OffsetFetch
    11,  # JoinGroup
    12,  # Heartbeat
    13,  # LeaveGroup
    14,  # SyncGroup
    15,  # DescribeGroups
    28,  # TxnOffsetCommit
    42,  # DeleteGroups
    47,  # OffsetDelete
    68,  # ConsumerGroupHeartbeat
    69,  # ConsumerGroupDescribe
})
DATA_KEYS: frozenset[int] = frozenset({0, 1, 2})  # Produce, Fetch, ListOffsets
METADATA, FIND_COORDINATOR = 3, 10
API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
             10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
             15: "DescribeGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 22: "InitProducerId",
             24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 28: "TxnOffsetCommit",
             32: "DescribeConfigs", 36: "SaslAuthenticate", 42: "DeleteGroups", 47: "OffsetDelete",
             60: "DescribeCluster", 68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe"}
# Highest response versions whose broker addresses this module can rewrite (Kafka 3.9 sends no newer).
_MAX_METADATA, _MAX_FIND_COORDINATOR = 12, 5

Address = tuple[str, int]


class ProtocolError(ValueError):
    """A frame that is not what the Kafka protocol says it should be."""


# ----------------------------------------------------------------------------- pure frame logic


class FrameBuffer:
    """Cuts a byte stream into Kafka frames (int32 size, then that many bytes), size prefix included."""

    MAX_FRAME = 100 * 1024 * 1024  # the broker's socket.request.max.bytes is 100 MiB

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._data += data
        frames = []
        while len(self._data) >= 4:
            (size,) = struct.unpack_from(">i", self._data)
            if not 0 <= size <= self.MAX_FRAME:
                raise ProtocolError(f"frame size {size} out of range: not a Kafka PLAINTEXT stream?")
            if len(self._data) < 4 + size:
                break
            frames.append(bytes(self._data[:4 + size]))
            del self._data[:4 + size]
        return frames


@dataclass(frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def request_header(frame: bytes) -> RequestHeader:
    """The request header at the start of a frame (the fields every header version shares)."""
    if len(frame) < 14:
        raise ProtocolError(f"a request frame of {len(frame)} bytes is shorter than its header")
    api_key, api_version, correlation_id, length = struct.unpack_from(">hhih", frame, 4)
    client_id = None if length < 0 else frame[14:14 + length].decode("utf-8", "replace")
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def response_correlation_id(frame: bytes) -> int:
    if len(frame) < 8:
        raise ProtocolError(f"a response frame of {len(frame)} bytes has no correlation id")
    return int(struct.unpack_from(">i", frame, 4)[0])


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.data):
                raise ProtocolError("a varint runs past the end of the frame")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self, compact: bool) -> str | None:
        length = self.uvarint() - 1 if compact else self.take(">h")
        if length < 0:
            return None
        text = self.data[self.pos:self.pos + length].decode("utf-8")
        self.pos += length
        return text

    def tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            size = self.uvarint()  # not `self.pos += self.uvarint()`: that reads pos before the varint moves it
            self.pos += size


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        if value < 0x80:
            out.append(value)
            return bytes(out)
        out.append((value & 0x7F) | 0x80)
        value >>= 7


def _string(text: str, compact: bool) -> bytes:
    raw = text.encode("utf-8")
    return (_uvarint(len(raw) + 1) if compact else struct.pack(">h", len(raw))) + raw


def rewrite_response(api_key: int, api_version: int, frame: bytes, addresses: dict[Address, Address]) -> bytes:
    """The frame with every broker address in ``addresses`` replaced by its value (Metadata, FindCoordinator).

    Any other response, or one naming no address of ``addresses``, comes back as it was.
    Raises ProtocolError for a Metadata or FindCoordinator version it does not know,
    since passing it on would let clients bypass the proxy unnoticed.
    """
    if api_key == METADATA:
        if api_version > _MAX_METADATA:
            raise ProtocolError(f"Metadata response v{api_version}: only v0-v{_MAX_METADATA} can be rewritten")
        return _rewrite_metadata(api_version, frame, addresses)
    if api_key == FIND_COORDINATOR:
        if api_version > _MAX_FIND_COORDINATOR:
            raise ProtocolError(
                f"FindCoordinator response v{api_version}: only v0-v{_MAX_FIND_COORDINATOR} can be rewritten")
        return _rewrite_find_coordinator(api_version, frame, addresses)
    return frame


def _body_start(frame: bytes, flexible: bool) -> _Reader:
    reader = _Reader(frame, 8)  # size, correlation id
    if flexible:
        reader.tagged_fields()  # response header v1
    return reader


def _address(reader: _Reader, compact: bool, addresses: dict[Address, Address]) -> bytes:
    """Reads host (string) and port (int32) and returns them re-encoded, mapped when listed."""
    host = reader.string(compact)
    port = reader.take(">i")
    if host is None:
        raise ProtocolError("a broker address with a null host")
    host, port = addresses.get((host, port), (host, port))
    return _string(host, compact) + struct.pack(">i", port)


def _reframe(body: bytes) -> bytes:
    return struct.pack(">i", len(body) - 4) + body[4:]


def _rewrite_metadata(version: int, frame: bytes, addresses: dict[Address, Address]) -> bytes:
    flexible = version >= 9
    reader = _body_start(frame, flexible)
    if version >= 3:
        reader.pos += 4  # throttle_time_ms
    count = reader.uvarint() - 1 if flexible else reader.take(">i")
    out = bytearray(frame[:reader.pos])
    for _ in range(max(count, 0)):
        node_start = reader.pos
        reader.pos += 4  # node_id
        out += frame[node_start:reader.pos]
        out += _address(reader, flexible, addresses)
        rest = reader.pos
        if version >= 1:
            reader.string(flexible)  # rack
        if flexible:
            reader.tagged_fields()
        out += frame[rest:reader.pos]
    out += frame[reader.pos:]
    return _reframe(bytes(out))


def _rewrite_find_coordinator(version: int, frame: bytes, addresses: dict[Address, Address]) -> bytes:
    flexible = version >= 3
    reader = _body_start(frame, flexible)
    if version >= 1:
        reader.pos += 4  # throttle_time_ms
    if version <= 3:
        reader.pos += 2  # error_code
        if version >= 1:
            reader.string(flexible)  # error_message
        reader.pos += 4  # node_id
        head = reader.pos
        address = _address(reader, flexible, addresses)
        return _reframe(frame[:head] + address + frame[reader.pos:])
    out = bytearray(frame[:reader.pos])
    count = reader.uvarint() - 1
    out += _uvarint(count + 1)
    for _ in range(max(count, 0)):
        start = reader.pos
        reader.string(True)  # key
        reader.pos += 4  # node_id
        out += frame[start:reader.pos]
        out += _address(reader, True, addresses)
        rest = reader.pos
        reader.pos += 2  # error_code
        reader.string(True)  # error_message
        reader.tagged_fields()
        out += frame[rest:reader.pos]
    out += frame[reader.pos:]
    return _reframe(bytes(out))


# ----------------------------------------------------------------------------- per-connection bookkeeping


@dataclass
class ConnectionLedger:
    """What one client connection carried and what the proxy withheld on it (pure; the proxy feeds it)."""

    client_id: str | None = None
    sent: Counter[int] = field(default_factory=Counter)  # api key -> requests forwarded
    held: Counter[int] = field(default_factory=Counter)  # api key -> requests withheld (ever)
    pending: dict[int, tuple[int, int]] = field(default_factory=dict)  # correlation id -> (api key, version)
    queue: list[bytes] = field(default_factory=list)  # withheld frames, in order

    def admit(self, header: RequestHeader, frame: bytes, hanging: bool, hold_keys: frozenset[int]) -> bool:
        """Record a request; True when it may go on now, False when it is queued (the hang, in order)."""
        self.client_id = header.client_id
        self.pending[header.correlation_id] = (header.api_key, header.api_version)
        if hanging and (self.queue or header.api_key in hold_keys):
            self.queue.append(frame)
            self.held[header.api_key] += 1
            return False
        self.sent[header.api_key] += 1
        return True

    def released(self) -> list[bytes]:
        """The withheld frames, to forward now in their order."""
        frames, self.queue = self.queue, []
        for frame in frames:
            self.sent[request_header(frame).api_key] += 1
        return frames

    def answered(self, correlation_id: int) -> tuple[int, int] | None:
        return self.pending.pop(correlation_id, None)

    def carries_groups_and_data(self, hold_keys: frozenset[int]) -> bool:
        seen = set(self.sent) | set(self.held)
        return bool(seen & hold_keys) and bool(seen & DATA_KEYS)

    def held_data(self) -> int:
        return sum(n for key, n in self.held.items() if key in DATA_KEYS)


def _named(counts: Counter[int]) -> dict[str, int]:
    return {API_NAMES.get(key, str(key)): n for key, n in sorted(counts.items())}


# ----------------------------------------------------------------------------- the proxy


class KafkaProxy:
    """A proxy on a free loopback port in front of ``upstream`` ("host:port"); see the module docstring.

    Runs its own asyncio loop on a daemon thread: :meth:`start` / :meth:`stop`, or use it
    as a context manager. :meth:`hang` and :meth:`release` are safe from any thread.
    """

    def __init__(self, upstream: str, hold_keys: frozenset[int] = GROUP_COORDINATOR_KEYS) -> None:
        host, _, port = upstream.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"upstream must be host:port, got {upstream!r}")
        self.upstream: Address = (host, int(port))
        self.hold_keys = hold_keys
        self.port = 0
        self._hanging = False
        self._connections: list[tuple[ConnectionLedger, asyncio.StreamWriter]] = []
        self._closed: list[ConnectionLedger] = []
        self._errors: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: dict[asyncio.Task[None], tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = {}
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="kproxy", daemon=True)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def __enter__(self) -> KafkaProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> KafkaProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    def stop(self) -> None:
        """Close the listener and every connection (withheld requests are dropped), then the loop."""
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def hang(self) -> None:
        """From now on withhold group-coordinator requests (and what follows them on their connection)."""
        self._call(self._set_hang)

    def release(self) -> None:
        """Forward everything withheld, in order, and stop withholding."""
        self._call(self._release)

    def stats(self) -> dict[str, Any]:
        """Per connection what it carried and what was withheld; totals; errors (a frame it could not read)."""
        return self._call(self._stats)

    def _call(self, fn: Any) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    # -- on the loop

    async def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Port 0 (the kernel's pick, no race), unlike devtools.ports: the proxy is never restarted
        # on its port, so an outgoing connection taking the port while it is down cannot happen.
        sock.bind((HOST, 0))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._serve, sock=sock)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        # Closing both ends makes each connection's reads end, so its task finishes on its own
        # (a cancelled one would make asyncio's stream callback log the CancelledError).
        for writers in self._writers.values():
            for writer in writers:
                writer.close()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)

    def _set_hang(self) -> None:
        self._hanging = True

    def _release(self) -> None:
        self._hanging = False
        for ledger, upstream in self._connections:
            frames = ledger.released()
            if frames and not upstream.is_closing():
                upstream.write(b"".join(frames))

    def _stats(self) -> dict[str, Any]:
        ledgers = [ledger for ledger, _ in self._connections] + self._closed
        rows = [{"client_id": ledger.client_id, "sent": _named(ledger.sent), "held": _named(ledger.held),
                 "waiting": len(ledger.queue)} for ledger in ledgers]
        held: Counter[int] = Counter()
        for ledger in ledgers:
            held.update(ledger.held)
        return {
            "connections": len(ledgers),
            "hanging": self._hanging,
            "held": _named(held),
            "waiting": sum(len(ledger.queue) for ledger in ledgers),
            "held_data_requests": sum(ledger.held_data() for ledger in ledgers),
            "mixed_connections": sum(1 for ledger in ledgers if ledger.carries_groups_and_data(self.hold_keys)),
            "errors": list(self._errors),
            "per_connection": rows,
        }

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.close()  # the broker is down: the client sees a refused connection, as it would
            return
        ledger = ConnectionLedger()
        entry = (ledger, upstream_writer)
        self._connections.append(entry)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers[task] = (client_writer, upstream_writer)
        proxy_address = {self.upstream: (HOST, self.port)}
        try:
            await asyncio.gather(self._requests(client_reader, upstream_writer, ledger),
                                 self._responses(upstream_reader, client_writer, ledger, proxy_address))
        finally:
            self._tasks.discard(task)
            self._writers.pop(task, None)
            self._connections.remove(entry)
            ledger.queue.clear()  # a closed connection's withheld requests were never sent
            self._closed.append(ledger)
            for writer in (client_writer, upstream_writer):
                writer.close()

    async def _requests(self, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter,
                        ledger: ConnectionLedger) -> None:
        frames = FrameBuffer()
        try:
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    if ledger.admit(request_header(frame), frame, self._hanging, self.hold_keys):
                        upstream.write(frame)
                await upstream.drain()
        except (ConnectionError, ProtocolError) as exc:
            self._note(exc)
        finally:
            upstream.close()

    async def _responses(self, reader: asyncio.StreamReader, client: asyncio.StreamWriter, ledger: ConnectionLedger,
                         addresses: dict[Address, Address]) -> None:
        frames = FrameBuffer()
        try:
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    request = ledger.answered(response_correlation_id(frame))
                    if request is not None:
                        frame = rewrite_response(request[0], request[1], frame, addresses)
                    client.write(frame)
                await client.drain()
        except (ConnectionError, ProtocolError) as exc:
            self._note(exc)
        finally:
            client.close()

    def _note(self, exc: Exception) -> None:
        if isinstance(exc, ProtocolError):
            self._errors.append(str(exc))

