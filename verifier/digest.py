"""Pass 1 aggregated inside the reader: plan and read the digest source (jvm/digest), or say why not.

Spark's Kafka source turns every record into a row before any SQL runs, and
that is most of what pass 1 costs. The digest reader (a DataSource V2 source
in Java, ``io.ureplicator.digest.DigestSource``) consumes each offset range
with the plain Kafka consumer, hashes and classifies every record exactly as
``verifier/kafka_source.py``'s SQL does, and hands Spark one row per (partition,
class, bucket). This module turns a snapshot into the reader's options and
merges the rows of chunks that share a bucket in the driver (no shuffle);
``pass1.bucket_passes`` decides which reader runs. Nobody configures it:
when its jar is not on the classpath, pass 1 falls back to Spark's Kafka
source with a warning.
``UREPLICATOR_VERIFIER_READER=kafka`` forces the fallback (tests and the
benchmark compare both readers with it); ``digest-job`` makes the digest
reader run as a Spark job even for the small runs it reads in the driver
(the standalone-cluster test, so that its executors read).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ureplicator.verifier.watermarks import TopicSnapshot

if TYPE_CHECKING:
    from ureplicator.verifier.route import RouteRule

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


def _chunk_size(ranges: Mapping[int, tuple[int, int]], bucket_size: int, parallelism: int) -> int:
    total = sum(max(0, e - s) for s, e in ranges.values())
    size = max(MIN_CHUNK, -(-total // max(1, parallelism)))
    return -(-size // bucket_size) * bucket_size


def chunks(ranges: Mapping[int, tuple[int, int]], bucket_size: int, parallelism: int) -> list[tuple[int, int, int]]:
    """Split the ranges into (partition, start, end) chunks: enough for every core, none tiny,
    cut at bucket boundaries."""
    size = _chunk_size(ranges, bucket_size, parallelism)
    out = []
    for p, (start, end) in sorted(ranges.items()):
        cut = start
        while cut < end:
            stop = min(end, (cut // size + 1) * size)
            out.append((p, cut, stop))
            cut = stop
    return out


def tasks(
    ranges: Mapping[int, tuple[int, int]], bucket_size: int, parallelism: int
) -> list[list[tuple[int, int, int]]]:
    """The chunks as Spark tasks: a full-size chunk alone; smaller ones (small partitions, a partition's ends) packed
    together, of distinct partitions, up to a chunk's size, so that a topic of many small partitions is a few tasks
    with one consumer each instead of a task and a consumer per partition."""
    size = _chunk_size(ranges, bucket_size, parallelism)
    out: list[list[tuple[int, int, int]]] = []
    group: list[tuple[int, int, int]] = []
    filled = 0
    for chunk in chunks(ranges, bucket_size, parallelism):
        length = chunk[2] - chunk[1]
        if length >= size:
            out.append([chunk])
            continue
        if group and (filled + length > size or any(chunk[0] == p for p, _, _ in group)):
            out.append(group)
            group, filled = [], 0
        group.append(chunk)
        filled += length
    if group:
        out.append(group)
    return out


def _listed(values: Mapping[int, int]) -> str:
    return ",".join(f"{int(p)}:{int(v)}" for p, v in sorted(values.items()))


def reader_options(
    side: Any,
    topic: str,
    which: str,
    tasked: list[list[tuple[int, int, int]]],
    snap: TopicSnapshot,
    bucket_size: int,
    rule: RouteRule | None = None,
    tuning: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The reader's options for one side of one topic: its tasks, each (partition, start, end) chunks of distinct
    partitions, the snapshot's offsets the classes depend on, the route's rule and the consumer's settings
    (``kafka.`` prefixed)."""
    parts = snap.partitions
    options = {
        "side": which,
        "topic": topic,
        "bucket.size": str(bucket_size),
        "chunks": ",".join(";".join(f"{p}:{s}:{e}" for p, s, e in task) for task in tasked),
        "verify.to": _listed({p: w.verify_to for p, w in parts.items()}),
        "kafka.bootstrap.servers": side.bootstrap_servers,
    }
    if which == "source":
        if rule is not None and rule.forward == "origin":
            options["keep.origin"] = rule.source.encode().hex()
        elif rule is not None:
            options["skip.origin"] = rule.destination.encode().hex()
    else:
        if rule is not None and rule.attribute:
            options["hop.source"] = rule.source.encode().hex()
        options["verify.from"] = _listed({p: w.verify_from for p, w in parts.items()})
        options["log.start"] = _listed({p: w.log_start for p, w in parts.items()})
        options["end"] = _listed({p: w.end for p, w in parts.items()})
    for key, value in {**(tuning or {}), **side.options}.items():
        options[f"kafka.{key}"] = value
    return options


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
    """The reader's pass-1 rows (p, cls, bucket, n, high, low, xor, first, last, first_do, delta_min,
    delta_max) of one side, one row per (chunk, class, bucket): unmerged (see ``merge``), and no shuffle."""
    tasked = tasks(ranges, bucket_size, spark.sparkContext.defaultParallelism)
    options = reader_options(side, topic, which, tasked, snap, bucket_size, rule, tuning)
    return spark.read.format(FORMAT).options(**options).load()


# Pass 1 of at most this many offsets in all (every topic, both sides) is read in the driver, without a Spark
# job (``driver_rows``): scheduling one costs about half a second on a warm session, more than reading this
# many records. Larger runs keep the Spark job, whose tasks spread over the executors.
DRIVER_MAX_OFFSETS = 200_000
DRIVER_CLASS = "io.ureplicator.digest.DriverDigest"


def driver_available(spark: Any) -> bool:
    """Whether the digest jar in this session has the in-driver reader (a jar built before it has not), and
    ``UREPLICATOR_VERIFIER_READER`` is not ``digest-job``."""
    if os.environ.get(READER_ENV, "auto").strip().lower() == "digest-job":
        return False
    known = getattr(spark, "_ureplicator_driver_digest", None)
    if known is None:
        from py4j.java_gateway import JavaClass

        try:
            known = isinstance(spark._jvm.io.ureplicator.digest.DriverDigest, JavaClass)
        except Exception:  # noqa: BLE001 - no gateway or no class: the Spark job reads instead
            known = False
        spark._ureplicator_driver_digest = known
    return bool(known)


def whole_ranges(ranges: Mapping[int, tuple[int, int]]) -> list[list[tuple[int, int, int]]]:
    """One (partition, start, end) chunk per non-empty range: the driver reads each partition in one go."""
    return [[(p, s, e)] for p, (s, e) in sorted(ranges.items()) if e > s]


def driver_rows(spark: Any, plans: list[dict[str, str]]) -> list[list[BucketRow]]:
    """The rows ``bucket_rows`` would give for each plan (``reader_options`` with ``whole_ranges``), read in the
    driver's JVM by the same aggregation (jvm/digest DriverDigest): one py4j call, no Spark job."""
    from urllib.parse import quote

    encoded = "\n".join("&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in plan.items())
                         for plan in plans)
    text = spark._jvm.io.ureplicator.digest.DriverDigest.rows(encoded)
    found: list[list[BucketRow]] = [[] for _ in plans]
    for line in text.splitlines():
        index, *fields = line.split(",")
        values = [None if f == "" else int(f) for f in fields]
        found[int(index)].append(BucketRow(*values))  # type: ignore[arg-type]
    return found


@dataclass(frozen=True)
class BucketRow:
    """One pass-1 row of one side: a (partition, class, bucket)'s aggregates, merged over the chunks that read it.

    The fields are the reader's columns (``pass1`` reads them by name, like a Spark Row's); a sum or a
    bound no chunk gave is None, as SQL's ``sum``/``min`` of nulls would be.
    """

    p: int
    cls: int
    bucket: int
    n: int
    high: int | None
    low: int | None
    xor: int | None
    first: int | None
    last: int | None
    first_do: int | None
    delta_min: int | None
    delta_max: int | None


def _add(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def _xor(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a ^ b


def _low(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _high(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def merge(rows: Iterable[Any]) -> list[BucketRow]:
    """The reader's rows of one side, merged per (partition, class, bucket): a bucket cut across two chunks
    (never, with ``chunks``; but a partition read in two ranges may share one) becomes one row.

    Done in the driver instead of a Spark ``groupBy``: the rows are a few per bucket, and without the shuffle
    pass 1 of every topic is one Spark stage.
    """
    merged: dict[tuple[int, int, int], BucketRow] = {}
    for r in rows:
        key = (int(r.p), int(r.cls), int(r.bucket))
        row = BucketRow(key[0], key[1], key[2], int(r.n), r.high, r.low, r.xor, r.first, r.last, r.first_do,
                        r.delta_min, r.delta_max)
        seen = merged.get(key)
        if seen is not None:
            row = BucketRow(
                key[0], key[1], key[2], seen.n + row.n, _add(seen.high, row.high), _add(seen.low, row.low),
                _xor(seen.xor, row.xor), _low(seen.first, row.first), _high(seen.last, row.last),
                _low(seen.first_do, row.first_do), _low(seen.delta_min, row.delta_min),
                _high(seen.delta_max, row.delta_max),
            )
        merged[key] = row
    return [merged[k] for k in sorted(merged)]
