"""Pass 2 of the verifier: classify the records of what pass 1 found different, and summarise them.

Only when pass 1 found a difference: re-read with Spark's Kafka source, join
the records of the differing buckets, list orphans and, for partitions not
proven in order, order the first copies; summarise to counts, offset ranges
and samples per category (docs/verification.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ureplicator.reports import model
from ureplicator.reports.model import BucketKey, CategoryResult, Sample
from ureplicator.verifier import sql
from ureplicator.verifier.kafka_source import destination_records, source_records
from ureplicator.verifier.route import (
    ATTRIBUTED,
    NO_SOURCE_PARTITION,
    OLD,
    ORPHAN_CLASSES,
    OTHER_PARTITION,
    SKIPPED,
    UNREADABLE,
    VERIFIED,
    KafkaSide,
    RouteRule,
    default_rule,
)
from ureplicator.verifier.watermarks import TopicSnapshot


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
    dst = destination_records(
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
        source_records(spark, source, snap, plan.source_ranges(snap, bucket_size), rule, with_key=keyed)
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
            source_records(spark, source, snap, whole, rule, with_key=True)
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

    src = source_records(spark, source, snap, plan.old_ranges(snap, bucket_size), rule).select(
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
