"""Continuous produce during a scenario, and the per-partition comparisons that end every scenario."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer

from devtools import harness
from tests.support import kafka_io


class ContinuousProducer:
    """Produces keyed records with headers to every partition at a steady rate until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate_per_s: int = 2000) -> None:
        self.topic, self.partitions, self.rate = topic, partitions, rate_per_s
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
            # After a source broker restart librdkafka may leave a partition leaderless until the
            # next periodic metadata refresh (5 min by default; common.kafka): the load then cannot
            # flush and the test blames the replicator. The bench's load producer does the same.
            "topic.metadata.refresh.interval.ms": 5000,
            "reconnect.backoff.max.ms": 500,
        })
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                i = self.sent
                try:
                    self.producer.produce(
                        self.topic, key=f"k{i}".encode(), value=f"v{i}".encode() * 3,
                        partition=i % self.partitions, headers=[("seq", str(i).encode())],
                    )
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                self.sent += 1
            self.producer.poll(0.01)
        assert self.producer.flush(60) == 0

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(90)


def wait_mirrored(services: dict, topic: str, partitions: int, timeout_s: float = 120) -> dict[int, int]:
    """Wait until the destination has at least as many records as the source in every partition."""
    source = kafka_io.end_offsets(services["source"], topic, partitions)
    kafka_io.wait_for(lambda: harness.caught_up(services, topic, partitions, source_ends=source), timeout_s,
                      f"{topic} mirrored")
    return source


def compare(services: dict, topic: str, partitions: int) -> dict[str, int]:
    """Per partition: lost (in source, not in destination), duplicated, and whether order held."""
    totals = {"records": 0, "lost": 0, "duplicated": 0, "reordered": 0}
    for p in range(partitions):
        src = kafka_io.read_partition(services["source"], topic, p)
        dst = kafka_io.read_partition(services["destination"], topic, p)
        source_offsets = [r.offset for r in src]
        by_offset = {r.offset: r.logical() for r in src}
        seen: list[int] = [r.provenance().source_offset for r in dst]
        for rec, offset in zip(dst, seen, strict=True):
            assert by_offset.get(offset) == rec.logical(), f"{topic}:{p} offset {offset} changed"
        totals["records"] += len(src)
        totals["lost"] += len(set(source_offsets) - set(seen))
        totals["duplicated"] += len(seen) - len(set(seen))
        first_seen = list(dict.fromkeys(seen))
        totals["reordered"] += sum(1 for a, b in zip(first_seen, first_seen[1:], strict=False) if b < a)
    return totals
