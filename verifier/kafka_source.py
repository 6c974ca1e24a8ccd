"""Spark's Kafka source: read offset ranges of one cluster and classify each record in SQL (hash, provenance, class).

Used by pass 2 (verifier/pass2.py), by pass 1 when the digest reader is
unavailable (verifier/pass1.py), and by the deployment check. The SQL is
built in verifier/sql.py; the classes are verifier/route.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ureplicator.verifier import sql
from ureplicator.verifier.route import (
    BEYOND_END,
    EXPIRED,
    FOREIGN,
    NO_SOURCE_PARTITION,
    OLD,
    OTHER_PARTITION,
    PENDING,
    SKIPPED,
    UNREADABLE,
    VERIFIED,
    KafkaSide,
    RouteRule,
)
from ureplicator.verifier.sql import (
    CONTENT_HASH,
    HEADERS,
    KEPT_HEADERS,
    LAST_UREP,
    UREP_OFFSET,
    UREP_PARTITION,
    UREP_POSITION,
    UREP_VALID,
    UREP_VALUE,
)
from ureplicator.verifier.watermarks import TopicSnapshot


def kafka_schema() -> Any:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType([
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField("headers", ArrayType(header)),
    ])


# Consumer settings for reading whole ranges as fast as the broker sends them: big fetches, big
# socket buffers. Every task reads up to the end of its range; the fetch past the end would otherwise
# wait the default 500 ms for records that will not come (fetches with data return at once).
READ_TUNING = {
    "fetch.max.wait.ms": "10",
    "max.partition.fetch.bytes": str(8 * 1024 * 1024),
    "fetch.max.bytes": str(64 * 1024 * 1024),
    "receive.buffer.bytes": str(1024 * 1024),
    "max.poll.records": "10000",
}


def read(
    spark: Any, side: KafkaSide, topic: str, ranges: Mapping[int, tuple[int, int]] | Iterable[tuple[int, int, int]]
) -> Any:
    """Records of ``topic`` in [start, end) per partition (committed records only).

    ``ranges`` is {partition: (start, end)} or (partition, start, end) triples; several ranges of one
    partition become one read each, unioned (targeted reads of a few buckets, not the span between).
    """
    triples = sorted(
        (p, s, e) for p, (s, e) in ranges.items()) if isinstance(ranges, Mapping) else sorted(ranges)
    triples = [(p, s, e) for p, s, e in triples if e > s]
    reads: list[dict[int, tuple[int, int]]] = []
    for p, s, e in triples:  # the i-th range of each partition goes to the i-th read
        for wanted in reads:
            if p not in wanted:
                wanted[p] = (s, e)
                break
        else:
            reads.append({p: (s, e)})
    if not reads:
        return spark.createDataFrame([], kafka_schema())
    frames = [_read_once(spark, side, topic, wanted) for wanted in reads]
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def _read_once(spark: Any, side: KafkaSide, topic: str, wanted: Mapping[int, tuple[int, int]]) -> Any:
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", side.bootstrap_servers)
        .option("assign", json.dumps({topic: sorted(wanted)}))
        .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in sorted(wanted.items())}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in sorted(wanted.items())}}))
        .option("includeHeaders", "true")
        # Offsets that vanish meanwhile (retention) are caught by re-reading the log start.
        .option("failOnDataLoss", "false")
        .option("kafka.isolation.level", "read_committed")
    )
    for key, value in READ_TUNING.items():
        reader = reader.option(f"kafka.{key}", value)
    parallelism = spark.sparkContext.defaultParallelism
    if len(wanted) < parallelism:
        reader = reader.option("minPartitions", str(parallelism))
    for key, value in side.options.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()


def with_header_columns(frame: Any, urep: str) -> Any:
    """Add _hdrs (headers, never null), _upos (first urep position), _kept (content headers), _urep."""
    from pyspark.sql import functions as F

    return (
        frame.withColumn("_hdrs", F.expr(HEADERS))
        .withColumn("_upos", F.expr(UREP_POSITION))
        .withColumn("_kept", F.expr(KEPT_HEADERS))
        .withColumn("_urep", F.expr(urep))
    )


def source_records(
    spark: Any,
    side: KafkaSide,
    snap: TopicSnapshot,
    ranges: Mapping[int, tuple[int, int]] | Iterable[tuple[int, int, int]],
    rule: RouteRule,
    with_key: bool = False,
) -> Any:
    """(p, o, h, cls[, k]): content hash per source record; SKIPPED when the route does not copy it
    (``rule``), else VERIFIED in the partition's verified range and PENDING above it."""
    from pyspark.sql import functions as F

    verify_to = {p: w.verify_to for p, w in snap.partitions.items()}
    looped = rule.skipped_sql()
    return (
        with_header_columns(read(spark, side, snap.topic, ranges), LAST_UREP)
        .select(
            F.col("partition").alias("p"),
            F.col("offset").alias("o"),
            F.expr(CONTENT_HASH).alias("h"),
            F.expr(
                f"CASE WHEN {looped} THEN {SKIPPED} "
                f"WHEN offset < {sql.lookup(verify_to, 'partition')} THEN {VERIFIED} ELSE {PENDING} END"
            ).alias("cls"),
            *([F.col("key").alias("k")] if with_key else []),
        )
    )


