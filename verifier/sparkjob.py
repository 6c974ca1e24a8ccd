"""Spark edge of the verifier: read both clusters and compare them in the JVM.

Per-record work happens in the executors' JVMs — in the digest reader
(verifier/digest.py, jvm/digest) or in built-in SQL over Spark's Kafka source
(hash, header parsing, windows, aggregates; the SQL is built in verifier/sql.py);
Python sees bucket aggregates and summarised findings, never records. Two
passes per topic:

1. **buckets** — source: per (partition, offset bucket) count, exact sum and
   xor of the bucket hashes; destination: the same per (partition, bucket of
   the ``urep`` source offset), plus each record's class (verified, pending,
   expired, or an orphan class) and the bounds of ``destination offset -
   source offset`` (the order proof). The digest reader computes these rows
   inside the reader, for every topic of a run in one Spark job
   (``bucket_passes``); without it, the same rows come from SQL, a topic at
   a time.
2. **records** — only when pass 1 found a difference: re-read with Spark's
   Kafka source, join the records of the differing buckets, list orphans and,
   for partitions not proven in order, order the first copies; summarise to
   counts, offset ranges and samples per category.

See docs/verification.md for the hash and the categories.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from ureplicator.common import java
from ureplicator.common.errors import UReplicatorError
from ureplicator.reports import model
from ureplicator.reports.model import BucketAggregate, BucketKey, CategoryResult, Sample
from ureplicator.verifier import cds, connector, digest, sql
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

CONNECTOR_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1"
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

# Record classes, small integers so that pass 1 groups on fixed-width keys.
VERIFIED = 0  # in this run's verified range
PENDING = 1  # at or above it: not committed by the replicator yet
SKIPPED = 2  # source records from the destination cluster: loop prevention keeps them there
EXPIRED = 3  # destination copies of source offsets below the source's log start
OLD = 4  # destination copies of source offsets an earlier run verified (incremental runs)
FOREIGN = 5  # destination records a declared route did not write (produced there, or another route's copies)
ORDER = 6  # digest reader only: one row per destination chunk, the order proof of its attributed copies
UNREADABLE = 10  # destination records with no readable urep header; this and the next three are orphans
OTHER_PARTITION = 11
NO_SOURCE_PARTITION = 12
BEYOND_END = 13
ORPHAN_CLASSES = (UNREADABLE, OTHER_PARTITION, NO_SOURCE_PARTITION, BEYOND_END)
ATTRIBUTED = (EXPIRED, PENDING, VERIFIED)


class SparkUnavailable(UReplicatorError):
    """Spark or its Kafka connector cannot run here; the verification could not start."""

    exit_status = 2


# --- session -----------------------------------------------------------------------------------


def session(master: str | None = None, conf: Mapping[str, str] | None = None, own_archive: bool = False) -> Any:
    """The process's SparkSession, created with the Kafka connector on the classpath.

    ``master`` None means: what spark-submit chose, else ``local[*]``. For local
    masters the connector jars come from ``connector.spark_jars()``; on a
    cluster pass ``--packages`` (see CONNECTOR_PACKAGE) or ``spark.jars``.
    ``own_archive`` (the ``verify`` command): without ``UREPLICATOR_SPARK_CDS``, map the class archive an
    earlier run dumped, or dump one for the next run (verifier/cds.py).
    """
    conf = dict(conf or {})
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # launched by spark-submit: keep its master
    resolved = master or (None if submitted else "local[*]")
    settings: dict[str, str] = {
        "spark.app.name": "ureplicator-verify",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Adaptive query execution sizes each shuffle from what the map side wrote (a few bucket rows,
        # or pass 2's records on a real cluster), instead of a fixed partition count.
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.redaction.regex": r"(?i)secret|password|token|access[.]?key|jaas|keystore\.key",
    }
    java_options = []
    if LOG4J_CONFIG.is_file():  # errors only, so progress lines stay readable
        java_options.append(f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}")
    if resolved is not None:
        settings["spark.master"] = resolved
    if "spark.jars" not in conf and "spark.jars.packages" not in conf:
        try:
            jars = connector.spark_jars()
            reader = connector.digest_jar(jars)
            settings["spark.jars"] = ",".join(jars if reader is None or reader in jars else [*jars, reader])
        except connector.ConnectorMissing as exc:
            if resolved is None or resolved.startswith("local"):
                raise SparkUnavailable(f"Spark's Kafka connector is missing: {exc}") from None
    explicit = cds.java_options()  # UREPLICATOR_SPARK_CDS names an archive
    java_options += explicit
    if own_archive and not explicit and os.environ.get(cds.CDS_ENV, "").strip() == "":
        try:
            archive = cds.auto_archive(java.java_executable(), settings.get("spark.jars", "").split(","),
                                       cds.cache_folder())
            java_options += cds.auto_options(archive)
        except java.JavaNotFound:
            pass  # reported below, where the session starts
    if java_options:
        settings["spark.driver.extraJavaOptions"] = " ".join(java_options)
    settings.update(conf)
    # pyspark logs every captured JVM error on its own before raising it; we report them once.
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # connection chatter at INFO
    try:
        java.java_executable()
        from pyspark.sql import SparkSession

        builder = SparkSession.builder
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    except java.JavaNotFound as exc:
        raise SparkUnavailable(str(exc)) from None
    except Exception as exc:  # the JVM did not start: its message is all we have
        raise SparkUnavailable(f"cannot start Spark ({settings.get('spark.master')}): {exc}") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def is_connector_missing(exc: BaseException) -> bool:
    text = str(exc)
    return "Failed to find data source: kafka" in text or "DATA_SOURCE_NOT_FOUND" in text


# --- the route's rule ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RouteRule:
    """Which source records the route copies and which destination records are its own.

    ``forward`` is the worker's policy (worker/forwarding.py): under ``transit`` a source record whose
    readable ``urep`` origin is the destination is not copied; under ``origin`` one whose readable origin
    is not the source. Those are SKIPPED. ``attribute`` (declared routes): the destination topic may hold
    records this route did not write (produced on the destination, or copied by another route into an
    identity-named topic); a record with no ``urep`` header or a version 2 ``urep`` naming another hop
    source is FOREIGN, neither verified nor an orphan. The implicit route keeps today's rule: every
    destination record is the route's.
    """

    source: str
    destination: str
    forward: str = "transit"
    attribute: bool = False

    def skipped_sql(self) -> str:
        """SQL: whether a source record (``_urep`` = its last urep value) is one the route does not copy."""
        return sql.skipped(self.forward, self.source, self.destination)

    def skipped_note(self) -> str:
        if self.forward == "origin":
            return (f"the source record did not originate on {self.source} and the route forwards origin only: "
                    "it should not have been copied")
        return f"the source record came from {self.destination}: loop prevention should have kept it there"


def default_rule(source: KafkaSide, destination: KafkaSide) -> RouteRule:
    """Today's single pipeline: transit, every destination record the route's."""
    return RouteRule(source.alias, destination.alias)


# --- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KafkaSide:
    """How Spark reaches one cluster: bootstrap servers, Java client options (no prefix), its alias."""

    bootstrap_servers: str
    options: Mapping[str, str] = field(default_factory=dict)
    alias: str = ""


def _kafka_schema() -> Any:
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
        return spark.createDataFrame([], _kafka_schema())
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


def _with_header_columns(frame: Any, urep: str) -> Any:
    """Add _hdrs (headers, never null), _upos (first urep position), _kept (content headers), _urep."""
    from pyspark.sql import functions as F

    return (
        frame.withColumn("_hdrs", F.expr(HEADERS))
        .withColumn("_upos", F.expr(UREP_POSITION))
        .withColumn("_kept", F.expr(KEPT_HEADERS))
        .withColumn("_urep", F.expr(urep))
    )


def _source_records(
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
        _with_header_columns(read(spark, side, snap.topic, ranges), LAST_UREP)
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


def _destination_records(
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
        _with_header_columns(read(spark, side, snap.destination, ranges), UREP_VALUE)
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


# --- pass 1: buckets ---------------------------------------------------------------------------


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
    reader tasks, no shuffle, one collect; the driver merges the rows. Without it, the same rows come from
    SQL over Spark's Kafka source, a topic at a time.
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
    from pyspark.sql import functions as F

    frames = []
    for index, (snap, rule) in enumerate(topics):
        rule = rule or default_rule(source, destination)
        for side, which, topic, ranges in (
            (source, "source", snap.topic, _source_ranges(snap)),
            (destination, "destination", snap.destination, snap.destination_ranges()),
        ):
            rows = digest.bucket_rows(spark, side, topic, which, ranges, snap, bucket_size, rule, READ_TUNING)
            frames.append(rows.withColumn("_topic", F.lit(index)).withColumn("_side", F.lit(which)))
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    grouped: dict[tuple[int, str], list[Any]] = {}
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

    src = _source_records(spark, source, snap, src_ranges, rule).withColumn(
        "bh", F.expr("xxhash64(h, o)")
    )
    src_rows = (
        src.groupBy("p", "cls", F.expr(f"o div {bucket_size}").alias("bucket"))
        .agg(*_bucket_aggregates("bh"), F.min("o").alias("first"), F.max("o").alias("last"))
        .collect()
    )
    attributed = F.col("cls").isin(*ATTRIBUTED)
    dst = (
        _destination_records(spark, destination, snap, rule=rule)
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


# --- pass 2: records ---------------------------------------------------------------------------


@dataclass
class RecordPlan:
    """What pass 2 must look at, derived from pass 1."""

    mismatched: list[BucketKey]
    ordering: set[int]  # partitions whose copies are not provably in source order
    orphans: set[int]  # partitions with orphan-class records
    old: list[BucketKey] = field(default_factory=list)  # buckets with late copies of already verified offsets

    @property
    def empty(self) -> bool:
        return not (self.mismatched or self.ordering or self.orphans or self.old)

    def destination_partitions(self) -> set[int]:
        return {p for p, _ in self.mismatched} | self.ordering | self.orphans | {p for p, _ in self.old}

    def source_ranges(self, snap: TopicSnapshot, bucket_size: int) -> dict[int, tuple[int, int]]:
        """Per partition, the verified offsets spanned by its mismatched buckets."""
        spans: dict[int, tuple[int, int]] = {}
        for p, bucket in self.mismatched:
            w = snap.partitions.get(p)
            if w is None:
                continue
            start, end = model.bucket_span(bucket, bucket_size, *w.verified_range)
            if end <= start:
                continue
            low, high = spans.get(p, (start, end))
            spans[p] = (min(low, start), max(high, end))
        return spans

    def old_ranges(self, snap: TopicSnapshot, bucket_size: int) -> list[tuple[int, int, int]]:
        """(partition, start, end) of the earlier-verified source buckets that late copies name: a targeted
        read of those buckets, adjacent ones merged, never the whole verified history."""
        spans = []
        for p, bucket in sorted(self.old):
            w = snap.partitions.get(p)
            if w is None:
                continue
            start, end = model.bucket_span(bucket, bucket_size, w.log_start, w.verify_from)
            if end > start:
                spans.append((p, start, end))
        merged: list[tuple[int, int, int]] = []
        for p, start, end in spans:
            if merged and merged[-1][0] == p and merged[-1][2] >= start:
                merged[-1] = (p, merged[-1][1], max(merged[-1][2], end))
            else:
                merged.append((p, start, end))
        return merged


def record_pass(
    spark: Any,
    source: KafkaSide,
    destination: KafkaSide,
    snap: TopicSnapshot,
    bucket_size: int,
    plan: RecordPlan,
    rule: RouteRule | None = None,
) -> dict[int, dict[str, CategoryResult]]:
    """Classify the records of the planned buckets and partitions; per partition, per category."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rule = rule or default_rule(source, destination)
    dst = _destination_records(
        spark, destination, snap, plan.destination_partitions(), with_key=snap.compacted, rule=rule
    ).persist(StorageLevel.MEMORY_AND_DISK)
    findings = None
    try:
        parts = []
        ends = {p: w.end for p, w in snap.partitions.items()}
        parts.append(
            dst.filter(F.col("cls").isin(*ORPHAN_CLASSES)).select(
                F.col("dp").alias("p"), F.lit(model.ORPHAN).alias("category"), F.col("do").alias("key"),
                "sp", "so", "do", F.lit(None).cast("bigint").alias("sh"), "dh",
                F.expr(
                    f"CASE cls WHEN {UNREADABLE} THEN 'no readable urep header' "
                    f"WHEN {OTHER_PARTITION} THEN concat('urep names source partition ', sp) "
                    f"WHEN {NO_SOURCE_PARTITION} THEN 'the source has no partition with this number' "
                    f"ELSE concat('source offset at or above the source end offset ', "
                    f"try_element_at({sql.int_map(ends)}, dp)) END"
                ).alias("note"),
            )
        )
        if plan.mismatched:
            parts.extend(_bucket_findings(spark, source, destination, snap, bucket_size, plan, dst, rule))
        if plan.old:
            parts.extend(_old_copy_findings(spark, source, destination, snap, bucket_size, plan, dst, rule))
        if plan.ordering:
            first = (
                dst.filter(F.col("cls").isin(*ATTRIBUTED) & F.col("dp").isin(*sorted(plan.ordering)))
                .groupBy("dp", "so")
                .agg(F.min("do").alias("do"), F.min_by("dh", "do").alias("dh"), F.min("cls").alias("cls"))
                .withColumn("prev", F.lag("so").over(Window.partitionBy("dp").orderBy("do")))
            )
            parts.append(
                first.filter((F.col("so") < F.col("prev")) & (F.col("cls") == VERIFIED)).select(
                    F.col("dp").alias("p"), F.lit(model.REORDERED).alias("category"), F.col("so").alias("key"),
                    F.col("dp").alias("sp"), "so", "do", F.lit(None).cast("bigint").alias("sh"), "dh",
                    F.concat(F.lit("after source offset "), F.col("prev")).alias("note"),
                )
            )
        findings = parts[0]
        for part in parts[1:]:
            findings = findings.unionByName(part)
        findings = findings.persist(StorageLevel.MEMORY_AND_DISK)
        return _summarise(findings)
    finally:
        if findings is not None:
            findings.unpersist()
        dst.unpersist()


