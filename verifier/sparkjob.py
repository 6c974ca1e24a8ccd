"""Spark edge of the verifier: read both clusters with Spark's Kafka source and compare them in the JVM.

Per-record work is built-in SQL only (hash, header parsing, windows,
aggregates); Python sees bucket aggregates and summarised findings, never
records. Two passes per topic:

1. **buckets** — source: per (partition, offset bucket) count, exact sum and
   xor of the bucket hashes; destination: the same per (partition, bucket of
   the ``urep`` source offset), plus each record's class (verified, pending,
   expired, or an orphan class) and the number of steps down in source offset
   along destination order (a reordering always makes one).
2. **records** — only when pass 1 found a difference: re-read, join the
   records of the differing buckets, list orphans and, for partitions with a
   step down, order the first copies; summarise to counts, offset ranges and
   samples per category.

See docs/verification.md for the hash and the categories.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from common import java, provenance
from common.errors import UReplicatorError
from reports import model
from reports.model import BucketAggregate, BucketKey, CategoryResult, Sample
from verifier import connector
from verifier.watermarks import TopicSnapshot

CONNECTOR_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1"
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

# Destination record classes (pass 1); the first four are orphans.
UNREADABLE = "unreadable"
OTHER_PARTITION = "other_partition"
NO_SOURCE_PARTITION = "no_source_partition"
BEYOND_END = "beyond_end"
EXPIRED = "expired"
PENDING = "pending"
VERIFIED = "verified"
SKIPPED = "skipped"  # source records from the destination cluster: loop prevention keeps them there
ORPHAN_CLASSES = (UNREADABLE, OTHER_PARTITION, NO_SOURCE_PARTITION, BEYOND_END)
ATTRIBUTED = (EXPIRED, PENDING, VERIFIED)


class SparkUnavailable(UReplicatorError):
    """Spark or its Kafka connector cannot run here; the verification could not start."""

    exit_status = 2


# --- session -----------------------------------------------------------------------------------


def session(master: str | None = None, conf: Mapping[str, str] | None = None) -> Any:
    """The process's SparkSession, created with the Kafka connector on the classpath.

    ``master`` None means: what spark-submit chose, else ``local[*]``. For local
    masters the connector jars come from ``connector.spark_jars()``; on a
    cluster pass ``--packages`` (see CONNECTOR_PACKAGE) or ``spark.jars``.
    """
    conf = dict(conf or {})
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # launched by spark-submit: keep its master
    resolved = master or (None if submitted else "local[*]")
    settings: dict[str, str] = {
        "spark.app.name": "ureplicator-verify",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.redaction.regex": r"(?i)secret|password|token|access[.]?key|jaas|keystore\.key",
    }
    if LOG4J_CONFIG.is_file():  # errors only, so progress lines stay readable
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}"
    if resolved is not None:
        settings["spark.master"] = resolved
    if "spark.jars" not in conf and "spark.jars.packages" not in conf:
        try:
            settings["spark.jars"] = ",".join(connector.spark_jars())
        except connector.ConnectorMissing as exc:
            if resolved is None or resolved.startswith("local"):
                raise SparkUnavailable(f"Spark's Kafka connector is missing: {exc}") from None
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


# --- SQL expressions ---------------------------------------------------------------------------


def _i32(expr: str) -> str:
    """A non-negative int as 4 big-endian bytes (ANSI Spark refuses CAST(int AS BINARY))."""
    return f"unhex(lpad(hex({expr}), 8, '0'))"


def _sized(expr: str) -> str:
    """Length-prefixed bytes; a null is the length -1 and no bytes."""
    return f"CASE WHEN {expr} IS NULL THEN X'FFFFFFFF' ELSE concat({_i32(f'octet_length({expr})')}, {expr}) END"


_HEADER = provenance.HEADER
KEPT_HEADERS = f"filter(coalesce(headers, array()), h -> h.key <> '{_HEADER}')"
CONTENT_HASH = (
    "xxhash64(concat("
    f"{_sized('key')}, {_sized('value')}, {_i32('size(_kept)')}, "
    "aggregate(_kept, X'', (acc, h) -> concat(acc, "
    f"{_i32('octet_length(h.key)')}, encode(h.key, 'UTF-8'), {_sized('h.value')})), "
    "unhex(lpad(hex(coalesce(unix_millis(timestamp), -1L)), 16, '0'))))"
)
# urep: u8 version | i64 source offset | i32 source partition | u8 n | n bytes alias (hex digits 1-based).
_UREP_VALUE = (
    f"CASE WHEN size(filter(coalesce(headers, array()), h -> h.key = '{_HEADER}')) = 1 "
    f"THEN try_element_at(filter(headers, h -> h.key = '{_HEADER}'), 1).value END"
)
_UREP_VALID = (
    "coalesce(octet_length(_urep) >= 14 AND substr(_uhex, 1, 2) = '01' "
    "AND octet_length(_urep) = 14 + CAST(conv(substr(_uhex, 27, 2), 16, 10) AS INT), false)"
)
_UREP_OFFSET = "CAST(conv(substr(_uhex, 3, 16), 16, -10) AS BIGINT)"
_UREP_PARTITION = "CAST(conv(substr(_uhex, 19, 8), 16, 10) AS BIGINT)"
# The worker takes a source record's origin from its last urep header, when readable.
_LAST_UREP = f"try_element_at(filter(coalesce(headers, array()), h -> h.key = '{_HEADER}'), -1).value"


def _int_map(values: Mapping[int, int]) -> str:
    if not values:
        return "map()"
    pairs = ", ".join(f"{int(k)}, {int(v)}L" for k, v in sorted(values.items()))
    return f"map({pairs})"


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


def read(spark: Any, side: KafkaSide, topic: str, ranges: Mapping[int, tuple[int, int]]) -> Any:
    """Records of ``topic`` in [start, end) per partition (committed records only)."""
    wanted = {p: r for p, r in sorted(ranges.items()) if r[1] > r[0]}
    if not wanted:
        return spark.createDataFrame([], _kafka_schema())
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", side.bootstrap_servers)
        .option("assign", json.dumps({topic: list(wanted)}))
        .option("startingOffsets", json.dumps({topic: {str(p): s for p, (s, _) in wanted.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): e for p, (_, e) in wanted.items()}}))
        .option("includeHeaders", "true")
        # Offsets that vanish meanwhile (retention) are caught by re-reading the log start.
        .option("failOnDataLoss", "false")
        .option("kafka.isolation.level", "read_committed")
        # Every task reads up to the end of its range; the consumer's fetch past the end would otherwise
        # wait the default 500 ms for records that will not come (fetches with data return at once).
        .option("kafka.fetch.max.wait.ms", "10")
    )
    parallelism = spark.sparkContext.defaultParallelism
    if len(wanted) < parallelism:
        reader = reader.option("minPartitions", str(parallelism))
    for key, value in side.options.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()


def _source_records(
    spark: Any,
    side: KafkaSide,
    snap: TopicSnapshot,
    ranges: Mapping[int, tuple[int, int]],
    skip_origin: str,
    with_key: bool = False,
) -> Any:
    """(p, o, h, cls[, k]): content hash per source record; skipped when it came from ``skip_origin``,
    else verified below the watermark and pending above."""
    from pyspark.sql import functions as F

    watermarks = {p: w.watermark for p, w in snap.partitions.items()}
    if skip_origin:
        origin = F.expr("substr(_urep, 15)")  # the alias after the 14 fixed bytes
        looped = F.coalesce(F.expr(_UREP_VALID) & (origin == F.lit(bytearray(skip_origin.encode()))), F.lit(False))
    else:
        looped = F.lit(False)
    return (
        read(spark, side, snap.topic, ranges)
        .withColumn("_kept", F.expr(KEPT_HEADERS))
        .withColumn("_urep", F.expr(_LAST_UREP))
        .withColumn("_uhex", F.expr("hex(_urep)"))
        .select(
            F.col("partition").alias("p"),
            F.col("offset").alias("o"),
            F.expr(CONTENT_HASH).alias("h"),
            looped.alias("_looped"),
            *([F.col("key").alias("k")] if with_key else []),
        )
        .withColumn(
            "cls",
            F.expr(
                f"CASE WHEN _looped THEN '{SKIPPED}' "
                f"WHEN o < try_element_at({_int_map(watermarks)}, p) THEN '{VERIFIED}' ELSE '{PENDING}' END"
            ),
        )
        .drop("_looped")
    )


def _destination_records(
    spark: Any, side: KafkaSide, snap: TopicSnapshot, partitions: Iterable[int] | None = None, with_key: bool = False
) -> Any:
    """(dp, do, sp, so, dh, cls[, k]): each destination record, its provenance and its class."""
    from pyspark.sql import functions as F

    ranges = snap.destination_ranges()
    if partitions is not None:
        keep = set(partitions)
        ranges = {p: r for p, r in ranges.items() if p in keep}
    ends = {p: w.end for p, w in snap.partitions.items()}
    starts = {p: w.log_start for p, w in snap.partitions.items()}
    marks = {p: w.watermark for p, w in snap.partitions.items()}
    cls = (
        f"CASE WHEN NOT _valid OR so < 0 THEN '{UNREADABLE}' "
        f"WHEN sp <> dp THEN '{OTHER_PARTITION}' "
        f"WHEN try_element_at({_int_map(ends)}, dp) IS NULL THEN '{NO_SOURCE_PARTITION}' "
        f"WHEN so >= try_element_at({_int_map(ends)}, dp) THEN '{BEYOND_END}' "
        f"WHEN so < try_element_at({_int_map(starts)}, dp) THEN '{EXPIRED}' "
        f"WHEN so >= try_element_at({_int_map(marks)}, dp) THEN '{PENDING}' "
        f"ELSE '{VERIFIED}' END"
    )
    return (
        read(spark, side, snap.destination, ranges)
        .withColumn("_kept", F.expr(KEPT_HEADERS))
        .withColumn("_urep", F.expr(_UREP_VALUE))
        .withColumn("_uhex", F.expr("hex(_urep)"))
        .withColumn("_valid", F.expr(_UREP_VALID))
        .select(
            F.col("partition").alias("dp"),
            F.col("offset").alias("do"),
            F.expr(f"CASE WHEN _valid THEN {_UREP_PARTITION} END").alias("_spu"),
            F.expr(f"CASE WHEN _valid THEN {_UREP_OFFSET} END").alias("so"),
            F.expr(CONTENT_HASH).alias("dh"),
            F.col("_valid"),
            *([F.col("key").alias("k")] if with_key else []),
        )
        .withColumn("sp", F.expr("CASE WHEN _spu >= 2147483648 THEN _spu - 4294967296 ELSE _spu END"))
        .withColumn("cls", F.expr(cls))
        .drop("_spu", "_valid")
    )


def _decimal_sum(column: str) -> Any:
    from pyspark.sql import functions as F

    return F.sum(F.col(column).cast("decimal(20,0)")).cast("decimal(38,0)")


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
    steps_down: dict[int, int] = field(default_factory=dict)
    verified: dict[int, int] = field(default_factory=dict)  # source records in [L, W)


def bucket_pass(
    spark: Any, source: KafkaSide, destination: KafkaSide, snap: TopicSnapshot, bucket_size: int
) -> BucketPass:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    result = BucketPass()
    src_ranges = {p: (w.log_start, w.end) for p, w in snap.partitions.items()}
    src = _source_records(spark, source, snap, src_ranges, destination.alias).withColumn(
        "bh", F.expr("xxhash64(h, o)")
    )
    rows = (
        src.groupBy("p", "cls", F.expr(f"o div {bucket_size}").alias("bucket"))
        .agg(
            F.count(F.lit(1)).alias("n"), _decimal_sum("bh").alias("total"), F.bit_xor("bh").alias("xor"),
            F.min("o").alias("first"), F.max("o").alias("last"),
        )
        .collect()
    )
    for r in rows:
        if r.cls == VERIFIED:
            result.source[(r.p, r.bucket)] = BucketAggregate(r.n, Decimal(r.total), r.xor)
            result.verified[r.p] = result.verified.get(r.p, 0) + r.n
        else:
            found = result.pending if r.cls == PENDING else result.skipped
            found.setdefault(r.p, []).append(ClassAggregate(r.n, r.first, r.last))

    attributed = F.col("cls").isin(*ATTRIBUTED)
    order = Window.partitionBy("dp", "attributed").orderBy("do")
    dst = (
        _destination_records(spark, destination, snap)
        .withColumn("attributed", attributed)
        .withColumn("step", F.when(F.col("attributed") & (F.col("so") < F.lag("so").over(order)), 1).otherwise(0))
        .withColumn("bucket", F.when(F.col("attributed"), F.expr(f"so div {bucket_size}")).otherwise(F.lit(-1)))
        .withColumn("bh", F.expr("xxhash64(dh, so)"))
    )
    rows = (
        dst.groupBy("dp", "attributed", "cls", "bucket")
        .agg(
            F.count(F.lit(1)).alias("n"), _decimal_sum("bh").alias("total"), F.bit_xor("bh").alias("xor"),
            F.min("so").alias("first"), F.max("so").alias("last"), F.sum("step").alias("steps"),
        )
        .collect()
    )
    for r in rows:
        result.steps_down[r.dp] = result.steps_down.get(r.dp, 0) + int(r.steps or 0)
        if r.cls == VERIFIED:
            result.destination[(r.dp, r.bucket)] = BucketAggregate(r.n, Decimal(r.total), r.xor)
        elif r.cls == EXPIRED:
            result.expired.setdefault(r.dp, []).append(ClassAggregate(r.n, r.first, r.last))
        elif r.cls in ORPHAN_CLASSES:
            result.orphans[r.dp] = result.orphans.get(r.dp, 0) + r.n
    return result


# --- pass 2: records ---------------------------------------------------------------------------


@dataclass
class RecordPlan:
    """What pass 2 must look at, derived from pass 1."""

    mismatched: list[BucketKey]
    ordering: set[int]  # partitions with a step down in source offset
    orphans: set[int]  # partitions with orphan-class records

    @property
    def empty(self) -> bool:
        return not (self.mismatched or self.ordering or self.orphans)

    def destination_partitions(self) -> set[int]:
        return {p for p, _ in self.mismatched} | self.ordering | self.orphans

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


def record_pass(
    spark: Any, source: KafkaSide, destination: KafkaSide, snap: TopicSnapshot, bucket_size: int, plan: RecordPlan
) -> dict[int, dict[str, CategoryResult]]:
    """Classify the records of the planned buckets and partitions; per partition, per category."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    dst = _destination_records(
        spark, destination, snap, plan.destination_partitions(), with_key=snap.compacted
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
                    f"CASE cls WHEN '{UNREADABLE}' THEN 'no readable urep header' "
                    f"WHEN '{OTHER_PARTITION}' THEN concat('urep names source partition ', sp) "
                    f"WHEN '{NO_SOURCE_PARTITION}' THEN 'the source has no partition with this number' "
                    f"ELSE concat('source offset at or above the source end offset ', "
                    f"try_element_at({_int_map(ends)}, dp)) END"
                ).alias("note"),
            )
        )
        if plan.mismatched:
            parts.extend(_bucket_findings(spark, source, destination, snap, bucket_size, plan, dst))
        if plan.ordering:
            first = (
                dst.filter(F.col("cls").isin(*ATTRIBUTED) & F.col("dp").isin(*sorted(plan.ordering)))
                .groupBy("dp", "so")
                .agg(F.min("do").alias("do"), F.min_by("dh", "do").alias("dh"), F.max("cls").alias("cls"))
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
) -> list[Any]:
    """MISSING, in-range ORPHAN, CORRUPTED, DUPLICATE (and COMPACTED) rows of the mismatched buckets."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keyed = snap.compacted
    buckets = F.broadcast(spark.createDataFrame([(int(p), int(b)) for p, b in plan.mismatched], "bp int, bb bigint"))
    origin = destination.alias
    src = (
        _source_records(spark, source, snap, plan.source_ranges(snap, bucket_size), origin, with_key=keyed)
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
        F.lit(f"the source record came from {origin}: loop prevention should have kept it there").alias("note"),
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
            _source_records(spark, source, snap, whole, origin, with_key=True)
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