def destination_records(
    spark: Any,
    side: KafkaSide,
    snap: TopicSnapshot,
    partitions: Iterable[int] | None = None,
    with_key: bool = False,
    rule: RouteRule | None = None,
) -> Any:
    """(dp, do, sp, so, dh, cls[, k]): each destination record, its provenance and its class."""
    from pyspark.sql import functions as F

    ranges = snap.destination_ranges()
    if partitions is not None:
        keep = set(partitions)
        ranges = {p: r for p, r in ranges.items() if p in keep}
    parts = snap.partitions
    end = sql.lookup({p: w.end for p, w in parts.items()}, "dp")
    # The urep partition is nearly always the record's own: compare 4 bytes, parse only when they differ.
    highest = max([*ranges, *parts], default=0)
    own = "array(" + ", ".join(sql.partition_bytes(p) for p in range(highest + 1)) + ")"
    partition = (
        f"CASE WHEN {sql.PARTITION_FIELD} = try_element_at({own}, partition + 1) THEN CAST(partition AS BIGINT) "
        f"ELSE {UREP_PARTITION} END"
    )
    foreign = ""
    if rule is not None and rule.attribute:
        foreign = (f"WHEN (_valid AND {sql.other_hop(rule.source)}) OR (NOT _valid AND _upos = 0) THEN {FOREIGN} ")
    cls = (
        f"CASE {foreign}WHEN NOT _valid OR so < 0 THEN {UNREADABLE} "
        f"WHEN sp <> dp THEN {OTHER_PARTITION} "
        f"WHEN {end} IS NULL THEN {NO_SOURCE_PARTITION} "
        f"WHEN so >= {end} THEN {BEYOND_END} "
        f"WHEN so < {sql.lookup({p: w.log_start for p, w in parts.items()}, 'dp')} THEN {EXPIRED} "
        f"WHEN so < {sql.lookup({p: w.verify_from for p, w in parts.items()}, 'dp')} THEN {OLD} "
        f"WHEN so >= {sql.lookup({p: w.verify_to for p, w in parts.items()}, 'dp')} THEN {PENDING} "
        f"ELSE {VERIFIED} END"
    )
    return (
        with_header_columns(read(spark, side, snap.destination, ranges), UREP_VALUE)
        .select(
            F.col("partition").alias("dp"),
            F.col("offset").alias("do"),
            F.expr(f"CASE WHEN {UREP_VALID} THEN {partition} END").alias("_spu"),
            F.expr(f"CASE WHEN {UREP_VALID} THEN {UREP_OFFSET} END").alias("so"),
            F.expr(CONTENT_HASH).alias("dh"),
            F.expr(UREP_VALID).alias("_valid"),
            *([F.expr(sql.other_hop(rule.source)).alias("_other"), F.col("_upos")] if foreign else []),
            *([F.col("key").alias("k")] if with_key else []),
        )
        .withColumn("sp", F.expr("CASE WHEN _spu >= 2147483648 THEN _spu - 4294967296 ELSE _spu END"))
        .withColumn("cls", F.expr(cls.replace(sql.other_hop(rule.source), "_other") if foreign else cls))
        .drop("_spu", "_valid", "_other", "_upos")
    )
