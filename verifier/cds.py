"""A class data sharing (AppCDS) archive of Spark's classes: a cold verifier JVM starts in less than half the time.

A new ``ureplicator verify`` process (the CronJob path) spent most of its
start-to-verdict loading and verifying Spark's classes. The JVM can map them
from an archive dumped by an earlier run instead. ``python -m ureplicator.verifier.cds
ARCHIVE`` writes one: it starts the verifier's own SparkSession with
``-XX:ArchiveClassesAtExit``, runs the kind of query the verifier runs (no
cluster needed) and exits, which dumps the classes the run loaded. The
verifier image builds it and sets ``UREPLICATOR_SPARK_CDS``; the driver then
starts with ``-XX:SharedArchiveFile`` (``-Xshare:auto``: an archive from
another JVM or classpath is ignored, never an error). Measured on a shared
2-core machine: a cold run of 100,000 records went from 26 s to 10-11 s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CDS_ENV = "UREPLICATOR_SPARK_CDS"
_QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]  # a stale archive is ignored without a word on stdout


def archive(environ: dict[str, str] | None = None) -> Path | None:
    """The archive the driver maps, when ``UREPLICATOR_SPARK_CDS`` names an existing file."""
    value = (os.environ if environ is None else environ).get(CDS_ENV, "").strip()
    return Path(value) if value and Path(value).is_file() else None


def java_options(environ: dict[str, str] | None = None) -> list[str]:
    found = archive(environ)
    return [f"-XX:SharedArchiveFile={found}", "-Xshare:auto", *_QUIET] if found is not None else []


def train(target: Path) -> None:
    """Dump the classes a verifier run loads into ``target`` (at the JVM's exit, so call it in a fresh process)."""
    from ureplicator.verifier import digest, sparkjob

    os.environ.pop(CDS_ENV, None)
    target.parent.mkdir(parents=True, exist_ok=True)
    options = [f"-Dlog4j2.configurationFile=file:{sparkjob.LOG4J_CONFIG}", f"-XX:ArchiveClassesAtExit={target}",
               *_QUIET]
    spark = sparkjob.session("local[2]", {"spark.driver.extraJavaOptions": " ".join(options)})
    digest.available(spark)
    # A pass-1-shaped query over a few records in Kafka's schema: the classes of the record hash,
    # the header handling and the bucket aggregation, without a cluster.
    from datetime import datetime, timezone

    from ureplicator.common import provenance

    now = datetime.now(timezone.utc)
    records = [(b"k%d" % i, b"v%d" % i, "t", i % 2, i, now, 0,
                [("trace", b"x"), (provenance.HEADER, provenance.encode(i, i % 2, "src"))]) for i in range(2_000)]
    frame = sparkjob._with_header_columns(
        spark.createDataFrame(records, sparkjob._kafka_schema()), sparkjob._LAST_UREP
    ).selectExpr("partition AS p", "offset AS o", f"{sparkjob.CONTENT_HASH} AS h", "offset div 100 AS bucket")
    frame.groupBy("p", "bucket").agg({"h": "bit_xor", "o": "min"}).join(frame.select("p").distinct(), "p").collect()
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ureplicator.verifier.cds ARCHIVE", file=sys.stderr)
        return 2
    train(Path(args[0]).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
