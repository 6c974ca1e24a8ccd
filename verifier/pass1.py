"""Pass 1 of the verifier: per (partition, class, bucket) aggregates of both sides, and what they prove.

source: per (partition, offset bucket) count, exact sum and xor of the
bucket hashes; destination: the same per (partition, bucket of the ``urep``
source offset), plus each record's class (verified, pending, expired, or an
orphan class) and the bounds of ``destination offset - source offset`` (the
order proof). The digest reader computes these rows inside the reader, for
every topic of a run in one Spark job (``bucket_passes``); without it, the
same rows come from SQL over Spark's Kafka source, a topic at a time.
See docs/verification.md for the hash and the categories.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ureplicator.reports.model import BucketAggregate, BucketKey
from ureplicator.verifier import digest
from ureplicator.verifier.kafka_source import READ_TUNING, destination_records, source_records
from ureplicator.verifier.route import (
    ATTRIBUTED,
    BEYOND_END,
    EXPIRED,
    FOREIGN,
    OLD,
    ORDER,
    ORPHAN_CLASSES,
    PENDING,
    VERIFIED,
    KafkaSide,
    RouteRule,
    default_rule,
)
from ureplicator.verifier.watermarks import TopicSnapshot


def _bucket_aggregates(hash_column: str) -> list[Any]:
    """count, the exact sum of the bucket hashes as two 32-bit halves, and their xor.

    Each half is below 2^32, so a BIGINT sum of up to 2^31 records cannot overflow: exact, and
    cheaper than a DECIMAL sum per record (Spark 4's ANSI mode fails a plain BIGINT sum on overflow).
    """
    from pyspark.sql import functions as F

    h = F.col(hash_column)
    return [
        F.count(F.lit(1)).alias("n"),
        F.sum(F.shiftright(h, 32)).alias("high"),
        F.sum(h.bitwiseAND(F.lit(0xFFFFFFFF))).alias("low"),
        F.bit_xor(h).alias("xor"),
    ]


def _total(high: int | None, low: int | None) -> Decimal:
    """The exact sum of the bucket hashes from its two halves."""
    return Decimal((int(high or 0) << 32) + int(low or 0))


@dataclass
class ClassAggregate:
    """count and [min, max] offset of one class in one bucket."""

    count: int
    first: int | None
    last: int | None


@dataclass
class BucketPass:
    """What pass 1 found for one topic."""

    source: dict[BucketKey, BucketAggregate] = field(default_factory=dict)
    destination: dict[BucketKey, BucketAggregate] = field(default_factory=dict)
    pending: dict[int, list[ClassAggregate]] = field(default_factory=dict)  # source records >= W
    expired: dict[int, list[ClassAggregate]] = field(default_factory=dict)  # destination records < L
    skipped: dict[int, list[ClassAggregate]] = field(default_factory=dict)  # source records from the destination
    orphans: dict[int, int] = field(default_factory=dict)  # destination records of orphan classes
    foreign: dict[int, int] = field(default_factory=dict)  # destination records another writer wrote (RouteRule)
    # Copies of source offsets an earlier run verified (incremental runs): their buckets.
    old: dict[BucketKey, int] = field(default_factory=dict)
    # Partitions whose attributed copies are not provably in source order (see _in_order).
    unordered: set[int] = field(default_factory=set)
    # Per destination partition, the lowest destination offset naming a source offset >= the verified
    # range's end: where the next incremental run starts reading.
    first_unverified: dict[int, int] = field(default_factory=dict)
    verified: dict[int, int] = field(default_factory=dict)  # source records in the verified range
    source_records: int = 0  # records read per side (the run's cost)
    destination_records: int = 0


def bucket_pass(
    spark: Any,
    source: KafkaSide,
    destination: KafkaSide,
    snap: TopicSnapshot,
    bucket_size: int,
    rule: RouteRule | None = None,
) -> BucketPass:
    """Pass 1 of one topic (``bucket_passes`` of one)."""
    return bucket_passes(spark, source, destination, [(snap, rule)], bucket_size)[0]


def bucket_passes(
    spark: Any,
    source: KafkaSide,
    destination: KafkaSide,
    topics: Sequence[tuple[TopicSnapshot, RouteRule | None]],
    bucket_size: int,
) -> list[BucketPass]:
    """Pass 1 of several topics, in their order: per side, one aggregate per (partition, class, bucket).

    With the digest reader (verifier/digest.py), both sides of every topic are one Spark job: one stage of
    reader tasks, no shuffle, one collect; the driver merges the rows. When all of them together are at most
    ``digest.DRIVER_MAX_OFFSETS`` offsets (an incremental run after a little new data, a small topic), the
    same aggregation reads them in the driver instead, without a Spark job. Without the digest reader, the
    same rows come from SQL over Spark's Kafka source, a topic at a time.
    """
    if not topics:
        return []
    if not digest.available(spark):
        results = []
        for snap, rule in topics:
            rule = rule or default_rule(source, destination)
            src_rows, dst_rows = _sql_bucket_rows(
                spark, source, destination, snap, bucket_size, _source_ranges(snap), rule
            )
            results.append(_bucket_pass(src_rows, dst_rows))
        return results
    reads = [
        (index, which, side, topic, ranges, snap, rule or default_rule(source, destination))
        for index, (snap, rule) in enumerate(topics)
        for side, which, topic, ranges in (
            (source, "source", snap.topic, _source_ranges(snap)),
            (destination, "destination", snap.destination, snap.destination_ranges()),
        )
    ]
    grouped: dict[tuple[int, str], list[Any]] = {}
    offsets = sum(max(0, e - s) for *_, ranges, _, _ in reads for s, e in ranges.values())
    if offsets <= digest.DRIVER_MAX_OFFSETS and digest.driver_available(spark):
        plans = [digest.reader_options(side, topic, which, digest.whole_ranges(ranges), snap, bucket_size, rule,
                                       READ_TUNING)
                 for _, which, side, topic, ranges, snap, rule in reads]
        for (index, which, *_), rows in zip(reads, digest.driver_rows(spark, plans), strict=True):
            grouped[(index, which)] = rows
    else:
        from pyspark.sql import functions as F

        frames = [
            digest.bucket_rows(spark, side, topic, which, ranges, snap, bucket_size, rule, READ_TUNING)
            .withColumn("_topic", F.lit(index)).withColumn("_side", F.lit(which))
            for index, which, side, topic, ranges, snap, rule in reads
        ]
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        for r in union.collect():
            grouped.setdefault((r["_topic"], r["_side"]), []).append(r)
    return [
        _bucket_pass(digest.merge(grouped.get((i, "source"), [])), digest.merge(grouped.get((i, "destination"), [])))
        for i in range(len(topics))
    ]


def _source_ranges(snap: TopicSnapshot) -> dict[int, tuple[int, int]]:
    return {p: (min(w.verify_from, w.end), w.end) for p, w in snap.partitions.items()}


def _bucket_pass(src_rows: Iterable[Any], dst_rows: Iterable[Any]) -> BucketPass:
    result = BucketPass()
    for r in src_rows:
        result.source_records += r.n
        if r.cls == VERIFIED:
            result.source[(r.p, r.bucket)] = BucketAggregate(r.n, _total(r.high, r.low), r.xor)
            result.verified[r.p] = result.verified.get(r.p, 0) + r.n
        else:
            found = result.pending if r.cls == PENDING else result.skipped
            found.setdefault(r.p, []).append(ClassAggregate(r.n, r.first, r.last))
    _destination_buckets(result, dst_rows)
    return result


def _sql_bucket_rows(
    spark: Any,
    source: KafkaSide,
    destination: KafkaSide,
    snap: TopicSnapshot,
    bucket_size: int,
    src_ranges: Mapping[int, tuple[int, int]],
    rule: RouteRule,
) -> tuple[list[Any], list[Any]]:
    """Pass 1 in SQL over Spark's Kafka source: the digest reader's rows, one record at a time."""
    from pyspark.sql import functions as F

    src = source_records(spark, source, snap, src_ranges, rule).withColumn(
        "bh", F.expr("xxhash64(h, o)")
    )
    src_rows = (
        src.groupBy("p", "cls", F.expr(f"o div {bucket_size}").alias("bucket"))
        .agg(*_bucket_aggregates("bh"), F.min("o").alias("first"), F.max("o").alias("last"))
        .collect()
    )
    attributed = F.col("cls").isin(*ATTRIBUTED)
    dst = (
        destination_records(spark, destination, snap, rule=rule)
        .withColumn("bucket", F.when(F.col("cls").isin(VERIFIED, OLD), F.expr(f"so div {bucket_size}"))
                    .otherwise(F.lit(-1)))
        .withColumn("bh", F.expr("xxhash64(dh, so)"))
        .withColumn("delta", F.when(attributed, F.col("do") - F.col("so")))
    )
    dst_rows = (
        dst.groupBy(F.col("dp").alias("p"), "cls", "bucket")
        .agg(
            *_bucket_aggregates("bh"), F.min("so").alias("first"), F.max("so").alias("last"),
            F.min("do").alias("first_do"), F.min("delta").alias("delta_min"), F.max("delta").alias("delta_max"),
        )
        .collect()
    )
    return src_rows, dst_rows


def _destination_buckets(result: BucketPass, rows: Iterable[Any]) -> None:
    deltas: dict[int, set[int]] = {}
    chunks: dict[int, list[tuple[int, bool, int, int]]] = {}
    for r in rows:
        if r.cls == ORDER:
            chunks.setdefault(r.p, []).append((r.bucket, r.xor == 1, r.first, r.last))
            continue
        result.destination_records += r.n
        if r.cls in ATTRIBUTED:
            deltas.setdefault(r.p, set()).update((r.delta_min, r.delta_max))
        if r.cls in (PENDING, BEYOND_END):
            result.first_unverified[r.p] = min(r.first_do, result.first_unverified.get(r.p, r.first_do))
        if r.cls == VERIFIED:
            result.destination[(r.p, r.bucket)] = BucketAggregate(r.n, _total(r.high, r.low), r.xor)
        elif r.cls == OLD:
            result.old[(r.p, r.bucket)] = r.n
        elif r.cls == EXPIRED:
            result.expired.setdefault(r.p, []).append(ClassAggregate(r.n, r.first, r.last))
        elif r.cls in ORPHAN_CLASSES:
            result.orphans[r.p] = result.orphans.get(r.p, 0) + r.n
        elif r.cls == FOREIGN:
            result.foreign[r.p] = result.foreign.get(r.p, 0) + r.n
    result.unordered = {p for p, found in deltas.items() if not _in_order(found) and not _ascending(chunks.get(p))}


def _in_order(deltas: set[int]) -> bool:
    """Whether one destination partition's attributed copies are provably in source order, without a sort.

    If ``destination offset - source offset`` is the same for every copy, the source offset rises by
    exactly one per destination record: strictly increasing, so neither reordered nor duplicated. A clean
    mirror of a gapless partition always has this; anything else (gaps from compaction or transactions,
    replays, loop-prevented records, a real reordering) makes pass 2 order the first copies exactly.
    """
    return len(deltas) <= 1


def _ascending(chunks: list[tuple[int, bool, int, int]] | None) -> bool:
    """Whether the digest reader's per-chunk order rows prove the attributed copies in source order.

    Each chunk says whether the source offsets of its attributed copies rise strictly in destination order;
    chunks in destination order that each rise, and each start above the previous one's last, rise as a whole:
    neither reordered nor duplicated, gaps or not (compaction, transactions, loop-skipped records). The
    reader proves it while reading, so such a partition needs no pass-2 re-read of the destination.
    """
    if not chunks:
        return False
    previous = None
    for _, rising, first, last in sorted(chunks):
        if not rising or (previous is not None and first <= previous):
            return False
        previous = last
    return True