def _bucket_findings(
    spark: Any,
    source: KafkaSide,
    destination: KafkaSide,
    snap: TopicSnapshot,
    bucket_size: int,
    plan: RecordPlan,
    dst: Any,
    rule: RouteRule,
) -> list[Any]:
    """MISSING, in-range ORPHAN, CORRUPTED, DUPLICATE (and COMPACTED) rows of the mismatched buckets."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keyed = snap.compacted
    buckets = F.broadcast(spark.createDataFrame([(int(p), int(b)) for p, b in plan.mismatched], "bp int, bb bigint"))
    src = (
        _source_records(spark, source, snap, plan.source_ranges(snap, bucket_size), rule, with_key=keyed)
        .filter(F.col("cls").isin(VERIFIED, SKIPPED))
        .withColumn("bucket", F.expr(f"o div {bucket_size}"))
        .join(buckets, (F.col("p") == F.col("bp")) & (F.col("bucket") == F.col("bb")), "left_semi")
        .select("p", "o", F.col("h").alias("sh"), F.col("cls").alias("scls"),
                *([F.col("k").alias("sk")] if keyed else []))
    )
    ver = (
        dst.filter(F.col("cls") == VERIFIED)
        .withColumn("bucket", F.expr(f"so div {bucket_size}"))
        .join(buckets, (F.col("dp") == F.col("bp")) & (F.col("bucket") == F.col("bb")), "left_semi")
        .select("dp", "do", "so", "dh", *([F.col("k").alias("dk")] if keyed else []))
    )
    joined = ver.join(src, (ver["dp"] == src["p"]) & (ver["so"] == src["o"]), "full_outer")
    none = F.lit(None).cast("bigint")
    skipped = F.col("scls") == SKIPPED
    absent = joined.filter(F.col("do").isNull() & ~skipped)  # source records the destination lacks
    stray = joined.filter(F.col("o").isNull())  # destination records naming an offset the source lacks
    looped = joined.filter(F.col("do").isNotNull() & skipped).select(  # mirrored back to where it came from
        F.col("dp").alias("p"), F.lit(model.ORPHAN).alias("category"), F.col("do").alias("key"),
        F.col("dp").alias("sp"), "so", "do", "sh", "dh",
        F.lit(rule.skipped_note()).alias("note"),
    )
    if keyed:
        # Compaction may remove a record on either side once that side holds a later one with the same key.
        later_dst = (
            dst.filter(F.col("cls").isin(*ATTRIBUTED))
            .groupBy(F.col("dp").alias("lp"), F.col("k").alias("lk"))
            .agg(F.max("so").alias("later"))
        )
        absent = absent.join(later_dst, (F.col("p") == F.col("lp")) & (F.col("sk") == F.col("lk")), "left")
        whole = {p: (snap.partitions[p].log_start, snap.partitions[p].end)
                 for p, _ in plan.mismatched if p in snap.partitions}
        later_src = (
            _source_records(spark, source, snap, whole, rule, with_key=True)
            .groupBy(F.col("p").alias("lp"), F.col("k").alias("lk"))
            .agg(F.max("o").alias("later"))
        )
        stray = stray.join(later_src, (F.col("dp") == F.col("lp")) & (F.col("dk") == F.col("lk")), "left")
        absent_compacted = F.coalesce(F.col("later") > F.col("o"), F.lit(False))
        stray_compacted = F.coalesce(F.col("later") > F.col("so"), F.lit(False))
        absent_note = F.when(absent_compacted, F.concat(
            F.lit("the destination holds source offset "), F.col("later"), F.lit(" with the same key")))
        stray_note = F.when(stray_compacted, F.concat(
            F.lit("compacted on the source: source offset "), F.col("later"), F.lit(" has the same key")))
    else:
        absent_compacted = stray_compacted = F.lit(False)
        absent_note = stray_note = F.lit(None).cast("string")
    missing = absent.select(
        "p",
        F.when(absent_compacted, model.COMPACTED).otherwise(model.MISSING).alias("category"),
        F.col("o").alias("key"), F.col("p").alias("sp"), F.col("o").alias("so"), none.alias("do"), "sh",
        none.alias("dh"), absent_note.alias("note"),
    )
    orphan = stray.select(
        F.col("dp").alias("p"),
        F.when(stray_compacted, model.COMPACTED).otherwise(model.ORPHAN).alias("category"),
        F.when(stray_compacted, F.col("so")).otherwise(F.col("do")).alias("key"),
        F.col("dp").alias("sp"), "so", "do", none.alias("sh"), "dh",
        F.coalesce(stray_note, F.lit("no source record has this offset")).alias("note"),
    )
    matched = joined.filter(F.col("do").isNotNull() & F.col("o").isNotNull() & ~skipped)
    corrupted = matched.filter(F.col("dh") != F.col("sh")).select(
        "p", F.lit(model.CORRUPTED).alias("category"), F.col("so").alias("key"), F.col("p").alias("sp"),
        "so", "do", "sh", "dh", F.lit(None).cast("string").alias("note"),
    )
    copies = matched.withColumn("copy", F.row_number().over(Window.partitionBy("p", "so").orderBy("do")))
    duplicate = copies.filter(F.col("copy") > 1).select(
        "p", F.lit(model.DUPLICATE).alias("category"), F.col("so").alias("key"), F.col("p").alias("sp"),
        "so", "do", "sh", "dh", F.concat(F.lit("copy "), F.col("copy")).alias("note"),
    )
    return [missing, orphan, looped, corrupted, duplicate]


def _old_copy_findings(
    spark: Any,
    source: KafkaSide,
    destination: KafkaSide,
    snap: TopicSnapshot,
    bucket_size: int,
    plan: RecordPlan,
    dst: Any,
    rule: RouteRule,
) -> list[Any]:
    """Late copies of source offsets an earlier run verified: each is a DUPLICATE (the first copy was
    verified then), also CORRUPTED when its content differs from the source record's, an ORPHAN when
    the source has no record there (on a compacted topic: one compacted since, a DUPLICATE) or when
    loop prevention should have kept it at the source."""
    from pyspark.sql import functions as F

    src = _source_records(spark, source, snap, plan.old_ranges(snap, bucket_size), rule).select(
        "p", "o", F.col("h").alias("sh"), F.col("cls").alias("scls")
    )
    late = dst.filter(F.col("cls") == OLD).select("dp", "do", "so", "dh")
    joined = late.join(src, (late["dp"] == src["p"]) & (late["so"] == src["o"]), "left")
    present = F.col("o").isNotNull() & (F.col("scls") != SKIPPED)
    kept = present | F.lit(snap.compacted) & F.col("o").isNull()
    duplicate = joined.filter(kept).select(
        F.col("dp").alias("p"), F.lit(model.DUPLICATE).alias("category"), F.col("so").alias("key"),
        F.col("dp").alias("sp"), "so", "do", "sh", "dh",
        F.when(F.col("o").isNull(), F.lit("late copy of a record verified in an earlier run; compacted since"))
        .otherwise(F.lit("late copy of a record verified in an earlier run")).alias("note"),
    )
    corrupted = joined.filter(present & (F.col("dh") != F.col("sh"))).select(
        F.col("dp").alias("p"), F.lit(model.CORRUPTED).alias("category"), F.col("so").alias("key"),
        F.col("dp").alias("sp"), "so", "do", "sh", "dh",
        F.lit("late copy of a record verified in an earlier run").alias("note"),
    )
    orphan = joined.filter(~kept).select(
        F.col("dp").alias("p"), F.lit(model.ORPHAN).alias("category"), F.col("do").alias("key"),
        F.col("dp").alias("sp"), "so", "do", "sh", "dh",
        F.when(F.col("o").isNull(), F.lit("no source record has this offset"))
        .otherwise(F.lit(rule.skipped_note())).alias("note"),
    )
    return [duplicate, corrupted, orphan]


def _summarise(findings: Any) -> dict[int, dict[str, CategoryResult]]:
    """Counts, compressed ranges (at most MAX_RANGES) and MAX_SAMPLES samples per partition and category."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    out: dict[int, dict[str, CategoryResult]] = {}

    def slot(p: int, category: str) -> CategoryResult:
        return out.setdefault(int(p), {}).setdefault(category, CategoryResult())

    for r in findings.groupBy("p", "category").count().collect():
        slot(r.p, r.category).count = r["count"]
    per = Window.partitionBy("p", "category")
    islands = (
        findings.withColumn("island", F.col("key") - F.dense_rank().over(per.orderBy("key")))
        .groupBy("p", "category", "island")
        .agg(F.min("key").alias("first"), F.max("key").alias("last"))
        .withColumn("n", F.row_number().over(per.orderBy("first")))
        .filter(F.col("n") <= model.MAX_RANGES + 1)
        .collect()
    )
    for r in sorted(islands, key=lambda r: (r.p, r.category, r.first)):
        result = slot(r.p, r.category)
        if r.n > model.MAX_RANGES:
            result.ranges_truncated = True
        else:
            result.ranges.append([int(r.first), int(r.last)])
    samples = (
        findings.withColumn("n", F.row_number().over(per.orderBy("key", F.col("do").asc_nulls_first())))
        .filter(F.col("n") <= model.MAX_SAMPLES)
        .collect()
    )
    for r in sorted(samples, key=lambda r: (r.p, r.category, r.n)):
        slot(r.p, r.category).samples.append(
            Sample(
                source_partition=r.sp,
                source_offset=r.so,
                destination_offset=r.do,
                source_hash=model.hash_hex(r.sh),
                destination_hash=model.hash_hex(r.dh),
                note=r.note,
            )
        )
    return out
