"""Find free loopback ports outside the kernel's ephemeral range (for the stack, tests, demo and benches)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

HOST = "127.0.0.1"


class NoFreePorts(OSError):
    """Fewer free ports than asked for."""


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """One free loopback port outside the ephemeral range (REST and metrics ports of tests, demo, benches)."""
    return free_ports(1)[0]


def free_ports(count: int, avoid: set[int] | None = None) -> list[int]:
    """count distinct free ports outside the kernel's ephemeral range.

    A port from that range (what binding port 0 returns) can be taken by any outgoing
    connection while its service is down - e.g. a client reconnecting to the stopped
    destination broker picks the broker's own port and connects to itself - so a
    restart on the same port would fail.
    """
    low, high = _ephemeral_range()
    pool = list(range(15000, low)) if low > 16000 else list(range(high + 1, 65536))
    random.SystemRandom().shuffle(pool)
    # Hold every socket open until all are chosen so no port is handed out twice.
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        for port in pool:
            if len(ports) == count:
                break
            if port in (avoid or ()):
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
            ports.append(port)
    finally:
        for sock in socks:
            sock.close()
    if len(ports) < count:
        raise NoFreePorts(f"found only {len(ports)} free ports on {HOST}, need {count}")
    return ports
