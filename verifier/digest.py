"""Pass 1 aggregated inside the reader: plan and read the digest source (jvm/digest), or say why not.

Spark's Kafka source turns every record into a row before any SQL runs, and
that is most of what pass 1 costs. The digest reader (a DataSource V2 source
in Java, ``io.ureplicator.digest.DigestSource``) consumes each offset range
with the plain Kafka consumer, hashes and classifies every record exactly as
``verifier/sparkjob.py``'s SQL does, and hands Spark one row per (partition,
class, bucket). This module turns a snapshot into the reader's options and
merges the rows of ranges that share a bucket; ``sparkjob.bucket_pass``
decides which reader runs. Nobody configures it: when its jar is not on the
classpath, pass 1 falls back to Spark's Kafka source with a warning.
``UREPLICATOR_VERIFIER_READER=kafka`` forces the fallback (tests and the
benchmark compare both readers with it).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ureplicator.verifier.watermarks import TopicSnapshot

if TYPE_CHECKING:
    from ureplicator.verifier.sparkjob import RouteRule

FORMAT = "io.ureplicator.digest.DigestSource"
READER_ENV = "UREPLICATOR_VERIFIER_READER"
# Offsets per input partition at least: a Kafka consumer per range costs tens of milliseconds.
MIN_CHUNK = 50_000

_log = logging.getLogger(__name__)


def available(spark: Any) -> bool:
    """Whether this session runs the digest reader; probed once per session, with a warning when not."""
    if os.environ.get(READER_ENV, "auto").strip().lower() == "kafka":
        return False
    known = getattr(spark, "_ureplicator_digest", None)
    if known is not None:
        return bool(known)
    found, why = _probe(spark)
    if not found:
        message = (f"the digest reader is unavailable ({why}): pass 1 reads with Spark's Kafka source, "
                   "which costs several times more CPU per record; run `make jars` (or use the verifier image)")
        _log.warning(message)
        print(f"verify: warning: {message}", file=sys.stderr, flush=True)
    spark._ureplicator_digest = found
    return found


def reader_name(spark: Any) -> str:
    return "digest" if available(spark) else "kafka"


def _probe(spark: Any) -> tuple[bool, str]:
    try:
        frame = (spark.read.format(FORMAT).option("side", "source").option("topic", "probe")
                 .option("bucket.size", "1").load())
        columns = frame.columns
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable here
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return False, first[:200]
    return "bucket" in columns, "" if "bucket" in columns else f"unexpected columns {columns}"


def chunks(ranges: Mapping[int, tuple[int, int]], bucket_size: int, parallelism: int) -> list[tuple[int, int, int]]:
    """Split the ranges into (partition, start, end) input partitions: enough for every core, none tiny,
    cut at bucket boundaries."""
    total = sum(max(0, e - s) for s, e in ranges.values())
    wanted = max(1, parallelism)
    size = max(MIN_CHUNK, -(-total // wanted))
    size = -(-size // bucket_size) * bucket_size
    out = []
    for p, (start, end) in sorted(ranges.items()):
        cut = start
        while cut < end:
            stop = min(end, (cut // size + 1) * size)
            out.append((p, cut, stop))
            cut = stop
    return out


def _listed(values: Mapping[int, int]) -> str:
    return ",".join(f"{int(p)}:{int(v)}" for p, v in sorted(values.items()))


def bucket_rows(
    spark: Any,
    side: Any,
    topic: str,
    which: str,
    ranges: Mapping[int, tuple[int, int]],
    snap: TopicSnapshot,
    bucket_size: int,
    rule: RouteRule | None = None,
    tuning: Mapping[str, str] | None = None,
) -> Any:
    """Pass-1 rows (p, cls, bucket, n, high, low, xor, first, last, first_do, delta_min, delta_max) of one side."""
    from pyspark.sql import functions as F

    parts = snap.partitions
    reader = (
        spark.read.format(FORMAT)
        .option("side", which)
        .option("topic", topic)
        .option("bucket.size", str(bucket_size))
        .option("chunks", ",".join(f"{p}:{s}:{e}" for p, s, e in
                                   chunks(ranges, bucket_size, spark.sparkContext.defaultParallelism)))
        .option("verify.to", _listed({p: w.verify_to for p, w in parts.items()}))
        .option("kafka.bootstrap.servers", side.bootstrap_servers)
    )
    if which == "source":
        if rule is not None and rule.forward == "origin":
            reader = reader.option("keep.origin", rule.source.encode().hex())
        elif rule is not None:
            reader = reader.option("skip.origin", rule.destination.encode().hex())
    else:
        if rule is not None and rule.attribute:
            reader = reader.option("hop.source", rule.source.encode().hex())
        reader = (
            reader.option("verify.from", _listed({p: w.verify_from for p, w in parts.items()}))
            .option("log.start", _listed({p: w.log_start for p, w in parts.items()}))
            .option("end", _listed({p: w.end for p, w in parts.items()}))
        )
    for key, value in {**(tuning or {}), **side.options}.items():
        reader = reader.option(f"kafka.{key}", value)
    return (
        reader.load()
        .groupBy("p", "cls", "bucket")
        .agg(
            F.sum("n").alias("n"), F.sum("high").alias("high"), F.sum("low").alias("low"),
            F.bit_xor("xor").alias("xor"), F.min("first").alias("first"), F.max("last").alias("last"),
            F.min("first_do").alias("first_do"), F.min("delta_min").alias("delta_min"),
            F.max("delta_max").alias("delta_max"),
        )
    )
