"""Topics with planted defects for verifier tests: the same topics for every reader and every test.

A destination written here looks like the replicator's output (see
verifier_env.mirrored) except where a defect is planted on purpose. Each
builder returns the pipeline, both topic names and the source records.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support import kafka_io
from tests.support import verifier_env as env
from tests.support.kafka_io import wait_for
from tests.support.verifier_env import mirrored
from ureplicator.common import provenance

PARTITIONS = 10
PER_PARTITION = 60
# kafka_io.produce stamps records in 2023: without this the brokers' retention would delete them mid-test.
KEEP = {"retention.ms": "-1"}


@dataclass
class Planted:
    pipeline: str
    topic: str
    destination: str
    source: dict[int, list[kafka_io.Record]]
    ends: dict[int, int] | None = None


def urep(offset: int, partition: int, origin: str) -> bytes:
    return provenance.encode(offset, partition, origin)


def plant_defects(services: dict) -> Planted:
    """Source topic with 10 partitions of 60 records; the destination gets one planted defect per partition.

    p0 missing 17 and 20-24 | p1 replay of 35-40 | p2 value of 33 changed | p3 header of 5 changed
    p4 three orphans | p5 40 and 41 swapped | p6 committed at 45, destination holds 0-51
    p7 source truncated below 25 | p8 clean
    p9 source records 10-14 came from the destination cluster (active-active); 12 was mirrored back anyway
    The topic is registered in ZooKeeper for the pipeline.
    """
    stamp = int(time.time() * 1000)
    pipeline = f"vd{stamp}"
    topic, destination = f"{pipeline}-orders", f"{pipeline}-orders.mirror"
    kafka_io.create_topic(services["source"], topic, PARTITIONS, KEEP)
    kafka_io.create_topic(services["destination"], destination, PARTITIONS, KEEP)
    kafka_io.produce(services["source"], topic, 9 * PER_PARTITION, 9)  # p0-p8
    # p9 also carries the content the hash must tell apart: null keys, headers with null values.
    env.write(services["source"], topic, 9, [
        env.Copy(None if i == 31 else b"k%d" % i, b"v%d" % i,
                 (("trace", b"t"), *((("empty", None),) if i in (12, 30) else ()),
                  *((("urep", urep(1000 + i, 9, "dst")),) if 10 <= i <= 14 else ())),
                 1_700_000_000_000 + i)
        for i in range(PER_PARTITION)
    ])
    source = {p: kafka_io.read_partition(services["source"], topic, p) for p in range(PARTITIONS)}
    copies = {p: [mirrored(r, p) for r in source[p]] for p in range(PARTITIONS)}

    copies[0] = [c for i, c in enumerate(copies[0]) if i != 17 and not 20 <= i <= 24]
    copies[1] = copies[1][:41] + copies[1][35:41] + copies[1][41:]
    copies[2][33] = copies[2][33].with_value(b"tampered")
    copies[3][5] = copies[3][5].with_header("trace", b"t-tampered")
    stray = env.Copy(b"stray", b"no provenance", (("trace", b"x"),), 1_700_000_000_000)
    other = mirrored(source[4][30], 7)  # claims to come from partition 7
    beyond = mirrored(source[4][59], 4)
    beyond = env.Copy(beyond.key, beyond.value, (*beyond.headers[:-1], ("urep", urep(500, 4, "src"))),
                      beyond.timestamp)
    copies[4] = copies[4][:11] + [stray] + copies[4][11:31] + [other] + copies[4][31:] + [beyond]
    copies[5][40], copies[5][41] = copies[5][41], copies[5][40]
    copies[6] = copies[6][:52]
    copies[9] = copies[9][:10] + [mirrored(source[9][12], 9, origin="dst")] + copies[9][15:]
    for p in range(PARTITIONS):
        env.write(services["destination"], destination, p, copies[p])
    admin = AdminClient({"bootstrap.servers": services["source"]})
    truncated = admin.delete_records([TopicPartition(topic, 7, 25)])
    for future in truncated.values():
        future.result(timeout=30)
    committed = {p: PER_PARTITION for p in range(PARTITIONS)}
    committed[6] = 45
    env.commit(services["source"], f"ureplicator.{pipeline}", topic, committed)
    env.register(services["zookeeper"], pipeline, topic, destination, PARTITIONS)

    return Planted(pipeline, topic, destination, source)


def plant_gaps(services: dict) -> Planted:
    """Compacted source topic: offset gaps from the log cleaner and from transaction markers.

    p0: mirrored, then compacted on the source (copies of overwritten keys remain in the destination)
    p1: transaction markers and an aborted transaction leave gaps before mirroring
    p2: the destination lacks offset 2 (key k2, overwritten at 7 -- as the destination's own compaction
        would do) and offset 9 (k4's latest value: a real loss)
    The destination topic has the source's name.
    """
    stamp = int(time.time() * 1000)
    pipeline, topic = f"vg{stamp}", f"vg{stamp}-changelog"
    compact = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
               "delete.retention.ms": "100", "min.compaction.lag.ms": "0"}
    kafka_io.create_topic(services["source"], topic, 3, compact)
    kafka_io.create_topic(services["destination"], topic, 3, KEEP)
    plain = Producer({"bootstrap.servers": services["source"], "enable.idempotence": True})
    for i in range(30):
        plain.produce(topic, key=f"k{i % 5}".encode(), value=f"v{i}".encode(), partition=0)
    for i in range(10):
        plain.produce(topic, key=f"k{i % 5}".encode(), value=f"w{i}".encode(), partition=2)
    plain.flush(30)
    env.write(services["destination"], topic, 0, [mirrored(r, 0) for r in env.read_all(services["source"], topic, 0)])
    rolls = iter(range(1_000_000))

    def compacted() -> bool:
        # Appending rolls the 100 ms segment, so the cleaner can drop overwritten keys. Done when each of
        # k0-k4 is left once; the roll records have unique keys, so no later cleaning removes anything.
        plain.produce(topic, key=f"roll{next(rolls)}".encode(), value=b"r", partition=0)
        plain.flush(30)
        keys = [r.key for r in env.read_all(services["source"], topic, 0) if r.key.startswith(b"k")]
        return sorted(keys) == [f"k{i}".encode() for i in range(5)]

    wait_for(compacted, 60, "the log cleaner to compact partition 0", interval_s=0.3)
    env.write(services["destination"], topic, 0,
              [mirrored(r, 0) for r in env.read_all(services["source"], topic, 0) if r.offset >= 30])
    tx = Producer({"bootstrap.servers": services["source"], "transactional.id": f"{topic}-tx"})
    tx.init_transactions()
    for batch, commit in ((range(5), True), (range(5, 10), True), (range(10, 13), False), (range(13, 15), True)):
        tx.begin_transaction()
        for i in batch:
            tx.produce(topic, key=f"t{i}".encode(), value=f"tx-{i}".encode(), partition=1)
        tx.commit_transaction() if commit else tx.abort_transaction()
    source = {p: env.read_all(services["source"], topic, p) for p in range(3)}
    env.write(services["destination"], topic, 1, [mirrored(r, 1) for r in source[1]])
    env.write(services["destination"], topic, 2, [mirrored(r, 2) for r in source[2] if r.offset not in (2, 9)])
    ends = kafka_io.end_offsets(services["source"], topic, 3)
    env.commit(services["source"], f"ureplicator.{pipeline}", topic, ends)
    assert len(source[0]) < ends[0] and len(source[1]) == 12 < ends[1]  # both have offset gaps

    return Planted(pipeline, topic, topic, source, ends)


def urep_v2(offset: int, partition: int, origin: str, hop: str) -> bytes:
    """A version 2 urep value, written here independently of common/provenance.py:
    ``u8 2 | i64 source offset | i32 source partition | u8 n | origin | u8 m | hop source alias``."""
    first, last = origin.encode(), hop.encode()
    return (bytes([2]) + offset.to_bytes(8, "big", signed=True) + partition.to_bytes(4, "big", signed=True)
            + bytes([len(first)]) + first + bytes([len(last)]) + last)


def _with_urep(copy: env.Copy, value: bytes) -> env.Copy:
    kept = tuple((k, v) for k, v in copy.headers if k != provenance.HEADER)
    return env.Copy(copy.key, copy.value, (*kept, (provenance.HEADER, value)), copy.timestamp)


def plant_v2_headers(services: dict) -> Planted:
    """Destinations carrying version 2 urep headers (a record that crossed two hops), mixed with version 1.

    p0 every copy version 2: clean | p1 version 2 with a wrong hop length at 4 (an orphan), 9 missing
    p2 source records 5-7 came from the destination cluster (their own version 2 urep names origin dst):
       skipped, but 6 was mirrored back anyway; even offsets copied with version 1, odd with version 2
    """
    stamp = int(time.time() * 1000)
    pipeline = f"v2h{stamp}"
    topic, destination = f"{pipeline}-t", f"{pipeline}-t.mirror"
    kafka_io.create_topic(services["source"], topic, 3, KEEP)
    kafka_io.create_topic(services["destination"], destination, 3, KEEP)
    kafka_io.produce(services["source"], topic, 2 * 30, 2)
    env.write(services["source"], topic, 2, [
        env.Copy(b"k%d" % i, b"v%d" % i,
                 ((provenance.HEADER, urep_v2(900 + i, 2, "dst", "hq")),) if 5 <= i <= 7 else (),
                 1_700_000_000_000 + i)
        for i in range(30)
    ])
    source = {p: kafka_io.read_partition(services["source"], topic, p) for p in range(3)}
    copies = {p: [_with_urep(mirrored(r, p), urep_v2(r.offset, p, "src", "src")) for r in source[p]] for p in (0, 1)}
    copies[1][4] = _with_urep(copies[1][4], urep_v2(4, 1, "src", "src")[:-1])  # the hop alias is a byte short
    del copies[1][9]
    copies[2] = [
        mirrored(r, 2) if r.offset % 2 == 0 else _with_urep(mirrored(r, 2), urep_v2(r.offset, 2, "src", "edge"))
        for r in source[2] if not 5 <= r.offset <= 7
    ]
    looped = _with_urep(mirrored(source[2][6], 2), urep_v2(6, 2, "dst", "src"))
    copies[2] = copies[2][:5] + [looped] + copies[2][5:]
    for p in range(3):
        env.write(services["destination"], destination, p, copies[p])
    ends = kafka_io.end_offsets(services["source"], topic, 3)
    env.commit(services["source"], f"ureplicator.{pipeline}", topic, ends)
    return Planted(pipeline, topic, destination, source, ends)
